"""The per-worker facts the cross-rank diagnosis reads (`analysis.worker.worker_facts`): step phases on a hand-made GPU
trace with hand-derived values, and the bounds (calls beyond MAX_CALLS are dropped and counted; a summary
holding more is refused)."""

from __future__ import annotations

import numpy as np
import pytest

from profiler_core.analysis.worker import worker_facts
from tb_plugin.summaries import summary

from .test_views_common_support import kernel, make_trace, op, runtime

US = 1000  # ns
DL = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def gpu_trace():
    """One step 0..100 µs: DataLoader 0..8; aten::mm 9..16 launches (9..14) a kernel that runs 20..50; a
    pageable host-to-device copy (cudaMemcpyAsync 52..54) runs 55..65; cudaDeviceSynchronize 66..90."""
    return make_trace(
        [
            op("ProfilerStep#1", 0, 100, cat="user_annotation"),
            op(DL, 0, 8),
            op("aten::mm", 9, 7, ext=5),
            runtime("cudaLaunchKernel", 9, 5, corr=1, ext=5),
            kernel("volta_sgemm_128x64_nn", 20, 30, corr=1),
            runtime("cudaMemcpyAsync", 52, 2, corr=2),
            kernel("Memcpy HtoD (Pageable -> Device)", 55, 10, corr=2, cat="gpu_memcpy"),
            runtime("cudaDeviceSynchronize", 66, 24, corr=3),
        ]
    )


def test_phases_of_a_gpu_step():
    ph = worker_facts.worker_facts(gpu_trace())["phases"]
    assert ph["step"] == ["1"] and ph["reasons"] == {}
    got = {k: ph[k][0] for k in worker_facts.PHASES}
    assert got == {
        "data_loading": 8 * US,
        "h2d": 10 * US,
        "host_sync": 24 * US,
        "launch": 5 * US,  # cudaLaunchKernel only (a memcpy call is not a kernel launch)
        "gpu_idle": (100 - 30 - 10) * US,  # the kernel and the copy are the GPU's only work
        "compute": 30 * US,
        "comm": 0,
    }
    names = ph["names"]
    assert [[names[i], ns] for i, ns in ph["top_kernels"][0]] == [["volta_sgemm_128x64_nn", 30 * US]]
    ops = {names[i]: ns for i, ns in ph["top_ops"][0]}
    # host self time: aten::mm's 7 µs less the 5 µs of its launch call (the project's one definition)
    assert ops[DL] == 8 * US and ops["aten::mm"] == 2 * US


def test_a_cpu_only_trace_says_why_gpu_phases_are_missing():
    ph = worker_facts.worker_facts(make_trace([op("ProfilerStep#1", 0, 10, cat="user_annotation")]))["phases"]
    assert ph["h2d"] == [None] and ph["gpu_idle"] == [None] and ph["launch"] == [None]
    assert ph["reasons"]["gpu_idle"] == "no GPU activity in the trace"
    assert ph["reasons"]["host_sync"] == "no CUDA/HIP runtime calls in the trace"


def _calls_trace(n: int):
    calls = [
        op(
            "record_param_comms",
            10 + 3 * i,
            2,
            **{"Collective name": "allreduce", "Process Group Name": "0", "Group size": 2},
        )
        for i in range(n)
    ]
    info = {"distributedInfo": {"rank": 0, "world_size": 2, "pg_config": [{"pg_name": "0", "ranks": [0, 1]}]}}
    return make_trace([op("ProfilerStep#1", 0, 10 + 3 * n, cat="user_annotation"), *calls], metadata=info)


def test_calls_beyond_the_bound_are_dropped_and_counted(monkeypatch):
    monkeypatch.setattr(worker_facts, "MAX_CALLS", 3)
    cc = worker_facts.worker_facts(_calls_trace(5))["collective_calls"]
    assert cc["dropped"] == 2 and cc["group"] == [0, 0, 0]
    assert cc["groups"] == ["0 [0, 1]"] and cc["group_ranks"] == [[0, 1]] and cc["group_size"] == [2]
    assert cc["start"] == [10 * US, 13 * US, 16 * US] and cc["dur"] == [2 * US] * 3


def test_a_summary_holding_more_calls_than_the_bound_is_refused(monkeypatch):
    s = summary.summarize(_calls_trace(5))
    assert len(summary.decode(summary.encode(s)).collective_calls.start) == 5
    monkeypatch.setattr(worker_facts, "MAX_CALLS", 3)
    with pytest.raises(summary.SummaryError, match="too many calls"):
        summary.decode(summary.encode(s))


def test_sequence_numbers_count_each_groups_non_wait_calls():
    group = np.array([0, 1, 0, 0, 1, 0])
    is_wait = np.array([False, False, True, False, False, False])
    assert worker_facts.sequence(group, is_wait).tolist() == [0, 0, -1, 1, 1, 2]
