"""Small Kineto traces generated for the browser tests (no dependency on profiler_core's writer)."""

from __future__ import annotations

import json
from pathlib import Path

# Names a careless frontend would turn into markup or run as script.
HOSTILE = [
    '<img src=x onerror="window.__xss=1">',
    "<script>window.__xss=2</script>",
    "<b>bold</b> & <i>em</i>",
]


def html_names_trace() -> dict:
    """A CPU trace whose op, step, process and thread names contain HTML and script."""
    pid, tid = 4242, 4243
    ev: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "<u>proc</u>"}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": "<svg onload=window.__xss=3>"}},
    ]
    t = 0.0
    for step in range(3):
        ev.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{step + 1}",
                "pid": pid,
                "tid": tid,
                "ts": t,
                "dur": 900.0,
                "args": {"External id": 100 + step},
            }
        )
        for i, name in enumerate(HOSTILE):
            ts = t + 10 + i * 250
            ev.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": name,
                    "pid": pid,
                    "tid": tid,
                    "ts": ts,
                    "dur": 200.0,
                    "args": {
                        "External id": 1000 + step * 10 + i,
                        "Input Dims": [[2, 3]],
                        "Input type": ["float"],
                        "Call stack": f"{name};<script>stack()</script>",
                    },
                }
            )
            ev.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": "aten::empty",
                    "pid": pid,
                    "tid": tid,
                    "ts": ts + 20,
                    "dur": 30.0,
                    "args": {"External id": 2000 + step * 10 + i},
                }
            )
            ev.append(
                {
                    "ph": "i",
                    "s": "t",
                    "cat": "cpu_instant_event",
                    "name": "[memory]",
                    "pid": pid,
                    "tid": tid,
                    "ts": ts + 25,
                    "args": {
                        "Device Type": 0,
                        "Device Id": -1,
                        "Addr": 1000 + i,
                        "Bytes": 4096,
                        "Total Allocated": 4096 * (i + 1),
                        "Total Reserved": 0,
                    },
                }
            )
        t += 1000.0
    return {
        "schemaVersion": 1,
        "deviceProperties": [],
        "traceEvents": ev,
        "traceName": "<b>html</b>",
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": 1700000000000000000,
        "<i>meta</i>": "<script>x()</script>",
    }


def no_steps_trace() -> dict:
    """A CPU trace of a few ops and no ProfilerStep# range (a script profiled without a schedule)."""
    pid, tid = 5151, 5152
    ev = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"aten::op{i}",
            "pid": pid,
            "tid": tid,
            "ts": 100.0 * i,
            "dur": 60.0,
            "args": {"External id": 10 + i},
        }
        for i in range(5)
    ]
    return {"schemaVersion": 1, "deviceProperties": [], "traceEvents": ev, "baseTimeNanoseconds": 1700000000000000000}


def write(trace: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(trace), encoding="utf-8")
    return path


def many_steps_trace(steps: int = 464) -> dict:
    """A CPU trace with many short ProfilerStep#N ranges (an overview with hundreds of bars)."""
    pid, tid = 77, 78
    ev: list[dict] = []
    for s in range(steps):
        t = s * 100.0
        ev.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{s + 1000}",
                "pid": pid,
                "tid": tid,
                "ts": t,
                "dur": 90.0,
                "args": {"External id": 10 * s + 1},
            }
        )
        ev.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::add",
                "pid": pid,
                "tid": tid,
                "ts": t + 5,
                "dur": 40.0 + s % 7,
                "args": {"External id": 10 * s + 2},
            }
        )
    return {"schemaVersion": 1, "deviceProperties": [], "traceEvents": ev, "displayTimeUnit": "ms"}


def split_smem_trace() -> dict:
    """A GPU trace as our CUPTI converter writes it: kernels with the static/dynamic shared-memory split."""
    pid, tid = 4242, 4243
    props = {
        "id": 0,
        "name": "NVIDIA H100",
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
        "sharedMemPerBlockOptin": 232448,
    }
    ev: list[dict] = []
    for i, (name, static, dynamic) in enumerate(
        [("reduce_kernel", 1024, 0), ("reduce_kernel", 0, 1024), ("scan_kernel", 512, 2048)]
    ):
        t, corr = 100.0 * i, i + 1
        ev.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::sum",
                "pid": pid,
                "tid": tid,
                "ts": t,
                "dur": 50.0,
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
                "ts": t + 5,
                "dur": 5.0,
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
                "ts": t + 20,
                "dur": 30.0,
                "args": {
                    "External id": corr,
                    "device": 0,
                    "stream": 7,
                    "correlation": corr,
                    "registers per thread": 32,
                    "shared memory": static + dynamic,
                    "static shared memory": static,
                    "dynamic shared memory": dynamic,
                    "grid": [64, 1, 1],
                    "block": [256, 1, 1],
                },
            }
        )
    return {"schemaVersion": 1, "deviceProperties": [props], "traceEvents": ev}


def skipped_events_trace() -> dict:
    """A CPU trace the reader reads with 3 events skipped: two of an unknown phase, one without ts."""
    ev: list[dict] = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "ts": 1000 + 100 * i, "dur": 50, "pid": 1, "tid": 1}
        for i in range(20)
    ]
    ev += [{"ph": "Q", "name": "<b>odd</b>", "ts": 1200, "pid": 1, "tid": 1}] * 2
    ev.append({"ph": "X", "cat": "cpu_op", "name": "no_ts", "dur": 5, "pid": 1, "tid": 1})
    return {"schemaVersion": 1, "traceEvents": ev}


def deep_modules_trace(depth: int = 150) -> dict:
    """User annotations nested `depth` deep (the modules view shows 100 levels and says so)."""
    ev = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": f"M{i}",
            "ts": 1000 + i,
            "dur": 10_000 - 2 * i,
            "pid": 1,
            "tid": 1,
        }
        for i in range(depth)
    ]
    return {"schemaVersion": 1, "traceEvents": ev}


def graph_replay_only_trace() -> dict:
    """Issue 24: a CUDA-graph job whose capture is not in the trace (benchmarks/gen_graph_job.py)."""
    import sys

    bench = str(Path(__file__).resolve().parents[2] / "benchmarks")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    from gen_graph_job import graph_trace

    return graph_trace(layers=2, replays=3, capture=False)
