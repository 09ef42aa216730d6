"""Pure converter: plain CUPTI-style records -> Kineto event dicts (docs/trace-format.md).

Input records are dicts as `records.py` describes; timestamps are in the capture clock's ns and are moved
onto the host clock by adding `clock_offset_ns`. Output events carry `ts`/`dur` as integer absolute ns on
the recording clock (`profiler_core.recording.now_ns`, epoch ns);
`profiler_core.trace.write.schema.convert_collector_events` turns them into the trace's µs relative to a base, as the
profiler writes them.
Linking to CPU ops (External id) is a separate step (`link.py`), since it needs the CPU events.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from ..trace import categories
from .demangle import demangle
from .occupancy import kernel_occupancy
from .records import (
    EXTERNAL_KIND_CUSTOM1,
    INVALID_STREAM,
    KERNEL_KINDS,
    MEMCPY_KIND,
    MEMORY_KIND,
    MEMORY_OP_ALLOCATION,
    MEMORY_OP_RELEASE,
    OVERHEAD_KIND,
    SYNC_TYPE,
)

#: device records the capture side links to their launching op (synchronisations too)
GPU_ACTIVITY_CATS = categories.GPU_ACTIVITY_CATS + (categories.CUDA_SYNC,)
API_CATS = categories.LAUNCH_CATS

_REQUIRED = {
    "kernel": ("start", "end", "device_id", "stream_id", "correlation_id"),
    "MEMCPY": ("start", "end", "bytes", "device_id", "stream_id", "correlation_id"),
    "MEMSET": ("start", "end", "bytes", "device_id", "stream_id", "correlation_id"),
    "api": ("start", "end", "correlation_id", "thread_id"),
    "SYNCHRONIZATION": ("start", "end", "correlation_id"),
    "MEMORY2": ("timestamp", "bytes", "memory_operation_type", "device_id"),
    "EXTERNAL_CORRELATION": ("external_id", "correlation_id"),
    "OVERHEAD": ("start", "end"),
}


@dataclass
class Converted:
    """The converter's output: Kineto events (absolute host ns) and what it had to skip."""

    events: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _num(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{what} is not a number: {value!r}")
    return int(value)


def _xyz(rec: dict, prefix: str) -> list[int]:
    return [int(rec.get(f"{prefix}_{axis}", 1) or 1) for axis in "xyz"]


def _bandwidth(nbytes: int, dur_ns: int, args: dict) -> None:
    if dur_ns > 0:
        args["memory bandwidth (GB/s)"] = nbytes / dur_ns


def _graph_ids(r: dict, args: dict) -> None:
    """CUPTI's graph and graph node ids of GPU work a CUDA graph ran (0: not run by a graph) as `graph id` /
    `graph node id` args (docs/trace-format.md)."""
    graph, node = int(r.get("graph_id", 0) or 0), int(r.get("graph_node_id", 0) or 0)
    if graph > 0:
        args["graph id"] = graph
    if node > 0:
        args["graph node id"] = node


def _kernel_event(r: dict, off: int, props: dict | None, memo: dict) -> dict:
    start, end = _num(r["start"], "start"), _num(r["end"], "end")
    grid, block = _xyz(r, "grid"), _xyz(r, "block")
    regs = int(r.get("registers_per_thread", 0) or 0)
    static, dynamic = int(r.get("static_shared_memory", 0) or 0), int(r.get("dynamic_shared_memory", 0) or 0)
    key = (id(props), *grid, *block, regs, static, dynamic)
    occ = memo.get(key)
    if occ is None:
        occ = memo[key] = kernel_occupancy(props, grid, block, regs, static, dynamic)
    name = demangle(str(r.get("name") or "kernel"))
    if name == "kernel":
        name = "Kernel"
    dev, stream = int(r["device_id"]), int(r["stream_id"])
    args = {
        "queued": int(r.get("queued", 0) or 0),
        "device": dev,
        "context": int(r.get("context_id", 0)),
        "stream": stream,
        "correlation": int(r["correlation_id"]),
        "registers per thread": regs,
        "shared memory": static + dynamic,  # Kineto's key (the total); the split is ours
        "static shared memory": static,
        "dynamic shared memory": dynamic,
        "blocks per SM": occ["blocks per SM"] if math.isfinite(occ["blocks per SM"]) else "inf",
        "warps per SM": occ["warps per SM"] if math.isfinite(occ["warps per SM"]) else "inf",
        "grid": grid,
        "block": block,
    }
    if "est. achieved occupancy %" in occ:
        args["est. achieved occupancy %"] = occ["est. achieved occupancy %"]
    _graph_ids(r, args)
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": dev,
        "tid": stream,
        "ts": start + off,
        "dur": max(0, end - start),
        "args": args,
    }


