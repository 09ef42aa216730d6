"""NCCL kernels are communication, whoever launched them: synthetic Kineto traces written to disk,
read back by the columnar reader and analysed by the plugin's views (no GPU needed)."""

import json

import pytest

from profiler_core.analysis.stages.classify import communication_mask, is_communication
from profiler_core.trace.read.reader import read_trace


def _gpu_trace(comm_launcher: str, shift_us: float = 0.0) -> dict:
    """One step [0, 1000] us: an sgemm [100, 300], an NCCL all-reduce [250, 600] launched by
    `comm_launcher`, and an NCCL all-gather [700, 800] (new ncclDevKernel_ naming) launched by a
    plain user annotation. `shift_us` delays the NCCL kernels (a worker that waits longer)."""
    pid, tid = 4242, 4242

    def cpu(name, cat, ts, dur, ext):
        return {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": pid,
            "tid": tid,
            "ts": ts,
            "dur": dur,
            "args": {"External id": ext},
        }

    def launch(ts, corr, ext):
        return {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": pid,
            "tid": tid,
            "ts": ts,
            "dur": 10,
            "args": {"External id": ext, "correlation": corr},
        }

    def kernel(name, ts, dur, corr, ext, stream):
        return {
            "ph": "X",
            "cat": "kernel",
            "name": name,
            "pid": 0,
            "tid": stream,
            "ts": ts,
            "dur": dur,
            "args": {
                "External id": ext,
                "correlation": corr,
                "device": 0,
                "stream": stream,
                "grid": [1, 1, 1],
                "block": [256, 1, 1],
            },
        }

    events = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python"}},
        cpu("ProfilerStep#1", "user_annotation", 0, 1000, 1),
        cpu("aten::mm", "cpu_op", 10, 100, 2),
        launch(20, 101, 2),
        kernel("volta_sgemm_128x64_nn", 100, 200, 101, 2, 7),
        cpu(comm_launcher, "user_annotation", 200, 60, 3),
        launch(210, 102, 3),
        kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 250 + shift_us, 350, 102, 3, 20),
        cpu("cupy_allgather", "user_annotation", 650, 40, 4),
        launch(660, 103, 4),
        kernel("ncclDevKernel_AllGather_RING_LL", 700 + shift_us, 100, 103, 4, 20),
    ]
    return {
        "schemaVersion": 1,
        "deviceProperties": [],
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
    }


def _write(tmp_path, name, trace):
    path = tmp_path / f"{name}.1700000000000.pt.trace.json"
    path.write_text(json.dumps(trace))
    return read_trace(path)


def test_nccl_kernels_are_communication_by_name(tmp_path):
    t = _write(tmp_path, "w0", _gpu_trace("my_cupy_allreduce"))
    mask = communication_mask(t.events).to_numpy()
    flagged = set(t.events["name"].astype(str)[mask])
    assert flagged == {"ncclKernel_AllReduce_RING_LL_Sum_float", "ncclDevKernel_AllGather_RING_LL"}
    assert is_communication("ncclDevKernel_Broadcast_RING_LL", "kernel")
    assert not is_communication("volta_sgemm_128x64_nn", "kernel")


def test_overview_counts_nccl_kernel_time_as_communication(tmp_path):
    from profiler_core.analysis import step_breakdown as overview

    t = _write(tmp_path, "w0", _gpu_trace("my_cupy_allreduce"))
    step = overview.overview(t)["steps"][0]
    assert step["total_us"] == pytest.approx(1000)
    assert step["kernel_us"] == pytest.approx(200)  # only the sgemm is computation
    # [250, 600] minus the part hidden under the sgemm (kernels win), plus [700, 800]
    assert step["communication_us"] == pytest.approx(300 + 100)
    parts = sum(v for k, v in step.items() if k.endswith("_us") and k != "total_us")
    assert parts == pytest.approx(step["total_us"])


def test_distributed_view_sees_nccl_communication(tmp_path):
    from tb_plugin.views import distributed

    traces = {
        "w0": _write(tmp_path, "w0", _gpu_trace("my_cupy_allreduce")),
        "w1": _write(tmp_path, "w1", _gpu_trace("nccl:all_reduce", shift_us=50)),
    }
    out = distributed.distributed(traces)
    assert set(out["workers"]) == {"w0", "w1"}
    for w, row in out["workers"].items():
        assert row["communication_us"] + row["overlap_us"] > 0, (w, row)
        # the all-reduce overlaps the sgemm for 50 us (w0) / 0 us (w1, shifted by 50 us)
    assert out["workers"]["w0"]["overlap_us"] == pytest.approx(50)
    assert out["workers"]["w1"]["overlap_us"] == pytest.approx(0)
