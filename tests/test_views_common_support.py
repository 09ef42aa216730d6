"""Test helpers for the views: build a columnar TraceData (docs/internals.md §3) from Kineto event dicts.

Hand-made traces in the views' tests are written as Kineto events (µs, args as in real traces) and turned into
the reader's columnar schema here, so the tests do not depend on the reader. `load_shared(path)` uses the real
reader (`profiler_core.trace.reader.read_trace`) and skips the test when it is not available.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

try:  # the real model when the backend engineer's module exists
    from profiler_core.trace.model import TraceData  # type: ignore
except Exception:  # pragma: no cover - stand-in with the same fields
    @dataclass
    class TraceData:  # type: ignore[no-redef]
        path: str
        metadata: dict
        device_properties: list
        base_ns: int
        events: pd.DataFrame
        memory: pd.DataFrame
        flows: pd.DataFrame
        names: pd.DataFrame
        warnings: list = field(default_factory=list)
        labels: dict = field(default_factory=dict)


_CAT_MAP = {"operator": "cpu_op", "python": "python_function", "memcpy": "gpu_memcpy",
            "memset": "gpu_memset", "runtime": "cuda_runtime"}

_INT64 = {"external_id": ("External id", "external id"), "correlation": ("correlation",),
          "device": ("device",), "stream": ("stream",), "bytes": ("bytes",),
          "python_id": ("Python id",), "python_parent_id": ("Python parent id",),
          "python_module_id": ("Python module id",), "sequence_nr": ("Sequence number",),
          "fwd_thread": ("Fwd thread id",), "in_nelems": ("In msg nelems",),
          "out_nelems": ("Out msg nelems",), "group_size": ("Group size",)}
_INT32 = {"registers": ("registers per thread",), "shared_memory": ("shared memory",)}
_FLOAT = {"blocks_per_sm": ("blocks per SM",), "warps_per_sm": ("warps per SM",),
          "occupancy": ("est. achieved occupancy %",)}
_TEXT = {"input_dims": "Input Dims", "input_type": "Input type", "call_stack": "Call stack",
         "coll_name": "Collective name", "dtype": "dtype"}


def _arg(args: dict, keys: tuple, default):
    for k in keys:
        v = args.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return v
    return default


def _num(v) -> int:
    if isinstance(v, (int, float)):
        return int(v)
    digits = "".join(ch for ch in str(v) if ch.isdigit())
    return int(digits) if digits else -1


def events_frame(events: list[dict]) -> pd.DataFrame:
    """The `events` DataFrame of the schema for the complete ("X") events among `events` (µs in, ns out)."""
    rows = []
    for idx, e in enumerate(events):
        if e.get("ph", "X") != "X":
            continue
        args = e.get("args") or {}
        cat = str(e.get("cat", "")).lower()
        cat = _CAT_MAP.get(cat, cat)
        r = {"cat": cat, "name": e.get("name", ""), "pid": _num(e.get("pid", 0)), "tid": _num(e.get("tid", 0)),
             "ts": int(round(float(e["ts"]) * 1000)), "dur": max(0, int(round(float(e.get("dur", 0)) * 1000))),
             "idx": idx}
        for col, keys in _INT64.items():
            r[col] = int(_arg(args, keys, -1))
        for col, keys in _INT32.items():
            r[col] = int(_arg(args, keys, -1))
        for col, keys in _FLOAT.items():
            r[col] = float(_arg(args, keys, np.nan))
        for col, key in _TEXT.items():
            v = args.get(key)
            r[col] = "" if v is None else (v if isinstance(v, str) else json.dumps(v, separators=(",", ":")))
        for prefix, key in (("grid", "grid"), ("block", "block")):
            dims = list(args.get(key) or [0, 0, 0]) + [0, 0, 0]
            for ax, v in zip("xyz", dims[:3]):
                r[f"{prefix}_{ax}"] = int(v)
        if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            if r["device"] < 0:
                r["device"] = r["pid"]
            if r["stream"] < 0:
                r["stream"] = r["tid"]
        rows.append(r)
    df = pd.DataFrame(rows)
    if df.empty:
        df = pd.DataFrame({c: pd.Series([], dtype="int64") for c in ["pid", "tid", "ts", "dur", "idx"]})
        for c in ["cat", "name", *list(_TEXT)]:
            df[c] = pd.Series([], dtype="object")
        for c in [*_INT64]:
            df[c] = pd.Series([], dtype="int64")
        for c in [*_INT32, "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]:
            df[c] = pd.Series([], dtype="int32")
        for c in _FLOAT:
            df[c] = pd.Series([], dtype="float64")
    df = df.sort_values(["ts", "idx"], kind="stable").reset_index(drop=True)
    for c in ["cat", "name", *list(_TEXT)]:
        df[c] = df[c].astype("category")
    for c in [*_INT32, "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]:
        df[c] = df[c].astype("int32")
    return df


def make_trace(events: list[dict], metadata: dict | None = None, memory: pd.DataFrame | None = None) -> TraceData:
    """A TraceData built by hand from Kineto event dicts (µs) plus optional top-level metadata."""
    metadata = dict(metadata or {})
    ev = events_frame(events)
    base = min((int(round(float(e["ts"]) * 1000)) for e in events if "ts" in e), default=0)
    ev["ts"] = ev["ts"] - base
    empty = pd.DataFrame()
    kwargs = dict(path="<hand-made>", metadata=metadata, device_properties=list(metadata.get("deviceProperties", [])),
                  base_ns=base, events=ev, memory=memory if memory is not None else empty, flows=empty,
                  names=empty, warnings=[])
    try:
        return TraceData(**kwargs)
    except TypeError:  # the real model may take more fields with defaults, or fewer
        t = TraceData.__new__(TraceData)
        for k, v in kwargs.items():
            setattr(t, k, v)
        return t


def load_shared(path: Path):
    """The shared trace at `path` through the real reader; skip when the reader is not there yet."""
    reader = pytest.importorskip("profiler_core.trace.reader")
    return reader.read_trace(str(path))


# Kineto event shorthands (µs) for hand-made traces.
def op(name, ts, dur, tid=1, ext=None, cat="cpu_op", **args):
    a = dict(args)
    if ext is not None:
        a["External id"] = ext
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": a}


def runtime(name, ts, dur, corr, ext=None, tid=1, cat="cuda_runtime"):
    a = {"correlation": corr}
    if ext is not None:
        a["External id"] = ext
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": a}


def kernel(name, ts, dur, corr, device=0, stream=7, cat="kernel", **args):
    a = {"device": device, "stream": stream, "correlation": corr}
    a.update(args)
    return {"ph": "X", "cat": cat, "name": name, "pid": device, "tid": stream, "ts": ts, "dur": dur, "args": a}


def test_support_builds_schema_columns():
    t = make_trace([op("ProfilerStep#1", 0, 100, ext=1, cat="user_annotation"),
                    op("aten::mm", 10, 50, ext=2, **{"Input Dims": [[2, 3], [3, 4]]}),
                    runtime("cudaLaunchKernel", 20, 5, corr=9, ext=2),
                    kernel("volta_h884gemm", 30, 40, corr=9, **{"blocks per SM": 0.5})])
    ev = t.events
    assert list(ev["cat"].astype(str)) == ["user_annotation", "cpu_op", "cuda_runtime", "kernel"]
    assert ev["ts"].tolist() == [0, 10_000, 20_000, 30_000]
    assert ev.loc[1, "input_dims"] == "[[2,3],[3,4]]"
    assert ev.loc[3, "device"] == 0 and ev.loc[3, "blocks_per_sm"] == 0.5
    assert ev.loc[2, "external_id"] == 2 and ev.loc[0, "correlation"] == -1