def _memcpy_event(r: dict, off: int) -> dict:
    start, end = _num(r["start"], "start"), _num(r["end"], "end")
    nbytes = _num(r["bytes"], "bytes")
    kind = MEMCPY_KIND.get(int(r.get("copy_kind", 0) or 0), "Unknown")
    src = MEMORY_KIND.get(int(r.get("src_kind", 0) or 0), "Unknown")
    dst = MEMORY_KIND.get(int(r.get("dst_kind", 0) or 0), "Unknown")
    dev, stream = int(r["device_id"]), int(r["stream_id"])
    args = {
        "device": dev,
        "context": int(r.get("context_id", 0)),
        "stream": stream,
        "correlation": int(r["correlation_id"]),
        "bytes": nbytes,
    }
    _bandwidth(nbytes, end - start, args)
    _graph_ids(r, args)
    return {
        "ph": "X",
        "cat": "gpu_memcpy",
        "name": f"Memcpy {kind} ({src} -> {dst})",
        "pid": dev,
        "tid": stream,
        "ts": start + off,
        "dur": max(0, end - start),
        "args": args,
    }


def _memset_event(r: dict, off: int) -> dict:
    start, end = _num(r["start"], "start"), _num(r["end"], "end")
    nbytes = _num(r["bytes"], "bytes")
    kind = MEMORY_KIND.get(int(r.get("memory_kind", 0) or 0), "Unknown")
    dev, stream = int(r["device_id"]), int(r["stream_id"])
    args = {
        "device": dev,
        "context": int(r.get("context_id", 0)),
        "stream": stream,
        "correlation": int(r["correlation_id"]),
        "bytes": nbytes,
    }
    _bandwidth(nbytes, end - start, args)
    _graph_ids(r, args)
    return {
        "ph": "X",
        "cat": "gpu_memset",
        "name": f"Memset ({kind})",
        "pid": dev,
        "tid": stream,
        "ts": start + off,
        "dur": max(0, end - start),
        "args": args,
    }


def _api_event(r: dict, off: int, cat: str, pid: int) -> dict:
    start, end = _num(r["start"], "start"), _num(r["end"], "end")
    cbid = int(r.get("cbid", 0) or 0)
    name = r.get("name") or f"{'cuda' if cat == 'cuda_runtime' else 'cu'}Api(cbid={cbid})"
    return {
        "ph": "X",
        "cat": cat,
        "name": str(name),
        "pid": int(r.get("process_id") or pid),
        "tid": int(r["thread_id"]),
        "ts": start + off,
        "dur": max(0, end - start),
        "args": {"cbid": cbid, "correlation": int(r["correlation_id"])},
    }


def _sync_event(r: dict, off: int, ctx_device: dict) -> dict:
    start, end = _num(r["start"], "start"), _num(r["end"], "end")
    name = SYNC_TYPE.get(int(r.get("type", 0) or 0), "Unknown Sync")
    ctx = int(r.get("context_id", 0) or 0)
    dev = ctx_device.get(ctx, 0)
    stream = int(r.get("stream_id", INVALID_STREAM))
    args = {
        "cuda_sync_kind": name,
        "stream": -1 if stream == INVALID_STREAM else stream,
        "correlation": int(r["correlation_id"]),
        "device": dev,
        "context": ctx,
    }
    return {
        "ph": "X",
        "cat": "cuda_sync",
        "name": name,
        "pid": dev,
        "tid": 0 if stream == INVALID_STREAM else stream,
        "ts": start + off,
        "dur": max(0, end - start),
        "args": args,
    }


def _overhead_event(r: dict, off: int) -> dict:
    start, end = _num(r["start"], "start"), _num(r["end"], "end")
    name = OVERHEAD_KIND.get(int(r.get("overhead_kind", 0) or 0), "Unknown")
    return {
        "ph": "X",
        "cat": "overhead",
        "name": name,
        "pid": -1,
        "tid": 0,
        "ts": start + off,
        "dur": max(0, end - start),
        "args": {},
    }


