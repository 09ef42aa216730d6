"""Diff view: two profiles (base, exp) compared step by step, phase by phase and operator by operator.

diff(base, exp) ->
  {"base": {"steps", "host_us", "device_us", "calls"}, "exp": {same},      # totals over steps
   "steps": [{"base_step": "2", "exp_step": "7",                          # i-th step vs i-th step
              "base": {"host_us", "device_us", "calls"}, "exp": {...}, "delta": {...},
              "phases": [phase row...]}],
   "phases": [phase row...],              # the same, summed over all aligned steps
   "ops": [op row...],                    # operator-level deltas over all steps
   "notes": [text...]}
  phase row = {"phase": "forward", "base": {"host_us", "device_us", "calls"} | None,
               "exp": {...} | None, "delta": {...}, "ops": [op row...]}   (None: absent on that side)
  op row    = {"name", "base": {"calls", "host_self_us", "host_total_us", "device_self_us",
               "device_total_us"}, "exp": {...}, "delta": {...}}          (absent side: zeros)
delta = exp - base. Phases are the top-level work of a step in execution order: "data loading"
(enumerate(DataLoader)...), "forward", "backward" (autograd nodes, and work on threads that run
autograd), "optimizer" (Optimizer.*), any other top-level user annotation under its own name, and
"other" (plain ops after backward). Phases of one step are aligned by name in order (difflib).
Op rows are sorted by |delta host_total_us| descending, then name; phase op lists keep the top 50.
"""
from __future__ import annotations

import difflib
from typing import Any

import numpy as np
import pandas as pd

from tb_plugin.views import common
from tb_plugin.views.modules import _nearest
from tb_plugin.views.timeline import BadRequest

PHASE_OPS_LIMIT = 50
_OP_KEYS = ("calls", "host_self_us", "host_total_us", "device_self_us", "device_total_us")
_SUM_KEYS = ("host_us", "device_us", "calls")


def _is_backward(name: str) -> bool:
    return ("Backward" in name or name.startswith("autograd::engine::evaluate_function")
            or name.startswith("torch::autograd::"))


def _phase_of_top(name: str, cat: str) -> str:
    if common.is_dataloader(name):
        return "data loading"
    if name.startswith("Optimizer."):
        return "optimizer"
    if _is_backward(name):
        return "backward"
    if cat == "user_annotation":
        return name
    return ""   # plain op: forward or other, decided by position


def op_nodes(t: Any) -> pd.DataFrame:
    """Per op occurrence inside a step (cached): name, step index, phase, start, host/device times."""
    return common.derived(t, "diff_op_nodes", lambda: _op_nodes(t))


