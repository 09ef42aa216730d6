"""GPU idle explained on hand-made traces: idle gap categories (host wait, kernel wait, other), their split by
step, kernel launch statistics (a kernel shorter than its launch, a negative delay clipped), the queue length
series, and the reasons given where a trace lacks launches or GPU activity. Expected values derived by hand."""

from __future__ import annotations

import pandas as pd
import pytest

from profiler_core.analysis.gpu_idle import gpu_launches, idle_causes, queue_length

from .test_views_common_support import kernel, make_trace, op, runtime


def trace():
    """Stream 7 of device 0 (µs):

    K1 launched [1, 3) runs [10, 20); K2 launched [5, 13) runs [25, 30): gap [20, 25) = 5 µs, its launch was
    before the gap: kernel wait; K3 launched [40, 44) runs [50, 60): gap [30, 50), launched after the gap
    began: host wait (20 µs); K4 launched [8, 9) runs [150, 160): gap [60, 150) = 90 µs >= 30, launched
    long before: other. Stream 8: a memcpy launched by cudaMemcpyAsync [170, 180) runs [175, 177)."""
    return make_trace(
        [
            op("ProfilerStep#1", 0, 100, cat="user_annotation"),
            runtime("cudaLaunchKernel", 1, 2, corr=1),
            runtime("cudaLaunchKernel", 5, 8, corr=2),
            runtime("cudaLaunchKernel", 8, 1, corr=4),
            runtime("cudaLaunchKernel", 40, 4, corr=3),
            runtime("cudaMemcpyAsync", 170, 10, corr=5),
            kernel("K1", 10, 10, corr=1),
            kernel("K2", 25, 5, corr=2),
            kernel("K3", 50, 10, corr=3),
            kernel("K4", 150, 10, corr=4),
            kernel("Memcpy HtoD", 175, 2, corr=5, stream=8, cat="gpu_memcpy"),
        ]
    )


