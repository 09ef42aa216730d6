"""Kernels view: GPU kernels grouped by name (or name and launching operator, optionally split by launch
configuration as torch-tb-profiler's "kernel properties + op name" table) with calls, total/mean/min/max
duration, duration-weighted mean blocks per SM and est. achieved occupancy, Tensor Core use (docs/http-api.md),
and the launch configuration: grid, block, registers per thread, shared memory (bytes per block, static +
dynamic as Kineto records it; `static_shared_memory`/`dynamic_shared_memory` too where the trace splits it,
as our CUPTI converter does) and the theoretical occupancy it allows (duration-weighted over the group).
A field the group's launches do not share is None; `launch_configs` counts the distinct configurations."""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import pandas as pd

from profiler_core.analysis import groupings
from profiler_core.analysis.stages.columns import category_mask, codes_and_texts, name_mask, ns_to_us
from profiler_core.analysis.stages.gpu_links import link_gpu_to_ops
from profiler_core.analysis.stages.launch_stats import device_properties, launch_stats
from profiler_core.analysis.tables.graph_notes import graph_replay_notes
from profiler_core.analysis.tensor_cores import uses_tensor_cores

GROUP_BY = groupings.KERNELS
CONFIG = ("grid", "block", "registers_per_thread", "shared_memory")
SPLIT = ("static_shared_memory", "dynamic_shared_memory")  # our converter's args; Kineto writes no split
NO_OP = "N/A"  # kernels whose launch could not be tied to an operator


class _All:
    """Every group (name_op_config: the launch fields are keys, shared by the group)."""

    def __getitem__(self, gi: int) -> bool:
        return True


_ALL = _All()


def _kernel_columns(t: Any, name_codes: np.ndarray) -> dict[str, np.ndarray]:
    """Per kernel (event order): name and launching-op name codes, duration, blocks per SM, occupancy, the
    launch configuration (grid/block normalised to 0 where the trace has no launch size), the theoretical
    occupancy and `tc` (a Tensor Core kernel by name). Plain arrays: the view groups on integer codes, never on
    per-kernel strings."""
    ev = t.events
    rows = np.flatnonzero(category_mask(ev, ("kernel",)))
    links = link_gpu_to_ops(t)
    op_of = np.full(len(ev), -1, np.int64)
    op_of[links["row"].to_numpy()] = links["op"].to_numpy()
    op = op_of[rows]
    del op_of
    launches = launch_stats(t)  # ROCm grids in blocks; AMD occupancy from CDNA limits, never NVIDIA's
    col = {
        c: t.arg(c, rows).astype(np.int64)
        for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers", "shared_memory", *SPLIT)
    }
    for dims in ("grid", "block"):  # '' in the table when the trace has no launch size: one code for all
        none = col[f"{dims}_x"] <= 0
        for a in "xyz":
            col[f"{dims}_{a}"] = np.where(none, 0, col[f"{dims}_{a}"])
    amd = launches["amd"].to_numpy(bool) if len(rows) else np.zeros(0, dtype=bool)
    block_size = col["block_x"] * np.maximum(col["block_y"], 1) * np.maximum(col["block_z"], 1)
    theo = _theoretical(
        device_properties(t),
        ev["device"].to_numpy(np.int64)[rows],
        block_size,
        col["registers"],
        col["shared_memory"],
    )
    col.update(
        name=name_codes[rows],
        op=np.where(op >= 0, name_codes[np.maximum(op, 0)], -1),
        dur=ev["dur"].to_numpy(np.float64)[rows],
        bps=launches["blocks_per_sm"].to_numpy(np.float64),
        occ=launches["occupancy"].to_numpy(np.float64),
        theo=np.where(amd, np.nan, theo),
        tc=name_mask(ev, uses_tensor_cores)[rows],  # (per name, memoised per trace: the overview's too)
    )  # NVIDIA's calculator never applies to AMD devices
    return col