def _memory_events(mem: list[dict], off: int, api_by_corr: dict, pid: int) -> list[dict]:
    """[memory] instants for device allocations and frees, with per-device running totals.

    Totals start from the smallest level that keeps them non-negative: a free of memory allocated before
    the capture window reveals that it existed. Without an allocator to ask, reserved == allocated.
    """
    mem = sorted(mem, key=lambda r: r["timestamp"])
    deltas = []
    for r in mem:
        op = int(r["memory_operation_type"])
        if op not in (MEMORY_OP_ALLOCATION, MEMORY_OP_RELEASE):
            continue
        nbytes = _num(r["bytes"], "bytes")
        deltas.append((r, nbytes if op == MEMORY_OP_ALLOCATION else -nbytes))
    running, low = defaultdict(int), defaultdict(int)
    for r, d in deltas:
        dev = int(r["device_id"])
        running[dev] += d
        low[dev] = min(low[dev], running[dev])
    total = {dev: -v for dev, v in low.items()}
    out = []
    for r, d in deltas:
        dev = int(r["device_id"])
        total[dev] += d
        ts = _num(r["timestamp"], "timestamp") + off
        api = api_by_corr.get(int(r.get("correlation_id", -1) or -1))
        tid, epid = 0, int(r.get("process_id") or pid)
        if api is not None:
            tid, epid = api["tid"], api["pid"]
            ts = min(max(ts, api["ts"]), api["ts"] + api["dur"])  # inside the call that did it
        out.append(
            {
                "ph": "i",
                "s": "t",
                "cat": "cpu_instant_event",
                "name": "[memory]",
                "pid": epid,
                "tid": tid,
                "ts": ts,
                "args": {
                    "Total Reserved": total[dev],
                    "Total Allocated": total[dev],
                    "Bytes": d,
                    "Device Id": dev,
                    "Device Type": 1,
                    "Addr": int(r.get("address", 0) or 0),
                },
            }
        )
    return out


def _metadata_events(gpu_events: list[dict], ts: int, process_name: str) -> list[dict]:
    devices = sorted({e["pid"] for e in gpu_events if e["pid"] >= 0})
    streams = sorted({(e["pid"], e["tid"]) for e in gpu_events if e["pid"] >= 0})
    out = []
    for dev in devices:
        out += [
            {"name": "process_name", "ph": "M", "ts": ts, "pid": dev, "tid": 0, "args": {"name": process_name}},
            {"name": "process_labels", "ph": "M", "ts": ts, "pid": dev, "tid": 0, "args": {"labels": f"GPU {dev}"}},
            {
                "name": "process_sort_index",
                "ph": "M",
                "ts": ts,
                "pid": dev,
                "tid": 0,
                "args": {"sort_index": 5000000 + dev},
            },
        ]
    for dev, stream in streams:
        out += [
            {
                "name": "thread_name",
                "ph": "M",
                "ts": ts,
                "pid": dev,
                "tid": stream,
                "args": {"name": f"stream {stream} "},
            },
            {
                "name": "thread_sort_index",
                "ph": "M",
                "ts": ts,
                "pid": dev,
                "tid": stream,
                "args": {"sort_index": stream},
            },
        ]
    return out


def _flows(api_events: list[dict], gpu_events: list[dict]) -> list[dict]:
    api_by_corr = {e["args"]["correlation"]: e for e in api_events}
    out, started = [], set()
    for g in gpu_events:
        corr = g["args"].get("correlation")
        api = api_by_corr.get(corr)
        if api is None:
            continue
        if corr not in started:
            started.add(corr)
            out.append(
                {
                    "ph": "s",
                    "id": corr,
                    "pid": api["pid"],
                    "tid": api["tid"],
                    "ts": api["ts"],
                    "cat": "ac2g",
                    "name": "ac2g",
                }
            )
        out.append(
            {
                "ph": "f",
                "id": corr,
                "pid": g["pid"],
                "tid": g["tid"],
                "ts": g["ts"],
                "cat": "ac2g",
                "name": "ac2g",
                "bp": "e",
            }
        )
    return out


