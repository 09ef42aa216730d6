"""Named analysis stages over a `TraceData` (docs/internals.md §5): each a public function `stage(t) -> table` in its
own module, computed once per trace (`registry`), the views and summaries only select and render them.

GRAPH is the one written list of which stage reads which (the plugin's view-level stages too);
`registry.DEPENDENCIES` (filled by the `@stage` declarations) must equal it (tests/test_analysis_concepts.py).
Importing this package imports pandas: profiler_core itself never does at import time.
"""

from __future__ import annotations

GRAPH: dict[str, tuple[str, ...]] = {
    "op_tree": (),  # stages/op_tree.py
    "tree_index": ("op_tree",),  # stages/op_tree.py
    "ext_to_op": (),  # stages/gpu_links.py
    "link_launches_to_ops": ("op_tree", "ext_to_op"),  # stages/gpu_links.py
    "graph_captures": (),  # stages/graph_replay.py
    "graph_replay": ("graph_captures",),  # stages/graph_replay.py
    "link_gpu_to_ops": ("link_launches_to_ops", "ext_to_op", "op_tree", "graph_replay"),
    "steps": ("link_gpu_to_ops",),  # stages/steps.py
    "early_gpu_rows": ("steps", "link_gpu_to_ops"),  # stages/steps.py
    "launch_stats": ("link_gpu_to_ops",),  # stages/launch_stats.py
    "node_stats": ("op_tree", "link_launches_to_ops", "link_gpu_to_ops"),  # stages/node_stats.py
    # stages of the plugin's views (tb_plugin/views/<module>.py)
    "op_stats": ("node_stats",),  # operators: + Tensor Core columns
    "tensor_core_eligible_kernel_ratio": ("op_stats",),  # operators
    "python_parents": (),  # operators: with_stack frames
    "op_nodes": ("op_tree", "node_stats", "steps"),  # diff: ops per step and phase
    "kernel_places": ("op_tree", "link_gpu_to_ops"),  # kernel_diff: each kernel's op path and place k
    "kernel_groups": ("kernel_places",),  # kernel_diff: kernels per (op path, name)
    "module_nodes": ("node_stats",),  # modules
    "collective_analysis": ("link_gpu_to_ops",),  # collectives
    "memory_records": (),  # memory
    "memory_record_ops": ("memory_records", "op_tree"),  # memory
    "tiles_for": (),  # timeline
    "queue_track": ("link_gpu_to_ops",),  # queue_length: the timeline's counter track
    "replay_notes": ("graph_replay", "graph_captures", "link_launches_to_ops"),  # graph_notes
    "worker_ledger": ("steps", "link_gpu_to_ops"),  # diagnosis/ledger
}
