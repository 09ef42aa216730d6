"""The recoverable-time ledger of one worker (profiler_core/analysis/worker/ledger.py) on hand-made traces, one instant
per bucket with its ns derived by hand, and on every shared real trace: the buckets add up to each step's wall
time exactly and none is negative."""

from __future__ import annotations

import pytest

from profiler_core.analysis.worker import ledger as L

from .conftest import TRACES
from .real_traces_support import read_real_trace, real_trace_files
from .test_views_common_support import kernel, make_trace, op, runtime

US = 1000


def _ns(led: dict, bucket: str) -> list[int] | None:
    return led["buckets"][bucket]["ns"]


def every_bucket_trace():
    """One step [0, 100) µs on device 0, stream 7 (launch calls on the host thread):

    0-2 nothing (other 2) | 2-5 cudaLaunchKernel (launch 3) | 5-6 other 1 | 6-8 cudaMemcpyAsync (launch 2)
    | 8-9 other 1 | 9-10 cudaMemsetAsync (launch 1) | 10-30 kernel K (compute 20; the pageable memcpy [25, 40)
    overlaps it from 25: compute wins) | 30-40 the pageable memcpy (pageable 10) | 40-45 memset (pinned 5)
    | 45-55 NCCL kernel (exposed comm 10; its launch [11, 12) is under compute) | 55-65 DataLoader __next__
    (data loading 10) | 65-70 cudaDeviceSynchronize (host sync 5) | 70-72 cudaLaunchKernel of K2 (launch 2)
    | 72-78 aten::add (host compute 6) | 78-80 other 2 | 80-85 K2 (compute 5) | 85-90 idle before K3, which
    was launched at 81 (< 85) and the gap is 5 µs < 30 µs: HTA's kernel wait (launch 5) | 90-95 K3 (compute 5)
    | 95-100 other 5.
    compute 30, pageable 10, pinned 5, comm 10, data 10, sync 5, launch 3+2+1+2+5 = 13, host 6,
    other 2+1+1+2+5 = 11: 100 µs."""
    return make_trace(
        [
            op("ProfilerStep#1", 0, 100, cat="user_annotation"),
            runtime("cudaLaunchKernel", 2, 3, corr=1),
            runtime("cudaMemcpyAsync", 6, 2, corr=2),
            runtime("cudaMemsetAsync", 9, 1, corr=3),
            runtime("cudaLaunchKernel", 11, 1, corr=4),
            op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 55, 10),
            runtime("cudaDeviceSynchronize", 65, 5, corr=90),
            runtime("cudaLaunchKernel", 70, 2, corr=5),
            op("aten::add", 72, 6),
            runtime("cudaLaunchKernel", 81, 1, corr=6),
            kernel("K", 10, 20, corr=1),
            kernel("Memcpy HtoD (Pageable -> Device)", 25, 15, corr=2, cat="gpu_memcpy"),
            kernel("Memset (Device)", 40, 5, corr=3, cat="gpu_memset"),
            kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 45, 10, corr=4),
            kernel("K2", 80, 5, corr=5),
            kernel("K3", 90, 5, corr=6),
        ]
    )


def test_every_bucket_by_hand():
    led = L.worker_ledger(every_bucket_trace())
    assert led["steps"] == ["1"] and led["wall_ns"] == [100 * US]
    want = {
        L.COMPUTE: 30,
        L.COPY_PAGEABLE: 10,
        L.COPY_PINNED: 5,
        L.EXPOSED_COMM: 10,
        L.DATA_LOADING: 10,
        L.HOST_SYNC: 5,
        L.LAUNCH_OVERHEAD: 13,
        L.HOST_COMPUTE: 6,
        L.OTHER: 11,
    }
    assert {b: _ns(led, b) for b in want} == {b: [v * US] for b, v in want.items()}
    # one trace cannot tell waiting from transferring: sync skew says so and its time is in exposed_comm
    assert _ns(led, L.SYNC_SKEW) is None and led["buckets"][L.SYNC_SKEW]["reason"] == L.NEEDS_ALL_RANKS
    rec = {b: led["buckets"][b]["recoverable_ns"] for b in want}
    # compute is the work (0); exposed comm could hide under the 30 µs of compute no collective overlaps: all 10
    assert rec[L.COMPUTE] == [0] and rec[L.EXPOSED_COMM] == [10 * US]
    assert all(rec[b] == [want[b] * US] for b in want if b not in (L.COMPUTE, L.EXPOSED_COMM))