def _op_nodes(t: Any) -> pd.DataFrame:
    cols = ("name", "step", "phase", "start", "host_total", "host_self", "device_self", "device_total", "top")
    ev = t.events
    tree = common.op_tree(t) if len(ev) else None
    if tree is None or not len(tree):
        return pd.DataFrame({c: [] for c in cols})
    n = len(tree)
    rows = tree["row"].to_numpy()
    pos_of = np.full(len(ev), -1, np.int64)
    pos_of[rows] = np.arange(n)
    praw = tree["parent"].to_numpy()
    parent = np.where(praw >= 0, pos_of[np.maximum(praw, 0)], -1)
    is_op = tree["is_op"].to_numpy() & (tree["merged_into"].to_numpy() < 0)
    names = ev["name"].astype(str).to_numpy()[rows]
    cats = ev["cat"].astype(str).to_numpy()[rows]
    is_step = is_op & np.char.startswith(names.astype(str), common.STEP_PREFIX)
    pop = _nearest(parent, is_op, parent)           # nearest op ancestor (modules are transparent)
    start = tree["start"].to_numpy()
    end = tree["end"].to_numpy()
    dur = (end - start).astype(np.float64)
    # top-level node: the ancestor right under a step node (or the thread root)
    top = np.arange(n)
    for _ in range(n + 1):
        p = pop[top]
        move = (p >= 0) & ~is_step[np.maximum(p, 0)]
        if not move.any():
            break
        top = np.where(move, p, top)
    # host self and device times
    child = is_op & (pop >= 0)
    child_sum = np.bincount(pop[child], weights=dur[child], minlength=n)
    host_self = dur - child_sum
    dev_self = np.zeros(n)
    links = common.link_gpu_to_ops(t)
    if len(links):
        op = links["op"].to_numpy()
        gp = np.where(op >= 0, pos_of[np.maximum(op, 0)], -1)
        gp = np.where(gp >= 0, np.where(is_op[np.maximum(gp, 0)], gp, pop[np.maximum(gp, 0)]), -1)
        ok = gp >= 0
        dev_self = np.bincount(gp[ok], weights=ev["dur"].to_numpy(np.float64)[links["row"].to_numpy()][ok], minlength=n)
    depth = np.zeros(n, np.int64)
    cur = pop.copy()
    for _ in range(n + 1):
        ok = cur >= 0
        if not ok.any():
            break
        depth[ok] += 1
        cur[ok] = pop[cur[ok]]
    dev_total = dev_self.copy()
    for d in range(int(depth.max()), 0, -1):
        sel = np.flatnonzero((depth == d) & is_op & (pop >= 0))
        np.add.at(dev_total, pop[sel], dev_total[sel])
    # steps by time
    st = common.steps(t)
    s0, s1 = st["start"].to_numpy(np.int64), st["end"].to_numpy(np.int64)
    k = np.searchsorted(s0, start, side="right") - 1
    in_step = (k >= 0) & (start <= s1[np.maximum(k, 0)])
    keep = np.flatnonzero(is_op & ~is_step & in_step)
    # phases: by top node name; threads running autograd put their plain roots in backward
    grp = tree["group"].to_numpy()
    bw_group = np.zeros(int(grp.max()) + 1, dtype=bool)
    bw_top = common.name_mask(ev, _is_backward)[rows]
    root_bw = bw_top & (pop < 0)
    bw_group[grp[root_bw]] = True
    top_phase = {}
    for j in np.unique(top[keep]).tolist():
        ph = _phase_of_top(names[j], cats[j])
        if not ph and pop[j] < 0 and bw_group[grp[j]]:
            ph = "backward"
        top_phase[j] = ph
    first_bw: dict[int, int] = {}
    for j, ph in top_phase.items():
        if ph == "backward" and in_step[j]:
            kk = int(k[j])
            first_bw[kk] = min(first_bw.get(kk, start[j]), start[j])
    for j, ph in list(top_phase.items()):
        if not ph:
            fb = first_bw.get(int(k[j]))
            top_phase[j] = "forward" if fb is None or start[j] < fb else "other"
    phase = np.array([top_phase[j] for j in top[keep].tolist()], dtype=object)
    return pd.DataFrame({"name": names[keep], "step": k[keep], "phase": phase, "start": start[keep],
                         "host_total": dur[keep], "host_self": host_self[keep], "device_self": dev_self[keep],
                         "device_total": dev_total[keep], "top": top[keep] == keep})


def _r(ns: float) -> float:
    return round(float(ns) / 1e3, 3)


def _sums(df: pd.DataFrame, host_ns: float | None = None) -> dict:
    host = float(df.loc[df["top"], "host_total"].sum()) if host_ns is None else host_ns
    return {"host_us": _r(host), "device_us": _r(df["device_self"].sum()), "calls": int(len(df))}


def _delta(a: dict | None, b: dict | None, keys: tuple) -> dict:
    out = {}
    for key in keys:
        va = (a or {}).get(key)
        vb = (b or {}).get(key)
        va = 0 if va is None else va
        vb = 0 if vb is None else vb
        out[key] = round(vb - va, 3) if isinstance(va, float) or isinstance(vb, float) else vb - va
    return out


def _op_table(df: pd.DataFrame) -> pd.DataFrame:
    if not len(df):
        return pd.DataFrame(columns=list(_OP_KEYS))
    g = df.groupby("name", sort=True)
    return pd.DataFrame({"calls": g.size(), "host_self_us": g["host_self"].sum() / 1e3,
                         "host_total_us": g["host_total"].sum() / 1e3, "device_self_us": g["device_self"].sum() / 1e3,
                         "device_total_us": g["device_total"].sum() / 1e3})


