"""The node stats stage: host and device self and total time of every op-tree node, by one definition.

- host total: the node's duration.
- host self: host total minus the time covered by the node's children in the host tree: its child nodes in
  the op tree (ops, annotations, nn.Module calls) and the runtime/driver calls whose innermost enclosing node
  it is (by time, the `intervals.holds` rule), each clipped to the node, overlaps counted once. A call is
  subtracted from the one node that holds it, not from the op its External id names: torch's `EventList`
  builds its tree this way, so `key_averages()` agrees. With properly nested children this is torch's
  "duration minus the children's durations"; children that stick out of their parent (ns rounding in
  real traces) or overlap each other never make self time negative.
- device self: the time of the GPU activities the node launched (`gpu_links`); device total: device self
  plus the device totals of its child nodes.
Nodes merged into their same-name parent (`op_tree.merged_into`) are not nodes here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...trace.categories import KERNEL
from .columns import category_mask, zeros_column
from .gpu_links import link_gpu_to_ops, link_launches_to_ops
from .op_tree import LEVEL_PASSES_MAX, innermost_op_at, op_tree
from .registry import stage

__all__ = ["node_stats"]


def _siblings_apart(parent: np.ndarray, cs: np.ndarray, ce: np.ndarray, parent_depth: np.ndarray) -> bool:
    """True when the children (given in tree order) of each node come one after another without overlapping:
    the children sorted by their node's depth (a radix sort of small numbers) then by position are grouped by
    node (each node's children one run), and each ends by the next one's start (so their union's length is the
    sum of their lengths)."""
    top = int(parent_depth.max())
    small = np.int8 if top < 2**7 else np.int16 if top < 2**15 else parent_depth.dtype  # (radix sorts)
    order = np.argsort(parent_depth.astype(small, copy=False), kind="stable")
    p = parent[order]
    change = p[1:] != p[:-1]
    has_children = np.zeros(int(p.max()) + 1, dtype=bool)  # (children: at least one)
    has_children[p] = True
    if int(np.count_nonzero(change)) + 1 != int(np.count_nonzero(has_children)):
        return False
    apart = ce[order[:-1]] <= cs[order[1:]]
    apart |= change
    return bool(apart.all())


def _children_cover(
    n: int,
    start: np.ndarray,
    end: np.ndarray,
    parent: np.ndarray,
    cs: np.ndarray,
    ce: np.ndarray,
    depth: np.ndarray | None = None,
) -> np.ndarray:
    """Per node (0..n-1): the length of the union of its children's ranges [cs, ce) clipped to the node's own
    [start, end) (`parent` gives each child's node). With `depth` (each node's), the children come in tree
    order (the op tree's): where siblings do not overlap (`_siblings_apart`) the union's length is the sum of
    theirs, without sorting them.

    `cs` and `ce` (int64) are worked on in place and left overwritten: the caller's arrays stay alive for the
    whole call, so a copy of either would add to the peak. Each temporary is dropped as soon as it is used:
    on a trace of a million nodes these are tens of MB."""
    m = len(parent)
    if m == 0:
        return np.zeros(n)
    np.maximum(cs, start[parent], out=cs)
    np.minimum(ce, end[parent], out=ce)
    np.maximum(ce, cs, out=ce)
    if depth is not None and _siblings_apart(parent, cs, ce, depth[parent]):
        ce -= cs  # (integers: the same sums in any order)
        return np.bincount(parent, weights=ce.astype(np.float64), minlength=n)
    lo = int(cs.min())
    span = int(ce.max()) - lo + 1
    if (int(parent.max()) + 1) * span < 2**62:
        vals = None
        cs -= lo
        ce -= lo
        rs, re_ = cs, ce
    else:  # times as ranks, so that (node, time) keys fit in int64
        vals, inv = np.unique(np.concatenate([cs, ce]), return_inverse=True)
        rs, re_ = inv[:m].astype(np.int64), inv[m:].astype(np.int64)
        del inv
        span = len(vals)
    del cs, ce
    span = np.int64(span)
    key = parent.astype(np.int64)
    key *= span
    key += rs
    order = np.argsort(key, kind="stable")
    del key
    p = parent[order]
    rs[:] = rs[order]
    re_[:] = re_[order]
    del order
    key = p.astype(np.int64)
    key *= span
    prev = key + re_
    np.maximum.accumulate(prev, out=prev)  # running end within each node: the node term dominates
    # prev[i - 1] - key[i]: the end reached by child i's earlier siblings (negative: none); the first child
    # has none, and rs >= 0, so each child's covered part begins at max(rs, that)
    prev[:-1] -= key[1:]
    del key
    np.maximum(rs[1:], prev[:-1], out=rs[1:])
    del prev
    begin = rs
    del rs
    if vals is None:
        covered = np.subtract(re_, begin, out=begin)
        np.maximum(covered, 0, out=covered)
    else:
        covered = np.where(re_ > begin, vals[re_] - vals[np.maximum(begin, 0)], 0)
    del begin, re_
    return np.bincount(p, weights=covered.astype(np.float64), minlength=n)


#: the children are taken this many tree positions at a time (their temporaries: about 40 bytes a child)
COVER_BLOCK = 1 << 20


def _tree_cover(
    n: int, tstart: np.ndarray, tend: np.ndarray, at: np.ndarray, parent: np.ndarray, depth: np.ndarray
) -> np.ndarray | None:
    """`_children_cover` for the tree's own children (the nodes' positions `at` in the op tree, whose `tstart` and
    `tend` they are read from; `parent` and `depth` per node, tree order): the sum of the clipped children's
    lengths per node, or None where some node's children overlap (the union's length then needs the sort).

    The children are taken a parent depth at a time (tree order keeps each node's children one run there, as
    `_siblings_apart` checks), COVER_BLOCK positions at a time, so that no child array is held for all nodes at
    once: on an 11M-node trace the whole-tree arrays were the operators view's peak memory."""
    covered = np.zeros(n)
    has_parent = parent >= 0
    if not has_parent.any():
        return covered
    top = int(depth.max())
    parent_depth = depth[parent]  # (-1: the last node's, masked below)
    if top < 2**7:
        parent_depth = parent_depth.astype(np.int8)
    parent_depth[~has_parent] = -1
    del has_parent
    has_children = np.zeros(n, dtype=bool)
    runs = 0
    # one pass per parent depth picks its children; deep trees take them by one sort
    by_level = None if top <= LEVEL_PASSES_MAX else np.argsort(parent_depth, kind="stable")
    if by_level is not None:
        bounds = np.searchsorted(parent_depth[by_level], np.arange(top + 2), side="left")
    for d in range(top + 1):
        last_p, last_end = -1, 0  # the previous block's last child: its node and clipped end
        first_at, stop = (0, n) if by_level is None else (int(bounds[d]), int(bounds[d + 1]))
        for a in range(first_at, stop, COVER_BLOCK):
            b = min(a + COVER_BLOCK, stop)
            if by_level is None:
                idx = np.flatnonzero(parent_depth[a:b] == d)
                idx += a
            else:
                idx = by_level[a:b]
            if len(idx) == 0:
                continue
            p = parent[idx]
            has_children[p] = True
            pos = at[idx]
            del idx
            cs = tstart[pos]
            ce = tend[pos]
            pos = at[p]
            np.maximum(cs, tstart[pos], out=cs)
            np.minimum(ce, tend[pos], out=ce)
            del pos
            np.maximum(ce, cs, out=ce)
            change = p[1:] != p[:-1]
            runs += int(np.count_nonzero(change)) + (0 if int(p[0]) == last_p else 1)
            if int(p[0]) == last_p and last_end > int(cs[0]):
                return None
            apart = ce[:-1] <= cs[1:]
            apart |= change
            if not apart.all():
                return None
            del apart
            last_p, last_end = int(p[-1]), int(ce[-1])
            ce -= cs
            del cs
            first = np.flatnonzero(np.concatenate(([True], change)))
            covered[p[first]] += np.add.reduceat(ce, first)  # (integers: exact, as the sums in any order)
    if runs != int(np.count_nonzero(has_children)):  # some node's children in two runs
        return None
    return covered


