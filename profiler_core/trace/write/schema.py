"""The trace dict (Kineto's chrome-trace layout, as torch 2.x writes it) and the Collector protocol.

``build_trace`` turns one recording window (per-thread tuples from ``recording``) plus collector
results into the dict that the writer writes and the analysis reads: top-level keys in Kineto's
order, ``ts``/``dur`` in microseconds (floats, exact to the ns) relative to
``baseTimeNanoseconds``, events ordered as Kineto orders them (M events, CPU ops/annotations by
start, [memory], python_function, collector events, the Trace span and its markers).
"""

from __future__ import annotations

import gc
import os
import socket
import sys
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

SCHEMA_VERSION = 1
BASE_TIME_GRANULARITY_NS = 7_889_238 * 1_000_000_000  # Kineto floors the base to ~3 months
CAT_NAMES = ("user_annotation", "cpu_op")  # indexed by recording.CAT_*
CAT_OP = 1


def _annotation_shapes() -> dict:
    return {"Concrete Inputs": [""], "Input type": [""], "Input Strides": [[]], "Input Dims": [[]]}


FLAG_KEYS = ("profile_memory", "with_stack", "record_shapes", "with_modules", "with_flops")
SPAN_NAME = "PyTorch Profiler (0)"  # kept for tool compatibility
SPANS_SORT_INDEX = 536870912


@dataclass
class CollectorResult:
    """What a collector hands back at stop: Kineto event dicts plus trace-level data.

    ``events``: ``ts``/``dur`` as int Unix-epoch ns on the ``time.time_ns()`` clock (the profiler
    converts them to relative µs); floats below 1e15 are taken as already-relative µs.
    """

    events: list = field(default_factory=list)
    device_properties: list = field(default_factory=list)
    metadata: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)


@runtime_checkable
class Collector(Protocol):
    """A source of non-CPU activity (e.g. CUDA via CUPTI), driven by the profile state machine."""

    def prepare(self) -> None: ...  # at warmup: expensive setup (subscribe, allocate)
    def start(self) -> None: ...  # recording starts
    def stop(self) -> CollectorResult: ...  # recording stops: hand back everything


