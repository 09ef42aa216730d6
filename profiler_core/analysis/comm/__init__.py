"""Communication: collective calls with their kernels, bytes and process groups (`collectives`), and the
matching of each collective's members across workers into wait and transfer (`group_waits`).
GRAPH: this package's part of the stage graph (`analysis.stages`' docstring)."""

from __future__ import annotations

GRAPH: dict[str, tuple[str, ...]] = {
    "collective_analysis": ("link_gpu_to_ops",),  # collectives
}