@stage(op_tree, link_launches_to_ops, link_gpu_to_ops)
def node_stats(t: Any) -> pd.DataFrame:
    """Per op-tree node (merged nodes dropped), in tree order: `row`, `name` (categorical), `is_op`, `parent`
    (node position or -1), `depth`, `host_total`, `host_self`, `device_self`, `device_total`, `kernel_self`
    (ns, float64; kernels only), `device_node` (positions of the nodes owning each linked GPU activity) and
    `device_rows` (those activities' rows in t.events) in `attrs`."""
    ev = t.events
    tree = op_tree(t)
    # the columns of the unmerged nodes, one at a time (not a copy of the whole tree frame: this is
    # the operators view's peak memory on a big trace); start and end are read from the tree's own arrays
    kept = tree["merged_into"].to_numpy() < 0
    n = int(np.count_nonzero(kept))
    small = np.int32 if len(ev) < 2**31 else np.int64
    rows = tree["row"].to_numpy()[kept]
    node_of = np.full(len(ev) + 1, -1, small)  # (the last: -1, for the parent -1)
    node_of[rows] = np.arange(n, dtype=small)
    parent = node_of[tree["parent"].to_numpy()[kept]]
    tstart = tree["start"].to_numpy()
    tend = tree["end"].to_numpy()
    is_op = tree["is_op"].to_numpy()[kept]
    depth = tree["depth"].to_numpy()[kept]
    at = np.flatnonzero(kept).astype(small)  # each node's tree position
    del tree, kept

    calls = link_launches_to_ops(t)["row"].to_numpy()
    holder = innermost_op_at(
        t, ev["pid"].to_numpy()[calls], ev["tid"].to_numpy()[calls], ev["ts"].to_numpy(np.int64)[calls], ops_only=False
    )
    hn = node_of[np.maximum(holder, 0)]
    ok = (holder >= 0) & (hn >= 0)
    del holder
    gl = link_gpu_to_ops(t)
    gop = node_of[np.maximum(gl["op"].to_numpy(), 0)]
    gok = (gl["op"].to_numpy() >= 0) & (gop >= 0)
    del node_of
    covered = None if ok.any() else _tree_cover(n, tstart, tend, at, parent, depth)
    if covered is None:
        has_parent = parent >= 0
        start = tstart[at]
        end = tend[at]
        cs = ev["ts"].to_numpy(np.int64)[calls[ok]]
        covered = _children_cover(
            n,
            start,
            end,
            np.concatenate([parent[has_parent], hn[ok]]),
            np.concatenate([start[has_parent], cs]),
            np.concatenate([end[has_parent], cs + ev["dur"].to_numpy(np.int64)[calls[ok]]]),
        )  # (calls, or overlapping siblings: the union by the sort)
        del cs, start, end, has_parent
    del hn, ok
    host_total = np.empty(n)
    for a in range(0, n, COVER_BLOCK):  # (a block at a time: no whole-tree temporaries)
        pos = at[a : a + COVER_BLOCK]
        host_total[a : a + COVER_BLOCK] = tend[pos] - tstart[pos]
    del at
    host_self = np.subtract(host_total, covered, out=covered)
    del covered

    has_parent = parent >= 0
    grow = gl["row"].to_numpy()[gok]
    gnode = gop[gok].astype(np.int64)
    if gok.any():
        gdur = ev["dur"].to_numpy(np.float64)[grow]
        device_self = np.bincount(gnode, weights=gdur, minlength=n)
        is_kernel = category_mask(ev, (KERNEL,))[grow]
        kernel_self = np.bincount(gnode, weights=np.where(is_kernel, gdur, 0.0), minlength=n)
        device_total = device_self.copy()
        for d in range(int(depth.max()) if n else 0, 0, -1):  # children before parents
            sel = np.flatnonzero((depth == d) & has_parent)
            if len(sel):
                np.add.at(device_total, parent[sel], device_total[sel])
    else:  # no device activity under any node (a CPU trace): one shared read-only zero, no memory
        device_self = device_total = kernel_self = zeros_column(n)
    out = pd.DataFrame(
        {
            "row": rows.astype(small, copy=False),
            "name": ev["name"].array.take(rows),
            "is_op": is_op,
            "parent": parent.astype(small, copy=False),
            "depth": depth,
            "host_total": host_total,
            "host_self": host_self,
            "device_self": device_self,
            "device_total": device_total,
            "kernel_self": kernel_self,
        },
        copy=False,
    )
    out.attrs["device_node"] = gnode
    out.attrs["device_rows"] = grow
    return out