def test_ranked_view_orders_by_recoverable_ms():
    view = L.ranked(L.worker_ledger(every_bucket_trace()), [(L.DATA_LOADING, "more workers"), (None, "memory")])
    keys = [r["key"] for r in view["buckets"]]
    # recoverable µs: launch 13, other 11, pageable/comm/data 10 (ties by ms, then priority), host 6, pinned 5,
    # sync 5, then compute (0 recoverable, 30 ms) and sync skew (None)
    assert keys[:9] == [
        L.LAUNCH_OVERHEAD,
        L.OTHER,
        L.COPY_PAGEABLE,
        L.EXPOSED_COMM,
        L.DATA_LOADING,
        L.HOST_COMPUTE,
        L.COPY_PINNED,
        L.HOST_SYNC,
        L.COMPUTE,
    ]
    row = {r["key"]: r for r in view["buckets"]}
    assert row[L.DATA_LOADING]["advice"] == ["more workers"] and view["other_advice"] == ["memory"]
    assert row[L.LAUNCH_OVERHEAD]["ms"] == 0.013 and row[L.LAUNCH_OVERHEAD]["share"] == pytest.approx(0.13)
    assert view["average_wall_ms"] == 0.1 and view["recoverable_ms"] == pytest.approx(0.070)  # 100 - 30 compute
    assert view["steps"][0]["buckets"][L.COMPUTE] == 0.03


def test_comm_hidden_by_compute_limits_what_overlap_can_win():
    """Step [0, 100): compute K [0, 50) on stream 7, NCCL [20, 80) on stream 8. Exposed comm [50, 80) = 30;
    compute 50 of which 30 already hide the collective: at most 20 more could overlap. [80, 100) other 20."""
    t = make_trace(
        [
            op("ProfilerStep#1", 0, 100, cat="user_annotation"),
            kernel("K", 0, 50, corr=-1),
            kernel("ncclDevKernel_AllReduce", 20, 60, corr=-1, stream=8),
        ]
    )
    led = L.worker_ledger(t)
    assert _ns(led, L.COMPUTE) == [50 * US] and _ns(led, L.EXPOSED_COMM) == [30 * US]
    assert led["buckets"][L.EXPOSED_COMM]["recoverable_ns"] == [20 * US]
    assert _ns(led, L.OTHER) == [20 * US]
    # no runtime calls at all: launch overhead and host sync cannot be seen, and say so
    assert _ns(led, L.LAUNCH_OVERHEAD) is None and led["buckets"][L.LAUNCH_OVERHEAD]["reason"] == L.NO_LAUNCH_CALLS
    assert _ns(led, L.HOST_SYNC) is None and led["buckets"][L.HOST_SYNC]["reason"] == L.NO_RUNTIME


