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

import pandas as pd

from profiler_core.analysis.stages.columns import trace_origin_ns
from profiler_core.analysis.stages.steps import steps
from profiler_core.analysis.tables.kernel_places import align_groups, kernel_groups
from tb_plugin.errors import BadRequest

MAX_ROWS = 5000


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
