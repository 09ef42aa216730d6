"""How far from the hardware: each op's modelled FLOPs and bytes (`op_models`), its kernels' achieved FLOP/s and
bytes/s against the device's roofline (`roofline_ops`, `roofline_kernels`) and the model FLOPs utilisation per
step (`mfu`). The models are `analysis/perf_models`, the device peaks `analysis/device_peaks.py`.

GRAPH: this package's part of the stage graph (`analysis.stages`' docstring)."""

from __future__ import annotations

GRAPH: dict[str, tuple[str, ...]] = {
    "op_models": ("op_tree",),  # ops: each modelled op, and which ones are counted (the outermost)
    "kernel_owners": ("op_models", "link_gpu_to_ops", "communication_events"),  # table: each kernel's call
    "roofline_calls": ("kernel_owners", "op_models"),  # table: per counted call, achieved vs bound
}
