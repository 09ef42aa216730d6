"""What one worker's trace gives the run-level diagnosis: the producers of its summary (the ledger, the
distributed part, the cross-rank facts, the pipeline and kernel-table projections) and the single-rank
critical path; the ledger's vocabulary (`buckets`). Run-level code (tb_plugin/run_level) reads only what these
put in the summaries. GRAPH: this package's part of the stage graph (`analysis.stages`' docstring)."""

from __future__ import annotations

GRAPH: dict[str, tuple[str, ...]] = {
    "worker_ledger": ("steps", "link_gpu_to_ops", "startup_calls", "roofline_calls"),  # ledger
}
