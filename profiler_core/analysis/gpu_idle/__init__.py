"""The GPU idle family: GPU activity and launches (`gpu_launches`), idle gaps and their causes (`idle_causes`),
queue length (`queue_length`) and their per-step projection for the summaries (`gpu_idle_summary`;
docs/gpu_idle.md). GRAPH: this package's part of the stage graph (`analysis.stages`' docstring)."""

from __future__ import annotations

GRAPH: dict[str, tuple[str, ...]] = {
    "queue_track": ("link_gpu_to_ops",),  # queue_length: the timeline's counter track
}
