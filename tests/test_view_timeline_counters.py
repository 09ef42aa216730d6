"""The timeline JSON's queue length counter track (views/timeline.py `counters`): Chrome "C" events per
(device, stream), windowed, thinned per pixel; a reason where there is none. Values derived by hand."""

from __future__ import annotations

from profiler_core.analysis.gpu_idle.gpu_launches import NO_GPU
from tb_plugin.views import timeline as tv

from .test_views_common_support import kernel, make_trace, op, runtime


def trace():
    """Stream 7 of device 0 (µs; the step at 0 is the origin): K1 launched at 1 runs from 10, K2 launched at 5
    runs from 25. Queue length: 1 at 1 (K1 launched), 2 at 5 (K2 launched), 1 at 10 (K1 started), 0 at 25."""
    return make_trace(
        [
            op("ProfilerStep#1", 0, 40, cat="user_annotation"),
            runtime("cudaLaunchKernel", 1, 2, corr=1),
            runtime("cudaLaunchKernel", 5, 8, corr=2),
            kernel("K1", 10, 10, corr=1),
            kernel("K2", 25, 5, corr=2),
        ]
    )


def _points(out):
    return [(c["ts"], c["args"]["queue_length"]) for c in out["counters"]]


def test_queue_length_counter_events():
    out = tv.timeline(trace())
    assert out["counters_reason"] is None
    assert _points(out) == [(1.0, 1), (5.0, 2), (10.0, 1), (25.0, 0)]
    c = out["counters"][0]
    assert c["ph"] == "C" and c["name"] == "Queue length stream 7" and (c["pid"], c["tid"]) == (0, 7)


def test_window_keeps_the_value_holding_at_its_start():
    # window [6, 30]: the change at 5 (value 2) still holds at 6; then 10 and 25
    assert _points(tv.timeline(trace(), 6, 30)) == [(5.0, 2), (10.0, 1), (25.0, 0)]
    # window [26, 30]: nothing changes inside; the value 0 set at 25 holds
    assert _points(tv.timeline(trace(), 26, 30)) == [(25.0, 0)]


def test_many_changes_keep_the_highest_per_pixel():
    # one pixel over [0, 30] and four changes (> 2 per pixel): the highest, 2 at 5 µs
    assert _points(tv.timeline(trace(), 0, 30, 1)) == [(5.0, 2)]


def test_no_gpu_says_why():
    out = tv.timeline(make_trace([op("aten::add", 0, 10)]))
    assert out["counters"] == [] and out["counters_reason"] == NO_GPU