def _dims_text(x: int, y: int, z: int) -> str:
    """'[x, y, z]' as torch-tb-profiler prints it; '' when the trace has no launch size."""
    return "" if x <= 0 else f"[{x}, {y}, {z}]"


def _codes(*cols: np.ndarray) -> np.ndarray:
    """Dense int64 codes of the row tuples of equal-length integer columns (first-appearance order)."""
    if len(cols) == 1:
        return pd.factorize(cols[0])[0].astype(np.int64)
    if len(cols[0]):  # one mixed-radix key of the tuples where it fits in int64: one factorize (same codes)
        key, span = np.zeros(len(cols[0]), np.int64), 1
        for c in cols:
            lo, hi = int(c.min()), int(c.max())
            span *= hi - lo + 1
            if span >= 1 << 62:
                break
            key *= hi - lo + 1
            key += c - lo
        else:
            return pd.factorize(key)[0].astype(np.int64)
    codes = pd.factorize(cols[0])[0].astype(np.int64)
    for c in cols[1:]:
        part, uniq = pd.factorize(c)
        codes = pd.factorize(codes * max(1, len(uniq)) + part)[0].astype(np.int64)
    return codes


def _per_group_unique(gid: np.ndarray, codes: np.ndarray, m: int) -> np.ndarray:
    """How many distinct `codes` each of the `m` groups holds."""
    pairs = pd.unique(gid * (int(codes.max()) + 1 if len(codes) else 1) + codes)
    return np.bincount(pairs // (int(codes.max()) + 1 if len(codes) else 1), minlength=m)


def _theoretical(
    props: dict[int, dict], device: np.ndarray, block_size: np.ndarray, regs: np.ndarray, smem: np.ndarray
) -> np.ndarray:
    """The occupancy (0..1) the launch configuration allows on its device: resident warps / the SM's
    maximum, by CUDA's occupancy calculator with the kernel's shared memory opted in (a kernel that ran with
    more than 48 KiB did opt in); NaN when the device or the configuration is unknown."""
    if len(device) == 0:
        return np.full(0, np.nan)
    # one calculation per distinct (device, block size, registers, shared memory): codes, not a dict per kernel
    key = _codes(device, block_size, regs, smem)
    first = np.full(int(key.max()) + 1, len(key), np.int64)
    np.minimum.at(first, key, np.arange(len(key)))
    vals = np.full(len(first), np.nan)
    keys: dict[int, tuple | None] = {}
    for j, i in enumerate(first.tolist()):
        dev, bs, r, sm = int(device[i]), int(block_size[i]), int(regs[i]), int(smem[i])
        p = props.get(dev)
        if p and bs > 0 and r >= 0 and sm >= 0:
            if dev not in keys:
                keys[dev] = _props_key(p)
            pk = keys[dev]
            vals[j] = _theoretical_one(pk, bs, r, sm) if pk is not None else _theoretical_of(p, bs, r, sm)
    return vals[key]


def _props_key(p: dict) -> tuple | None:
    """A hashable key of a device's properties (each value with its type); None when one is not hashable."""
    try:
        key = tuple(sorted((k, type(v).__name__, v) for k, v in p.items()))
        hash(key)
    except TypeError:
        return None
    return key


@functools.lru_cache(maxsize=1 << 12)
def _theoretical_one(props_key: tuple, bs: int, regs: int, smem: int) -> float:
    """`_theoretical_of` memoised by the device's properties and the configuration (the files of a run share
    their devices and most of their kernels' configurations)."""
    return _theoretical_of({k: v for k, _, v in props_key}, bs, regs, smem)


def _theoretical_of(p: dict, bs: int, regs: int, smem: int) -> float:
    """The theoretical occupancy of one configuration on the device of properties `p` (NaN: unknown)."""
    from profiler_core.cuda.occupancy import UnknownDevice, active_blocks_per_sm

    try:
        warp = int(p.get("warpSize", 32))
        res = active_blocks_per_sm(p, bs, regs, 0, smem, opt_in=True)  # it ran: it opted in
        return min(1.0, res.active_blocks * (-(-bs // warp)) * warp / int(p["maxThreadsPerMultiprocessor"]))
    except (UnknownDevice, ValueError, KeyError, TypeError, ZeroDivisionError):
        return math.nan


def kernel_rows(t: Any, name: str, op: str | None = None) -> np.ndarray:
    """The event rows of the kernels named `name` (launched by an op named `op`, NO_OP for none, when given): the
    kernels a row of the table counts, for the timeline's occurrences of that row."""
    ev = t.events
    rows = np.flatnonzero(category_mask(ev, ("kernel",)) & (ev["name"] == name).to_numpy(bool))
    if op is None or not len(rows):
        return rows.astype(np.int64)
    links = link_gpu_to_ops(t)
    op_of = np.full(len(ev), -1, np.int64)
    op_of[links["row"].to_numpy()] = links["op"].to_numpy()
    launched = op_of[rows]
    names = ev["name"].array.take(np.maximum(launched, 0))
    keep = np.array([(str(n) if k >= 0 else NO_OP) == op for n, k in zip(names, launched)], dtype=bool)
    return rows[keep].astype(np.int64)


def kernels(t: Any, group_by: str = "name") -> dict:
    """Kernel table rows grouped by `name` or `name_op` (or name, op and launch configuration), sorted by total
    time descending, then the group keys."""
    if group_by not in GROUP_BY:
        raise ValueError(f"group_by must be one of {', '.join(GROUP_BY)}, not {group_by!r}")
    if not category_mask(t.events, ("kernel",)).any():  # (a CPU trace: no per-event codes to make)
        return {"rows": []}
    name_codes, names = codes_and_texts(t.events["name"].array)
    k = _kernel_columns(t, name_codes)
    if len(k["dur"]) == 0:
        return {"rows": []}
    # the launching op by its name (kernels of ops with one name, or of none, group together)
    op_inverse, op_uniq = pd.factorize(k["op"])
    text_codes, op_values = pd.factorize(pd.Index([names[int(c)] if c >= 0 else NO_OP for c in op_uniq], dtype=object))
    op_codes = text_codes[op_inverse].astype(np.int64)
    grid = _codes(k["grid_x"], k["grid_y"], k["grid_z"])
    block = _codes(k["block_x"], k["block_y"], k["block_z"])
    split = bool((k[SPLIT[0]] >= 0).any() or (k[SPLIT[1]] >= 0).any())
    config = _codes(grid, block, k["registers"], k["shared_memory"], *((k[c] for c in SPLIT) if split else ()))
    parts = (
        [k["name"]]
        + ([op_codes] if group_by != "name" else [])
        + ([grid, block, k["registers"], k["shared_memory"]] if group_by == "name_op_config" else [])
    )
    gid = _codes(*parts)
    m = int(gid.max()) + 1
    first = np.full(m, len(gid), np.int64)
    np.minimum.at(first, gid, np.arange(len(gid)))  # each group's first kernel: where its keys are read

    dur = k["dur"]
    frame = {"dur": dur}
    # durations are whole ns: their sums are exact in any order (bincount); the weighted values' sums keep
    # pandas' compensated summation
    sums = {"dur": np.bincount(gid, weights=dur, minlength=m)}
    for c, has in (
        ("bps", k["bps"] > 0),
        ("occ", np.isfinite(k["occ"]) & (k["occ"] >= 0)),
        ("theo", np.isfinite(k["theo"])),
    ):  # duration-weighted over the kernels with a value
        frame[f"{c}_vw"] = np.where(has, np.where(has, k[c], 0.0) * dur, 0.0)
        sums[f"{c}_w"] = np.bincount(gid, weights=np.where(has, dur, 0.0), minlength=m)
        sums[f"{c}_n"] = np.bincount(gid, weights=has, minlength=m)
    del frame["dur"]
    vw = pd.DataFrame(frame).groupby(gid, sort=True).sum()
    lo, hi = np.full(m, np.inf), np.full(m, -np.inf)
    np.minimum.at(lo, gid, dur)
    np.maximum.at(hi, gid, dur)
    calls = np.bincount(gid, minlength=m)
    total = sums["dur"]
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = {
            c: np.where(sums[f"{c}_n"] > 0, vw[f"{c}_vw"].to_numpy() / sums[f"{c}_w"], np.nan)
            for c in ("bps", "occ", "theo")
        }
    configs = _per_group_unique(gid, config, m)
    shared = {}  # a launch field is shown when the whole group shares it
    fields = {"grid": grid, "block": block, "registers_per_thread": k["registers"], "shared_memory": k["shared_memory"]}
    if group_by == "name_op_config":
        fields = {}  # the configuration is part of the key: one value per group
    fields.update({c: k[c] for c in SPLIT} if split else {})
    for c, codes in fields.items():
        shared[c] = _per_group_unique(gid, _codes(codes), m) == 1
    # the groups' values as Python lists, each group's keys read at its first kernel (no numpy scalars per row)
    at = first
    key_of = {c: k[c][at].tolist() for c in ("name", "tc", "registers", "shared_memory", *(SPLIT if split else ()))}
    dims = {c: k[c][at].tolist() for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")}
    ops = op_codes[at].tolist() if group_by != "name" else []
    shared_at = {c: v.tolist() for c, v in shared.items()}
    calls_l, total_l, lo_l, hi_l, configs_l = (a.tolist() for a in (calls, total, lo, hi, configs))
    mean_l = {c: v.tolist() for c, v in mean.items()}
    rows = []
    for gi in range(m):
        name = names[int(key_of["name"][gi])]
        row: dict[str, Any] = {"name": name}
        if group_by != "name":
            row["op"] = str(op_values[ops[gi]])
        bps, occ, theo = mean_l["bps"][gi], mean_l["occ"][gi], mean_l["theo"][gi]
        row.update(
            calls=calls_l[gi],
            total_us=ns_to_us(total_l[gi]),
            mean_us=ns_to_us(total_l[gi] / calls_l[gi]),
            min_us=ns_to_us(lo_l[gi]),
            max_us=ns_to_us(hi_l[gi]),
            blocks_per_sm=None if math.isnan(bps) else round(bps, 4),
            achieved_occupancy=None if math.isnan(occ) else round(occ / 100.0, 6),
            tensor_cores=bool(key_of["tc"][gi]),
        )

        def value(field: str, src: str, gi: int = gi) -> Any:
            if field in shared_at and not shared_at[field][gi]:
                return None
            v = key_of[src][gi]
            return v if v >= 0 else None

        gtext = _dims_text(dims["grid_x"][gi], dims["grid_y"][gi], dims["grid_z"][gi])
        btext = _dims_text(dims["block_x"][gi], dims["block_y"][gi], dims["block_z"][gi])
        row.update(
            grid=gtext if gtext and shared_at.get("grid", _ALL)[gi] else None,
            block=btext if btext and shared_at.get("block", _ALL)[gi] else None,
            registers_per_thread=value("registers_per_thread", "registers"),
            shared_memory=value("shared_memory", "shared_memory"),
            **{c: value(c, c) for c in SPLIT if split},
            theoretical_occupancy=None if math.isnan(theo) else round(theo, 6),
            launch_configs=configs_l[gi],
        )
        keys = (name, row.get("op", "")) + (
            (gtext, btext, key_of["registers"][gi], key_of["shared_memory"][gi]) if group_by == "name_op_config" else ()
        )
        rows.append((-total_l[gi], keys, row))
    rows.sort(key=lambda r: (r[0], r[1]))
    notes = graph_replay_notes(t)
    return {"rows": [r for _, _, r in rows], **({"notes": notes} if notes else {})}