def test_cpu_only_trace():
    """Step [0, 100), no GPU activity: gloo all_reduce [10, 30) (exposed comm 20), aten::mm [40, 60) and a
    cudaLaunchKernel with no kernel [80, 85) (host compute 20 + 5, the work itself: nothing recoverable),
    DataLoader [60, 70) (10), other [0, 10) + [30, 40) + [70, 80) + [85, 100) = 45."""
    t = make_trace(
        [
            op("ProfilerStep#1", 0, 100, cat="user_annotation"),
            op("gloo:all_reduce", 10, 20),
            op("aten::mm", 40, 20),
            op("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 60, 10),
            runtime("cudaLaunchKernel", 80, 5, corr=3),
        ]
    )
    led = L.worker_ledger(t)
    assert not led["has_gpu"]
    assert _ns(led, L.EXPOSED_COMM) == [20 * US] and _ns(led, L.HOST_COMPUTE) == [25 * US]
    assert _ns(led, L.DATA_LOADING) == [10 * US] and _ns(led, L.OTHER) == [45 * US]
    assert led["buckets"][L.HOST_COMPUTE]["recoverable_ns"] == [0]
    # the 20 µs of gloo could overlap the 25 µs of host work: all 20 recoverable
    assert led["buckets"][L.EXPOSED_COMM]["recoverable_ns"] == [20 * US]
    for b in (L.COMPUTE, L.COPY_PAGEABLE, L.COPY_PINNED, L.HOST_SYNC, L.LAUNCH_OVERHEAD):
        assert _ns(led, b) is None and led["buckets"][b]["reason"] == L.CPU_ONLY


def test_no_collectives_says_so():
    t = make_trace([op("ProfilerStep#1", 0, 10, cat="user_annotation"), op("aten::add", 2, 3)])
    led = L.worker_ledger(t)
    assert _ns(led, L.EXPOSED_COMM) is None and led["buckets"][L.EXPOSED_COMM]["reason"] == L.NO_COMM
    assert _ns(led, L.HOST_COMPUTE) == [3 * US] and _ns(led, L.OTHER) == [7 * US]


def adds_up(led: dict) -> list[str]:
    """Problems: steps whose known buckets do not add up to the wall time, or negative buckets."""
    bad = []
    for i, (step, wall) in enumerate(zip(led["steps"], led["wall_ns"])):
        vals = {b: e["ns"][i] for b, e in led["buckets"].items() if e["ns"] is not None}
        if sum(vals.values()) != wall:
            bad.append(f"step {step}: buckets sum to {sum(vals.values())} ns, wall {wall} ns")
        bad.extend(f"step {step}: {b} = {v} < 0" for b, v in vals.items() if v < 0)
        bad.extend(
            f"step {step}: recoverable {b} = {e['recoverable_ns'][i]} outside [0, {e['ns'][i]}]"
            for b, e in led["buckets"].items()
            if e["ns"] is not None and not 0 <= e["recoverable_ns"][i] <= e["ns"][i]
        )
    return bad


@pytest.mark.parametrize("path", real_trace_files(), ids=lambda p: str(p.relative_to(TRACES)))
def test_buckets_add_up_on_real_traces(path):
    t = read_real_trace(path)
    if t is None:  # refused on purpose, with its reason (tests/real_traces_support.py)
        return
    led = L.worker_ledger(t)
    assert led["steps"], "every shared trace has at least one step (or the whole-window step)"
    assert adds_up(led) == []


def test_a_job_without_a_gpu_is_not_told_about_gpu_idle():
    """A CPU-only step (data loading, then an op): its buckets read "Data loading" and "CPU compute", never "GPU
    idle" (there is no GPU); a step with a kernel keeps the GPU's labels."""
    cpu = make_trace(
        [
            op("ProfilerStep#1", 0, 100, cat="user_annotation"),
            op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 30, cat="user_annotation"),
            op("aten::add", 30, 70),
        ]
    )
    view = L.ranked(L.worker_ledger(cpu))
    labels = {r["key"]: r["label"] for r in view["buckets"]}
    assert labels[L.DATA_LOADING] == "Data loading" and labels[L.HOST_COMPUTE].startswith("CPU compute")
    assert not [t for t in labels.values() if "GPU idle" in t], labels
    row = {r["key"]: r for r in view["buckets"]}
    assert row[L.DATA_LOADING]["ms"] == 0.03 and row[L.HOST_COMPUTE]["ms"] == 0.07
    gpu = {r["key"]: r["label"] for r in L.ranked(L.worker_ledger(every_bucket_trace()))["buckets"]}
    assert gpu[L.DATA_LOADING] == "Data loading (GPU idle)"
