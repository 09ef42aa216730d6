"""The one fixture builder of the view tests: hand-made events written as a Kineto JSON file and read back
through the real reader (`profiler_core.trace.read.reader.read_trace`), so views see exactly what they see on
real traces (schema, dtypes, the (ts, -dur, idx) order, rebasing, labels), never a hand-rolled frame.

Events are given either as Kineto event dicts (µs, `args` under Kineto's keys) or as rows of column values
(ns, the reader's column names) which `event()` turns into Kineto events under Kineto's own arg names.
"""

from __future__ import annotations

import atexit
import itertools
import json
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from profiler_core.trace.model import TraceData
from profiler_core.trace.read.reader import read_trace

#: reader column -> the Kineto args key it is read from (docs/trace-format.md; Kineto's names)
ARG_OF_COLUMN = {
    "external_id": "External id",
    "correlation": "correlation",
    "device": "device",
    "stream": "stream",
    "bytes": "bytes",
    "python_id": "Python id",
    "python_parent_id": "Python parent id",
    "python_module_id": "Python module id",
    "sequence_nr": "Sequence number",
    "fwd_thread": "Fwd thread id",
    "in_nelems": "In msg nelems",
    "out_nelems": "Out msg nelems",
    "group_size": "Group size",
    "registers": "registers per thread",
    "shared_memory": "shared memory",
    "blocks_per_sm": "blocks per SM",
    "warps_per_sm": "warps per SM",
    "occupancy": "est. achieved occupancy %",
    "input_dims": "Input Dims",
    "input_type": "Input type",
    "call_stack": "Call stack",
    "coll_name": "Collective name",
    "dtype": "dtype",
    "pg_name": "Process Group Name",
}

_DIR: Path | None = None
_SEQ = itertools.count()


def _workdir() -> Path:
    """A private folder for the written fixtures, removed when the test process exits (the reader
    re-reads args from the file lazily, so a file must outlive its TraceData)."""
    global _DIR
    if _DIR is None:
        _DIR = Path(tempfile.mkdtemp(prefix="gpuscope-fixtures-"))
        atexit.register(shutil.rmtree, _DIR, True)
    return _DIR


def _us(ns: int) -> float | int:
    return ns // 1000 if ns % 1000 == 0 else ns / 1000


def event(cat: str, name: str, pid: int, tid: int, ts_ns: int, dur_ns: int, **columns) -> dict:
    """A complete ("X") Kineto event from column values (ns); -1, "" and None mean absent."""
    args = {}
    for col, value in columns.items():
        key = ARG_OF_COLUMN[col]
        if value is None or value == "" or (isinstance(value, int) and value == -1):
            continue
        args[key] = json.loads(value) if col == "input_dims" and isinstance(value, str) else value
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": _us(ts_ns),
        "dur": _us(dur_ns),
        "args": args,
    }


def rows(rows: Iterable[tuple], columns: list[str]) -> list[dict]:
    """Kineto events of rows of (cat, name, pid, tid, ts_ns, dur_ns, *the other `columns`); short rows
    leave the remaining columns absent."""
    out = []
    for r in rows:
        extra = dict(zip(columns[6:], r[6:]))
        out.append(event(*r[:6], **extra))
    return out


def memory_event(
    ts_ns: int,
    device_type: int,
    device_id: int,
    addr: int,
    nbytes: int,
    total_allocated: int,
    total_reserved: int,
    pid: int = 1,
    tid: int = 1,
) -> dict:
    """A `[memory]` instant event as Kineto writes it."""
    return {
        "ph": "i",
        "cat": "cpu_instant_event",
        "s": "t",
        "name": "[memory]",
        "pid": pid,
        "tid": tid,
        "ts": _us(ts_ns),
        "args": {
            "Total Reserved": total_reserved,
            "Total Allocated": total_allocated,
            "Bytes": nbytes,
            "Device Id": device_id,
            "Device Type": device_type,
            "Addr": addr,
        },
    }


def flow_event(cat: str, flow_id: int, ph: str, pid: int, tid: int, ts_ns: int, bp: str = "") -> dict:
    """An `s`/`f` flow event (ac2g: `f` with bp "e")."""
    e = {"ph": ph, "id": flow_id, "pid": pid, "tid": tid, "ts": _us(ts_ns), "cat": cat, "name": cat}
    if bp:
        e["bp"] = bp
    return e


def name_event(pid: int, tid: int, kind: str, value) -> dict:
    """An `M` metadata event (process_name, thread_name, process_labels, *_sort_index)."""
    key = {"process_labels": "labels", "process_sort_index": "sort_index", "thread_sort_index": "sort_index"}.get(
        kind, "name"
    )
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "ts": 0, "args": {key: value}}


def read_events(
    events: list[dict],
    *,
    metadata: dict | None = None,
    device_properties: Iterable = (),
    base_ns: int | None = 0,
    gz: bool = False,
) -> TraceData:
    """Write `events` as a Kineto trace and read it back with the real reader.

    `base_ns` becomes `baseTimeNanoseconds` (0 by default: ts stay as given); None leaves it out, so that
    the reader rebases on the first event as it does for old traces."""
    doc: dict = {"schemaVersion": 1, "deviceProperties": list(device_properties)}
    doc.update(metadata or {})
    if base_ns is not None:
        doc["baseTimeNanoseconds"] = base_ns
    doc["traceEvents"] = events
    path = _workdir() / f"fixture{next(_SEQ)}.{1700000000000 + next(_SEQ)}.pt.trace.json"
    data = json.dumps(doc).encode()
    if gz:
        import gzip

        path = path.with_name(path.name + ".gz")
        data = gzip.compress(data)
    path.write_bytes(data)
    return read_trace(path, processes=0)
