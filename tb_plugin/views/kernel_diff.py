"""Kernel diff: the kernels of two profiles (base, exp) aligned by name, else by their place under the same op path.

kernel_diff(base, exp) ->
  {"base": {"kernels", "device_us"}, "exp": {same},
   "rows": [{"align": "name" | "structure" | "unmatched",
             "path": "fwd > aten::linear > aten::addmm",     # the owning op / module path ("": no op), base's
             "base": side | None, "exp": side | None,       # None: no such kernel on that side
             "delta_us": exp total - base total (an absent side counts 0),
             "delta_mean_us": exp mean - base mean | None (None unless both sides have the kernel)}],
   "notes": [text...]}
  side = {"name", "count", "total_us", "mean_us", "first_us", "first_dur_us", "first_idx", "path"}
A kernel's op is the gpu links stage's (never re-linked); its path is the names of that op and its enclosing
ops and modules from the top, without step annotations (ProfilerStep#N) so steps add up. Kernels are grouped
by (path, name). Groups with the same path and name on both sides align by name. Of the others, a group whose
kernels are most often the k-th kernel launched by one call of their op aligns with the other side's group of
the same path and k ("structure": a kernel renamed by a library or hardware change, sm80_* vs sm90_*); several
such groups pair in order of first appearance. Then a group pairs with one of the same name under another
path ("name"; each side's path is in its side: an op or module renamed). The rest are unmatched. Rows are
sorted by |delta_us| descending, then path and names. `first_us` is the first occurrence's start, µs from
the trace's first event (the timeline's clock), `first_idx` its index in the file's traceEvents.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from profiler_core.analysis.stages.classify import STEP_PREFIX
from profiler_core.analysis.stages.columns import category_mask, name_mask
from profiler_core.analysis.stages.gpu_links import link_gpu_to_ops
from profiler_core.analysis.stages.op_tree import op_tree
from profiler_core.analysis.stages.registry import stage
from profiler_core.analysis.stages.steps import steps
from profiler_core.trace.categories import KERNEL
from tb_plugin.errors import BadRequest
from tb_plugin.views.timeline import trace_origin_ns

MAX_ROWS = 5000
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


def _us(ns: float) -> float:
    return round(float(ns) / 1e3, 3)


def _side(rec: dict, origin: int) -> dict:
    n = int(rec["count"])
    return {
        "name": str(rec["name"]),
        "count": n,
        "total_us": _us(rec["total"]),
        "mean_us": _us(rec["total"] / n),
        "first_us": _us(rec["first_ts"] - origin),
        "first_dur_us": _us(rec["first_dur"]),
        "first_idx": int(rec["first_idx"]),
        "path": str(rec["path"]),
    }


def _row(align: str, path: str, a: dict | None, b: dict | None) -> dict:
    ta = a["total_us"] if a else 0.0
    tb = b["total_us"] if b else 0.0
    return {
        "align": align,
        "path": path,
        "base": a,
        "exp": b,
        "delta_us": round(tb - ta, 3),
        "delta_mean_us": round(b["mean_us"] - a["mean_us"], 3) if a and b else None,
    }


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


def kernel_diff(base: Any, exp: Any) -> dict:
    """Compare the kernels of two profiles: aligned rows with count and device time on each side, by |delta|."""
    if base is None or exp is None:
        raise BadRequest("a kernel diff needs two profiles")
    ga, gb = kernel_groups(base), kernel_groups(exp)
    oa, ob = trace_origin_ns(base), trace_origin_ns(exp)
    rows = []
    for align, a, b in align_groups(ga, gb):
        sa = _side(a, oa) if a is not None else None
        sb = _side(b, ob) if b is not None else None
        rows.append(_row(align, (a or b or {}).get("path", ""), sa, sb))
    rows.sort(key=lambda r: (-abs(r["delta_us"]), r["path"], (r["base"] or r["exp"])["name"]))
    notes = []
    for label, g in (("base", ga), ("exp", gb)):
        if not len(g):
            notes.append(f"{label} has no kernels: the trace holds no GPU kernel activity")
    na, nb = len(steps(base)), len(steps(exp))
    if na != nb:
        notes.append(f"base has {na} steps and exp has {nb}: totals cover each whole profile, compare the mean times")
    if len(rows) > MAX_ROWS:
        notes.append(f"{len(rows)} rows: the {MAX_ROWS} largest changes are listed")
        rows = rows[:MAX_ROWS]

    def totals(g: pd.DataFrame) -> dict:
        return {
            "kernels": int(g["count"].sum()) if len(g) else 0,
            "device_us": _us(g["total"].sum()) if len(g) else 0.0,
        }

    return {"base": totals(ga), "exp": totals(gb), "rows": rows, "notes": notes}
