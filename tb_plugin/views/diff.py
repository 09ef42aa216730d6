"""Diff view: two profiles (base, exp) compared step by step, phase by phase and operator by operator.

diff(base, exp) ->
  {"base": {"steps", "host_us", "device_us", "calls"}, "exp": {same},  # steps: all; rest: compared steps
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
"other" (plain ops after backward). Phases of one step are aligned by name, whatever their order on
either side (base's order; a phase only in exp follows its predecessor there).
Op rows are sorted by |delta host_total_us| descending, then name; phase op lists keep the top 50
(20 in the per-step phases).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from profiler_core.analysis.stages.steps import steps
from profiler_core.analysis.tables.op_phases import op_nodes
from tb_plugin.errors import BadRequest

PHASE_OPS_LIMIT = 50  # ops per phase over all steps
STEP_PHASE_OPS_LIMIT = 20  # ops per phase of one step
_OP_KEYS = ("calls", "host_self_us", "host_total_us", "device_self_us", "device_total_us")
_SUM_KEYS = ("host_us", "device_us", "calls")


def _r(ns: float) -> float:
    return round(float(ns) / 1e3, 3)


class _Agg:
    """One profile's op nodes aggregated by (step, phase, name) and (step, phase), with names as text."""

    def __init__(self, nodes: pd.DataFrame, n_steps: int) -> None:
        names = nodes.attrs.get("names", np.zeros(0, dtype=object))
        phases = nodes.attrs.get("phases", [])
        d = nodes[nodes["step"] < n_steps].assign(host_top=lambda x: x["host_total"].where(x["top"], 0.0))
        g = d.groupby(["step", "phase", "name"], sort=False)
        ops = pd.DataFrame(
            {
                "calls": g.size(),
                "hs": g["host_self"].sum(),
                "ht": g["host_total"].sum(),
                "ds": g["device_self"].sum(),
                "dt": g["device_total"].sum(),
            }
        ).reset_index()
        ops["name"] = names[ops["name"].to_numpy(np.int64)] if len(ops) else ops["name"]
        ops["phase"] = [phases[i] for i in ops["phase"].tolist()]
        self.ops = ops
        g2 = d.groupby(["step", "phase"], sort=False)
        ph = pd.DataFrame(
            {
                "host": g2["host_top"].sum(),
                "device": g2["device_self"].sum(),
                "calls": g2.size(),
                "first": g2["start"].min(),
            }
        ).reset_index()
        ph["phase"] = [phases[i] for i in ph["phase"].tolist()]
        self.phases = ph
        self.step_device = d.groupby("step")["device_self"].sum().to_dict()
        self.step_calls = d.groupby("step").size().to_dict()
        self.ops_by: dict = {}  # (step, phase) -> name -> stats; names are unique within a group
        cols = [ops[c].tolist() for c in ("step", "phase", "name", "calls", "hs", "ht", "ds", "dt")]
        for st, phs, nm, c, hs, ht, ds, dt in zip(*cols):
            self.ops_by.setdefault((int(st), phs), {})[str(nm)] = {
                "calls": int(c),
                "host_self_us": _r(hs),
                "host_total_us": _r(ht),
                "device_self_us": _r(ds),
                "device_total_us": _r(dt),
            }
        ph = ph.sort_values(["step", "first"], kind="stable")
        bounds = np.flatnonzero(np.diff(ph["step"].to_numpy(), prepend=-1, append=-2))
        self.phases_by = {int(ph["step"].iat[a]): ph.iloc[a:b] for a, b in zip(bounds[:-1], bounds[1:])}

    def phase_table(self) -> pd.DataFrame:
        """Phases summed over steps, in order of first appearance."""
        g = self.phases.groupby("phase", sort=False)
        out = pd.DataFrame(
            {"host": g["host"].sum(), "device": g["device"].sum(), "calls": g["calls"].sum(), "first": g["first"].min()}
        ).reset_index()
        return out.sort_values("first", kind="stable")


def _table(ops: pd.DataFrame) -> dict:
    """name -> op stats (µs) from aggregated rows (several steps/phases are summed)."""
    if not len(ops):
        return {}
    g = ops.groupby("name", sort=False)[["calls", "hs", "ht", "ds", "dt"]].sum()
    return {
        str(nm): {
            "calls": int(r[0]),
            "host_self_us": _r(r[1]),
            "host_total_us": _r(r[2]),
            "device_self_us": _r(r[3]),
            "device_total_us": _r(r[4]),
        }
        for nm, r in zip(g.index.tolist(), g.to_numpy().tolist())
    }


_ZERO_OP = {"calls": 0, "host_self_us": 0.0, "host_total_us": 0.0, "device_self_us": 0.0, "device_total_us": 0.0}


def _delta(a: dict | None, b: dict | None, keys: tuple) -> dict:
    out = {}
    for key in keys:
        va = (a or {}).get(key)
        vb = (b or {}).get(key)
        va = 0 if va is None else va
        vb = 0 if vb is None else vb
        out[key] = round(vb - va, 3) if isinstance(va, float) or isinstance(vb, float) else vb - va
    return out


