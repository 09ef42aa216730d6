"""Each kernel's place (stages `kernel_places`, `kernel_groups`): its op path (the names of the launching op, the
gpu links stage's, and its enclosing ops and modules from the top, without step annotations so steps add up) and
k, the kernel's most common position among the kernels one call of its op launches; and the alignment of two
profiles' kernel groups by (path, name), else by (path, k), else by name (`align_groups`; the Diff view's
Kernels tab and the job diff use it)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from profiler_core.analysis.stages.classify import STEP_PREFIX
from profiler_core.analysis.stages.columns import category_mask, name_mask
from profiler_core.analysis.stages.gpu_links import link_gpu_to_ops
from profiler_core.analysis.stages.op_tree import op_tree
from profiler_core.analysis.stages.registry import stage
from profiler_core.trace.categories import KERNEL

PATH_SEP = " > "
NO_OP = -1  # ordinal of a kernel without an op: never aligned by structure


def _op_paths(t: Any, ops: np.ndarray) -> dict[int, str]:
    """Event position of each op in `ops` -> its path text (enclosing ops and modules, steps left out)."""
    tree = op_tree(t)
    ev = t.events
    rows = tree["row"].to_numpy().astype(np.int64)
    pos_of = np.full(len(ev), -1, np.int64)
    pos_of[rows] = np.arange(len(rows))
    praw = tree["parent"].to_numpy().astype(np.int64)
    parent = np.where(praw >= 0, pos_of[np.maximum(praw, 0)], -1)
    names = ev["name"]
    is_step = name_mask(ev, lambda x: x.startswith(STEP_PREFIX))[rows]
    shown = ~is_step & (tree["merged_into"].to_numpy() < 0)
    memo: dict[int, tuple[str, ...]] = {}
    out: dict[int, str] = {}
    for op in ops.tolist():
        p = int(pos_of[op]) if 0 <= op < len(ev) else -1
        chain = []
        while p >= 0 and p not in memo:
            chain.append(p)
            p = int(parent[p])
        path = memo[p] if p >= 0 else ()
        for q in reversed(chain):
            if shown[q]:
                path = path + (str(names.iat[int(rows[q])]),)
            memo[q] = path
        out[op] = PATH_SEP.join(path)
    return out


PLACE_COLUMNS = ("row", "path", "name", "k", "ts", "dur", "idx")
GROUP_COLUMNS = ("path", "name", "count", "total", "ordinal", "first_ts", "first_dur", "first_idx")


@stage(op_tree, link_gpu_to_ops)
def kernel_places(t: Any) -> pd.DataFrame:
    """Each kernel of one profile with its place: event row, op path, name, k (its rank by start among the
    kernels its op call launched; NO_OP without an op), start and duration (ns), traceEvents index."""
    ev = t.events
    if not len(ev):
        return pd.DataFrame({c: [] for c in PLACE_COLUMNS})
    links = link_gpu_to_ops(t)
    lrows = links["row"].to_numpy().astype(np.int64)
    is_k = category_mask(ev, (KERNEL,))[lrows]
    krows = lrows[is_k]
    if not len(krows):
        return pd.DataFrame({c: [] for c in PLACE_COLUMNS})
    op = links["op"].to_numpy().astype(np.int64)[is_k]
    ts = ev["ts"].to_numpy(np.int64)[krows]
    dur = ev["dur"].to_numpy(np.int64)[krows]
    idx = ev["idx"].to_numpy(np.int64)[krows] if "idx" in ev else krows
    order = np.lexsort((ts, op))
    so = op[order]
    first_of_run = np.r_[True, so[1:] != so[:-1]] if len(so) else np.zeros(0, bool)
    run_start = np.maximum.accumulate(np.where(first_of_run, np.arange(len(so)), 0))
    k = np.empty(len(so), np.int64)
    k[order] = np.arange(len(so)) - run_start
    k[op < 0] = NO_OP
    uops = np.unique(op[op >= 0])
    paths = _op_paths(t, uops)
    path = [paths.get(o, "") if o >= 0 else "" for o in op.tolist()]
    names = ev["name"].to_numpy()[krows].astype(str)
    return pd.DataFrame({"row": krows, "path": path, "name": names, "k": k, "ts": ts, "dur": dur, "idx": idx})


def group_places(places: pd.DataFrame) -> pd.DataFrame:
    """Kernels (rows of `kernel_places`) grouped by (path, name): count, total ns, ordinal (the most common k),
    first start (ns), first duration (ns), first traceEvents index; in order of first start."""
    if not len(places):
        return pd.DataFrame({c: [] for c in GROUP_COLUMNS})
    df = places.sort_values("ts", kind="stable")
    g = df.groupby(["path", "name"], sort=False)
    ordinal = df.groupby(["path", "name", "k"], sort=False).size().reset_index(name="n")
    ordinal = ordinal.sort_values(["n", "k"], ascending=[False, True], kind="stable").drop_duplicates(["path", "name"])
    out = pd.DataFrame(
        {
            "count": g.size(),
            "total": g["dur"].sum(),
            "first_ts": g["ts"].first(),
            "first_dur": g["dur"].first(),
            "first_idx": g["idx"].first(),
        }
    ).reset_index()
    out = out.merge(ordinal[["path", "name", "k"]].rename(columns={"k": "ordinal"}), on=["path", "name"])
    return out.sort_values("first_ts", kind="stable").reset_index(drop=True)[list(GROUP_COLUMNS)]


@stage(kernel_places)
def kernel_groups(t: Any) -> pd.DataFrame:
    """The kernel diff's stage: one profile's kernels grouped by (path, name) (`group_places`)."""
    return group_places(kernel_places(t))


def align_groups(ga: pd.DataFrame, gb: pd.DataFrame) -> list[tuple[str, dict | None, dict | None]]:
    """Pairs (align, base group, exp group) of two sides' kernel groups: by (path, name), then by
    (path, ordinal), then by name under different paths, each in order of first appearance; the rest alone."""
    ra, rb = ga.to_dict("records"), gb.to_dict("records")
    by_b = {(r["path"], r["name"]): r for r in rb}
    pairs: list[tuple[str, dict | None, dict | None]] = []
    left_a = []
    used_b: set = set()
    for r in ra:
        m = by_b.get((r["path"], r["name"]))
        if m is not None:
            pairs.append(("name", r, m))
            used_b.add((r["path"], r["name"]))
        else:
            left_a.append(r)
    left_b = [r for r in rb if (r["path"], r["name"]) not in used_b]
    slots: dict[tuple, list] = {}
    for r in left_b:
        if r["ordinal"] != NO_OP:
            slots.setdefault((r["path"], int(r["ordinal"])), []).append(r)
    taken: set = set()
    still_a = []
    for r in left_a:
        cand = slots.get((r["path"], int(r["ordinal"]))) if r["ordinal"] != NO_OP else None
        if cand:
            m = cand.pop(0)
            taken.add((m["path"], m["name"]))
            pairs.append(("structure", r, m))
        else:
            still_a.append(r)
    still_b = [r for r in left_b if (r["path"], r["name"]) not in taken]
    moved: dict[str, list] = {}  # the same name under another op path (an op or module renamed)
    for r in still_b:
        moved.setdefault(r["name"], []).append(r)
    for r in still_a:
        cand = moved.get(r["name"])
        if cand:
            m = cand.pop(0)
            taken.add((m["path"], m["name"]))
            pairs.append(("name", r, m))
        else:
            pairs.append(("unmatched", r, None))
    pairs += [("unmatched", None, r) for r in still_b if (r["path"], r["name"]) not in taken]
    return pairs