def test_gap_categories():
    g = idle_causes.idle_gaps(trace())
    got = [(int(r.stream), r.start // 1000, r.end // 1000, r.category) for r in g.itertuples()]
    assert got == [(7, 20, 25, "kernel_wait"), (7, 30, 50, "host_wait"), (7, 60, 150, "other")]
    assert g["launch_known"].all()


def test_threshold_is_a_parameter():
    # at 4 µs the 5 µs gap is no longer launch overhead: other; at 100 µs the 90 µs gap is kernel wait
    cats = list(idle_causes.idle_gaps(trace(), kernel_wait_threshold_ns=4_000)["category"])
    assert cats == ["other", "host_wait", "other"]
    cats = list(idle_causes.idle_gaps(trace(), kernel_wait_threshold_ns=100_000)["category"])
    assert cats == ["kernel_wait", "host_wait", "kernel_wait"]


def test_launch_at_the_gap_start_is_not_host_wait():
    # HTA's rule is strict: a launch that starts exactly when the previous kernel ends was in time
    t = make_trace(
        [
            runtime("cudaLaunchKernel", 0, 1, corr=1),
            runtime("cudaLaunchKernel", 20, 1, corr=2),
            kernel("A", 10, 10, corr=1),
            kernel("B", 60, 5, corr=2),
        ]
    )
    (cat,) = idle_causes.idle_gaps(t)["category"]
    assert cat == "other"  # 40 µs gap, launched at its start: not host wait, over the 30 µs threshold


def test_split_by_step():
    steps = pd.DataFrame({"step": ["1", "2"], "start": [0, 100_000], "end": [100_000, 140_000]})
    per = idle_causes.idle_by_step(idle_causes.idle_gaps(trace()), steps)
    rows = {r.step: (r.host_wait, r.kernel_wait, r.other, r.idle) for r in per.itertuples()}
    # step 1: kernel wait 5, host wait 20, other [60, 100) = 40; step 2: other [100, 140) = 40;
    # outside every step: other [140, 150) = 10
    assert rows == {"1": (20_000, 5_000, 40_000, 65_000), "2": (0, 0, 40_000, 40_000), "": (0, 0, 10_000, 10_000)}


def test_breakdown_dict_totals():
    b = idle_causes.idle_breakdown(trace())
    assert b["reason"] is None and b["kernel_wait_threshold_us"] == 30.0
    (s,) = b["streams"]  # stream 8 has a single activity: no gap
    assert (s["device"], s["stream"]) == (0, 7)
    assert (s["host_wait_us"], s["kernel_wait_us"], s["other_us"], s["idle_us"]) == (20.0, 5.0, 90.0, 115.0)
    assert sum(p["idle_us"] for p in s["steps"]) == pytest.approx(115.0)
    assert b["total"]["idle_us"] == 115.0 and b["total"]["unknown_launch_us"] == 0.0


def test_devices_are_kept_apart():
    # the same stream number on two devices: two streams, each with its own gap
    t = make_trace(
        [
            kernel("A", 0, 10, corr=-1, device=0),
            kernel("B", 15, 5, corr=-1, device=0),
            kernel("C", 0, 10, corr=-1, device=1),
            kernel("D", 50, 5, corr=-1, device=1),
        ]
    )
    g = idle_causes.idle_gaps(t)
    assert [(int(r.device), r.duration // 1000, r.category) for r in g.itertuples()] == [
        (0, 5, "kernel_wait"),
        (1, 40, "other"),
    ]
    b = idle_causes.idle_breakdown(t)
    assert b["reason"] == idle_causes.NO_LAUNCH_LINKS and b["total"]["host_wait_us"] is None
    assert b["total"]["unknown_launch_us"] == 45.0


def test_nested_activity_makes_no_idle_time():
    # B runs inside A on the same stream; the gap before C starts at A's end (30), not B's (15)
    t = make_trace([kernel("A", 0, 30, corr=-1), kernel("B", 5, 10, corr=-1), kernel("C", 40, 5, corr=-1)])
    g = idle_causes.idle_gaps(t)
    assert [(r.start // 1000, r.end // 1000) for r in g.itertuples()] == [(30, 40)]


def test_no_gpu_activity_says_so():
    t = make_trace([op("aten::add", 0, 10)])
    b = idle_causes.idle_breakdown(t)
    assert b["reason"] == gpu_launches.NO_GPU and b["streams"] == [] and b["total"] is None
    assert queue_length.queue_length(t)["reason"] == gpu_launches.NO_GPU
    assert gpu_launches.launch_stats_summary(gpu_launches.kernel_launch_stats(t))["reason"] == gpu_launches.NO_LAUNCHES


def test_kernel_launch_stats():
    st = gpu_launches.kernel_launch_stats(trace()).set_index("correlation")
    # (cpu, gpu, delay) µs: K1 (2, 10, 10 - 3); K2 (8, 5, 25 - 13), shorter than its launch; K3 (4, 10, 50 - 44);
    # K4 (1, 10, 150 - 9); the memcpy (10, 2, 175 - 180 < 0 -> 0), shorter than its launch
    want = {
        1: (2, 10, 7, False),
        2: (8, 5, 12, True),
        3: (4, 10, 6, False),
        4: (1, 10, 141, False),
        5: (10, 2, 0, True),
    }
    got = {
        c: (r.cpu_duration // 1000, r.gpu_duration // 1000, r.launch_delay // 1000, bool(r.shorter_than_launch))
        for c, r in st.iterrows()
    }
    assert got == want
    s = gpu_launches.launch_stats_summary(
        gpu_launches.kernel_launch_stats(trace()), runtime_cutoff_ns=5_000, launch_delay_cutoff_ns=10_000
    )
    assert (s["count"], s["shorter_than_launch"], s["runtime_outliers"], s["launch_delay_outliers"]) == (5, 2, 2, 2)
    assert s["launch_delay_sum_us"] == 166.0 and s["cpu_duration_max_us"] == 10.0 and s["reason"] is None


def test_launch_stats_names():
    # without memory events, the cudaMemcpyAsync-launched copy is left out (HTA's include_memory_events=False)
    names = gpu_launches.stats_launch_names(include_memory=False)
    assert "cudaMemcpyAsync" not in names and "cuLaunchKernel" in names and "hipLaunchKernel" in names
    assert sorted(gpu_launches.kernel_launch_stats(trace(), launch_names=names)["correlation"]) == [1, 2, 3, 4]


def test_queue_length_series():
    s = queue_length.queue_length_series(trace())
    s7 = s[s["stream"] == 7]
    # launches at 1, 5, 8, 40 (+1), starts at 10, 25, 50, 150 (-1)
    assert list(s7["ts"] // 1000) == [1, 5, 8, 10, 25, 40, 50, 150]
    assert list(s7["queue_length"]) == [1, 2, 3, 2, 1, 2, 1, 0]
    assert list(s[s["stream"] == 8]["queue_length"]) == [1, 0]
    q = queue_length.queue_length_summary(s).set_index("stream")
    assert q.loc[7, "count"] == 8 and q.loc[7, "mean"] == 1.5 and q.loc[7, "max"] == 3 and q.loc[7, "50%"] == 1.5
    # 1*4 + 2*3 + 3*2 + 2*15 + 1*15 + 2*10 + 1*100 over [1, 150]
    assert q.loc[7, "time_weighted_mean"] == pytest.approx(181 / 149)


def test_queue_length_launch_before_start_at_equal_times():
    # a launch and the previous kernel's start at the same instant: the launch counts first (never below 0)
    t = make_trace(
        [
            runtime("cudaLaunchKernel", 0, 1, corr=1),
            runtime("cudaLaunchKernel", 10, 1, corr=2),
            kernel("A", 10, 5, corr=1),
            kernel("B", 20, 5, corr=2),
        ]
    )
    assert list(queue_length.queue_length_series(t)["queue_length"]) == [1, 2, 1, 0]


def test_queue_length_counter_events():
    t = trace()
    ev = queue_length.queue_length_counter(queue_length.queue_length_series(t), t.base_ns)
    assert ev[0] == {
        "ph": "C",
        "name": "Queue length stream 7",
        "pid": 0,
        "tid": 7,
        "ts": (t.base_ns + 1000) / 1000.0,
        "args": {"queue_length": 1},
    }
    assert len(ev) == 10


def test_no_launch_calls_say_so():
    t = make_trace([kernel("A", 0, 10, corr=1), kernel("B", 50, 10, corr=2)])
    assert queue_length.queue_length(t)["reason"] == queue_length.NO_QUEUE
    assert gpu_launches.launch_stats_summary(gpu_launches.kernel_launch_stats(t))["reason"] == gpu_launches.NO_LAUNCHES


def test_device_idle_is_no_activity_on_any_stream():
    """Device 0 (µs): stream 7 runs A [0, 10) and C [50, 60); stream 8 runs B [20, 40). Per stream (HTA): stream 7
    idles [10, 50) = 40 µs; stream 8 has one activity, no gap. The device as a whole idles [10, 20) = 10 µs before
    B (launched at 15, after the gap began: host wait) and [40, 50) = 10 µs before C (launched at 2: kernel
    wait)."""
    t = make_trace(
        [
            runtime("cudaLaunchKernel", 0, 1, corr=1),
            runtime("cudaLaunchKernel", 2, 1, corr=3),
            runtime("cudaLaunchKernel", 15, 1, corr=2),
            kernel("A", 0, 10, corr=1),
            kernel("B", 20, 20, corr=2, stream=8),
            kernel("C", 50, 10, corr=3),
        ]
    )
    per_stream = idle_causes.idle_gaps(t)
    assert [(int(r.stream), r.duration // 1000, r.category) for r in per_stream.itertuples()] == [(7, 40, "other")]
    dev = idle_causes.idle_gaps(t, per_stream=False)
    assert [(int(r.stream), r.start // 1000, r.end // 1000, r.category) for r in dev.itertuples()] == [
        (idle_causes.ALL_STREAMS, 10, 20, "host_wait"),
        (idle_causes.ALL_STREAMS, 40, 50, "kernel_wait"),
    ]
    b = idle_causes.idle_breakdown(t)
    (d,) = b["devices"]
    assert (d["device"], d["host_wait_us"], d["kernel_wait_us"], d["other_us"], d["idle_us"]) == (
        0,
        10.0,
        10.0,
        0.0,
        20.0,
    )
    assert b["total"]["idle_us"] == 40.0


def test_summaries_are_json():
    import json

    t = trace()
    for d in (
        idle_causes.idle_breakdown(t),
        queue_length.queue_length(t),
        gpu_launches.launch_stats_summary(gpu_launches.kernel_launch_stats(t)),
    ):
        assert json.loads(json.dumps(d)) == d


def test_launch_stats_by_step():
    # launches at 1, 5, 8, 40 (step "1" = [0, 30)... split here at 30): K1, K2, K4 in "1"; K3 in "2" = [30, 100);
    # the memcpy launched at 170 is outside every step
    steps = pd.DataFrame({"step": ["1", "2"], "start": [0, 30_000], "end": [30_000, 100_000]})
    per = gpu_launches.launch_stats_by_step(gpu_launches.kernel_launch_stats(trace()), steps)
    got = {
        r.step: (r.count, r.cpu_duration // 1000, r.launch_delay // 1000, r.shorter_than_launch)
        for r in per.itertuples()
    }
    assert got == {"1": (3, 2 + 8 + 1, 7 + 12 + 141, 1), "2": (1, 4, 6, 0), "": (1, 10, 0, 1)}
    inside = pd.DataFrame({"step": ["1"], "start": [0], "end": [200_000]})
    assert list(gpu_launches.launch_stats_by_step(gpu_launches.kernel_launch_stats(trace()), inside)["step"]) == ["1"]


def test_time_at_queue_length():
    # stream 7 (see test_queue_length_series) holds 2 or more over [5, 25) and [40, 50): 20 + 10 µs; 3 or more
    # over [8, 10); never 4
    s = queue_length.queue_length_series(trace())
    at2 = queue_length.time_at_queue_length(s, at_least=2)
    assert at2.to_dict(orient="records") == [{"device": 0, "stream": 7, "ns": 30_000}]
    assert queue_length.time_at_queue_length(s, at_least=3)["ns"].tolist() == [2_000]
    assert len(queue_length.time_at_queue_length(s, at_least=4)) == 0
    assert len(queue_length.time_at_queue_length(s)) == 0  # far from CUDA's 1024 pending launches
