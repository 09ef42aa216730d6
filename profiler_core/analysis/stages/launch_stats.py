"""The launch stats stage: per kernel, its grid in blocks, threads per block, blocks per SM and occupancy
(NVIDIA: the trace's; AMD CDNA: estimated), with the device properties they need."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...trace.categories import KERNEL
from .columns import category_mask, name_mask, sorted_unique
from .gpu_links import launch_calls, link_gpu_to_ops
from .registry import stage

__all__ = ["launch_stats", "device_properties", "is_amd_device", "cdna_occupancy", "WORK_ITEM_GRID_LAUNCHES"]


def device_properties(t: Any) -> dict[int, dict]:
    """The trace's deviceProperties by device id (the `id` field, else the list position)."""
    props: dict[int, dict] = {}
    for i, p in enumerate(getattr(t, "device_properties", None) or []):
        if isinstance(p, dict):
            did = p.get("id", i)
            props[int(did) if isinstance(did, (int, float)) and not isinstance(did, bool) else i] = p
    return props


# ------------------------------------------------------------------------------------------- launch shapes
#: ROCm launch calls whose `grid` is the global work size in work-items (hipLaunchKernel's is in blocks)
WORK_ITEM_GRID_LAUNCHES = frozenset({"hipExtModuleLaunchKernel", "hipHccModuleLaunchKernel"})


def _is_work_item_launch(name: str) -> bool:
    return name in WORK_ITEM_GRID_LAUNCHES


_AMD_NAME_HINTS = ("amd", "instinct", "radeon", "gfx")


def is_amd_device(p: dict | None) -> bool:
    """True for an AMD GPU's deviceProperties entry (its name, or a 64-wide wavefront)."""
    if not isinstance(p, dict):
        return False
    name = str(p.get("name") or "").lower()
    return any(h in name for h in _AMD_NAME_HINTS) or p.get("warpSize") == 64


def _launch_stats(t: Any) -> pd.DataFrame:
    ev = t.events
    rows = np.flatnonzero(category_mask(ev, (KERNEL,)))
    grid = np.stack([t.arg(c, rows).astype(np.int64) for c in ("grid_x", "grid_y", "grid_z")], axis=1)
    block = np.stack([t.arg(c, rows).astype(np.int64) for c in ("block_x", "block_y", "block_z")], axis=1)
    shared = t.arg("shared_memory", rows).astype(np.int64)
    launch = np.full(len(rows), -1, np.int64)
    if len(rows):
        launch = launch_calls(t, rows)
        has = launch >= 0
        if has.any():  # ROCm kernels may carry the shape only on their launch call (read where they lack it)
            lr = launch[has]
            for j, c in enumerate(("grid_x", "grid_y", "grid_z")):
                need = has & (grid[:, j] <= 0)
                if need.any():
                    grid[need, j] = t.arg(c, launch[need]).astype(np.int64)
            for j, c in enumerate(("block_x", "block_y", "block_z")):
                need = has & (block[:, j] <= 0)
                if need.any():
                    block[need, j] = t.arg(c, launch[need]).astype(np.int64)
            need = has & (shared < 0)
            if need.any():
                shared[need] = t.arg("shared_memory", launch[need]).astype(np.int64)
            work_items = np.zeros(len(rows), dtype=bool)
            work_items[has] = name_mask(ev, _is_work_item_launch)[lr]
            if work_items.any():  # global work size -> work-groups, axis by axis
                b = np.maximum(block[work_items], 1)
                grid[work_items] = (grid[work_items] + b - 1) // b
    blocks = np.where(grid[:, 0] > 0, grid[:, 0] * np.maximum(grid[:, 1], 1) * np.maximum(grid[:, 2], 1), 0)
    threads = np.where(block[:, 0] > 0, block[:, 0] * np.maximum(block[:, 1], 1) * np.maximum(block[:, 2], 1), 0)
    props = device_properties(t)
    dev = ev["device"].to_numpy(np.int64)[rows]  # (one column: no copy of the kernels' frame rows)
    bps = t.arg("blocks_per_sm", rows).astype(np.float64)
    bps[~np.isfinite(bps) | (bps < 0)] = np.nan  # CUPTI can report "inf" (no SM count): estimate instead
    occ = t.arg("occupancy", rows).astype(np.float64)
    registers = t.arg("registers", rows).astype(np.int64)
    amd = np.zeros(len(rows), dtype=bool)
    for d in sorted_unique(dev).tolist():
        sel = dev == d
        p = props.get(int(d)) or {}
        sms = float(p.get("numSms") or np.nan)
        est = np.where((blocks[sel] > 0) & (sms > 0), blocks[sel] / sms, np.nan)
        if is_amd_device(p):
            amd[sel] = True
            bps[sel] = est  # Kineto's ROCm args never hold blocks per CU; NVIDIA formulas never apply
            occ[sel] = cdna_occupancy(est, threads[sel], shared[sel], p) * 100.0
        else:
            bps[sel] = np.where(np.isnan(bps[sel]), est, bps[sel])
            _optin_occupancy(occ, sel, p, bps, threads, registers, shared)
    return pd.DataFrame(
        {"row": rows, "blocks": blocks, "threads": threads, "blocks_per_sm": bps, "occupancy": occ, "amd": amd},
        copy=False,
    )


