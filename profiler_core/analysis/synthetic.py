"""Small builders of Kineto trace dicts in our format (docs/trace-format.md), for tests and benchmarks.

Nothing here is used at run time by the profiler; it exists so tests and benchmarks can state a
trace in a few lines (``trace([op("aten::mm", 0, 10), kernel("k", 2, 5, ext=1)])``).
"""

from __future__ import annotations

import random
from typing import Any

__all__ = [
    "trace",
    "op",
    "annotation",
    "python_frame",
    "runtime",
    "kernel",
    "memcpy",
    "memset",
    "gpu_annotation",
    "memory",
    "large_trace",
]

PID = 4242
TID = 4242
BASE_NS = 1_790_857_026_000_000_000


def _x(cat: str, name: str, ts: float, dur: float, pid: Any, tid: Any, args: dict) -> dict:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": float(ts),
        "dur": float(dur),
        "args": args,
    }


def op(
    name: str,
    ts: float,
    dur: float,
    ext: int = 0,
    *,
    tid: Any = TID,
    pid: Any = PID,
    dims: list | None = None,
    types: list | None = None,
    stack: str | None = None,
    flops: int | None = None,
    cat: str = "cpu_op",
    **extra: Any,
) -> dict:
    """A ``cpu_op`` (or other CPU category) X event."""
    args: dict = {"External id": ext, "Record function id": 0}
    if dims is not None:
        args["Input Dims"] = dims
        args["Input type"] = types if types is not None else ["float"] * len(dims)
        args["Concrete Inputs"] = [""] * len(dims)
    if flops is not None:
        args["flops"] = flops
    if stack is not None:
        args["Call stack"] = stack
    args.update(extra)
    return _x(cat, name, ts, dur, pid, tid, args)


def annotation(name: str, ts: float, dur: float, ext: int = 0, **kw: Any) -> dict:
    """A ``user_annotation`` (record_function / ProfilerStep#N)."""
    return op(name, ts, dur, ext, cat="user_annotation", **kw)


def python_frame(
    name: str, ts: float, dur: float, pyid: int, parent: int | None = None, *, tid: Any = TID, pid: Any = PID
) -> dict:
    """A ``python_function`` event (with_stack)."""
    return _x("python_function", name, ts, dur, pid, tid, {"Python parent id": parent, "Python id": pyid})


def runtime(
    name: str,
    ts: float,
    dur: float,
    corr: int,
    ext: int | None = None,
    *,
    tid: Any = TID,
    pid: Any = PID,
    cat: str = "cuda_runtime",
) -> dict:
    """A ``cuda_runtime`` / ``cuda_driver`` API call."""
    args: dict = {"cbid": 211, "correlation": corr}
    if ext is not None:
        args = {"External id": ext, **args}
    return _x(cat, name, ts, dur, pid, tid, args)


def _gpu(
    cat: str, name: str, ts: float, dur: float, corr: int, ext: int | None, device: int, stream: int, extra: dict
) -> dict:
    args: dict = {"device": device, "context": 1, "stream": stream, "correlation": corr, **extra}
    if ext is not None:
        args = {"External id": ext, **args}
    return _x(cat, name, ts, dur, device, stream, args)


def kernel(
    name: str, ts: float, dur: float, corr: int = -1, ext: int | None = None, *, device: int = 0, stream: int = 7
) -> dict:
    """A ``kernel`` activity on device/stream."""
    return _gpu(
        "kernel",
        name,
        ts,
        dur,
        corr,
        ext,
        device,
        stream,
        {
            "registers per thread": 32,
            "shared memory": 0,
            "blocks per SM": 1.0,
            "warps per SM": 4.0,
            "grid": [80, 1, 1],
            "block": [128, 1, 1],
            "est. achieved occupancy %": 50,
        },
    )


def memcpy(
    ts: float,
    dur: float,
    corr: int = -1,
    ext: int | None = None,
    nbytes: int = 4096,
    *,
    device: int = 0,
    stream: int = 7,
) -> dict:
    """A host-to-device ``gpu_memcpy``."""
    return _gpu(
        "gpu_memcpy",
        "Memcpy HtoD (Pageable -> Device)",
        ts,
        dur,
        corr,
        ext,
        device,
        stream,
        {"bytes": nbytes, "memory bandwidth (GB/s)": nbytes / max(dur * 1000, 1)},
    )


def memset(
    ts: float,
    dur: float,
    corr: int = -1,
    ext: int | None = None,
    nbytes: int = 4096,
    *,
    device: int = 0,
    stream: int = 7,
) -> dict:
    """A ``gpu_memset``."""
    return _gpu(
        "gpu_memset",
        "Memset (Device)",
        ts,
        dur,
        corr,
        ext,
        device,
        stream,
        {"bytes": nbytes, "memory bandwidth (GB/s)": nbytes / max(dur * 1000, 1)},
    )


