"""The module / annotation hierarchy of a trace (stage `module_nodes`): each node's nearest enclosing module or
annotation (`nearest_flagged`) and the module nodes with host and device time (node_stats'); the Modules view
renders it, the op phases stage finds each op's module with `nearest_flagged`."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from profiler_core.analysis.stages.classify import STEP_PREFIX
from profiler_core.analysis.stages.node_stats import node_stats
from profiler_core.analysis.stages.registry import stage


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