def _optin_occupancy(
    occ: np.ndarray,
    sel: np.ndarray,
    p: dict,
    bps: np.ndarray,
    threads: np.ndarray,
    regs: np.ndarray,
    shared: np.ndarray,
) -> None:
    """Replace, in place, the 0 % Kineto writes for kernels above the default 48 KiB of shared memory per block
    (it leaves the opt-in out) by the same estimate with the shared memory opted in."""
    from profiler_core.cuda.occupancy import optin_achieved_occupancy

    limit = p.get("sharedMemPerBlock")
    if not isinstance(limit, (int, float)) or isinstance(limit, bool) or limit <= 0:
        return
    fix = np.flatnonzero(sel & (occ == 0) & (shared > limit) & (threads > 0) & np.isfinite(bps) & (regs >= 0))
    memo: dict[tuple, float] = {}
    for i in fix.tolist():
        key = (float(bps[i]), int(threads[i]), int(regs[i]), int(shared[i]))
        if key not in memo:
            memo[key] = optin_achieved_occupancy(p, *key)
        occ[i] = memo[key]


@stage(link_gpu_to_ops)
def launch_stats(t: Any) -> pd.DataFrame:
    """Per kernel (in event order): `row`, `blocks` (grid size in blocks/work-groups: ROCm work-item grids of
    hipExtModuleLaunchKernel/hipHccModuleLaunchKernel divided by the block size), `threads` per block,
    `blocks_per_sm` (the trace's value, else blocks / SMs; on AMD always blocks / CUs), `occupancy` (% : the
    trace's est. achieved occupancy on NVIDIA, recomputed with the shared memory opted in where Kineto wrote 0
    for a kernel above 48 KiB; `cdna_occupancy` on AMD; NaN when unknown), `amd`."""
    return _launch_stats(t)


def cdna_occupancy(blocks_per_cu: np.ndarray, threads: np.ndarray, shared_bytes: np.ndarray, p: dict) -> np.ndarray:
    """Estimated achieved occupancy (fraction) of AMD CDNA kernels: resident work-groups per CU, limited by
    the wavefront slots (maxThreadsPerMultiprocessor / warpSize) and the LDS (maxSharedMemoryPerMultiProcessor
    / the kernel's shared memory), times waves per work-group over the CU's wave slots. An upper bound:
    ROCm traces carry no register counts. NaN when the launch shape or the device is unknown."""
    bpc = np.asarray(blocks_per_cu, np.float64)
    threads = np.asarray(threads, np.float64)
    shared = np.asarray(shared_bytes, np.float64)
    wave = float(p.get("warpSize") or 64)
    slots = float(p.get("maxThreadsPerMultiprocessor") or 0) / wave
    if slots <= 0:
        return np.full(len(bpc), np.nan)
    waves = np.ceil(threads / wave)
    with np.errstate(divide="ignore", invalid="ignore"):
        limit = np.floor(slots / waves)
        lds = float(p.get("maxSharedMemoryPerMultiProcessor") or p.get("sharedMemPerMultiprocessor") or 0)
        if lds > 0:
            limit = np.where(shared > 0, np.minimum(limit, np.floor(lds / shared)), limit)
        occ = np.minimum(bpc, limit) * waves / slots
    ok = np.isfinite(bpc) & (waves > 0) & (limit >= 0)
    return np.where(ok, np.clip(occ, 0.0, 1.0), np.nan)
