"""Overview view: the step-time breakdown, GPU summary, recommendations and environment of one trace
(`analysis.step_breakdown`) with the trace's ledger ranked (`analysis.worker.ledger`; docs/diagnosis.md)."""

from __future__ import annotations

from typing import Any

from profiler_core.analysis.roofline.worker import worker_roofline
from profiler_core.analysis.step_breakdown import overview_with_advice
from profiler_core.analysis.worker.ledger import ranked, worker_ledger


def overview(t: Any) -> dict:
    """The per-file `/overview` answer: the step breakdown's answer plus `ledger`, each recommendation under
    its bucket, and `roofline` (MFU, HFU, the roof, ms lost to the bound: `analysis.roofline.worker`)."""
    out, tips = overview_with_advice(t)
    r = worker_roofline(t)
    keep = ("device", "roof", "peak_tflops", "mfu", "hfu", "note", "lost_ms", "modelled_ms", "no_model_ms")
    return {**out, "ledger": ranked(worker_ledger(t), tips), "roofline": {k: r[k] for k in keep}}
