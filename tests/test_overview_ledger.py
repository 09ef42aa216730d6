"""The Overview JSON's `ledger` (docs/diagnosis.md): the recoverable-time ledger of the trace, ranked, with the
existing recommendation texts attached to their buckets; the old keys stay."""

from __future__ import annotations

from profiler_core.analysis.worker import ledger as L
from tb_plugin.views import overview as overview_view

from .test_diagnosis_ledger import every_bucket_trace


def test_overview_carries_the_ranked_ledger_with_advice_by_bucket():
    o = overview_view.overview(every_bucket_trace())
    assert {"steps", "average", "gpu", "recommendations", "environment", "has_steps", "notes"} <= set(o)
    led = o["ledger"]
    row = {r["key"]: r for r in led["buckets"]}
    # the DataLoader span is 10 of the 100 µs step (> 5 %): torch-tb-profiler's text, now under data_loading
    # with its 0.01 ms; GPU 0 is idle 45 µs of 100 (over 25 %, and busy under half): the idle text goes to
    # launch overhead, the low-utilization one to host compute
    assert row[L.DATA_LOADING]["ms"] == 0.01 and len(row[L.DATA_LOADING]["advice"]) == 1
    assert row[L.DATA_LOADING]["advice"][0].startswith("10.0% of the step time is spent loading input data")
    assert any("idle 45.0%" in a for a in row[L.LAUNCH_OVERHEAD]["advice"])
    assert any("busy less than half" in a for a in row[L.HOST_COMPUTE]["advice"])
    # every recommendation is in exactly one place of the ledger
    placed = [a for r in led["buckets"] for a in r["advice"]] + led["other_advice"]
    assert sorted(placed) == sorted(o["recommendations"]) and len(o["recommendations"]) == 3
    # the ledger's ms add up to the step: 100 µs
    assert round(sum(r["ms"] for r in led["buckets"] if r["ms"] is not None), 6) == led["average_wall_ms"] == 0.1


def test_overview_view_is_the_step_breakdown_with_the_ledger():
    """The plugin's /overview is `views.overview.overview`; without its ledger and its roofline (MFU) it equals the
    step breakdown's."""
    from profiler_core.analysis import step_breakdown

    t = every_bucket_trace()
    with_ledger = overview_view.overview(t)
    assert "ledger" not in step_breakdown.overview(t) and "roofline" not in step_breakdown.overview(t)
    assert "ledger" in with_ledger and "roofline" in with_ledger
    assert {k: v for k, v in with_ledger.items() if k not in ("ledger", "roofline")} == step_breakdown.overview(t)
