"""Ops per step and phase (stage `op_nodes`): each top-level op of a step as forward, backward, optimizer or
other, with its calls and host and device self/total time; the Diff view aligns two profiles' trees of them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from profiler_core.analysis.stages.classify import STEP_PREFIX, is_dataloader
from profiler_core.analysis.stages.columns import column_codes, name_mask
from profiler_core.analysis.stages.node_stats import node_stats
from profiler_core.analysis.stages.op_tree import op_tree
from profiler_core.analysis.stages.registry import stage
from profiler_core.analysis.stages.steps import steps
from profiler_core.analysis.tables.module_tree import nearest_flagged


def _is_backward(name: str) -> bool:
    return "Backward" in name or name.startswith(("autograd::engine::evaluate_function", "torch::autograd::"))


def _phase_of_top(name: str, cat: str) -> str:
    if is_dataloader(name):
        return "data loading"
    if name.startswith("Optimizer."):
        return "optimizer"
    if _is_backward(name):
        return "backward"
    if cat == "user_annotation":
        return name
    return ""  # plain op: forward or other, decided by position


@stage(op_tree, node_stats, steps)
def op_nodes(t: Any) -> pd.DataFrame:
    """The diff's op occurrences stage: per op inside a step, name, step index, phase, start, host/device times."""
    return _op_nodes(t)


def _op_nodes(t: Any) -> pd.DataFrame:
    cols = ("name", "step", "phase", "start", "host_total", "host_self", "device_self", "device_total", "top")
    ev = t.events
    tree = op_tree(t) if len(ev) else None
    if tree is None or not len(tree):
        return pd.DataFrame({c: [] for c in cols})
    n = len(tree)
    rows = tree["row"].to_numpy()
    pos_of = np.full(len(ev), -1, np.int64)
    pos_of[rows] = np.arange(n)
    praw = tree["parent"].to_numpy()
    parent = np.where(praw >= 0, pos_of[np.maximum(praw, 0)], -1)
    is_op = tree["is_op"].to_numpy() & (tree["merged_into"].to_numpy() < 0)
    ncode_all, ntable = column_codes(ev["name"])
    ccode_all, ctable = column_codes(ev["cat"])
    ncode, ccode = ncode_all[rows], ccode_all[rows]
    is_step = is_op & name_mask(ev, lambda x: x.startswith(STEP_PREFIX))[rows]
    pop = nearest_flagged(parent, is_op, parent)  # nearest op ancestor (modules are transparent)
    start = tree["start"].to_numpy()
    end = tree["end"].to_numpy()
    dur = (end - start).astype(np.float64)
    # top-level node: the ancestor right under a step node (or the thread root)
    top = np.arange(n)
    for _ in range(n + 1):
        p = pop[top]
        move = (p >= 0) & ~is_step[np.maximum(p, 0)]
        if not move.any():
            break
        top = np.where(move, p, top)
    # host self and device times: the node stats stage's (one definition of "self")
    st = node_stats(t)
    at = np.full(len(ev), -1, np.int64)
    at[st["row"].to_numpy()] = np.arange(len(st))
    node = at[rows]
    has = node >= 0
    host_self = np.where(has, st["host_self"].to_numpy()[np.maximum(node, 0)], 0.0)
    dev_self = np.where(has, st["device_self"].to_numpy()[np.maximum(node, 0)], 0.0)
    dev_total = np.where(has, st["device_total"].to_numpy()[np.maximum(node, 0)], 0.0)
    del at, node, has
    # steps by time
    st = steps(t)
    s0, s1 = st["start"].to_numpy(np.int64), st["end"].to_numpy(np.int64)
    k = np.searchsorted(s0, start, side="right") - 1
    in_step = (k >= 0) & (start <= s1[np.maximum(k, 0)])
    keep = np.flatnonzero(is_op & ~is_step & in_step)
    # phases: by top node name; threads running autograd put their plain roots in backward
    grp = tree["group"].to_numpy()
    bw_group = np.zeros(int(grp.max()) + 1, dtype=bool)
    bw_top = name_mask(ev, _is_backward)[rows]
    root_bw = bw_top & (pop < 0)
    bw_group[grp[root_bw]] = True
    # phase of each top node from its (name, cat), decided once per distinct pair
    tops = np.unique(top[keep])
    pair = ncode[tops] * (len(ctable) + 1) + ccode[tops]
    upair, inv = np.unique(pair, return_inverse=True)
    labels = [
        _phase_of_top(str(ntable[u // (len(ctable) + 1)]), str(ctable[u % (len(ctable) + 1)])) for u in upair.tolist()
    ]
    phase_names = sorted(set(labels) - {""} | {"forward", "other", "backward"})
    pcode = {ph: i for i, ph in enumerate(phase_names)}
    tcode = np.array([pcode.get(x, -1) for x in labels], dtype=np.int64)[inv]
    bw = pcode["backward"]
    plain = tcode < 0
    tcode[plain & (pop[tops] < 0) & bw_group[grp[tops]]] = bw
    plain = tcode < 0
    # plain ops: forward before the step's first backward work, other after it
    first_bw = np.full(len(st) + 1, np.iinfo(np.int64).max)
    isb = (tcode == bw) & in_step[tops]
    np.minimum.at(first_bw, k[tops][isb], start[tops][isb])
    late = start[tops] >= first_bw[np.maximum(k[tops], 0)]
    tcode[plain] = np.where(late[plain], pcode["other"], pcode["forward"])
    phase = tcode[np.searchsorted(tops, top[keep])] if len(keep) else np.zeros(0, np.int64)
    df = pd.DataFrame(
        {
            "name": ncode[keep],
            "step": k[keep],
            "phase": phase,
            "start": start[keep],
            "host_total": dur[keep],
            "host_self": host_self[keep],
            "device_self": dev_self[keep],
            "device_total": dev_total[keep],
            "top": top[keep] == keep,
        }
    )
    df.attrs["names"] = np.asarray(ntable, dtype=object)
    df.attrs["phases"] = phase_names
    return df
