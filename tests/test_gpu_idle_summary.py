"""The per-worker GPU-idle summary on a hand-made two-step trace (values derived by hand) and its reasons."""

from __future__ import annotations

import json

from profiler_core.analysis.gpu_idle import gpu_idle_summary as gis
from profiler_core.analysis.gpu_idle.gpu_launches import NO_GPU, NO_LAUNCHES
from profiler_core.analysis.gpu_idle.idle_causes import NO_LAUNCH_LINKS

from .test_views_common_support import kernel, make_trace, op, runtime


def trace():
    """Steps [0, 100) and [100, 200) (µs). K1 [20, 40) and K2 [45, 50) launched at 10 and 15: the 5 µs gap before
    K2 is kernel wait. K3 [130, 150) launched at 120, after K2 ended: host wait [50, 130), 50 µs in step 1 and 30
    in step 2. K4 [190, 195) launched [126, 136), before K3 ended: the 40 µs gap is other, and K4 is shorter
    than its launch."""
    return make_trace(
        [
            op("ProfilerStep#1", 0, 100, cat="user_annotation"),
            op("ProfilerStep#2", 100, 100, cat="user_annotation"),
            runtime("cudaLaunchKernel", 10, 2, corr=1),
            runtime("cudaLaunchKernel", 15, 2, corr=2),
            runtime("cudaLaunchKernel", 120, 5, corr=3),
            runtime("cudaLaunchKernel", 126, 10, corr=4),
            kernel("K1", 20, 20, corr=1),
            kernel("K2", 45, 5, corr=2),
            kernel("K3", 130, 20, corr=3),
            kernel("K4", 190, 5, corr=4),
        ]
    )


def test_summary_per_step():
    s = gis.gpu_idle_summary(trace())
    assert s["steps"] == ["1", "2"] and s["reasons"] == []
    assert s["devices"] == {
        "0": {"host_wait": [50_000, 30_000], "kernel_wait": [5_000, 0], "other": [0, 40_000], "unknown_launch": [0, 0]}
    }
    # (cpu, gpu, delay) µs: K1 (2, 20, 8), K2 (2, 5, 28) | K3 (5, 20, 5), K4 (10, 5, 54)
    assert s["launches"] == {
        "count": [2, 2],
        "cpu_duration": [4_000, 15_000],
        "gpu_duration": [25_000, 25_000],
        "launch_delay": [36_000, 59_000],
        "shorter_than_launch": [0, 1],
    }
    assert s["queue_max"] == {"0:7": 2}  # launches at 10 and 15 before K1 starts at 20
    assert json.loads(json.dumps(s)) == s


def test_reasons_instead_of_numbers():
    s = gis.gpu_idle_summary(make_trace([op("aten::add", 0, 10)]))
    assert s["reasons"] == [NO_GPU] and s["devices"] is None and s["launches"] is None
    s = gis.gpu_idle_summary(make_trace([kernel("A", 0, 10, corr=1), kernel("B", 50, 10, corr=2)]))
    assert s["reasons"] == [NO_LAUNCH_LINKS, NO_LAUNCHES]
    assert s["devices"]["0"]["host_wait"] is None and s["devices"]["0"]["other"] == [40_000]
    assert s["launches"] is None and s["queue_max"] == {}
