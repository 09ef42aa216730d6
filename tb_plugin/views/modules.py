"""Module view: the nn.Module (or annotation) hierarchy with host and device time per node.

modules(t) -> {"source": "modules" | "annotations" | None,
               "tree": [node...]}     node = {"name", "path", "occurrences", "operators",
                                              "host_total_us", "host_self_us", "device_total_us",
                                              "device_self_us", "avg_host_us", "children": [node...]}
- source "modules": python_function events that carry `Python module id` (nn.Module calls,
  recorded with with_stack/with_modules); a module's parent is the nearest enclosing module.
- source "annotations" (no module events): user_annotation ranges (ProfilerStep#N excluded),
  nested by time on each thread.
- None: neither is present; "tree" is empty.
Occurrences of the same path (names from the root) are merged into one node. host_total_us is
the summed duration, host_self_us excludes child nodes, device_*_us is the GPU time (kernels,
memcpy, memset) launched by the ops inside (self: by ops whose nearest node is this one),
operators counts the CPU ops inside (whole subtree). Children are in order of first execution.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from profiler_core.analysis.tables.graph_notes import graph_replay_notes
from profiler_core.analysis.tables.module_tree import module_nodes

#: deepest level of the tree answered: each level is two levels of JSON nesting, which every JSON
#: encoder and the page walk recursively
MAX_DEPTH = 100


def _r(ns: float) -> float:
    return round(float(ns) / 1e3, 3)


def modules(t: Any) -> dict:
    """The module (or annotation) tree of one trace with occurrences and host/device times."""
    source, df = module_nodes(t)
    notes = graph_replay_notes(t)
    if source is None or not len(df):
        return {"source": None, "tree": [], **({"notes": notes} if notes else {})}
    g = df.groupby("path", sort=False)
    agg = pd.DataFrame(
        {
            "occ": g.size(),
            "first": g["start"].min(),
            "ht": g["host_total"].sum(),
            "hs": g["host_self"].sum(),
            "dt": g["device_total"].sum(),
            "ds": g["device_self"].sum(),
            "ops": g["ops_total"].sum(),
        }
    )
    nodes: dict[tuple, dict] = {}
    order = sorted(agg.index, key=lambda p: (len(p), agg.at[p, "first"], p))
    roots: list[tuple] = []
    kids: dict[tuple, list] = {}
    hidden = sum(1 for p in order if len(p) > MAX_DEPTH)
    order = [p for p in order if len(p) <= MAX_DEPTH]
    for p in order:
        r = agg.loc[[p]].iloc[0]
        occ = int(r["occ"])
        nodes[p] = {
            "name": p[-1],
            "path": "/".join(p),
            "occurrences": occ,
            "operators": int(r["ops"]),
            "host_total_us": _r(r["ht"]),
            "host_self_us": _r(r["hs"]),
            "device_total_us": _r(r["dt"]),
            "device_self_us": _r(r["ds"]),
            "avg_host_us": _r(r["ht"] / occ),
            "children": [],
        }
        (kids.setdefault(p[:-1], []) if len(p) > 1 else roots).append(p)
    for parent_path, children in kids.items():
        children.sort(key=lambda c: (agg.at[c, "first"], c))
        nodes[parent_path]["children"] = [nodes[c] for c in children]
    roots.sort(key=lambda c: (agg.at[c, "first"], c))
    out = {"source": source, "tree": [nodes[p] for p in roots]}
    if hidden:
        out["note"] = f"{hidden} modules nested deeper than {MAX_DEPTH} levels are not shown"
    if notes:
        out["notes"] = notes
    return out
