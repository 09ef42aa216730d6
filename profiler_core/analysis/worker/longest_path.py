"""The heaviest path of a directed acyclic graph given as edge arrays, with chains summed in numpy: the longest-
path step of the single-rank critical path (single_rank_path.py)."""

from __future__ import annotations

import numpy as np

__all__ = ["heaviest_path"]


def heaviest_path(pos: np.ndarray, src: np.ndarray, dst: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Edge indices of the heaviest path (edges go forward in `pos`), first to last.

    Chains (an edge whose source has no other out-edge and whose target no other in-edge) are summed with numpy
    (pointer jumping); only the edges that join chains are relaxed one by one, in topological order."""
    n, m = len(pos), len(src)
    if not m:
        return np.zeros(0, np.int64)
    indeg = np.bincount(dst, minlength=n)
    outdeg = np.bincount(src, minlength=n)
    chain = (outdeg[src] == 1) & (indeg[dst] == 1)
    in_chain = np.full(n, -1, np.int64)  # each node's chain in-edge, if any
    in_chain[dst[chain]] = np.flatnonzero(chain)
    has = in_chain >= 0
    ic = np.maximum(in_chain, 0)
    head = np.where(has, src[ic], np.arange(n))
    off = np.where(has, w[ic], 0)  # weight from `head` to the node
    rank = has.astype(np.int64)  # chain edges from `head` to the node
    while True:
        up = head[head]
        if (up == head).all():
            break
        off, rank, head = off + off[head], rank + rank[head], up
    # relax the joining edges in topological order of their targets (every target is a chain head)
    joins = np.flatnonzero(~chain)
    joins = joins[np.argsort(pos[dst[joins]], kind="stable")]
    dist_head = [0] * n
    best = [-1] * n
    for e, h, o, d, x in zip(
        joins.tolist(), head[src[joins]].tolist(), off[src[joins]].tolist(), dst[joins].tolist(), w[joins].tolist()
    ):
        c = dist_head[h] + o + x
        if c > dist_head[d] or (best[d] < 0 and c == dist_head[d]):
            dist_head[d] = c
            best[d] = e
    best_a = np.asarray(best, np.int64)
    dist = np.asarray(dist_head, np.int64)[head] + off
    reached = has | (best_a >= 0)
    if not reached.any():
        return np.zeros(0, np.int64)
    top = dist[reached].max()
    ends = np.flatnonzero(reached & (dist == top))
    node = int(ends[np.argmax(pos[ends])])
    # walk back: a whole chain stretch at a time, then the joining edge into its head
    by_chain = np.lexsort((rank, head))
    at = np.empty(n, np.int64)
    at[by_chain] = np.arange(n)
    parts = []
    while True:
        if rank[node] > 0:
            stretch = by_chain[at[node] - rank[node] + 1 : at[node] + 1]
            parts.append(in_chain[stretch])
            node = int(head[node])
        if best_a[node] < 0:
            break
        parts.append(best_a[node : node + 1])
        node = int(src[best_a[node]])
    return np.concatenate(parts[::-1]) if parts else np.zeros(0, np.int64)
