"""The tables the per-file views render (operators, kernels, kernel places, module tree, memory records, op
phases, timeline tiles, CUDA-graph notes), as analyses: views select and render them, summaries keep parts.
GRAPH: this package's part of the stage graph (`analysis.stages`' docstring)."""

from __future__ import annotations

GRAPH: dict[str, tuple[str, ...]] = {
    "op_stats": ("node_stats",),  # operators: + Tensor Core columns
    "tensor_core_eligible_kernel_ratio": ("op_stats",),  # operators
    "python_parents": (),  # operators: with_stack frames
    "op_nodes": ("op_tree", "node_stats", "steps"),  # op_phases: ops per step and phase
    "kernel_places": ("op_tree", "link_gpu_to_ops"),  # kernel_places: each kernel's op path and place k
    "kernel_groups": ("kernel_places",),  # kernel_places: kernels per (op path, name)
    "module_nodes": ("node_stats",),  # module_tree
    "memory_records": (),  # memory_records
    "memory_record_ops": ("memory_records", "op_tree"),  # memory_records
    "tiles_for": (),  # timeline_tiles
    "replay_notes": ("graph_replay", "graph_captures", "link_launches_to_ops"),  # graph_notes
}