def convert_records(
    records: list[dict],
    *,
    device_properties: list[dict] | None = None,
    clock_offset_ns: int = 0,
    pid: int = 0,
    process_name: str = "python",
    window_start_ns: int | None = None,
) -> Converted:
    """Turn raw records into Kineto events (absolute host ns); bad or unknown records become warnings."""
    props = {int(p["id"]): p for p in (device_properties or []) if isinstance(p, dict) and "id" in p}
    off = int(clock_offset_ns)
    res = Converted()
    skipped, unknown = Counter(), Counter()
    by_kind = defaultdict(list)
    for r in records:
        if not isinstance(r, dict) or not isinstance(r.get("kind"), str):
            skipped["record without a 'kind' name"] += 1
            continue
        by_kind[r["kind"]].append(r)

    def valid(rs: list[dict], req_key: str, label: str) -> list[dict]:
        ok = []
        for r in rs:
            missing = [k for k in _REQUIRED[req_key] if r.get(k) is None]
            if missing:
                skipped[f"{label} record missing {', '.join(missing)}"] += 1
            else:
                ok.append(r)
        return ok

    # External correlation: CUPTI correlation id -> the CPU op's External id (CUSTOM1 = annotations: unused).
    ext = {}
    for r in valid(by_kind.pop("EXTERNAL_CORRELATION", []), "EXTERNAL_CORRELATION", "EXTERNAL_CORRELATION"):
        if int(r.get("external_kind", 0) or 0) != EXTERNAL_KIND_CUSTOM1:
            ext[int(r["correlation_id"])] = int(r["external_id"])

    api, gpu, other = [], [], []
    ctx_device, occ_memo = {}, {}
    builders = [
        (KERNEL_KINDS, "kernel", lambda r: _kernel_event(r, off, props.get(int(r["device_id"])), occ_memo)),
        (("MEMCPY",), "MEMCPY", lambda r: _memcpy_event(r, off)),
        (("MEMSET",), "MEMSET", lambda r: _memset_event(r, off)),
    ]
    for kinds, req, build in builders:
        for kind in kinds:
            for r in valid(by_kind.pop(kind, []), req, kind):
                try:
                    gpu.append(build(r))
                    ctx_device[int(r.get("context_id", 0) or 0)] = int(r["device_id"])
                except (ValueError, TypeError) as exc:
                    skipped[f"{kind} record with bad values ({exc})"] += 1
    for kind, cat in (("RUNTIME", "cuda_runtime"), ("DRIVER", "cuda_driver")):
        for r in valid(by_kind.pop(kind, []), "api", kind):
            try:
                e = _api_event(r, off, cat, pid)
            except (ValueError, TypeError) as exc:
                skipped[f"{kind} record with bad values ({exc})"] += 1
                continue
            if e["args"]["correlation"] in ext:
                e["args"] = {"External id": ext[e["args"]["correlation"]], **e["args"]}
            api.append(e)
    for r in valid(by_kind.pop("SYNCHRONIZATION", []), "SYNCHRONIZATION", "SYNCHRONIZATION"):
        try:
            gpu.append(_sync_event(r, off, ctx_device))
        except (ValueError, TypeError) as exc:
            skipped[f"SYNCHRONIZATION record with bad values ({exc})"] += 1
    for r in valid(by_kind.pop("OVERHEAD", []), "OVERHEAD", "OVERHEAD"):
        try:
            other.append(_overhead_event(r, off))
        except (ValueError, TypeError) as exc:
            skipped[f"OVERHEAD record with bad values ({exc})"] += 1
    api_by_corr = {e["args"]["correlation"]: e for e in api}
    try:
        memory = _memory_events(valid(by_kind.pop("MEMORY2", []), "MEMORY2", "MEMORY2"), off, api_by_corr, pid)
    except (ValueError, TypeError) as exc:
        memory = []
        skipped[f"MEMORY2 records with bad values ({exc})"] += 1
    for kind, rs in by_kind.items():
        unknown[kind] += len(rs)

    # External ids found through external correlation flow to the GPU work of the same call.
    for g in gpu:
        api_e = api_by_corr.get(g["args"].get("correlation"))
        if api_e is not None and "External id" in api_e["args"]:
            g["args"] = {"External id": api_e["args"]["External id"], **g["args"]}

    gpu.sort(key=lambda e: (e["ts"], e["pid"], e["tid"]))
    api.sort(key=lambda e: e["ts"])
    all_ts = [e["ts"] for e in gpu + api + other + memory]
    t0 = window_start_ns if window_start_ns is not None else (min(all_ts) if all_ts else 0)
    res.events = _metadata_events(gpu, t0, process_name) + api + gpu + other + memory + _flows(api, gpu)
    for what, n in sorted(skipped.items()):
        res.warnings.append(f"skipped {n} {what}")
    for kind, n in sorted(unknown.items()):
        res.warnings.append(f"ignored {n} record(s) of unsupported kind {kind!r}")
    return res
