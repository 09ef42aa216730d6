"""The GPU links stage: each runtime/driver call and each GPU activity with the CPU op that launched it.

A launch call belongs to the op whose External id it carries, else to the innermost op enclosing its start
(`op_tree.innermost_op_at`, the `intervals.holds` rule); a GPU activity to its launch call's op by correlation,
else to the op with its own External id; a kernel replayed by a CUDA graph to the op that captured it
(`graph_replay`). An op merged into its same-name parent hands its links to it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...trace.categories import GPU_ACTIVITY_CATS, LAUNCH_CATS, OP_CATS
from .columns import category_mask, first_position_by_key, lookup
from .graph_replay import graph_replay
from .op_tree import innermost_op_at, op_tree
from .registry import stage

__all__ = ["link_launches_to_ops", "link_gpu_to_ops", "launch_calls", "ext_to_op", "first_position_by_key", "lookup"]


@stage()
def ext_to_op(t: Any) -> tuple[np.ndarray, np.ndarray]:
    """Sorted External ids of the CPU ops and, for each, the position of the first op carrying it."""
    ev = t.events
    is_op = category_mask(ev, OP_CATS)
    ext = ev["external_id"].to_numpy(np.int64)
    rows = np.flatnonzero(is_op & (ext > 0))
    return first_position_by_key(ext[rows], rows)


def _resolve_merged(t: Any, op_rows: np.ndarray) -> np.ndarray:
    if not (op_rows >= 0).any():
        return op_rows
    tree = op_tree(t)
    merged = tree["merged_into"].to_numpy()
    if not (merged >= 0).any():
        return op_rows
    target = np.arange(len(t.events), dtype=np.int64)
    target[tree["row"].to_numpy()] = np.where(merged >= 0, merged, tree["row"].to_numpy())
    return np.where(op_rows >= 0, target[np.maximum(op_rows, 0)], -1)


def _build_launch_links(t: Any) -> pd.DataFrame:
    ev = t.events
    rows = np.flatnonzero(category_mask(ev, LAUNCH_CATS))
    if len(rows) == 0:  # no launch call (a CPU trace): no External id map to build
        return pd.DataFrame({"row": rows, "op": np.zeros(0, np.int64), "correlation": np.zeros(0, np.int64)})
    ext = ev["external_id"].to_numpy(np.int64)[rows]
    keys, vals = ext_to_op(t)
    op = lookup(keys, vals, ext)
    missing = op < 0
    if missing.any():  # no (known) External id: the innermost op around the call on its thread
        mr = rows[missing]
        op[missing] = innermost_op_at(
            t, ev["pid"].to_numpy()[mr], ev["tid"].to_numpy()[mr], ev["ts"].to_numpy(np.int64)[mr]
        )
    op = _resolve_merged(t, op)
    return pd.DataFrame({"row": rows, "op": op, "correlation": ev["correlation"].to_numpy(np.int64)[rows]}, copy=False)


@stage(op_tree, ext_to_op)
def link_launches_to_ops(t: Any) -> pd.DataFrame:
    """Each cuda_runtime/cuda_driver call with the CPU op that made it: columns `row`, `op` (position or -1),
    `correlation`. Linked by External id, else by the innermost cpu_op/user_annotation on the same thread
    whose range holds the call's start."""
    return _build_launch_links(t)


def _build_gpu_links(t: Any) -> pd.DataFrame:
    ev = t.events
    rows = np.flatnonzero(category_mask(ev, GPU_ACTIVITY_CATS))
    corr = ev["correlation"].to_numpy(np.int64)[rows]
    launches = link_launches_to_ops(t)
    lr = launches["row"].to_numpy()
    lc = launches["correlation"].to_numpy()
    ok = lc >= 0
    lkeys, lpos = first_position_by_key(lc[ok], np.arange(len(lr))[ok])
    li = lookup(lkeys, lpos, np.where(corr >= 0, corr, -2))
    if len(lr):
        runtime = np.where(li >= 0, lr[np.maximum(li, 0)], -1)
        op = np.where(li >= 0, launches["op"].to_numpy()[np.maximum(li, 0)], -1)
    else:
        runtime = np.full(len(rows), -1, np.int64)
        op = np.full(len(rows), -1, np.int64)
    ext_own = ev["external_id"].to_numpy(np.int64)[rows]
    missing = (op < 0) & (ext_own > 0)
    if missing.any():  # the activity's own External id (old traces carry it on kernels too)
        keys, vals = ext_to_op(t)
        op[missing] = _resolve_merged(t, lookup(keys, vals, ext_own[missing]))
    replay = graph_replay(t)
    captured = replay["call"].to_numpy()
    if (captured >= 0).any():  # kernels a graph launch replayed: the op of the call that captured them
        op_of = np.full(len(ev), -1, np.int64)
        op_of[launches["row"].to_numpy()] = launches["op"].to_numpy()
        at = np.searchsorted(rows, replay["row"].to_numpy()[captured >= 0])
        op[at] = op_of[captured[captured >= 0]]
    ext_col = ev["external_id"].to_numpy(np.int64)
    external_id = np.where(op >= 0, ext_col[np.maximum(op, 0)], ext_own) if len(rows) else ext_own
    return pd.DataFrame({"row": rows, "runtime": runtime, "op": op, "external_id": external_id}, copy=False)


@stage(link_launches_to_ops, ext_to_op, op_tree, graph_replay)
def link_gpu_to_ops(t: Any) -> pd.DataFrame:
    """Each kernel/memcpy/memset (in event order) with its launch: columns `row` (position in t.events),
    `runtime` (the cuda_runtime/cuda_driver call with the same correlation, or -1), `op` (the innermost CPU
    op that made that call, or the op with the activity's own External id; -1 if none), `external_id`.
    An activity a graph launch replayed has the op of the call that captured it (`graph_replay`), where the
    trace holds the capture; its `runtime` stays the graph launch."""
    return _build_gpu_links(t)


def launch_calls(t: Any, rows: np.ndarray) -> np.ndarray:
    """For the GPU activities at `rows` (positions in t.events), the row of the runtime/driver call that launched
    each (`link_gpu_to_ops`' `runtime`), -1 where the trace has none."""
    gl = link_gpu_to_ops(t)
    runtime_of = np.full(len(t.events), -1, np.int64)
    runtime_of[gl["row"].to_numpy()] = gl["runtime"].to_numpy()
    return runtime_of[rows]
