"""Notices about GPU work replayed by CUDA graphs, for the Operators, Kernels and Modules views' `notes`.

Replayed kernels whose capture is in the trace count as device time of the ops that captured them
(`profiler_core.analysis.stages.graph_replay`); the others stay on the op that launched the graph, and a note
says how much GPU time that is, which row holds it, and why.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from profiler_core.analysis.stages.columns import category_mask
from profiler_core.analysis.stages.gpu_links import link_launches_to_ops
from profiler_core.analysis.stages.graph_replay import BY_NODE_ID, graph_captures, graph_replay
from profiler_core.analysis.stages.registry import stage
from profiler_core.trace.categories import GPU_ACTIVITY_CATS

#: a launching row holding more than this fraction of the GPU time is named as holding most of it
MOST = 0.5


def _percent(x: float) -> str:
    return f"{100 * x:.1f} %"


def _notes(t: Any) -> list[str]:
    replay = graph_replay(t)
    if not len(replay):
        return []
    ev = t.events
    dur = ev["dur"].to_numpy(np.int64)
    total = int(dur[category_mask(ev, GPU_ACTIVITY_CATS)].sum())
    call, rows = replay["call"].to_numpy(), replay["row"].to_numpy()
    launch = replay["launch"].to_numpy()
    notes = []
    done = call >= 0
    if done.any():
        by_id = bool((replay["how"].to_numpy()[done] == BY_NODE_ID).all())
        notes.append(
            f"{int(done.sum()):,} GPU activities replayed by {len(np.unique(launch[done])):,} CUDA-graph launches "
            f"count as device time of the ops that captured them (matched by "
            f"{'graph node id' if by_id else 'their order in the capture'})."
        )
    left = ~done
    if not left.any() or total <= 0:
        return notes
    launches = link_launches_to_ops(t)
    op_of = np.full(len(ev), -1, np.int64)
    op_of[launches["row"].to_numpy()] = launches["op"].to_numpy()
    names = ev["name"].astype(str).to_numpy()
    per_row: dict[str, int] = {}
    for lr, d in zip(launch[left].tolist(), dur[rows[left]].tolist()):
        op = int(op_of[lr])
        key = names[op] if op >= 0 else names[lr]
        per_row[key] = per_row.get(key, 0) + int(d)
    top, top_ns = max(per_row.items(), key=lambda kv: (kv[1], kv[0]))
    share, top_share = sum(per_row.values()) / total, top_ns / total
    n_launch = len(np.unique(launch[left]))
    why = (
        "the capture is not in this trace"
        if len(graph_captures(t)) == 0
        else "no capture in this trace before them launches as many kernels as they run"
    )
    text = (
        f"{_percent(share)} of the GPU time was replayed by {n_launch:,} CUDA-graph launches whose kernels cannot "
        f"be attributed to the ops, modules and shapes that captured them ({why}); it counts as device time of "
        f"the ops that launched the graphs ('{top}': {_percent(top_share)}, the most). Profile the step that "
        "captures the graphs too (torch.cuda.graph, torch.compile's first calls) to attribute it."
    )
    if top_share > MOST:
        text = f"One row, '{top}', holds most of the GPU time ({_percent(top_share)}). " + text
    notes.append(text)
    return notes


@stage(graph_replay, graph_captures, link_launches_to_ops)
def replay_notes(t: Any) -> tuple[str, ...]:
    """The notes of `graph_replay_notes`, computed once per trace."""
    return tuple(_notes(t))


def graph_replay_notes(t: Any) -> list[str]:
    """Plain-text notes on CUDA-graph replays: how many replayed activities landed on their capture ops, and
    the share of GPU time left on the graph-launching op where the capture is missing."""
    return list(replay_notes(t))