def _op_rows(a: pd.DataFrame, b: pd.DataFrame, limit: int | None = None) -> list:
    ta, tb = _op_table(a), _op_table(b)
    j = ta.merge(tb, left_index=True, right_index=True, how="outer", suffixes=("_a", "_b")).fillna(0.0)
    if not len(j):
        return []
    j["_d"] = (j["host_total_us_b"] - j["host_total_us_a"]).abs().round(3)
    j = j.rename_axis("name").reset_index().sort_values(["_d", "name"], ascending=[False, True], kind="stable")
    if limit:
        j = j.head(limit)
    rows = []
    for rec in j.to_dict("records"):
        sa = {k: int(rec[k + "_a"]) if k == "calls" else round(float(rec[k + "_a"]), 3) for k in _OP_KEYS}
        sb = {k: int(rec[k + "_b"]) if k == "calls" else round(float(rec[k + "_b"]), 3) for k in _OP_KEYS}
        rows.append({"name": str(rec["name"]), "base": sa, "exp": sb, "delta": _delta(sa, sb, _OP_KEYS)})
    return rows


def _phase_rows(a: pd.DataFrame, b: pd.DataFrame) -> list:
    def order(df: pd.DataFrame) -> list:
        if not len(df):
            return []
        first = df.groupby("phase", sort=False)["start"].min().sort_values(kind="stable")
        return list(first.index)
    pa, pb = order(a), order(b)
    sm = difflib.SequenceMatcher(a=pa, b=pb, autojunk=False)
    pairs: list[tuple] = []
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            pairs += [(pa[i], pb[j]) for i, j in zip(range(i1, i2), range(j1, j2))]
        else:
            pairs += [(pa[i], None) for i in range(i1, i2)] + [(None, pb[j]) for j in range(j1, j2)]
    rows = []
    for x, y in pairs:
        da = a[a["phase"] == x] if x is not None else a.iloc[0:0]
        db = b[b["phase"] == y] if y is not None else b.iloc[0:0]
        sa = _sums(da) if x is not None else None
        sb = _sums(db) if y is not None else None
        rows.append({"phase": x if x is not None else y, "base": sa, "exp": sb,
                     "delta": _delta(sa, sb, _SUM_KEYS), "ops": _op_rows(da, db, PHASE_OPS_LIMIT)})
    return rows


def diff(base: Any, exp: Any) -> dict:
    """Compare two profiles: aligned steps and phases with host/device time and calls, op deltas."""
    if base is None or exp is None:
        raise BadRequest("diff needs two profiles")
    na, nb = op_nodes(base), op_nodes(exp)
    sa, sb = common.steps(base), common.steps(exp)
    notes = []
    if len(sa) != len(sb):
        notes.append(f"base has {len(sa)} steps and exp has {len(sb)}; the first "
                     f"{min(len(sa), len(sb))} are compared step by step")
    steps_out = []
    for i in range(min(len(sa), len(sb))):
        da, db = na[na["step"] == i], nb[nb["step"] == i]
        ha = float(sa["end"].iat[i] - sa["start"].iat[i])
        hb = float(sb["end"].iat[i] - sb["start"].iat[i])
        x, y = _sums(da, ha), _sums(db, hb)
        steps_out.append({"base_step": str(sa["step"].iat[i]), "exp_step": str(sb["step"].iat[i]),
                          "base": x, "exp": y, "delta": _delta(x, y, _SUM_KEYS), "phases": _phase_rows(da, db)})
    m = min(len(sa), len(sb))
    ca, cb = na[na["step"] < m], nb[nb["step"] < m]

    def totals(st: pd.DataFrame, nodes: pd.DataFrame) -> dict:
        host = float((st["end"] - st["start"]).sum())
        return {"steps": int(len(st)), **_sums(nodes, host)}
    return {"base": totals(sa, na), "exp": totals(sb, nb), "steps": steps_out,
            "phases": _phase_rows(ca, cb), "ops": _op_rows(ca, cb), "notes": notes}