def base_time_ns(start_ns: int) -> int:
    """Kineto's baseTimeNanoseconds: the epoch time floored to a multiple of 7,889,238 s."""
    return (start_ns // BASE_TIME_GRANULARITY_NS) * BASE_TIME_GRANULARITY_NS


def new_trace_id() -> str:
    """A trace id like Kineto's: 32 upper-case hex digits."""
    return uuid.uuid4().hex.upper()


def process_name() -> str:
    """The process's short name (Linux comm, like Kineto), else the interpreter's file name."""
    try:
        with open("/proc/self/comm", encoding="utf-8") as f:
            name = f.read().strip()
        if name:
            return name
    except OSError:
        pass
    return os.path.basename(sys.executable or "python") or "python"


def name_text(name: Any) -> str:
    """An event name as text: ``str(name)``, or a placeholder when that fails (one odd name must
    not lose the whole trace)."""
    if isinstance(name, str):
        return str.__str__(name)
    try:
        return str(name)
    except Exception:
        try:
            return f"<unprintable {type(name).__name__}>"
        except Exception:
            return "<unprintable>"


def _us(rel_ns: int) -> float:
    """Relative ns -> µs float (exact to the ns after %.3f formatting)."""
    return (rel_ns if rel_ns > 0 else 0) / 1000.0


def metadata_events(pid: int, threads: Iterable[tuple], ts_us: float) -> list:
    """The M events naming the CPU process and each recorded thread ``(tid, name)``."""
    pname = process_name()
    out = [
        {"ph": "M", "name": "process_name", "ts": ts_us, "pid": pid, "tid": 0, "args": {"name": pname}},
        {"ph": "M", "name": "process_labels", "ts": ts_us, "pid": pid, "tid": 0, "args": {"labels": "CPU"}},
        {"ph": "M", "name": "process_sort_index", "ts": ts_us, "pid": pid, "tid": 0, "args": {"sort_index": pid}},
    ]
    for tid, tname in threads:
        out.append(
            {
                "ph": "M",
                "name": "thread_name",
                "ts": ts_us,
                "pid": pid,
                "tid": tid,
                "args": {"name": f"thread {tid} ({tname})"},
            }
        )
        out.append(
            {"ph": "M", "name": "thread_sort_index", "ts": ts_us, "pid": pid, "tid": tid, "args": {"sort_index": tid}}
        )
    return out


def span_events(start_rel_ns: int, stop_rel_ns: int) -> list:
    """Kineto's closing events: the Trace span, its sort index and iteration markers, Record Window End."""
    start_us, stop_us = _us(start_rel_ns), _us(stop_rel_ns)
    return [
        {
            "ph": "X",
            "cat": "Trace",
            "name": SPAN_NAME,
            "pid": "Spans",
            "tid": "PyTorch Profiler",
            "ts": start_us,
            "dur": _us(stop_rel_ns - start_rel_ns),
            "args": {"Op count": 0},
        },
        {
            "ph": "M",
            "name": "process_sort_index",
            "ts": start_us,
            "pid": "Spans",
            "tid": 0,
            "args": {"sort_index": SPANS_SORT_INDEX},
        },
        {
            "ph": "i",
            "s": "g",
            "name": "Iteration Start: PyTorch Profiler",
            "pid": "Traces",
            "tid": "Trace PyTorch Profiler",
            "ts": start_us,
        },
        {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": stop_us},
    ]


def convert_collector_events(events: list[dict], base_ns: int) -> list[dict]:
    """A collector's events (absolute recording-clock ns) -> the trace's µs relative to `base_ns`, as
    build_trace writes them."""
    return [_convert_collector_event(e, base_ns) for e in events]


def _convert_collector_event(ev: dict, base_ns: int) -> dict:
    """One event: an absolute-ns `ts` (an int, or a float >= 1e15) and its `dur` to relative µs."""
    ev = dict(ev)
    ts = ev.get("ts")
    if isinstance(ts, (int, float)) and not isinstance(ts, bool) and (isinstance(ts, int) or ts >= 1e15):
        ev["ts"] = _us(int(ts) - base_ns)
        dur = ev.get("dur")
        if isinstance(dur, (int, float)) and not isinstance(dur, bool):
            ev["dur"] = _us(int(dur))
    return ev


@dataclass
class ThreadData:
    """One thread's raw records (epoch offset not yet applied; see recording)."""

    tid: int
    name: str
    events: list  # (t0, t1, name, external_id, cat, args, stack) raw perf ns
    memory: list  # (ts, bytes, total) raw perf ns
    python: list  # (t0, t1, name, python_id, parent_id) raw perf ns


def build_trace(**kwargs: Any) -> dict:
    """Assemble the Kineto trace dict of one recording window (see module docstring and _build_trace).

    The cyclic GC is paused meanwhile: millions of fresh dicts would otherwise trigger many
    full collections for nothing (they hold no cycles).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _build_trace(**kwargs)
    finally:
        if was_enabled:
            gc.enable()


def _build_trace(
    *,
    pid: int,
    threads: list,
    offset_ns: int,
    start_ns: int,
    stop_ns: int,
    flags: dict,
    metadata: dict | None = None,
    trace_id: str | None = None,
    distributed_info: dict | None = None,
    collector_results: Iterable[CollectorResult] = (),
) -> dict:
    base = base_time_ns(start_ns)
    shift = offset_ns - base  # raw perf ns + shift = ns relative to base
    start_us = _us(start_ns - base)
    results = list(collector_results)

    top: dict[str, Any] = {"schemaVersion": SCHEMA_VERSION, "deviceProperties": []}
    for r in results:
        top["deviceProperties"].extend(r.device_properties)
    top["trace_id"] = trace_id or new_trace_id()
    for k in FLAG_KEYS:
        if flags.get(k):
            top[k] = 1
    for k, v in (metadata or {}).items():
        top[k] = v
    top["host_name"] = socket.gethostname()
    for r in results:
        top.update(r.metadata)
    if distributed_info:
        top["distributedInfo"] = distributed_info
    top["displayTimeUnit"] = "ms"
    top["baseTimeNanoseconds"] = base

    record_shapes = bool(flags.get("record_shapes") or flags.get("with_flops"))
    recorded = [t for t in threads if t.events or t.memory or t.python]
    events = metadata_events(pid, ((t.tid, t.name) for t in recorded), start_us)
    n_meta = len(events)

    ops = []
    for t in recorded:
        tid = t.tid
        for t0, t1, name, ext, cat, args, stack in t.events:
            ops.append((t0, tid, name, ext, cat, args, stack, t1))
    ops.sort(key=lambda r: (r[0], r[3]))
    idx = 0
    for t0, tid, name, ext, cat, args, stack, t1 in ops:
        a = {"External id": ext, "Record function id": 0}
        if args is not None:
            if cat == CAT_OP:
                a.update(args)
                a["External id"] = ext  # extra args never replace the id that links GPU work
            elif record_shapes:  # record_function(name, args_str): one opaque input, as torch
                a.update(_annotation_shapes())
        if stack:
            a["Call stack"] = stack
        a["Ev Idx"] = idx
        idx += 1
        events.append(
            {
                "ph": "X",
                "cat": CAT_NAMES[cat],
                "name": name if type(name) is str else name_text(name),
                "pid": pid,
                "tid": tid,
                "ts": _us(t0 + shift),
                "dur": _us(t1 - t0),
                "args": a,
            }
        )
    for t in recorded:
        for ts, nbytes, total in t.memory:
            events.append(
                {
                    "ph": "i",
                    "cat": "cpu_instant_event",
                    "s": "t",
                    "name": "[memory]",
                    "pid": pid,
                    "tid": t.tid,
                    "ts": _us(ts + shift),
                    "args": {
                        "Total Reserved": 0,
                        "Total Allocated": total,
                        "Bytes": nbytes,
                        "Device Id": -1,
                        "Device Type": 0,
                        "Addr": 0,
                        "Ev Idx": idx,
                    },
                }
            )
            idx += 1
    for t in recorded:
        for t0, t1, name, pyid, parent in sorted(t.python):
            events.append(
                {
                    "ph": "X",
                    "cat": "python_function",
                    "name": name,
                    "pid": pid,
                    "tid": t.tid,
                    "ts": _us(t0 + shift),
                    "dur": _us(t1 - t0),
                    "args": {"Python parent id": parent, "Python id": pyid, "Ev Idx": idx},
                }
            )
            idx += 1
    # M events of collectors go with ours, at the front (as Kineto orders them)
    for r in results:
        converted = convert_collector_events(r.events, base)
        meta = [e for e in converted if e.get("ph") == "M"]
        if meta:
            events[n_meta:n_meta] = meta
            n_meta += len(meta)
            converted = [e for e in converted if e.get("ph") != "M"]
        events.extend(converted)
    events.extend(span_events(start_ns - base, stop_ns - base))
    top["traceEvents"] = events
    top["traceName"] = ""
    return top
