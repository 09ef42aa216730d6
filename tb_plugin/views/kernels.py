"""Kernels view: GPU kernels grouped by name (or name and launching operator, optionally split by launch
configuration as torch-tb-profiler's "kernel properties + op name" table) with calls, total/mean/min/max
duration, duration-weighted mean blocks per SM and est. achieved occupancy, Tensor Core use (DESIGN.md §4),
and the launch configuration: grid, block, registers per thread, shared memory (bytes per block, static +
dynamic as Kineto records it; `static_shared_memory`/`dynamic_shared_memory` too where the trace splits it,
as our CUPTI converter does) and the theoretical occupancy it allows (duration-weighted over the group).
A field the group's launches do not share is None; `launch_configs` counts the distinct configurations."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from . import common
from .common import category_mask, ns_to_us
from ..errors import BadRequest

GROUP_BY = ("name", "name_op", "name_op_config")
CONFIG = ("grid", "block", "registers_per_thread", "shared_memory")
SPLIT = ("static_shared_memory", "dynamic_shared_memory")  # our converter's args; Kineto writes no split
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
    props = common.device_properties(t)
    dims = {c: k[c].to_numpy(np.int64) for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")}
    regs, smem = k["registers"].to_numpy(np.int64), k["shared_memory"].to_numpy(np.int64)
    amd = launches["amd"].to_numpy(bool) if len(rows) else np.zeros(0, dtype=bool)
    theo = _theoretical(props, k["device"].to_numpy(np.int64),
                        dims["block_x"] * np.maximum(dims["block_y"], 1) * np.maximum(dims["block_z"], 1), regs, smem)
    return pd.DataFrame({
        "name": k["name"].astype(str).to_numpy(), "op": op_name.astype(str),
        "dur": k["dur"].to_numpy(np.float64),
        "bps": launches["blocks_per_sm"].to_numpy(np.float64),
        "occ": launches["occupancy"].to_numpy(np.float64),
        "grid": _dims(dims["grid_x"], dims["grid_y"], dims["grid_z"]),
        "block": _dims(dims["block_x"], dims["block_y"], dims["block_z"]),
        "registers_per_thread": regs, "shared_memory": smem,
        **{c: k[c].to_numpy(np.int64) for c in SPLIT},
        "theo": np.where(amd, np.nan, theo),  # NVIDIA's calculator never applies to AMD devices
    })


def _dims(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """'[x, y, z]' per kernel as torch-tb-profiler prints it; '' when the trace has no launch size."""
    return np.array(["" if a <= 0 else f"[{a}, {b}, {c}]" for a, b, c in zip(x.tolist(), y.tolist(), z.tolist())],
                    dtype=object)


def _theoretical(props: dict[int, dict], device: np.ndarray, block_size: np.ndarray, regs: np.ndarray,
                 smem: np.ndarray) -> np.ndarray:
    """The occupancy (0..1) the launch configuration allows on its device: resident warps / the SM's
    maximum, by CUDA's occupancy calculator; NaN when the device or the configuration is unknown."""
    from profiler_core.cuda.occupancy import UnknownDevice, active_blocks_per_sm

    out = np.full(len(device), np.nan)
    memo: dict[tuple, float] = {}
    for i, key in enumerate(zip(device.tolist(), block_size.tolist(), regs.tolist(), smem.tolist())):
        if key not in memo:
            dev, bs, r, sm = key
            p = props.get(int(dev))
            val = np.nan
            if p and bs > 0 and r >= 0 and sm >= 0:
                try:
                    warp = int(p.get("warpSize", 32))
                    res = active_blocks_per_sm(p, bs, r, sm)
                    val = min(1.0, res.active_blocks * (-(-bs // warp)) * warp / int(p["maxThreadsPerMultiprocessor"]))
                except (UnknownDevice, ValueError, KeyError, TypeError, ZeroDivisionError):
                    val = np.nan
            memo[key] = val
        out[i] = memo[key]
    return out


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
    keys = ["name"] + (["op"] if group_by != "name" else []) + (list(CONFIG) if group_by == "name_op_config" else [])
    if len(k) == 0:
        return {"rows": []}
    k["config"] = k["grid"] + "|" + k["block"] + "|" + k["registers_per_thread"].astype(str) + "|" + k["shared_memory"].astype(str)
    split = bool((k[list(SPLIT)] >= 0).to_numpy().any())
    if split:
        k["config"] += "|" + k[SPLIT[0]].astype(str) + "|" + k[SPLIT[1]].astype(str)
    g = k.groupby(keys, sort=False)
    agg = g["dur"].agg(calls="size", total="sum", min="min", max="max")
    key_series = [k[c] for c in keys]
    agg["bps"] = _weighted(k["bps"].where(k["bps"] > 0), k["dur"], key_series)
    agg["occ"] = _weighted(k["occ"].where(np.isfinite(k["occ"]) & (k["occ"] >= 0)), k["dur"], key_series)
    agg["theo"] = _weighted(k["theo"], k["dur"], key_series)
    agg["configs"] = g["config"].nunique()
    if group_by != "name_op_config":
        for c in CONFIG:  # each field shown when the whole group shares it
            agg[c] = g[c].first().where(g[c].nunique() == 1, other=pd.NA)
    for c in SPLIT if split else ():  # the split may vary even within one (Kineto) launch configuration
        agg[c] = g[c].first().where(g[c].nunique() == 1, other=pd.NA)
    agg = agg.reset_index()
    agg["tc"] = common._per_value(agg["name"], common.uses_tensor_cores)
    agg = agg.sort_values(["total"] + keys, ascending=[False] + [True] * len(keys), kind="stable")
    rows = []
    for r in agg.itertuples(index=False):
        row: dict[str, Any] = {"name": r.name}
        if group_by != "name":
            row["op"] = r.op
        row.update(calls=int(r.calls), total_us=ns_to_us(r.total), mean_us=ns_to_us(r.total / r.calls),
                   min_us=ns_to_us(r.min), max_us=ns_to_us(r.max),
                   blocks_per_sm=None if pd.isna(r.bps) else round(float(r.bps), 4),
                   achieved_occupancy=None if pd.isna(r.occ) else round(float(r.occ) / 100.0, 6),
                   tensor_cores=bool(r.tc))
        known = lambda v: v is not None and not pd.isna(v) and v != "" and not (isinstance(v, (int, np.integer)) and v < 0)  # noqa: E731
        row.update(grid=r.grid if known(r.grid) else None, block=r.block if known(r.block) else None,
                   registers_per_thread=int(r.registers_per_thread) if known(r.registers_per_thread) else None,
                   shared_memory=int(r.shared_memory) if known(r.shared_memory) else None,
                   **{c: int(getattr(r, c)) if known(getattr(r, c)) else None for c in SPLIT if split},
                   theoretical_occupancy=None if pd.isna(r.theo) else round(float(r.theo), 6),
                   launch_configs=int(r.configs))
        rows.append(row)
    return {"rows": rows}
