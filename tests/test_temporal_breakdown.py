"""Issue 11, item 6: HTA's temporal breakdown (GPU idle / compute / non-compute) in the overview's GPU summary,
per step and on average, per device, and a recommendation when idle passes a threshold.

Fixture: tests/data/issue11/idle_gpu.pt.trace.json.gz (hand-made, see PROVENANCE.md). Agreement with HTA itself
on the shared traces: tests/test_hta_agreement.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profiler_core.analysis import step_breakdown as overview
from profiler_core.analysis import temporal
from profiler_core.trace.read.reader import read_trace

DATA = Path(__file__).parent / "data" / "issue11"


@pytest.fixture(scope="module")
def ov():
    return overview.overview(read_trace(DATA / "idle_gpu.pt.trace.json.gz", processes=0))


def test_temporal_breakdown_per_step_and_average(ov):
    tb = ov["gpu"]["temporal"]
    (dev,) = tb["devices"]
    assert dev["device"] == 0
    s1, s2 = dev["steps"]
    assert (s1["step"], s2["step"]) == ("1", "2")
    assert (s1["total_us"], s1["idle_us"], s1["compute_us"], s1["non_compute_us"]) == (10_000, 4500, 4000, 1500)
    assert (s2["total_us"], s2["idle_us"], s2["compute_us"], s2["non_compute_us"]) == (10_000, 1000, 8000, 1000)
    assert s1["idle_share"] == pytest.approx(0.45) and s2["compute_share"] == pytest.approx(0.8)
    avg = dev["average"]
    assert (avg["idle_us"], avg["compute_us"], avg["non_compute_us"]) == (2750, 6000, 1250)
    assert avg["idle_share"] + avg["compute_share"] + avg["non_compute_share"] == pytest.approx(1.0)
    json.dumps(ov)


def test_idle_is_invisible_in_the_step_breakdown_but_not_in_the_temporal_one(ov):
    assert ov["average"]["other_us"] < 0.01 * ov["average"]["total_us"]  # annotations count as CPU Exec
    assert ov["gpu"]["temporal"]["devices"][0]["average"]["idle_share"] == pytest.approx(0.275)


def test_recommendation_when_idle_passes_the_threshold(ov):
    recs = [r for r in ov["recommendations"] if "idle" in r]
    assert len(recs) == 1 and "GPU 0 is idle 27.5% of the average step" in recs[0]
    below = {"devices": [{"device": 0, "average": {"idle_share": temporal.IDLE_THRESHOLD - 0.01}}]}
    assert temporal.idle_recommendations(below) == []
    above = {"devices": [{"device": 1, "average": {"idle_share": temporal.IDLE_THRESHOLD + 0.01}}]}
    assert len(temporal.idle_recommendations(above)) == 1


def test_kernel_type_times_split_overlaps():
    t = read_trace(DATA / "idle_gpu.pt.trace.json.gz", processes=0)
    kt = temporal.kernel_type_times(t)
    # step 1: GEMM [1000, 5000), NCCL [4500, 5500), copy [5500, 6500); step 2: GEMM 8 ms, copy and memset 0.5 ms
    assert kt == {
        "COMPUTATION": 3_500_000 + 8_000_000,
        "COMPUTATION overlapping COMMUNICATION": 500_000,
        "COMMUNICATION": 500_000,
        "MEMORY": 2_000_000,
    }