def _op_rows(ta: dict, tb: dict, limit: int | None = None) -> list:
    rows = []
    for nm in set(ta) | set(tb):
        sa, sb = ta.get(nm, _ZERO_OP), tb.get(nm, _ZERO_OP)
        rows.append({"name": nm, "base": dict(sa), "exp": dict(sb), "delta": _delta(sa, sb, _OP_KEYS)})
    rows.sort(key=lambda r: (-abs(r["delta"]["host_total_us"]), r["name"]))
    return rows[:limit] if limit else rows


def _sum_of(rec: Any) -> dict:
    return {"host_us": _r(rec["host"]), "device_us": _r(rec["device"]), "calls": int(rec["calls"])}


def align_by_name(la: list, lb: list) -> list[tuple]:
    """Pairs (base name | None, exp name | None) of two lists of distinct names: a name on both sides
    is one pair, wherever it stands; in base's order, a name only in exp right after its exp predecessor."""
    inb, ina = set(lb), set(la)
    pairs: list[tuple] = [(x, x if x in inb else None) for x in la]
    for j, y in enumerate(lb):
        if y in ina:
            continue
        pos = 0
        if j:
            prev = lb[j - 1]
            pos = next(k for k, p in enumerate(pairs) if p[1] == prev) + 1
        pairs.insert(pos, (None, y))
    return pairs


def _phase_rows(pa: pd.DataFrame, pb: pd.DataFrame, ops_a: Any, ops_b: Any, limit: int = PHASE_OPS_LIMIT) -> list:
    """Phases of both sides aligned by name; ops_x(phase) gives that side's op table."""
    la, lb = pa["phase"].tolist(), pb["phase"].tolist()
    ra = dict(zip(la, pa.to_dict("records")))
    rb = dict(zip(lb, pb.to_dict("records")))
    rows = []
    pairs = align_by_name(la, lb)
    for x, y in pairs:
        sa = _sum_of(ra[x]) if x is not None else None
        sb = _sum_of(rb[y]) if y is not None else None
        rows.append(
            {
                "phase": x if x is not None else y,
                "base": sa,
                "exp": sb,
                "delta": _delta(sa, sb, _SUM_KEYS),
                "ops": _op_rows(ops_a(x) if x is not None else {}, ops_b(y) if y is not None else {}, limit),
            }
        )
    return rows


def diff(base: Any, exp: Any) -> dict:
    """Compare two profiles: aligned steps and phases with host/device time and calls, op deltas."""
    if base is None or exp is None:
        raise BadRequest("diff needs two profiles")
    sa, sb = steps(base), steps(exp)
    m = min(len(sa), len(sb))
    notes = []
    if len(sa) != len(sb):
        notes.append(f"base has {len(sa)} steps and exp has {len(sb)}; the first {m} are compared step by step")
    A, B = _Agg(op_nodes(base), m), _Agg(op_nodes(exp), m)
    empty = pd.DataFrame({"phase": [], "host": [], "device": [], "calls": [], "first": []})
    steps_out = []
    for i in range(m):
        x = {
            "host_us": _r(sa["end"].iat[i] - sa["start"].iat[i]),
            "device_us": _r(A.step_device.get(i, 0.0)),
            "calls": int(A.step_calls.get(i, 0)),
        }
        y = {
            "host_us": _r(sb["end"].iat[i] - sb["start"].iat[i]),
            "device_us": _r(B.step_device.get(i, 0.0)),
            "calls": int(B.step_calls.get(i, 0)),
        }
        phases = _phase_rows(
            A.phases_by.get(i, empty),
            B.phases_by.get(i, empty),
            lambda p, i=i: A.ops_by.get((i, p), {}),
            lambda p, i=i: B.ops_by.get((i, p), {}),
            STEP_PHASE_OPS_LIMIT,
        )
        steps_out.append(
            {
                "base_step": str(sa["step"].iat[i]),
                "exp_step": str(sb["step"].iat[i]),
                "base": x,
                "exp": y,
                "delta": _delta(x, y, _SUM_KEYS),
                "phases": phases,
            }
        )

    def totals(st: pd.DataFrame, agg: _Agg) -> dict:
        return {
            "steps": int(len(st)),
            "host_us": _r((st["end"] - st["start"]).iloc[:m].sum()),
            "device_us": _r(sum(agg.step_device.values())),
            "calls": int(sum(agg.step_calls.values())),
        }

    phases_all = _phase_rows(
        A.phase_table(),
        B.phase_table(),
        lambda p: _table(A.ops[A.ops["phase"] == p]),
        lambda p: _table(B.ops[B.ops["phase"] == p]),
    )
    return {
        "base": totals(sa, A),
        "exp": totals(sb, B),
        "steps": steps_out,
        "phases": phases_all,
        "ops": _op_rows(_table(A.ops), _table(B.ops)),
        "notes": notes,
    }
