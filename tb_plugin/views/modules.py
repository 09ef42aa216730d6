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

import numpy as np
import pandas as pd

from profiler_core.analysis.stages.classify import STEP_PREFIX
from profiler_core.analysis.stages.node_stats import node_stats
from profiler_core.analysis.stages.registry import stage
from tb_plugin.views.graph_notes import graph_replay_notes


def nearest_flagged(parent: np.ndarray, is_node: np.ndarray, start: np.ndarray) -> np.ndarray:
    """For each tree position, the nearest position at or above `start` (its own or an ancestor's)
    flagged in `is_node`, -1 if none. `start` gives the first candidate for each position."""
    anc = start.copy()
    for _ in range(len(parent) + 1):
        need = (anc >= 0) & ~is_node[np.maximum(anc, 0)]
        if not need.any():
            break
        anc[need] = parent[anc[need]]
    return anc


@stage(node_stats)
def module_nodes(t: Any) -> tuple[str | None, pd.DataFrame]:
    """The hierarchy nodes with their per-occurrence numbers (cached): columns path (tuple), start,
    host_total, host_self, device_self, device_total, ops_self, ops_total."""
    return _module_nodes(t)


def _module_nodes(t: Any) -> tuple[str | None, pd.DataFrame]:
    """Module nodes over `node_stats`: host and device totals are the node's own; host self excludes only child
    module nodes; device self is the device self time of the nodes whose nearest module this is."""
    ev = t.events
    cols = ("path", "start", "host_total", "host_self", "device_self", "device_total", "ops_self", "ops_total")
    empty = pd.DataFrame({c: [] for c in cols})
    if not len(ev):
        return None, empty
    st = node_stats(t)
    n = len(st)
    if not n:
        return None, empty
    rows = st["row"].to_numpy()
    parent = st["parent"].to_numpy().astype(np.int64)
    names = ev["name"].astype(str).to_numpy()[rows]
    cat = ev["cat"].astype(str).to_numpy()[rows]
    is_op_node = st["is_op"].to_numpy()
    is_mod = ~is_op_node
    source = "modules"
    if not is_mod.any():
        is_mod = (cat == "user_annotation") & ~np.char.startswith(names.astype(str), STEP_PREFIX)
        source = "annotations"
        if not is_mod.any():
            return None, empty
    # nearest hierarchy node strictly above each node, and at-or-above
    up = nearest_flagged(parent, is_mod, parent)
    at = np.where(is_mod, np.arange(n), up)
    mods = np.flatnonzero(is_mod)
    mod_parent = up[mods]
    # paths (python loop over hierarchy nodes only, in tree order: parents come first)
    path_of: dict[int, tuple] = {}
    for m, p in zip(mods.tolist(), mod_parent.tolist()):
        path_of[m] = (path_of[p] if p >= 0 else ()) + (names[m],)
    k = len(mods)
    mi = np.full(n, -1, np.int64)
    mi[mods] = np.arange(k)
    host_total = st["host_total"].to_numpy()[mods]
    child_sum = np.bincount(mi[mod_parent[mod_parent >= 0]], weights=host_total[mod_parent >= 0], minlength=k)
    host_self = host_total - child_sum
    # CPU ops and device self time per module: those of the nodes whose nearest module it is
    inside = np.flatnonzero(at >= 0)
    ops = inside[cat[inside] == "cpu_op"]
    ops_self = np.bincount(mi[at[ops]], minlength=k).astype(np.float64)
    dev_self = np.bincount(mi[at[inside]], weights=st["device_self"].to_numpy()[inside], minlength=k)
    # ops per subtree: children into parents, deepest first (the device total is node_stats' own)
    depth = np.zeros(k, np.int64)
    for j, p in enumerate(mod_parent.tolist()):
        depth[j] = depth[mi[p]] + 1 if p >= 0 else 0
    ops_total = ops_self.copy()
    pm = np.where(mod_parent >= 0, mi[np.maximum(mod_parent, 0)], -1)
    for d in range(int(depth.max()) if k else 0, 0, -1):
        sel = np.flatnonzero(depth == d)
        np.add.at(ops_total, pm[sel], ops_total[sel])
    df = pd.DataFrame(
        {
            "path": [path_of[m] for m in mods.tolist()],
            "start": ev["ts"].to_numpy(np.int64)[rows[mods]],
            "host_total": host_total,
            "host_self": host_self,
            "device_self": dev_self,
            "device_total": st["device_total"].to_numpy()[mods],
            "ops_self": ops_self,
            "ops_total": ops_total,
        }
    )
    return source, df


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
