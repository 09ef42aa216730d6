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
from .op_tree import innermost_op_at, op_tree
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


@stage(op_tree, link_launches_to_ops, link_gpu_to_ops)
def node_stats(t: Any) -> pd.DataFrame:
    """Per op-tree node (merged nodes dropped), in tree order: `row`, `name` (categorical), `is_op`, `parent`
    (node position or -1), `depth`, `host_total`, `host_self`, `device_self`, `device_total`, `kernel_self`
    (ns, float64; kernels only), `device_node` (positions of the nodes owning each linked GPU activity) and
    `device_rows` (those activities' rows in t.events) in `attrs`."""
    ev = t.events
    tree = op_tree(t)
    # the columns of the unmerged nodes, one at a time (not a copy of the whole tree frame: this is
    # the operators view's peak memory on a big trace)
    kept = np.flatnonzero(tree["merged_into"].to_numpy() < 0)
    n = len(kept)
    small = np.int32 if len(ev) < 2**31 else np.int64
    rows = tree["row"].to_numpy()[kept]
    node_of = np.full(len(ev), -1, small)
    node_of[rows] = np.arange(n, dtype=small)
    parent = tree["parent"].to_numpy()[kept]
    parent = np.where(parent >= 0, node_of[np.maximum(parent, 0)], -1).astype(small, copy=False)
    start = tree["start"].to_numpy()[kept]
    end = tree["end"].to_numpy()[kept]
    is_op = tree["is_op"].to_numpy()[kept]
    depth = tree["depth"].to_numpy()[kept]
    del tree, kept

    has_parent = parent >= 0
    calls = link_launches_to_ops(t)["row"].to_numpy()
    holder = innermost_op_at(
        t, ev["pid"].to_numpy()[calls], ev["tid"].to_numpy()[calls], ev["ts"].to_numpy(np.int64)[calls], ops_only=False
    )
    hn = node_of[np.maximum(holder, 0)]
    ok = (holder >= 0) & (hn >= 0)
    cs = ev["ts"].to_numpy(np.int64)[calls[ok]]
    covered = _children_cover(
        n,
        start,
        end,
        np.concatenate([parent[has_parent], hn[ok]]),
        np.concatenate([start[has_parent], cs]),
        np.concatenate([end[has_parent], cs + ev["dur"].to_numpy(np.int64)[calls[ok]]]),
        depth=None if ok.any() else depth,  # (only the tree's children: in tree order)
    )
    del cs
    host_total = (end - start).astype(np.float64)
    del start, end

    gl = link_gpu_to_ops(t)
    gop = node_of[np.maximum(gl["op"].to_numpy(), 0)]
    ok = (gl["op"].to_numpy() >= 0) & (gop >= 0)
    del node_of
    grow = gl["row"].to_numpy()[ok]
    gnode = gop[ok].astype(np.int64)
    if ok.any():
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
            "row": rows.astype(small),
            "name": ev["name"].array.take(rows),
            "is_op": is_op,
            "parent": parent.astype(small),
            "depth": depth,
            "host_total": host_total,
            "host_self": host_total - covered,
            "device_self": device_self,
            "device_total": device_total,
            "kernel_self": kernel_self,
        },
        copy=False,
    )
    out.attrs["device_node"] = gnode
    out.attrs["device_rows"] = grow
    return out
