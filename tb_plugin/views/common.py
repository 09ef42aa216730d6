"""Shared pure helpers for the plugin views: event classes, communication recognition, ProfilerStep ranges,
GPU-activity -> launching-call -> CPU-op links and the CPU op tree, all vectorised over `TraceData.events`.

Positions ("rows") returned here are positions in `t.events` (0..len-1, the reader's RangeIndex order).
Times are int64 ns relative to `t.base_ns`, like the events. Results are memoised per TraceData object
(`derived`), so several views of one trace share the work.
"""
from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pandas as pd

from profiler_core.trace import categories

from .tensor_cores import TC_KERNEL_PATTERNS, uses_tensor_cores

CPU_OP_CATS = categories.OP_CATS
GPU_CATS = categories.GPU_ACTIVITY_CATS
LAUNCH_CATS = categories.LAUNCH_CATS
COMM_PREFIXES = ("nccl:", "gloo:", "c10d::", "mpi::")
COMM_NAMES = frozenset({"record_param_comms"})
_NOT_COMM_CATS = frozenset({"gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "python_function",
                            "trace"})
STEP_PREFIX = "ProfilerStep#"

__all__ = [
    "CPU_OP_CATS", "GPU_CATS", "LAUNCH_CATS", "is_communication", "communication_mask", "is_dataloader",
    "category_mask", "name_mask", "steps", "early_gpu_rows", "link_gpu_to_ops", "link_launches_to_ops", "op_tree",
    "derived", "innermost_op_at", "sorted_unique", "device_properties", "blocks_per_sm", "launch_stats",
    "cdna_occupancy", "is_amd_device", "zeros_column", "WORK_ITEM_GRID_LAUNCHES", "ns_to_us", "uses_tensor_cores",
    "is_tc_eligible_op", "TC_KERNEL_PATTERNS",
]


# ----------------------------------------------------------------------------------------------- memoisation
_cache_lock = threading.Lock()
_cache: dict[int, tuple[weakref.ref, dict]] = {}


def _forget(key: int) -> None:
    with _cache_lock:
        _cache.pop(key, None)


def derived(t: Any, key: str, fn: Callable[[], Any]) -> Any:
    """`fn()` computed once per TraceData object `t` and `key` (weakly held: dropped with `t`)."""
    tid = id(t)
    with _cache_lock:
        entry = _cache.get(tid)
        if entry is not None and entry[0]() is t and key in entry[1]:
            return entry[1][key]
    value = fn()
    with _cache_lock:
        entry = _cache.get(tid)
        if entry is None or entry[0]() is not t:
            try:
                ref = weakref.ref(t, lambda _r, k=tid: _forget(k))
            except TypeError:  # not weak-referenceable: no memoisation
                return value
            entry = (ref, {})
            _cache[tid] = entry
        entry[1][key] = value
    return value


def zeros_column(n: int) -> np.ndarray:
    """A read-only length-n float64 array of zeros that takes no memory (derived columns that are zero on
    every row of a trace, e.g. device times of a CPU trace)."""
    return np.broadcast_to(np.float64(0.0), (n,))


def codes_and_texts(values: Any) -> tuple[np.ndarray, list[str]]:
    """int64 codes of a column's values and the text of each code (categorical as the reader makes it,
    or plain values from elsewhere; missing values read as "")."""
    if isinstance(values, pd.Categorical):
        codes = np.asarray(values.codes, dtype=np.int64)
        texts = [str(v) for v in values.categories]
        if len(codes) and codes.min() < 0:  # missing: its own code, shown as ""
            codes = np.where(codes < 0, len(texts), codes)
            texts.append("")
        return codes, texts
    codes, uniq = pd.factorize(pd.Series(np.asarray(values, dtype=object)).fillna("").astype(str))
    return codes.astype(np.int64), [str(v) for v in uniq]


# ------------------------------------------------------------------------------------------ classification
def is_communication(name: str, cat: str) -> bool:
    """True for communication: CPU ops named nccl:*, gloo:*, c10d::*, mpi::*, record_param_comms; NCCL kernels."""
    name, cat = str(name), str(cat)
    if cat == "kernel":
        return "nccl" in name.lower()
    if cat in _NOT_COMM_CATS:
        return False
    return name.startswith(COMM_PREFIXES) or name in COMM_NAMES


def is_dataloader(name: str) -> bool:
    """torch-tb-profiler's DataLoader ranges: `enumerate(DataLoader)#...__next__` and `enumerate(DataPipe)#...`."""
    name = str(name)
    return (name.startswith("enumerate(DataLoader)#") and name.endswith(".__next__")) or \
        name.startswith("enumerate(DataPipe)#")