def gpu_annotation(name: str, ts: float, dur: float, ext: int, *, device: int = 0, stream: int = 7) -> dict:
    """A ``gpu_user_annotation`` span."""
    return _x("gpu_user_annotation", name, ts, dur, device, stream, {"External id": ext})


def memory(
    ts: float, nbytes: int, device_type: int = 0, *, total: int = 0, tid: Any = TID, pid: Any = PID, addr: int = 1000
) -> dict:
    """A ``[memory]`` instant event (Device Type 0 = CPU, 1 = CUDA)."""
    return {
        "ph": "i",
        "cat": "cpu_instant_event",
        "s": "t",
        "name": "[memory]",
        "pid": pid,
        "tid": tid,
        "ts": float(ts),
        "args": {
            "Total Reserved": 0,
            "Total Allocated": total,
            "Bytes": nbytes,
            "Device Id": -1 if device_type == 0 else 0,
            "Device Type": device_type,
            "Addr": addr,
        },
    }


def trace(events: list, *, gpu: bool = False, **top: Any) -> dict:
    """Wrap events in our top-level keys (docs/trace-format.md), Kineto's order."""
    props = (
        [
            {
                "id": 0,
                "name": "Synthetic GPU",
                "totalGlobalMem": 16 << 30,
                "computeMajor": 8,
                "computeMinor": 0,
                "maxThreadsPerBlock": 1024,
                "maxThreadsPerMultiprocessor": 2048,
                "regsPerBlock": 65536,
                "regsPerMultiprocessor": 65536,
                "warpSize": 32,
                "sharedMemPerBlock": 49152,
                "sharedMemPerMultiprocessor": 167936,
                "numSms": 80,
                "sharedMemPerBlockOptin": 166912,
            }
        ]
        if gpu
        else []
    )
    out: dict = {"schemaVersion": 1, "deviceProperties": props, "trace_id": "0" * 32}
    out.update(top)
    out["displayTimeUnit"] = "ms"
    out["baseTimeNanoseconds"] = BASE_NS
    meta = [
        {"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "ts": 0.0, "args": {"name": "python"}},
        {
            "ph": "M",
            "name": "thread_name",
            "pid": PID,
            "tid": TID,
            "ts": 0.0,
            "args": {"name": f"thread {TID} (python)"},
        },
    ]
    out["traceEvents"] = meta + list(events)
    out["traceName"] = "synthetic.pt.trace.json"
    return out


def large_trace(n_events: int, *, gpu: bool = True, seed: int = 0) -> dict:
    """A training-like trace of about ``n_events`` events: steps of nested ops, launches, kernels, memory.

    Each op block is 1 module annotation > 3 aten ops > 1 runtime call each, plus one kernel per
    launch and an alloc/free pair, on two CPU threads, with record_shapes-style args.
    """
    rng = random.Random(seed)
    names = [
        "aten::addmm",
        "aten::relu",
        "aten::add_",
        "aten::mm",
        "aten::copy_",
        "aten::sum",
        "aten::mul",
        "aten::conv2d",
        "aten::empty",
        "aten::t",
    ]
    events: list = []
    ext = corr = 0
    ts = 0.0
    step = 0
    blocks_per_step = 50
    while len(events) < n_events:
        step_start = ts
        step_ext = ext = ext + 1
        step_events: list = []
        for b in range(blocks_per_step):
            tid = TID if b % 4 else TID + 1
            block_start = ts
            mod_ext = ext = ext + 1
            inner: list = []
            t = ts + 0.5
            for _ in range(3):
                name = rng.choice(names)
                dur = rng.uniform(2.0, 20.0)
                ext += 1
                dims = [[rng.choice((32, 64, 128)), 64], [64, 64]]
                inner.append(op(name, t, dur, ext, tid=tid, dims=dims))
                if gpu:
                    corr += 1
                    inner.append(runtime("cudaLaunchKernel", t + 0.2, dur / 2, corr, ext, tid=tid))
                    inner.append(kernel(f"void kernel_{name[6:]}<float>(float*)", t + dur, dur * 0.7, corr, ext))
                t += dur + 0.3
            inner.append(memory(ts + 0.6, 4096, tid=tid))
            inner.append(memory(t - 0.1, -4096, tid=tid))
            step_events.append(
                annotation(f"nn.Module: Block_{b % 7}", block_start, t - block_start + 0.2, mod_ext, tid=tid)
            )
            step_events.extend(inner)
            ts = t + 0.5
            if len(events) + len(step_events) >= n_events:
                break
        events.append(annotation(f"ProfilerStep#{step}", step_start, ts - step_start + 1.0, step_ext))
        events.extend(step_events)
        ts += 2.0
        step += 1
    return trace(events, gpu=gpu, record_shapes=1, profile_memory=1)
