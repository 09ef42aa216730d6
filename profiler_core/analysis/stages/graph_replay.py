"""The CUDA-graph stages: kernels replayed by a graph launch, attributed to the calls that captured them.

A graph launch (`cudaGraphLaunch`, `cuGraphLaunch`, `hipGraphLaunch`) runs kernels captured earlier: during the
capture (between `*StreamBeginCapture` and `*StreamEndCapture` on one thread, or torch's `capture_begin` /
`capture_end` frames where the trace has no such calls) each launch call records a graph node and runs nothing.
The k-th GPU activity of a replay belongs to the k-th launch call of its capture; where the trace numbers the
graph nodes (args `graph node id`, and `graph id`), the replay's activities are ordered by node id (nodes are
numbered as they are created), and an activity whose node id a captured call carries matches that call directly.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from ...trace.categories import GPU_ACTIVITY_CATS, LAUNCH_CATS, OP_CATS, PYTHON_FUNCTION
from .columns import category_mask, first_position_by_key, lookup, name_mask
from .registry import stage

__all__ = [
    "BY_NODE_ID",
    "BY_SEQUENCE",
    "NOT_MATCHED",
    "graph_captures",
    "graph_replay",
    "is_graph_launch",
]

GRAPH_LAUNCH = re.compile(r"^(cuda|cu|hip)GraphLaunch")
BEGIN_CAPTURE = re.compile(r"^(cuda|cu|hip)StreamBeginCapture")
END_CAPTURE = re.compile(r"^(cuda|cu|hip)StreamEndCapture")
#: the launch calls that add a node running GPU work to a graph under capture
NODE_CALL = re.compile(r"Launch\w*Kernel|Mem(cpy|set)\w*Async")
BEGIN_FRAME, END_FRAME = "capture_begin", "capture_end"

#: `graph_replay` `how`: how an activity found its captured call
NOT_MATCHED, BY_NODE_ID, BY_SEQUENCE = 0, 1, 2


def is_graph_launch(name: str) -> bool:
    """True for a runtime/driver call that launches a CUDA or HIP graph."""
    return GRAPH_LAUNCH.search(name) is not None


def _int_column(t: Any, name: str) -> np.ndarray:
    """An events column of `t` (sparse or not) as int64, every row."""
    return t.arg(name).astype(np.int64, copy=False)


def _regions(ev: pd.DataFrame, begins: np.ndarray, ends: np.ndarray, b_at: np.ndarray, e_at: np.ndarray) -> list:
    """(pid, tid, start, end) of each begin paired with the first end after it on its thread."""
    pid, tid = ev["pid"].to_numpy(), ev["tid"].to_numpy()
    out = []
    for b, bt in zip(begins.tolist(), b_at.tolist()):
        same = (pid[ends] == pid[b]) & (tid[ends] == tid[b]) & (e_at >= bt)
        if same.any():
            out.append((pid[b], tid[b], bt, int(e_at[same].min())))
    return out


@stage()
def graph_captures(t: Any) -> pd.DataFrame:
    """Every launch call made while a graph was captured: columns `capture` (0, 1, ... in time order), `call`
    (row of the launch call), `begin`, `end` (ns, the capture's range), in capture then time order."""
    ev = t.events
    ts = ev["ts"].to_numpy(np.int64)
    te = ts + ev["dur"].to_numpy(np.int64)
    launch = category_mask(ev, LAUNCH_CATS)
    begins = np.flatnonzero(launch & name_mask(ev, lambda n: BEGIN_CAPTURE.search(n) is not None))
    ends = np.flatnonzero(launch & name_mask(ev, lambda n: END_CAPTURE.search(n) is not None))
    regions = _regions(ev, begins, ends, ts[begins], ts[ends])
    if not regions:  # no capture calls recorded: torch's CUDAGraph capture frames or annotations
        host = category_mask(ev, OP_CATS + (PYTHON_FUNCTION,))
        fb = np.flatnonzero(host & name_mask(ev, lambda n: BEGIN_FRAME in n))
        fe = np.flatnonzero(host & name_mask(ev, lambda n: END_FRAME in n))
        regions = _regions(ev, fb, fe, te[fb], ts[fe])
    regions.sort(key=lambda r: (r[2], r[3]))
    calls = np.flatnonzero(
        launch & name_mask(ev, lambda n: NODE_CALL.search(n) is not None and GRAPH_LAUNCH.search(n) is None)
    )
    cp, ct, cts = ev["pid"].to_numpy()[calls], ev["tid"].to_numpy()[calls], ts[calls]
    parts = []
    for i, (pid, tid, start, end) in enumerate(regions):
        sel = calls[(cp == pid) & (ct == tid) & (cts >= start) & (cts < end)]
        sel = sel[np.lexsort((sel, ts[sel]))]
        parts.append(
            pd.DataFrame(
                {
                    "capture": np.full(len(sel), i, np.int64),
                    "call": sel.astype(np.int64),
                    "begin": np.full(len(sel), start, np.int64),
                    "end": np.full(len(sel), end, np.int64),
                }
            )
        )
    if not parts:
        return pd.DataFrame({c: np.zeros(0, np.int64) for c in ("capture", "call", "begin", "end")})
    return pd.concat(parts, ignore_index=True)


def _order_key(ts: np.ndarray, node: np.ndarray | None) -> np.ndarray:
    return node if node is not None and (node > 0).all() else ts


def _build_replay(t: Any) -> pd.DataFrame:
    ev = t.events
    glaunch = np.flatnonzero(category_mask(ev, LAUNCH_CATS) & name_mask(ev, is_graph_launch))
    if not len(glaunch):  # no graph launch: nothing replayed (and no dense graph id columns to read)
        z = np.zeros(0, np.int64)
        return pd.DataFrame({"row": z, "launch": z, "call": z, "how": np.zeros(0, np.int8)})
    ts = ev["ts"].to_numpy(np.int64)
    corr = ev["correlation"].to_numpy(np.int64)
    node_col, graph_col = _int_column(t, "graph_node_id"), _int_column(t, "graph_id")
    acts = np.flatnonzero(category_mask(ev, GPU_ACTIVITY_CATS))
    ok = corr[glaunch] >= 0
    keys, pos = first_position_by_key(corr[glaunch][ok], glaunch[ok])
    launch_of = lookup(keys, pos, np.where(corr[acts] >= 0, corr[acts], -2))
    acts, launch_of = acts[launch_of >= 0], launch_of[launch_of >= 0]
    n = len(acts)
    call = np.full(n, -1, np.int64)
    how = np.zeros(n, np.int8)
    if n:
        caps = graph_captures(t)
        cap_id, cap_call, cap_end = (caps[c].to_numpy(np.int64) for c in ("capture", "call", "end"))
        if node_col is not None and len(cap_call):  # captured calls that carry their node's id
            known = node_col[cap_call] > 0
            nkeys, ncall = first_position_by_key(node_col[cap_call][known], cap_call[known])
            by_id = lookup(nkeys, ncall, np.where(node_col[acts] > 0, node_col[acts], -2))
            call = np.where(by_id >= 0, by_id, call)
            how[by_id >= 0] = BY_NODE_ID
        starts = np.searchsorted(cap_id, np.arange(int(cap_id.max()) + 1 if len(cap_id) else 0))
        counts = np.diff(np.append(starts, len(cap_id)))
        ends = cap_end[np.minimum(starts, max(len(cap_end) - 1, 0))] if len(cap_end) else np.zeros(0, np.int64)
        by_graph: dict[int, int] = {}
        order = np.lexsort((acts, _order_key(ts[acts], None if node_col is None else node_col[acts]), launch_of))
        acts, launch_of, call, how = acts[order], launch_of[order], call[order], how[order]
        bounds = np.flatnonzero(np.r_[True, launch_of[1:] != launch_of[:-1], True])
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            if (how[lo:hi] == BY_NODE_ID).all():
                continue
            sl = slice(lo, hi)
            seg = acts[sl]
            if node_col is not None and (node_col[seg] > 0).all():  # replays in node order, not run order
                seg_order = np.lexsort((seg, node_col[seg]))
            else:
                seg_order = np.arange(hi - lo)
            gid = int(graph_col[seg[0]]) if graph_col is not None else -1
            cap = by_graph.get(gid, -1) if gid > 0 else -1
            if cap < 0:
                fits = np.flatnonzero((counts == hi - lo) & (ends <= ts[launch_of[lo]]))
                if not len(fits):
                    continue
                cap = int(fits[np.argmax(ends[fits])])
                if gid > 0:
                    by_graph[gid] = cap
            if counts[cap] != hi - lo:
                continue
            captured = cap_call[starts[cap] : starts[cap] + counts[cap]]
            todo = how[sl][seg_order] != BY_NODE_ID
            idx = np.arange(lo, hi)[seg_order][todo]
            call[idx] = captured[todo]
            how[idx] = BY_SEQUENCE
    out = pd.DataFrame({"row": acts, "launch": launch_of, "call": call, "how": how}, copy=False)
    return out.sort_values("row", kind="stable", ignore_index=True)


@stage(graph_captures)
def graph_replay(t: Any) -> pd.DataFrame:
    """Each GPU activity a graph launch ran, in event order: columns `row`, `launch` (the graph launch call),
    `call` (the launch call that captured it, or -1), `how` (BY_NODE_ID, BY_SEQUENCE, or NOT_MATCHED where no
    capture in the trace before the replay has as many launch calls). `link_gpu_to_ops` gives these activities
    their capturing call's op."""
    return _build_replay(t)