def _per_value(col: pd.Series, fn: Callable[[str], bool]) -> np.ndarray:
    """Evaluate `fn` once per distinct value of a (categorical) column; boolean array per row."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        cats = col.cat.categories
        vals = np.fromiter((bool(fn(c)) for c in cats), dtype=bool, count=len(cats))
        codes = col.cat.codes.to_numpy()
        if not len(codes) or codes.min() >= 0:  # no missing value (the reader's columns): one gather
            return vals.take(codes)
        out = np.zeros(len(codes), dtype=bool)
        ok = codes >= 0
        out[ok] = vals[codes[ok]]
        return out
    codes, uniques = pd.factorize(col, use_na_sentinel=True)
    vals = np.fromiter((bool(fn(c)) for c in uniques), dtype=bool, count=len(uniques))
    out = np.zeros(len(codes), dtype=bool)
    ok = codes >= 0
    out[ok] = vals[codes[ok]]
    return out


def category_mask(events: pd.DataFrame, cats: Iterable[str]) -> np.ndarray:
    """Boolean array: rows whose `cat` is one of `cats` (memoised per events frame; do not modify it)."""
    wanted = frozenset(cats)

    def build() -> np.ndarray:
        mask = _per_value(events["cat"], lambda c: c in wanted)
        mask.flags.writeable = False  # shared between callers
        return mask

    return derived(events, "cat:" + "|".join(sorted(wanted)), build)


def name_mask(events: pd.DataFrame, fn: Callable[[str], bool]) -> np.ndarray:
    """Boolean array: rows whose `name` satisfies `fn` (evaluated once per distinct name)."""
    return _per_value(events["name"], fn)


def communication_mask(events: pd.DataFrame) -> pd.Series:
    """Vectorised `is_communication` over an events frame (boolean Series aligned with `events`)."""
    if len(events) == 0:
        return pd.Series(np.zeros(0, dtype=bool), index=events.index)
    kernel = category_mask(events, ("kernel",))
    nccl = name_mask(events, lambda n: "nccl" in n.lower())
    by_name = name_mask(events, lambda n: n.startswith(COMM_PREFIXES) or n in COMM_NAMES)
    excluded = category_mask(events, _NOT_COMM_CATS)
    return pd.Series(np.where(kernel, nccl, by_name & ~excluded), index=events.index)


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """np.unique by sorting (numpy 2's hash-based unique is far slower on millions of int64)."""
    a = np.sort(np.asarray(values), kind="stable")
    if len(a) < 2:
        return a
    keep = np.empty(len(a), dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def ns_to_us(ns: float | int | np.ndarray) -> Any:
    """ns -> µs rounded to the ns (3 decimals), as plain float(s)."""
    if isinstance(ns, np.ndarray):
        return np.round(ns / 1000.0, 3)
    return round(float(ns) / 1000.0, 3)


# ------------------------------------------------------------------------------------------------- op tree
def _group_codes(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """Dense codes for (pid, tid) pairs, ordered by (pid, tid)."""
    if len(pid) == 0:
        return np.zeros(0, dtype=np.int64)
    cp, up = pd.factorize(pid, sort=True)
    ct, ut = pd.factorize(tid, sort=True)
    pair = cp.astype(np.int64) * len(ut) + ct  # order-preserving: the factorized codes are sorted
    if len(up) * len(ut) > 4 * len(pair) + 1024:  # many distinct pairs: sort them
        return np.unique(pair, return_inverse=True)[1].astype(np.int64).reshape(-1)
    present = np.bincount(pair, minlength=len(up) * len(ut)) > 0
    return (np.cumsum(present) - 1)[pair]


def _tree_order(grp: np.ndarray, start: np.ndarray, end: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """np.lexsort((rows, -end, start, grp)) for ascending `rows`; a stable sort by group alone when the
    rows already come in (start, -end) order, as the reader sorts events (ts, then longest first)."""
    if len(rows) > 1:
        later = start[1:] > start[:-1]
        tie = start[1:] == start[:-1]
        if bool((later | (tie & (end[1:] <= end[:-1]))).all()):
            small = grp.astype(np.int16) if int(grp.max()) < 2 ** 15 else grp  # radix sort
            return np.argsort(small, kind="stable")
    return np.lexsort((rows, -end, start, grp))


def _composite(g: np.ndarray, v: np.ndarray, lo: int, span: int) -> np.ndarray:
    """Order-preserving int64 key for (group, value) pairs with value in [lo, lo + span)."""
    return g.astype(np.int64) * np.int64(span) + (v.astype(np.int64) - np.int64(lo))


def _op_tree(t: Any) -> pd.DataFrame:
    """Build the op tree: depth by counting open ranges, parent = last earlier node one level up, repairs."""
    ev = t.events
    is_op = category_mask(ev, CPU_OP_CATS)
    is_module = category_mask(ev, ("python_function",)) & (ev["python_module_id"].to_numpy() >= 0)
    rows = np.flatnonzero(is_op | is_module)
    n = len(rows)
    if n == 0:
        empty = np.zeros(0, np.int64)
        return pd.DataFrame({"row": rows, "parent": empty, "depth": empty, "group": empty, "start": empty,
                             "end": empty, "merged_into": empty, "is_op": is_op[rows]})
    start = ev["ts"].to_numpy(np.int64)[rows]
    end = start + ev["dur"].to_numpy(np.int64)[rows]
    grp = _group_codes(ev["pid"].to_numpy()[rows], ev["tid"].to_numpy()[rows])
    order = _tree_order(grp, start, end, rows)
    # one column at a time, each old one freed as its reordered copy is made (temporaries go as soon as
    # they are used: the tree's peak memory is the views' peak)
    rows = rows[order]
    start = start[order]
    end = end[order]
    grp = grp[order]
    del order
    pos = np.arange(n, dtype=np.int64)

    # depth_i = number of earlier nodes (tree order) of the same thread still open at start_i (end_j > start_i)
    lo = int(min(start.min(), end.min()))
    span = int(max(start.max(), end.max())) - lo + 2
    if (int(grp.max()) + 1) * span >= 2 ** 62:  # pragma: no cover - absurd time ranges
        raise ValueError("trace time range too large for the op tree")
    end_keys = _composite(grp, end, lo, span)
    end_keys.sort(kind="stable")  # ends come nearly in order: 10x quicker than quicksort (2.2M nodes: 0.13 s)
    closed = np.searchsorted(end_keys, _composite(grp, start, lo, span), side="right")
    closed -= np.searchsorted(end_keys, grp.astype(np.int64) * span, side="left")
    del end_keys
    zero = end == start
    run_change = np.ones(n, dtype=bool)
    run_change[1:] = (grp[1:] != grp[:-1]) | (start[1:] != start[:-1])
    run_id = np.cumsum(run_change) - 1
    run_start = np.flatnonzero(run_change)
    del run_change
    run_end = np.append(run_start[1:], n)[run_id]
    del run_start
    nz_run = np.bincount(run_id, weights=zero).astype(np.int64)[run_id]
    del run_id
    run_end -= pos
    z = np.where(zero, run_end, nz_run)
    del run_end, nz_run
    closed -= z
    del z
    depth = pos - np.searchsorted(grp, grp, side="left")
    depth -= closed
    del closed, pos  # (an arange: made again where needed)
    np.maximum(depth, 0, out=depth)

    # candidate parent: the last earlier node one level up. Keys depth * n + pos in (depth, pos) order
    # (a radix sort of small depths); the queries (depth - 1) * n + pos are then sorted too, which
    # makes searchsorted and the gathers sequential.
    by_level = np.argsort(depth.astype(np.int16) if int(depth.max()) < 2 ** 15 else depth, kind="stable")
    dk = depth[by_level]
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
    parent = np.full(n, -1, np.int64)
    parent[by_level[found]] = cand[found]
    del by_level, cand, found

    # repair nodes whose candidate does not contain them (partially overlapping siblings): walk up
    def bad_mask(p: np.ndarray) -> np.ndarray:
        ok = p >= 0
        pp = np.maximum(p, 0)
        return ok & ((grp[pp] != grp) | (end[pp] < end) | (start[pp] > start))

    bad = bad_mask(parent)
    for _ in range(int(depth.max()) + 2):
        if not bad.any():
            break
        parent[bad] = parent[parent[bad]]
        bad = bad_mask(parent)
    parent[bad] = -1
    del bad

    # torch's _remove_dup_nodes: an op whose only child is an op of the same name absorbs it
    small = np.int32 if len(ev) < 2 ** 31 else np.int64  # positions, depths, thread codes (see below)
    nchild = np.bincount(parent[parent >= 0], minlength=n)
    names = ev["name"].to_numpy()[rows] if not isinstance(ev["name"].dtype, pd.CategoricalDtype) \
        else ev["name"].cat.codes.to_numpy()[rows]
    cpu_op = category_mask(ev, ("cpu_op",))[rows]
    pp = np.maximum(parent, 0)
    merge = (parent >= 0) & (nchild[pp] == 1) & (names[pp] == names) & cpu_op & cpu_op[pp]
    del nchild, names, cpu_op, pp
    rep = np.where(merge, parent, np.arange(n, dtype=np.int64))
    for _ in range(int(depth.max()) + 2):
        nxt = rep[rep]
        if np.array_equal(nxt, rep):
            break
        rep = nxt
    del nxt
    final_parent = np.where(parent >= 0, rep[np.maximum(parent, 0)], -1)
    del parent
    merged_into = np.where(merge, rows[rep], -1).astype(small)
    del merge, rep
    parent_row = np.where(final_parent >= 0, rows[np.maximum(final_parent, 0)], -1).astype(small)
    del final_parent
    # the tree is held as long as its trace: int32 where it fits (a trace of 2**31 events is far beyond
    # memory) keeps it at 37 bytes a node rather than 57
    cols = dict(row=rows.astype(small), parent=parent_row, depth=depth.astype(small), group=grp.astype(small),
                start=start, end=end, merged_into=merged_into, is_op=is_op[rows])
    return pd.DataFrame(cols, copy=False)  # fresh arrays: no need to copy them into blocks


def op_tree(t: Any) -> pd.DataFrame:
    """The CPU op tree (cpu_op, user_annotation and nn.Module python_function events) per (pid, tid).

    One row per node in tree order (thread, start, longest first): `row` (position in t.events), `parent`
    (position of the innermost enclosing node, -1 at top level), `depth` (before merging), `group` (thread
    code), `start`, `end` (ns), `merged_into` (position of the op this one was merged into by torch's
    same-name single-child rule, else -1; merged nodes are not separate calls), `is_op` (cpu_op or
    user_annotation). Partially overlapping nodes hang under the innermost node that fully contains them.
    Positions, depth and group are int32 (the tree lives as long as its trace), start and end int64.
    """
    return derived(t, "op_tree", lambda: _op_tree(t))


def innermost_op_at(t: Any, pid: np.ndarray, tid: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Position in t.events of the innermost cpu_op/user_annotation on the same (pid, tid) whose range holds
    `ts` (start <= ts < end), or -1; vectorised over the query arrays (any order)."""
    pid, tid = np.asarray(pid, dtype=np.int64), np.asarray(tid, dtype=np.int64)
    ts = np.asarray(ts, dtype=np.int64)
    tree = op_tree(t)
    m = len(ts)
    if m == 0 or len(tree) == 0:
        return np.full(m, -1, np.int64)
    ev = t.events
    rows = tree["row"].to_numpy()
    npid, ntid = ev["pid"].to_numpy()[rows], ev["tid"].to_numpy()[rows]
    both = _group_codes(np.concatenate([npid, pid]), np.concatenate([ntid, tid]))
    g_nodes, g_q = both[: len(rows)], both[len(rows):]
    # the node groups from op_tree are dense codes of the same sort: re-derive keys on the joint codes
    start = tree["start"].to_numpy()
    end = tree["end"].to_numpy()
    lo = int(min(start.min(), ts.min()))
    span = int(max(end.max(), ts.max())) - lo + 2
    keys = _composite(g_nodes, start, lo, span)  # non-decreasing in tree order
    p = np.searchsorted(keys, _composite(g_q, ts, lo, span), side="right") - 1
    pos_of_row = np.full(len(ev), -1, np.int64)
    pos_of_row[rows] = np.arange(len(rows))
    parent_pos = np.where(tree["parent"].to_numpy() >= 0, pos_of_row[np.maximum(tree["parent"].to_numpy(), 0)], -1)
    merged = tree["merged_into"].to_numpy()
    is_op = tree["is_op"].to_numpy()

    def miss(p: np.ndarray) -> np.ndarray:
        pp = np.maximum(p, 0)
        return (p >= 0) & ((g_nodes[pp] != g_q) | (end[pp] <= ts) | ~is_op[pp] | (merged[pp] >= 0))

    bad = miss(p)
    for _ in range(int(tree["depth"].max()) + 2):
        if not bad.any():
            break
        p[bad] = np.where(g_nodes[p[bad]] != g_q[bad], -1, parent_pos[p[bad]])
        bad = miss(p)
    p[bad] = -1
    return np.where(p >= 0, rows[np.maximum(p, 0)], -1)


_innermost_op_at = innermost_op_at  # the first name other views used


# ---------------------------------------------------------------------------------------------------- links
def _is_sorted(a: np.ndarray) -> bool:
    return len(a) < 2 or bool((a[1:] >= a[:-1]).all())


def _first_position_by_key(keys: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique keys and, for each, the smallest position carrying it."""
    order = np.argsort(keys, kind="stable") if _is_sorted(positions) else np.lexsort((positions, keys))
    k, p = keys[order], positions[order]
    first = np.ones(len(k), dtype=bool)
    first[1:] = k[1:] != k[:-1]
    return k[first], p[first]


def _lookup(sorted_keys: np.ndarray, values: np.ndarray, query: np.ndarray) -> np.ndarray:
    if len(sorted_keys) == 0:
        return np.full(len(query), -1, np.int64)
    i = np.searchsorted(sorted_keys, query)
    i = np.minimum(i, len(sorted_keys) - 1)
    return np.where(sorted_keys[i] == query, values[i], -1)


def _ext_to_op(t: Any) -> tuple[np.ndarray, np.ndarray]:
    return derived(t, "ext_to_op", lambda: _build_ext_to_op(t))


def _build_ext_to_op(t: Any) -> tuple[np.ndarray, np.ndarray]:
    ev = t.events
    is_op = category_mask(ev, CPU_OP_CATS)
    ext = ev["external_id"].to_numpy(np.int64)
    rows = np.flatnonzero(is_op & (ext > 0))
    return _first_position_by_key(ext[rows], rows)


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


def _link_launches(t: Any) -> pd.DataFrame:
    ev = t.events
    rows = np.flatnonzero(category_mask(ev, LAUNCH_CATS))
    ext = ev["external_id"].to_numpy(np.int64)[rows]
    keys, vals = _ext_to_op(t)
    op = _lookup(keys, vals, ext)
    missing = op < 0
    if missing.any():  # no (known) External id: the innermost op around the call on its thread
        mr = rows[missing]
        op[missing] = innermost_op_at(t, ev["pid"].to_numpy()[mr], ev["tid"].to_numpy()[mr],
                                       ev["ts"].to_numpy(np.int64)[mr])
    op = _resolve_merged(t, op)
    return pd.DataFrame({"row": rows, "op": op, "correlation": ev["correlation"].to_numpy(np.int64)[rows]},
                        copy=False)


def link_launches_to_ops(t: Any) -> pd.DataFrame:
    """Each cuda_runtime/cuda_driver call with the CPU op that made it: columns `row`, `op` (position or -1),
    `correlation`. Linked by External id, else by the innermost cpu_op/user_annotation on the same thread
    whose range holds the call's start."""
    return derived(t, "launch_links", lambda: _link_launches(t))


def _link_gpu(t: Any) -> pd.DataFrame:
    ev = t.events
    rows = np.flatnonzero(category_mask(ev, GPU_CATS))
    corr = ev["correlation"].to_numpy(np.int64)[rows]
    launches = link_launches_to_ops(t)
    lr = launches["row"].to_numpy()
    lc = launches["correlation"].to_numpy()
    ok = lc >= 0
    lkeys, lpos = _first_position_by_key(lc[ok], np.arange(len(lr))[ok])
    li = _lookup(lkeys, lpos, np.where(corr >= 0, corr, -2))
    if len(lr):
        runtime = np.where(li >= 0, lr[np.maximum(li, 0)], -1)
        op = np.where(li >= 0, launches["op"].to_numpy()[np.maximum(li, 0)], -1)
    else:
        runtime = np.full(len(rows), -1, np.int64)
        op = np.full(len(rows), -1, np.int64)
    ext_own = ev["external_id"].to_numpy(np.int64)[rows]
    missing = (op < 0) & (ext_own > 0)
    if missing.any():  # the activity's own External id (old traces carry it on kernels too)
        keys, vals = _ext_to_op(t)
        op[missing] = _resolve_merged(t, _lookup(keys, vals, ext_own[missing]))
    ext_col = ev["external_id"].to_numpy(np.int64)
    external_id = np.where(op >= 0, ext_col[np.maximum(op, 0)], ext_own) if len(rows) else ext_own
    return pd.DataFrame({"row": rows, "runtime": runtime, "op": op, "external_id": external_id}, copy=False)


def link_gpu_to_ops(t: Any) -> pd.DataFrame:
    """Each kernel/memcpy/memset (in event order) with its launch: columns `row` (position in t.events),
    `runtime` (the cuda_runtime/cuda_driver call with the same correlation, or -1), `op` (the innermost CPU
    op that made that call, or the op with the activity's own External id; -1 if none), `external_id`."""
    return derived(t, "gpu_links", lambda: _link_gpu(t))


# ---------------------------------------------------------------------------------------------------- steps
def _step_number(name: str) -> str:
    return name[len(STEP_PREFIX):] if name.startswith(STEP_PREFIX) else name


def _steps(t: Any) -> pd.DataFrame:
    ev = t.events
    empty = pd.DataFrame({"step": pd.Series([], dtype=object), "start": pd.Series([], dtype=np.int64),
                          "end": pd.Series([], dtype=np.int64), "host_start": pd.Series([], dtype=np.int64),
                          "host_end": pd.Series([], dtype=np.int64), "device_ops": pd.Series([], dtype=np.int64)})
    if len(ev) == 0:
        return empty
    ts = ev["ts"].to_numpy(np.int64)
    te = ts + ev["dur"].to_numpy(np.int64)
    is_cpu = category_mask(ev, CPU_OP_CATS)
    is_step = is_cpu & name_mask(ev, lambda n: n.startswith(STEP_PREFIX))
    srows = np.flatnonzero(is_step)
    if len(srows):
        srows = srows[np.lexsort((srows, ts[srows]))]
        names = [_step_number(str(n)) for n in ev["name"].to_numpy()[srows]]
        hs, he = ts[srows], te[srows]
    else:  # no ProfilerStep: one step "0" over the whole trace window (never the profiler's own `Trace` span)
        sel = ~category_mask(ev, ("trace",))
        if not sel.any():
            return empty
        names, hs, he = ["0"], np.array([ts[sel].min()]), np.array([te[sel].max()])
    n = len(hs)

    gl = link_gpu_to_ops(t)
    grow, grt = gl["row"].to_numpy(), gl["runtime"].to_numpy()
    matched_count = np.zeros(n, np.int64)
    dev_max = np.full(n, np.iinfo(np.int64).min)
    matched = np.zeros(len(grow), dtype=bool)
    has_rt = grt >= 0
    if has_rt.any():
        rs, re_ = ts[grt[has_rt]], te[grt[has_rt]]
        k = np.searchsorted(hs, rs, side="right") - 1
        inside = (k >= 0) & (re_ <= he[np.maximum(k, 0)])
        idx = np.flatnonzero(has_rt)[inside]
        kk = k[inside]
        matched[idx] = True
        matched_count = np.bincount(kk, minlength=n).astype(np.int64)
        np.maximum.at(dev_max, kk, te[grow[idx]])
    start, end = hs.copy(), he.copy()
    if matched.any():
        # GPU work launched before the window (or whose launch record is missing) never moves a step: the
        # first step starts with its CPU range (see early_gpu_rows; the breakdown leaves that work out)
        prev = int(hs[0])
        for i in range(n):
            s = max(prev, int(hs[i]))
            e = int(he[i]) if matched_count[i] == 0 else max(int(he[i]), int(dev_max[i]))
            e = max(e, s)
            start[i], end[i] = s, e
            prev = e
        if n > 1:  # drop trailing steps whose GPU work was not (fully) captured
            last = np.flatnonzero(matched_count > 0)
            if len(last):
                i = int(last[-1])
                keep = i + 1
                if i > 0 and matched_count[i - 1] * 0.8 > matched_count[i]:
                    keep = i
                names, start, end = names[:keep], start[:keep], end[:keep]
                hs, he, matched_count = hs[:keep], he[:keep], matched_count[:keep]
    return pd.DataFrame({"step": names, "start": start.astype(np.int64), "end": end.astype(np.int64),
                         "host_start": hs.astype(np.int64), "host_end": he.astype(np.int64),
                         "device_ops": matched_count.astype(np.int64)})


def steps(t: Any) -> pd.DataFrame:
    """ProfilerStep ranges with torch-tb-profiler's rules: columns `step` ("5"), `start`, `end` (ns, after the
    GPU adjustment), `host_start`, `host_end` (the CPU range), `device_ops` (GPU activities launched inside).

    Without ProfilerStep events: one step "0" over the whole trace window, every event but the profiler's own
    `Trace`-category span (torch-tb-profiler's rule; HTA's temporal breakdown covers the same window). When GPU work
    is linked to launches inside steps, each step runs from max(previous step end, its CPU start) to max(its CPU
    end, the end of the GPU work it launched); trailing steps that launched nothing, or under 80% of the previous
    step's GPU activities (work not fully captured), are dropped. Unlike torch-tb-profiler 0.4.3, GPU work launched
    before the first step never moves its start (the first step starts with its CPU range, every step ends no
    earlier than its CPU range); `early_gpu_rows` names that work so views can leave it out."""
    return derived(t, "steps", lambda: _steps(t))


def _early_gpu_rows(t: Any) -> np.ndarray:
    ev = t.events
    st = steps(t)
    gl = link_gpu_to_ops(t)
    if len(st) == 0 or len(gl) == 0 or int(st["device_ops"].sum()) == 0:
        return np.zeros(0, np.int64)
    ts = ev["ts"].to_numpy(np.int64)
    te = ts + ev["dur"].to_numpy(np.int64)
    grow, grt = gl["row"].to_numpy(), gl["runtime"].to_numpy()
    hs0 = int(st["host_start"].iloc[0])
    he = st["host_end"].to_numpy(np.int64)
    hs = st["host_start"].to_numpy(np.int64)
    has_rt = grt >= 0
    rs = np.where(has_rt, ts[np.maximum(grt, 0)], 0)
    re_ = np.where(has_rt, te[np.maximum(grt, 0)], 0)
    k = np.searchsorted(hs, rs, side="right") - 1
    inside = has_rt & (k >= 0) & (re_ <= he[np.maximum(k, 0)])
    first_inside = int(ts[grow[inside]].min()) if inside.any() else np.iinfo(np.int64).max
    early = (has_rt & (rs < hs0)) | (~has_rt & (ts[grow] < first_inside))
    return grow[early]


def early_gpu_rows(t: Any) -> np.ndarray:
    """Positions of the GPU activities launched before the profiled steps: their launch call starts before
    the first ProfilerStep, or (launch not in the trace) they start before the first GPU activity launched
    inside a step. Empty when no GPU work is linked to a step. The step-time breakdown leaves them out."""
    return derived(t, "early_gpu_rows", lambda: _early_gpu_rows(t))


# ---------------------------------------------------------------------------------------------- Tensor Cores
# Operators that can use Tensor Cores (autocast's lower-precision list and their backward ops).
TC_ELIGIBLE_OPS = frozenset({
    "aten::_convolution", "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::conv_tbc",
    "aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d", "aten::convolution",
    "aten::cudnn_convolution", "aten::cudnn_convolution_transpose", "aten::prelu", "aten::addmm", "aten::addmv",
    "aten::addr", "aten::matmul", "aten::mm", "aten::mv", "aten::linear", "aten::addbmm", "aten::baddbmm",
    "aten::bmm", "aten::chain_matmul", "aten::linalg_multi_dot", "aten::_thnn_fused_lstm_cell",
    "aten::_thnn_fused_gru_cell", "aten::lstm_cell", "aten::gru_cell", "aten::rnn_tanh_cell",
    "aten::rnn_relu_cell", "CudnnConvolutionBackward", "BmmBackward0", "aten::cudnn_convolution_transpose_backward",
    "CudnnConvolutionTransposeBackward", "MmBackward", "aten::cudnn_convolution_backward_weight", "aten::addmm_",
    "AddmvBackward", "MvBackward", "aten::cudnn_convolution_transpose_backward_weight",
    "aten::cudnn_convolution_transpose_backward_input", "AddmmBackward", "aten::cudnn_convolution_backward_input",
    "AddbmmBackward", "aten::cudnn_convolution_backward",
    # current PyTorch names of the same work
    "aten::convolution_backward", "aten::_convolution_mode", "aten::cudnn_convolution_relu",
    "aten::cudnn_convolution_add_relu", "aten::_scaled_mm", "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_cudnn_attention",
    "aten::_flash_attention_forward", "aten::_flash_attention_backward", "aten::_efficient_attention_forward",
    "aten::_efficient_attention_backward", "aten::scaled_dot_product_attention",
})


def is_tc_eligible_op(op_name: str) -> bool:
    """True if an operator can use Tensor Cores (it, or an op it calls, is a convolution/GEMM/attention)."""
    return str(op_name) in TC_ELIGIBLE_OPS


# ------------------------------------------------------------------------------------------------- devices
def device_properties(t: Any) -> dict[int, dict]:
    """The trace's deviceProperties by device id (the `id` field, else the list position)."""
    props: dict[int, dict] = {}
    for i, p in enumerate(getattr(t, "device_properties", None) or []):
        if isinstance(p, dict):
            did = p.get("id", i)
            props[int(did) if isinstance(did, (int, float)) and not isinstance(did, bool) else i] = p
    return props


def blocks_per_sm(kernels: pd.DataFrame, props: dict[int, dict]) -> np.ndarray:
    """Each kernel's `blocks per SM` from the trace, else its grid's blocks / the device's SM count when both
    are known (NaN otherwise)."""
    bps = kernels["blocks_per_sm"].to_numpy(np.float64).copy()
    bps[~np.isfinite(bps) | (bps < 0)] = np.nan  # CUPTI can report "inf" (no SM count): estimate instead
    missing = np.isnan(bps)
    if missing.any():
        dev = kernels["device"].to_numpy(np.int64)[missing]
        devices = sorted_unique(dev)
        per_device = np.array([float((props.get(int(d)) or {}).get("numSms") or np.nan) for d in devices])
        sms = per_device[np.searchsorted(devices, dev)]
        grid = [np.maximum(kernels[c].to_numpy(np.float64)[missing], 1 if c != "grid_x" else 0)
                for c in ("grid_x", "grid_y", "grid_z")]
        blocks = grid[0] * grid[1] * grid[2]
        bps[missing] = np.where((blocks > 0) & (sms > 0), blocks / sms, np.nan)
    return bps


# ------------------------------------------------------------------------------------------- launch shapes
#: ROCm launch calls whose `grid` is the global work size in work-items (hipLaunchKernel's is in blocks)
WORK_ITEM_GRID_LAUNCHES = frozenset({"hipExtModuleLaunchKernel", "hipHccModuleLaunchKernel"})
_AMD_NAME_HINTS = ("amd", "instinct", "radeon", "gfx")


def is_amd_device(p: dict | None) -> bool:
    """True for an AMD GPU's deviceProperties entry (its name, or a 64-wide wavefront)."""
    if not isinstance(p, dict):
        return False
    name = str(p.get("name") or "").lower()
    return any(h in name for h in _AMD_NAME_HINTS) or p.get("warpSize") == 64


def _launch_stats(t: Any) -> pd.DataFrame:
    ev = t.events
    rows = np.flatnonzero(category_mask(ev, ("kernel",)))
    k = ev.iloc[rows]
    grid = np.stack([k[c].to_numpy(np.int64) for c in ("grid_x", "grid_y", "grid_z")], axis=1)
    block = np.stack([k[c].to_numpy(np.int64) for c in ("block_x", "block_y", "block_z")], axis=1)
    shared = k["shared_memory"].to_numpy(np.int64).copy()
    launch = np.full(len(rows), -1, np.int64)
    if len(rows):
        gl = link_gpu_to_ops(t)
        rt_of = np.full(len(ev), -1, np.int64)
        rt_of[gl["row"].to_numpy()] = gl["runtime"].to_numpy()
        launch = rt_of[rows]
        has = launch >= 0
        if has.any():  # ROCm kernels may carry the shape only on their launch call
            lr = launch[has]
            for j, c in enumerate(("grid_x", "grid_y", "grid_z")):
                v = ev[c].to_numpy(np.int64)[lr]
                grid[has, j] = np.where(grid[has, j] > 0, grid[has, j], v)
            for j, c in enumerate(("block_x", "block_y", "block_z")):
                v = ev[c].to_numpy(np.int64)[lr]
                block[has, j] = np.where(block[has, j] > 0, block[has, j], v)
            sh = ev["shared_memory"].to_numpy(np.int64)[lr]
            shared[has] = np.where(shared[has] >= 0, shared[has], sh)
            work_items = np.zeros(len(rows), dtype=bool)
            work_items[has] = name_mask(ev, WORK_ITEM_GRID_LAUNCHES.__contains__)[lr]
            if work_items.any():  # global work size -> work-groups, axis by axis
                b = np.maximum(block[work_items], 1)
                grid[work_items] = (grid[work_items] + b - 1) // b
    blocks = np.where(grid[:, 0] > 0, grid[:, 0] * np.maximum(grid[:, 1], 1) * np.maximum(grid[:, 2], 1), 0)
    threads = np.where(block[:, 0] > 0, block[:, 0] * np.maximum(block[:, 1], 1) * np.maximum(block[:, 2], 1), 0)
    props = device_properties(t)
    dev = k["device"].to_numpy(np.int64)
    bps = k["blocks_per_sm"].to_numpy(np.float64).copy()
    bps[~np.isfinite(bps) | (bps < 0)] = np.nan  # CUPTI can report "inf" (no SM count): estimate instead
    occ = k["occupancy"].to_numpy(np.float64).copy()
    amd = np.zeros(len(rows), dtype=bool)
    for d in sorted_unique(dev).tolist():
        sel = dev == d
        p = props.get(int(d)) or {}
        sms = float(p.get("numSms") or np.nan)
        est = np.where((blocks[sel] > 0) & (sms > 0), blocks[sel] / sms, np.nan)
        if is_amd_device(p):
            amd[sel] = True
            bps[sel] = est  # Kineto's ROCm args never hold blocks per CU; NVIDIA formulas never apply
            occ[sel] = cdna_occupancy(est, threads[sel], shared[sel], p) * 100.0
        else:
            bps[sel] = np.where(np.isnan(bps[sel]), est, bps[sel])
            _optin_occupancy(occ, sel, p, bps, threads, k["registers"].to_numpy(np.int64), shared)
    return pd.DataFrame({"row": rows, "blocks": blocks, "threads": threads, "blocks_per_sm": bps,
                         "occupancy": occ, "amd": amd}, copy=False)


def _optin_occupancy(occ: np.ndarray, sel: np.ndarray, p: dict, bps: np.ndarray, threads: np.ndarray,
                     regs: np.ndarray, shared: np.ndarray) -> None:
    """Replace, in place, the 0 % Kineto writes for kernels above the default 48 KiB of shared memory per block
    (it leaves the opt-in out) by the same estimate with the shared memory opted in."""
    from profiler_core.cuda.occupancy import optin_achieved_occupancy

    limit = p.get("sharedMemPerBlock")
    if not isinstance(limit, (int, float)) or isinstance(limit, bool) or limit <= 0:
        return
    fix = np.flatnonzero(sel & (occ == 0) & (shared > limit) & (threads > 0) & np.isfinite(bps) & (regs >= 0))
    memo: dict[tuple, float] = {}
    for i in fix.tolist():
        key = (float(bps[i]), int(threads[i]), int(regs[i]), int(shared[i]))
        if key not in memo:
            memo[key] = optin_achieved_occupancy(p, *key)
        occ[i] = memo[key]


def launch_stats(t: Any) -> pd.DataFrame:
    """Per kernel (in event order): `row`, `blocks` (grid size in blocks/work-groups: ROCm work-item grids of
    hipExtModuleLaunchKernel/hipHccModuleLaunchKernel divided by the block size), `threads` per block,
    `blocks_per_sm` (the trace's value, else blocks / SMs; on AMD always blocks / CUs), `occupancy` (% : the
    trace's est. achieved occupancy on NVIDIA, recomputed with the shared memory opted in where Kineto wrote 0
    for a kernel above 48 KiB; `cdna_occupancy` on AMD; NaN when unknown), `amd`."""
    return derived(t, "launch_stats", lambda: _launch_stats(t))


def cdna_occupancy(blocks_per_cu: np.ndarray, threads: np.ndarray, shared_bytes: np.ndarray,
                   p: dict) -> np.ndarray:
    """Estimated achieved occupancy (fraction) of AMD CDNA kernels: resident work-groups per CU, limited by
    the wavefront slots (maxThreadsPerMultiprocessor / warpSize) and the LDS (maxSharedMemoryPerMultiProcessor
    / the kernel's shared memory), times waves per work-group over the CU's wave slots. An upper bound:
    ROCm traces carry no register counts. NaN when the launch shape or the device is unknown."""
    bpc = np.asarray(blocks_per_cu, np.float64)
    threads = np.asarray(threads, np.float64)
    shared = np.asarray(shared_bytes, np.float64)
    wave = float(p.get("warpSize") or 64)
    slots = float(p.get("maxThreadsPerMultiprocessor") or 0) / wave
    if slots <= 0:
        return np.full(len(bpc), np.nan)
    waves = np.ceil(threads / wave)
    with np.errstate(divide="ignore", invalid="ignore"):
        limit = np.floor(slots / waves)
        lds = float(p.get("maxSharedMemoryPerMultiProcessor") or p.get("sharedMemPerMultiprocessor") or 0)
        if lds > 0:
            limit = np.where(shared > 0, np.minimum(limit, np.floor(lds / shared)), limit)
        occ = np.minimum(bpc, limit) * waves / slots
    ok = np.isfinite(bpc) & (waves > 0) & (limit >= 0)
    return np.where(ok, np.clip(occ, 0.0, 1.0), np.nan)
