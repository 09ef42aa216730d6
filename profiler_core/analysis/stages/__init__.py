"""Named analysis stages over a `TraceData` (docs/internals.md §5): each a public function `stage(t) -> table` in its
own module, computed once per trace (`registry`), the views and summaries only select and render them.

GRAPH is the written list of which of these core stages reads which; each analysis package that declares stages
of its own (`comm`, `gpu_idle`, `tables`, `worker`) writes its part in its `__init__.py`, and
`registry.DEPENDENCIES` (filled by the `@stage` declarations) must equal their union
(tests/test_analysis_concepts.py).
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
    "communication_events": ("link_gpu_to_ops",),  # stages/classify.py
    "startup_calls": (),  # stages/startup.py
}
