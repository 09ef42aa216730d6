"""Test helpers for the views: hand-made traces written as Kineto events (µs, args as in real traces) and read
by the real reader (`make_trace`, through tests/trace_builder.py); `load_shared(path)` reads a shared trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from profiler_core.trace.model import TraceData

from .trace_builder import read_events


def make_trace(events: list[dict], metadata: dict | None = None) -> TraceData:
    """Kineto event dicts (µs) plus optional top-level metadata, written as a trace file and read back by the
    real reader (tests/trace_builder.py); times are rebased on the first event, as for traces without
    baseTimeNanoseconds."""
    metadata = dict(metadata or {})
    props = metadata.pop("deviceProperties", [])
    base = metadata.pop("baseTimeNanoseconds", None)
    return read_events(events, metadata=metadata, device_properties=props, base_ns=base)


def load_shared(path: Path):
    """The shared trace at `path` through the real reader."""
    from profiler_core.trace.read import reader

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
    t = make_trace(
        [
            op("ProfilerStep#1", 0, 100, ext=1, cat="user_annotation"),
            op("aten::mm", 10, 50, ext=2, **{"Input Dims": [[2, 3], [3, 4]]}),
            runtime("cudaLaunchKernel", 20, 5, corr=9, ext=2),
            kernel("volta_h884gemm", 30, 40, corr=9, **{"blocks per SM": 0.5}),
        ]
    )
    ev = t.events
    assert list(ev["cat"].astype(str)) == ["user_annotation", "cpu_op", "cuda_runtime", "kernel"]
    assert ev["ts"].tolist() == [0, 10_000, 20_000, 30_000]
    assert ev.loc[1, "input_dims"] == "[[2,3],[3,4]]"
    assert ev.loc[3, "device"] == 0 and t.arg_at("blocks_per_sm", 3) == 0.5
    assert ev.loc[2, "external_id"] == 2 and ev.loc[0, "correlation"] == -1


def synthetic_gpu_trace(n_ops: int = 500_000, ops_per_step: int = 5000, seed: int = 0) -> TraceData:
    """A columnar GPU trace built directly with numpy (4 events per op: op, child op, launch, kernel), for
    benchmarks and invariants at scale: 500k ops = 2M events, ProfilerStep every `ops_per_step` ops."""
    rng = np.random.default_rng(seed)
    n_steps = max(1, n_ops // ops_per_step)
    i = np.arange(n_ops)
    step_of = i // ops_per_step
    ts_op = i * 20_000 + step_of * 50_000
    child_ts = ts_op + 2_000
    rt_ts = child_ts + 1_000
    k_ts = rt_ts + 4_000 + rng.integers(0, 3000, n_ops)
    k_dur = rng.integers(1000, 16000, n_ops)
    step_ts = np.arange(n_steps) * (ops_per_step * 20_000 + 50_000) - 1000
    parts = []

    def part(cat, name, pid, tid, ts, dur, ext=-1, corr=-1, dev=-1, bps=np.nan, occ=np.nan, dims=""):
        n = len(ts)
        full = lambda v, dt: np.broadcast_to(np.asarray(v, dtype=dt), (n,)).copy()  # noqa: E731
        parts.append(
            pd.DataFrame(
                {
                    "cat": full(cat, object),
                    "name": full(name, object),
                    "pid": full(pid, np.int64),
                    "tid": full(tid, np.int64),
                    "ts": ts.astype(np.int64),
                    "dur": full(dur, np.int64),
                    "external_id": full(ext, np.int64),
                    "correlation": full(corr, np.int64),
                    "device": full(dev, np.int64),
                    "stream": full(7 if dev >= 0 else -1, np.int64),
                    "blocks_per_sm": full(bps, np.float64),
                    "occupancy": full(occ, np.float64),
                    "input_dims": full(dims, object),
                }
            )
        )

    names = np.array([f"aten::op{k}" for k in range(50)], object)[i % 50]
    knames = np.array([f"kernel_{k}_sm80_xmma" if k % 3 == 0 else f"kernel_{k}" for k in range(200)], object)
    part(
        "user_annotation",
        np.array([f"ProfilerStep#{k}" for k in range(n_steps)], object),
        1,
        1,
        step_ts,
        ops_per_step * 20_000,
    )
    part(
        "cpu_op",
        names,
        1,
        1,
        ts_op,
        15_000,
        ext=2 * i + 1,
        dims=np.array(["[[32,64]]", "[[64,64],[64]]", "[]"], object)[i % 3],
    )
    part("cpu_op", "aten::empty", 1, 1, child_ts, 10_000, ext=2 * i + 2)
    part("cuda_runtime", "cudaLaunchKernel", 1, 1, rt_ts, 3_000, ext=2 * i + 2, corr=i + 1)
    part(
        "kernel",
        knames[i % 200],
        0,
        7,
        k_ts,
        k_dur,
        corr=i + 1,
        dev=0,
        bps=rng.random(n_ops) * 4,
        occ=rng.random(n_ops) * 100,
    )
    ev = pd.concat(parts, ignore_index=True)  # in the reader's order: (ts, -dur, idx), idx = file position
    ev = ev.sort_values(["ts", "dur"], ascending=[True, False], kind="stable").reset_index(drop=True)
    n = len(ev)
    for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"):
        ev[c] = np.zeros(n, np.int32)
    for c in ("registers", "shared_memory", "static_shared_memory", "dynamic_shared_memory"):
        ev[c] = np.full(n, -1, np.int32)
    for c in (
        "bytes",
        "python_id",
        "python_parent_id",
        "python_module_id",
        "sequence_nr",
        "fwd_thread",
        "in_nelems",
        "out_nelems",
        "group_size",
    ):
        ev[c] = np.full(n, -1, np.int64)
    ev["warps_per_sm"] = np.nan
    for c in ("input_type", "call_stack", "coll_name", "dtype"):
        ev[c] = ""
    for c in ("cat", "name", "input_dims", "input_type", "call_stack", "coll_name", "dtype"):
        ev[c] = ev[c].astype("category")
    ev["idx"] = np.arange(n)
    props = [
        {
            "id": 0,
            "name": "NVIDIA A100-SXM4-40GB",
            "numSms": 108,
            "computeMajor": 8,
            "computeMinor": 0,
            "totalGlobalMem": 40 * 2**30,
        }
    ]
    empty = pd.DataFrame()
    kwargs = dict(
        path="<synthetic>",
        metadata={"deviceProperties": props},
        device_properties=props,
        base_ns=0,
        events=ev,
        memory=empty,
        flows=empty,
        names=empty,
        warnings=[],
    )
    try:
        return TraceData(**kwargs)
    except TypeError:
        t = TraceData.__new__(TraceData)
        for k, v in kwargs.items():
            setattr(t, k, v)
        return t


def test_synthetic_gpu_trace_shape():
    t = synthetic_gpu_trace(n_ops=1000, ops_per_step=100)
    cats = t.events["cat"].astype(str).value_counts().to_dict()
    assert cats == {"cpu_op": 2000, "cuda_runtime": 1000, "kernel": 1000, "user_annotation": 10}
    assert t.events["ts"].is_monotonic_increasing
