"""Kernels view: GPU kernels grouped by name (or name and launching operator) with calls, total/mean/min/max
duration, duration-weighted mean blocks per SM and est. achieved occupancy, and Tensor Core use (DESIGN.md §4)."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from . import common
from .common import category_mask, ns_to_us
from ..errors import BadRequest

GROUP_BY = ("name", "name_op")
NO_OP = "N/A"  # kernels whose launch could not be tied to an operator


def _kernel_frame(t: Any) -> pd.DataFrame:
    ev = t.events
    kmask = category_mask(ev, ("kernel",))
    rows = np.flatnonzero(kmask)
    links = common.link_gpu_to_ops(t)
    op_of = np.full(len(ev), -1, np.int64)
    op_of[links["row"].to_numpy()] = links["op"].to_numpy()
    op = op_of[rows]
    names = ev["name"].to_numpy()
    op_name = np.where(op >= 0, names[np.maximum(op, 0)].astype(object), NO_OP) if len(rows) else np.array([])
    k = ev.iloc[rows]
    launches = common.launch_stats(t)  # ROCm grids in blocks; AMD occupancy from CDNA limits, never NVIDIA's
    return pd.DataFrame({
        "name": k["name"].astype(str).to_numpy(), "op": op_name.astype(str),
        "dur": k["dur"].to_numpy(np.float64),
        "bps": launches["blocks_per_sm"].to_numpy(np.float64),
        "occ": launches["occupancy"].to_numpy(np.float64),
    })


def _weighted(values: pd.Series, weights: pd.Series, keys: list[pd.Series]) -> pd.Series:
    """Duration-weighted mean per group over the rows that have a value (NaN -> no value)."""
    has = values.notna()
    frame = pd.DataFrame({"vw": np.where(has, values.fillna(0) * weights, 0.0),
                          "w": np.where(has, weights, 0.0), "n": has.astype(np.int64)})
    g = frame.groupby(keys, sort=False).sum()
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = g["vw"] / g["w"]
    return mean.where(g["n"] > 0)


def kernels(t: Any, group_by: str = "name") -> dict:
    """Kernel table rows grouped by `name` or `name_op`, sorted by total time descending, then name (and op)."""
    if group_by not in GROUP_BY:
        raise BadRequest(f"group_by must be one of {', '.join(GROUP_BY)}, not {group_by!r}")
    k = _kernel_frame(t)
    keys = ["name"] + (["op"] if group_by == "name_op" else [])
    if len(k) == 0:
        return {"rows": []}
    g = k.groupby(keys, sort=False)
    agg = g["dur"].agg(calls="size", total="sum", min="min", max="max")
    key_series = [k[c] for c in keys]
    agg["bps"] = _weighted(k["bps"].where(k["bps"] > 0), k["dur"], key_series)
    agg["occ"] = _weighted(k["occ"].where(np.isfinite(k["occ"]) & (k["occ"] >= 0)), k["dur"], key_series)
    agg = agg.reset_index()
    agg["tc"] = common._per_value(agg["name"], common.uses_tensor_cores)
    agg = agg.sort_values(["total"] + keys, ascending=[False] + [True] * len(keys), kind="stable")
    rows = []
    for r in agg.itertuples(index=False):
        row: dict[str, Any] = {"name": r.name}
        if group_by == "name_op":
            row["op"] = r.op
        row.update(calls=int(r.calls), total_us=ns_to_us(r.total), mean_us=ns_to_us(r.total / r.calls),
                   min_us=ns_to_us(r.min), max_us=ns_to_us(r.max),
                   blocks_per_sm=None if pd.isna(r.bps) else round(float(r.bps), 4),
                   achieved_occupancy=None if pd.isna(r.occ) else round(float(r.occ) / 100.0, 6),
                   tensor_cores=bool(r.tc))
        rows.append(row)
    return {"rows": rows}
