"""The op tree stage: CPU ops, user annotations and nn.Module calls nested per thread, and the innermost node
enclosing a time (one boundary rule: `intervals.holds`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ... import settings
from ...trace.categories import CPU_OP, OP_CATS, PYTHON_FUNCTION
from ..intervals import holds
from .columns import category_mask
from .registry import stage

try:
    from profiler_core.analysis.stages import _tree  # type: ignore[attr-defined]
except ImportError:  # not built (no compiler where it was installed): the nesting is counted in numpy
    _tree = None

__all__ = ["op_tree", "tree_index", "innermost_op_at", "group_codes", "composite"]


def group_codes(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """Dense codes for (pid, tid) pairs, ordered by (pid, tid)."""
    if len(pid) == 0:
        return np.zeros(0, dtype=np.int64)
    if pid.min() == pid.max() and tid.min() == tid.max():  # one thread (a CPU trace): no hashing
        return np.zeros(len(pid), dtype=np.int64)
    if _tree is not None and settings.get("GPUSCOPE_NATIVE_TREE") and pid.dtype == tid.dtype == np.int64:
        codes = np.empty(len(pid), np.int64)
        _tree.pair_codes(np.ascontiguousarray(pid), np.ascontiguousarray(tid), codes)  # one pass, a hash table
        return codes
    return group_codes_numpy(pid, tid)


def group_codes_numpy(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """`group_codes` in numpy (the reference): the pairs' codes from each column's sorted factorization."""
    cp, up = pd.factorize(pid, sort=True)
    ct, ut = pd.factorize(tid, sort=True)
    pair = cp.astype(np.int64) * len(ut) + ct  # order-preserving: the factorized codes are sorted
    if len(up) * len(ut) > 4 * len(pair) + 1024:  # many distinct pairs: sort them
        return np.unique(pair, return_inverse=True)[1].astype(np.int64).reshape(-1)
    present = np.bincount(pair, minlength=len(up) * len(ut)) > 0
    return (np.cumsum(present) - 1)[pair]


def _tree_order(grp: np.ndarray, start: np.ndarray, end: np.ndarray, rows: np.ndarray) -> np.ndarray | None:
    """np.lexsort((rows, -end, start, grp)) for ascending `rows`; a stable sort by group alone when the
    rows already come in (start, -end) order, as the reader sorts events (ts, then longest first); None when
    they are in tree order already (one thread, in that order)."""
    if len(rows) > 1:
        later = start[1:] > start[:-1]
        tie = start[1:] == start[:-1]
        if bool((later | (tie & (end[1:] <= end[:-1]))).all()):
            if int(grp.max()) == int(grp.min()):
                return None
            small = grp.astype(np.int16) if int(grp.max()) < 2**15 else grp  # radix sort
            return np.argsort(small, kind="stable")
    return np.lexsort((rows, -end, start, grp))


def composite(g: np.ndarray, v: np.ndarray, lo: int, span: int) -> np.ndarray:
    """Order-preserving int64 key for (group, value) pairs with value in [lo, lo + span)."""
    return g.astype(np.int64) * np.int64(span) + (v.astype(np.int64) - np.int64(lo))


def _adopt_inside_repaired(
    parent: np.ndarray,
    depth: np.ndarray,
    repaired: np.ndarray,
    grp: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
) -> None:
    """Give each node inside a partially overlapping node `r` (one the repair moved up) `r` as parent where its
    parent starts before `r`: the depth count counted the range `r` overlaps, so the nodes inside `r` were given
    an outer parent. Afterwards every node's parent is the latest-starting earlier node of its thread that holds
    it, as in torch's tree. The nodes inside `r` are moved deeper than `r` (every child deeper than its parent,
    the order the stages sum children in). `repaired` in tree order; `parent` and `depth` change in place."""
    lo = int(min(start.min(), end.min()))
    span = int(max(start.max(), end.max())) - lo + 2
    keys = composite(grp, start, lo, span)
    stop = np.searchsorted(keys, composite(grp[repaired], end[repaired], lo, span), side="left")
    del keys
    has_inside = stop > repaired + 1
    for r, k in zip(repaired[has_inside].tolist(), stop[has_inside].tolist()):
        sl = slice(r + 1, k)
        inside = end[sl] <= end[r]
        adopt = inside & (parent[sl] < r)
        if adopt.any():
            parent[sl][adopt] = r
            below = depth[sl][inside]
            shift = int(depth[r]) + 1 - int(below.min())
            if shift > 0:
                depth[sl][inside] = below + shift


#: up to this depth the candidate parents are found level by level (a few quick passes over the nodes each, about
#: a third of the cost of the one search over all nodes sorted by level that deeper trees take: 2.2M nodes of depth 4,
#: 55 ms against 146 ms)
LEVEL_PASSES_MAX = 10


def _last_one_level_up(depth: np.ndarray) -> np.ndarray:
    """Per node (tree order), the position of the last earlier node whose depth is one less, else -1 (int32 where
    positions fit, else int64)."""
    n = len(depth)
    top = int(depth.max())
    if top <= LEVEL_PASSES_MAX:
        small = np.int32 if n < 2**31 - 1 else np.int64
        level = depth.astype(np.int8)
        pos1 = np.arange(1, n + 1, dtype=small)  # positions + 1, so that 0 is "none"
        last = np.empty(n, small)
        best = np.zeros(n, small)
        sel = np.empty(n, bool)
        for d in range(1, top + 1):
            np.equal(level, d - 1, out=sel)
            np.multiply(pos1, sel, out=last)
            np.maximum.accumulate(last, out=last)  # the latest node of depth d - 1 so far, + 1
            np.equal(level, d, out=sel)
            np.copyto(best, last, where=sel)
        best -= 1  # (positions in int32 where they fit: the tree holds them so)
        return best
    parent = np.full(n, -1, np.int64)
    # keys depth * n + pos in (depth, pos) order (a radix sort of small depths); the queries (depth - 1) * n
    # + pos are then sorted too, which makes searchsorted and the gathers sequential.
    by_level = np.argsort(depth.astype(np.int16) if top < 2**15 else depth, kind="stable")
    dk = depth[by_level].astype(np.int64)
    dk *= n
    dk += by_level
    ks = dk - n
    ks = np.searchsorted(dk, ks, side="left")
    ks -= 1
    found = ks >= 0
    np.maximum(ks, 0, out=ks)
    cand = dk[ks]
    del ks
    found &= dk >= n
    found &= cand // n == dk // n - 1
    del dk
    cand %= n
    parent[by_level[found]] = cand[found]
    return parent


def _nest(
    grp: np.ndarray, start: np.ndarray, end: np.ndarray, one_thread: bool, small: type
) -> tuple[np.ndarray, np.ndarray]:
    """Each node's depth (the earlier nodes of its thread still open at its start: end > its start) and candidate
    parent (the last earlier node one level up, else -1), nodes in tree order: by the C pass where it is built
    (`_tree.c`, one loop with a heap of open ends), else in numpy (`nest_numpy`, the reference)."""
    if _tree is not None and settings.get("GPUSCOPE_NATIVE_TREE"):
        depth, parent = np.empty(len(grp), small), np.empty(len(grp), small)
        if _tree.depths(np.ascontiguousarray(grp), start, end, depth, parent):
            return depth, parent
    return nest_numpy(grp, start, end, one_thread, small)


def nest_numpy(
    grp: np.ndarray, start: np.ndarray, end: np.ndarray, one_thread: bool, small: type
) -> tuple[np.ndarray, np.ndarray]:
    """`_nest` in numpy: depths by counting the nodes closed before each start, candidates by level passes."""
    n = len(grp)
    # depth_i = number of earlier nodes (tree order) of the same thread still open at start_i (end_j > start_i)
    lo = int(min(start.min(), end.min()))
    span = int(max(start.max(), end.max())) - lo + 2
    if (int(grp.max()) + 1) * span >= 2**62:  # pragma: no cover - absurd time ranges
        raise ValueError("trace time range too large for the op tree")
    # closed_i = the nodes whose (thread, end) key is at most i's (thread, start) key: counted from each node's
    # q = the starts before its end (node j is closed at i when q_j <= i). A node with a length that ends by
    # the next node's start (most: the leaves) has q = its position + 1; only the others are searched.
    # (closed counts the ends of earlier threads too: as many as the nodes before the thread's first, which
    # `pos` counts as well, so depth = pos - closed)
    # (one thread: the times are the keys)
    start_keys = start if one_thread else composite(grp, start, lo, span)
    end_keys = end if one_thread else composite(grp, end, lo, span)
    q = np.arange(1, n + 1, dtype=np.int64)
    searched = end_keys <= start_keys  # zero length
    searched[:-1] |= end_keys[:-1] > start_keys[1:]
    far = np.flatnonzero(searched)
    del searched
    q[far] = np.searchsorted(start_keys, end_keys[far], side="left")
    del start_keys, end_keys, far
    closed = np.bincount(q, minlength=n + 1)[:n]
    del q
    np.cumsum(closed, out=closed)
    zero = end == start
    if zero.any():  # zero-length nodes (none: nothing to correct)
        run_change = np.ones(n, dtype=bool)
        run_change[1:] = (grp[1:] != grp[:-1]) | (start[1:] != start[:-1])
        run_id = np.cumsum(run_change) - 1
        run_start = np.flatnonzero(run_change)
        del run_change
        run_end = np.append(run_start[1:], n)[run_id]
        del run_start
        nz_run = np.bincount(run_id, weights=zero).astype(np.int64)[run_id]
        del run_id
        run_end -= np.arange(n)
        z = np.where(zero, run_end, nz_run)
        del run_end, nz_run
        closed -= z
        del z
    del zero
    np.subtract(np.arange(n), closed, out=closed)  # depth = pos - closed
    np.maximum(closed, 0, out=closed)
    depth = closed.astype(small)
    del closed
    return depth, _last_one_level_up(depth).astype(small, copy=False)


def _build_op_tree(t: Any) -> pd.DataFrame:
    """Build the op tree: depth by counting open ranges, parent = last earlier node one level up, repairs."""
    ev = t.events
    is_op = category_mask(ev, OP_CATS)
    is_module = category_mask(ev, (PYTHON_FUNCTION,)) & (ev["python_module_id"].to_numpy() >= 0)
    rows = np.flatnonzero(is_op | is_module)
    n = len(rows)
    if n == 0:
        empty = np.zeros(0, np.int64)
        return pd.DataFrame(
            {
                "row": rows,
                "parent": empty,
                "depth": empty,
                "group": empty,
                "start": empty,
                "end": empty,
                "merged_into": empty,
                "is_op": is_op[rows],
            }
        )
    # positions, depths and thread codes in int32 where they fit (a trace of 2**31 events is far beyond memory):
    # the tree is held as long as its trace, and its build's temporaries are the operators view's peak memory
    small = np.int32 if len(ev) < 2**31 else np.int64
    rows = rows.astype(small)
    start = ev["ts"].to_numpy(np.int64)[rows]
    end = ev["dur"].to_numpy(np.int64)[rows]
    end += start
    pid = ev["pid"].to_numpy()[rows]
    tid = ev["tid"].to_numpy()[rows]
    one_thread = bool(pid.min() == pid.max() and tid.min() == tid.max())
    grp = np.zeros(n, small) if one_thread else group_codes(pid, tid).astype(small)
    del pid, tid
    order = _tree_order(grp, start, end, rows)
    if order is not None:
        # one column at a time, each old one freed as its reordered copy is made (temporaries go as soon as
        # they are used: the tree's peak memory is the views' peak)
        rows = rows[order]
        start = start[order]
        end = end[order]
        grp = grp[order]
        del order

    depth, parent = _nest(grp, start, end, one_thread, small)

    # repair nodes whose candidate does not contain them (partially overlapping siblings): walk up
    # (a candidate comes earlier in tree order: on the same thread it starts no later; one thread: no
    # thread to compare)
    def bad_mask(p: np.ndarray) -> np.ndarray:
        pp = np.maximum(p, 0)
        bad = end[pp] < end
        if not one_thread:
            bad |= grp[pp] != grp
        bad &= p >= 0
        return bad

    bad = bad_mask(parent)
    repaired = np.flatnonzero(bad)
    for _ in range(int(depth.max()) + 2):
        if not bad.any():
            break
        parent[bad] = parent[parent[bad]]
        bad = bad_mask(parent)
    parent[bad] = -1
    del bad
    if len(repaired):
        _adopt_inside_repaired(parent, depth, repaired, grp, start, end)

    # torch's _remove_dup_nodes: an op whose only child is an op of the same name absorbs it
    nchild = np.bincount(parent[parent >= 0], minlength=n)
    names = (
        ev["name"].to_numpy()[rows]
        if not isinstance(ev["name"].dtype, pd.CategoricalDtype)
        else ev["name"].cat.codes.to_numpy()[rows]
    )
    cpu_op = category_mask(ev, (CPU_OP,))[rows]
    pp = np.maximum(parent, 0)
    merge = (parent >= 0) & (nchild[pp] == 1) & (names[pp] == names) & cpu_op & cpu_op[pp]
    del nchild, names, cpu_op
    if merge.any():
        rep = np.where(merge, parent, np.arange(n, dtype=small))
        for _ in range(int(depth.max()) + 2):
            nxt = rep[rep]
            if np.array_equal(nxt, rep):
                break
            rep = nxt
        del nxt
        stands_for = rows[rep]  # the row of the node each node was merged into (or its own)
        del rep
        merged_into = np.where(merge, stands_for, -1).astype(small, copy=False)
    else:
        stands_for = rows
        merged_into = np.full(n, -1, small)
    del merge
    parent_row = np.where(parent >= 0, stands_for[pp], -1).astype(small, copy=False)
    del parent, pp, stands_for
    # int32 where it fits keeps the tree at 37 bytes a node rather than 57
    cols = dict(
        row=rows,
        parent=parent_row,
        depth=depth,
        group=grp,
        start=start,
        end=end,
        merged_into=merged_into,
        is_op=is_op[rows],
    )
    return pd.DataFrame(cols, copy=False)  # fresh arrays: no need to copy them into blocks


@stage()
def op_tree(t: Any) -> pd.DataFrame:
    """The CPU op tree (cpu_op, user_annotation and nn.Module python_function events) per (pid, tid).

    One row per node in tree order (thread, start, longest first): `row` (position in t.events), `parent`
    (position of the innermost enclosing node, -1 at top level), `depth` (greater than its parent's), `group` (thread
    code), `start`, `end` (ns), `merged_into` (position of the op this one was merged into by torch's
    same-name single-child rule, else -1; merged nodes are not separate calls), `is_op` (cpu_op or
    user_annotation). Partially overlapping nodes hang under the innermost node that fully contains them
    and hold the nodes inside them (torch's tree: each node's parent is the latest-starting earlier node holding it).
    Positions, depth and group are int32 (the tree lives as long as its trace), start and end int64.
    """
    return _build_op_tree(t)


@stage(op_tree)
def tree_index(t: Any) -> dict:
    """Search arrays over `op_tree` for `innermost_op_at`: each node's thread code, a sorted (thread, start) key,
    its parent's tree position, and each thread code's (pid, tid)."""
    tree = op_tree(t)
    ev = t.events
    rows = tree["row"].to_numpy()
    g = tree["group"].to_numpy().astype(np.int64)
    start = tree["start"].to_numpy()
    end = tree["end"].to_numpy()
    lo = int(start.min()) - 1 if len(tree) else 0
    span = (int(end.max()) - lo + 2) if len(tree) else 1
    first = np.unique(g, return_index=True)[1] if len(g) else np.zeros(0, np.int64)
    pos_of_row = np.full(len(ev), -1, np.int64)
    pos_of_row[rows] = np.arange(len(rows))
    parent = tree["parent"].to_numpy()
    return {
        "g": g,
        "keys": composite(g, start, lo, span),
        "lo": lo,
        "span": span,
        "parent_pos": np.where(parent >= 0, pos_of_row[np.maximum(parent, 0)], -1),
        "group_pid": ev["pid"].to_numpy()[rows[first]],
        "group_tid": ev["tid"].to_numpy()[rows[first]],
    }


def innermost_op_at(t: Any, pid: np.ndarray, tid: np.ndarray, ts: np.ndarray, *, ops_only: bool = True) -> np.ndarray:
    """Position in t.events of the innermost cpu_op/user_annotation on the same (pid, tid) whose range holds
    `ts` under `holds` (start <= ts < end), or -1; vectorised over the query arrays (any order). With
    `ops_only=False` nn.Module nodes count too (the parent of a host call in the op tree)."""
    pid, tid = np.asarray(pid, dtype=np.int64), np.asarray(tid, dtype=np.int64)
    ts = np.asarray(ts, dtype=np.int64)
    tree = op_tree(t)
    m = len(ts)
    if m == 0 or len(tree) == 0:
        return np.full(m, -1, np.int64)
    ix = tree_index(t)
    g_nodes, lo, span = ix["g"], ix["lo"], ix["span"]
    ng = len(ix["group_pid"])
    # the queries' threads in the tree's thread codes (-1: a thread without nodes)
    joint = group_codes(np.concatenate([ix["group_pid"], pid]), np.concatenate([ix["group_tid"], tid]))
    code_of = np.full(int(joint.max()) + 1, -1, np.int64)
    code_of[joint[:ng]] = np.arange(ng)
    g_q = code_of[joint[ng:]]
    qkey = composite(np.maximum(g_q, 0), np.minimum(np.maximum(ts, np.int64(lo)), np.int64(lo + span - 1)), lo, span)
    p = np.searchsorted(ix["keys"], qkey, side="right") - 1
    p[g_q < 0] = -1
    rows = tree["row"].to_numpy()
    start = tree["start"].to_numpy()
    end = tree["end"].to_numpy()
    parent_pos = ix["parent_pos"]
    merged = tree["merged_into"].to_numpy()
    is_op = tree["is_op"].to_numpy() if ops_only else np.ones(len(tree), dtype=bool)

    def miss(p: np.ndarray) -> np.ndarray:
        pp = np.maximum(p, 0)
        return (p >= 0) & ((g_nodes[pp] != g_q) | ~holds(start[pp], end[pp], ts) | ~is_op[pp] | (merged[pp] >= 0))

    bad = miss(p)
    for _ in range(int(tree["depth"].max()) + 2):
        if not bad.any():
            break
        p[bad] = np.where(g_nodes[p[bad]] != g_q[bad], -1, parent_pos[p[bad]])
        bad = miss(p)
    p[bad] = -1
    return np.where(p >= 0, rows[np.maximum(p, 0)], -1)
