"""Traces generated for the issue 23 browser tests (first-hour views: long tables, diffs, downloads)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

H100 = {
    "id": 0,
    "name": "NVIDIA H100 80GB HBM3",
    "computeMajor": 9,
    "computeMinor": 0,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536,
    "regsPerMultiprocessor": 65536,
    "warpSize": 32,
    "sharedMemPerBlock": 49152,
    "sharedMemPerMultiprocessor": 233472,
    "numSms": 132,
}


def gpu_steps_trace(steps: int = 400) -> dict:
    """A GPU trace of `steps` ProfilerStep#N ranges, each launching two kernels (a long per-step table)."""
    pid, tid = 100, 101
    ev: list[dict] = []
    corr = 0
    for s in range(steps):
        t = s * 1000.0
        ev.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{s}",
                "pid": pid,
                "tid": tid,
                "ts": t,
                "dur": 900.0,
                "args": {"External id": 1_000_000 + s},
            }
        )
        for k, name in enumerate(("gemm_kernel", "relu_kernel")):
            corr += 1
            ts = t + 50 + k * 300
            ev.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": "aten::mm" if k == 0 else "aten::relu",
                    "pid": pid,
                    "tid": tid,
                    "ts": ts,
                    "dur": 100.0,
                    "args": {"External id": corr},
                }
            )
            ev.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": pid,
                    "tid": tid,
                    "ts": ts + 10,
                    "dur": 10.0,
                    "args": {"External id": corr, "correlation": corr},
                }
            )
            ev.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": name,
                    "pid": 0,
                    "tid": 7,
                    "ts": ts + 30,
                    "dur": 200.0,
                    "args": {
                        "External id": corr,
                        "correlation": corr,
                        "device": 0,
                        "stream": 7,
                        "registers per thread": 32,
                        "shared memory": 0,
                        "grid": [132, 1, 1],
                        "block": [256, 1, 1],
                    },
                }
            )
    return {"schemaVersion": 1, "deviceProperties": [H100], "traceEvents": ev, "displayTimeUnit": "ms"}


def phases_trace(loader_first: bool, steps: int = 3) -> dict:
    """A CPU trace whose steps load data, run forward, backward and the optimizer; the data loading
    comes first in each step when `loader_first`, else last (prefetching for the next step)."""
    pid, tid = 200, 201
    ev: list[dict] = []
    eid = 0

    def op(name: str, cat: str, ts: float, dur: float) -> None:
        nonlocal eid
        eid += 1
        ev.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": pid,
                "tid": tid,
                "ts": ts,
                "dur": dur,
                "args": {"External id": eid},
            }
        )

    for s in range(steps):
        t = s * 10_000.0
        op(f"ProfilerStep#{s + 1}", "user_annotation", t, 9_000.0)
        parts = [("fwd", 2_000.0), ("bwd", 3_000.0), ("opt", 1_000.0)]
        parts = ([("dl", 500.0)] + parts) if loader_first else (parts + [("dl", 700.0)])
        c = t + 100
        for kind, dur in parts:
            if kind == "dl":
                op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "user_annotation", c, dur)
            elif kind == "fwd":
                op("aten::linear", "cpu_op", c, dur)
            elif kind == "bwd":
                op("autograd::engine::evaluate_function: AddmmBackward0", "cpu_op", c, dur)
            else:
                op("Optimizer.step#SGD.step", "user_annotation", c, dur)
            c += dur + 50
    return {"schemaVersion": 1, "deviceProperties": [], "traceEvents": ev, "displayTimeUnit": "ms"}


def write_json(trace: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(trace).encode("utf-8")
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path
