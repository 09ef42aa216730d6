"""Shared pure helpers for the plugin views: event classes, communication recognition, ProfilerStep ranges,
GPU-activity -> launching-call -> CPU-op links and the CPU op tree, all vectorised over `TraceData.events`.

Positions ("rows") returned here are positions in `t.events` (0..len-1, the reader's RangeIndex order).
Times are int64 ns relative to `t.base_ns`, like the events. Results are memoised per TraceData object
(`derived`), so several views of one trace share the work.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from profiler_core.analysis.stages.columns import (  # noqa: F401 - re-exported for the views
    category_mask, codes_and_texts, name_mask, ns_to_us, per_value, sorted_unique, zeros_column,
)
from profiler_core.analysis.stages.gpu_links import (  # noqa: F401
    first_position_by_key, link_gpu_to_ops, link_launches_to_ops, lookup,
)
from profiler_core.analysis.stages.registry import cached as derived  # noqa: F401
from profiler_core.analysis.stages.op_tree import composite, group_codes, innermost_op_at, op_tree  # noqa: F401
from profiler_core.trace import categories

from .tensor_cores import TC_KERNEL_PATTERNS, uses_tensor_cores

CPU_OP_CATS = categories.OP_CATS
GPU_CATS = categories.GPU_ACTIVITY_CATS
LAUNCH_CATS = categories.LAUNCH_CATS
COMM_PREFIXES = ("nccl:", "gloo:", "c10d::", "mpi::")
COMM_NAMES = frozenset({"record_param_comms"})
_NOT_COMM_CATS = frozenset({"gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "python_function",
                            "trace"})
STEP_PREFIX = "ProfilerStep#"

__all__ = [
    "CPU_OP_CATS", "GPU_CATS", "LAUNCH_CATS", "is_communication", "communication_mask", "is_dataloader",
    "category_mask", "name_mask", "steps", "early_gpu_rows", "link_gpu_to_ops", "link_launches_to_ops", "op_tree",
    "derived", "innermost_op_at", "sorted_unique", "device_properties", "blocks_per_sm", "launch_stats",
    "cdna_occupancy", "is_amd_device", "zeros_column", "WORK_ITEM_GRID_LAUNCHES", "ns_to_us", "uses_tensor_cores",
    "is_tc_eligible_op", "TC_KERNEL_PATTERNS",
]


# ------------------------------------------------------------------------------------------ classification
def is_communication(name: str, cat: str) -> bool:
    """True for communication: CPU ops named nccl:*, gloo:*, c10d::*, mpi::*, record_param_comms; NCCL kernels."""
    name, cat = str(name), str(cat)
    if cat == "kernel":
        return "nccl" in name.lower()
    if cat in _NOT_COMM_CATS:
        return False
    return name.startswith(COMM_PREFIXES) or name in COMM_NAMES


def is_dataloader(name: str) -> bool:
    """torch-tb-profiler's DataLoader ranges: `enumerate(DataLoader)#...__next__` and `enumerate(DataPipe)#...`."""
    name = str(name)
    return (name.startswith("enumerate(DataLoader)#") and name.endswith(".__next__")) or \
        name.startswith("enumerate(DataPipe)#")


def communication_mask(events: pd.DataFrame) -> pd.Series:
    """Vectorised `is_communication` over an events frame (boolean Series aligned with `events`)."""
    if len(events) == 0:
        return pd.Series(np.zeros(0, dtype=bool), index=events.index)
    kernel = category_mask(events, ("kernel",))
    nccl = name_mask(events, lambda n: "nccl" in n.lower())
    by_name = name_mask(events, lambda n: n.startswith(COMM_PREFIXES) or n in COMM_NAMES)
    excluded = category_mask(events, _NOT_COMM_CATS)
    return pd.Series(np.where(kernel, nccl, by_name & ~excluded), index=events.index)


# ---------------------------------------------------------------------------------------------------- steps
def _step_number(name: str) -> str:
    return name[len(STEP_PREFIX):] if name.startswith(STEP_PREFIX) else name


def _steps(t: Any) -> pd.DataFrame:
    ev = t.events
    empty = pd.DataFrame({"step": pd.Series([], dtype=object), "start": pd.Series([], dtype=np.int64),
                          "end": pd.Series([], dtype=np.int64), "host_start": pd.Series([], dtype=np.int64),
                          "host_end": pd.Series([], dtype=np.int64), "device_ops": pd.Series([], dtype=np.int64)})
    if len(ev) == 0:
        return empty
    ts = ev["ts"].to_numpy(np.int64)
    te = ts + ev["dur"].to_numpy(np.int64)
    is_cpu = category_mask(ev, CPU_OP_CATS)
    is_step = is_cpu & name_mask(ev, lambda n: n.startswith(STEP_PREFIX))
    srows = np.flatnonzero(is_step)
    if len(srows):
        srows = srows[np.lexsort((srows, ts[srows]))]
        names = [_step_number(str(n)) for n in ev["name"].to_numpy()[srows]]
        hs, he = ts[srows], te[srows]
    else:  # no ProfilerStep: one step "0" over the whole trace window (never the profiler's own `Trace` span)
        sel = ~category_mask(ev, ("trace",))
        if not sel.any():
            return empty
        names, hs, he = ["0"], np.array([ts[sel].min()]), np.array([te[sel].max()])
    n = len(hs)

    gl = link_gpu_to_ops(t)
    grow, grt = gl["row"].to_numpy(), gl["runtime"].to_numpy()
    matched_count = np.zeros(n, np.int64)
    dev_max = np.full(n, np.iinfo(np.int64).min)
    matched = np.zeros(len(grow), dtype=bool)
    has_rt = grt >= 0
    if has_rt.any():
        rs, re_ = ts[grt[has_rt]], te[grt[has_rt]]
        k = np.searchsorted(hs, rs, side="right") - 1
        inside = (k >= 0) & (re_ <= he[np.maximum(k, 0)])
        idx = np.flatnonzero(has_rt)[inside]
        kk = k[inside]
        matched[idx] = True
        matched_count = np.bincount(kk, minlength=n).astype(np.int64)
        np.maximum.at(dev_max, kk, te[grow[idx]])
    start, end = hs.copy(), he.copy()
    if matched.any():
        # GPU work launched before the window (or whose launch record is missing) never moves a step: the
        # first step starts with its CPU range (see early_gpu_rows; the breakdown leaves that work out)
        prev = int(hs[0])
        for i in range(n):
            s = max(prev, int(hs[i]))
            e = int(he[i]) if matched_count[i] == 0 else max(int(he[i]), int(dev_max[i]))
            e = max(e, s)
            start[i], end[i] = s, e
            prev = e
        if n > 1:  # drop trailing steps whose GPU work was not (fully) captured
            last = np.flatnonzero(matched_count > 0)
            if len(last):
                i = int(last[-1])
                keep = i + 1
                if i > 0 and matched_count[i - 1] * 0.8 > matched_count[i]:
                    keep = i
                names, start, end = names[:keep], start[:keep], end[:keep]
                hs, he, matched_count = hs[:keep], he[:keep], matched_count[:keep]
    return pd.DataFrame({"step": names, "start": start.astype(np.int64), "end": end.astype(np.int64),
                         "host_start": hs.astype(np.int64), "host_end": he.astype(np.int64),
                         "device_ops": matched_count.astype(np.int64)})


def steps(t: Any) -> pd.DataFrame:
    """ProfilerStep ranges with torch-tb-profiler's rules: columns `step` ("5"), `start`, `end` (ns, after the
    GPU adjustment), `host_start`, `host_end` (the CPU range), `device_ops` (GPU activities launched inside).

    Without ProfilerStep events: one step "0" over the whole trace window, every event but the profiler's own
    `Trace`-category span (torch-tb-profiler's rule; HTA's temporal breakdown covers the same window). When GPU work
    is linked to launches inside steps, each step runs from max(previous step end, its CPU start) to max(its CPU
    end, the end of the GPU work it launched); trailing steps that launched nothing, or under 80% of the previous
    step's GPU activities (work not fully captured), are dropped. Unlike torch-tb-profiler 0.4.3, GPU work launched
    before the first step never moves its start (the first step starts with its CPU range, every step ends no
    earlier than its CPU range); `early_gpu_rows` names that work so views can leave it out."""
    return derived(t, "steps", lambda: _steps(t))


def _early_gpu_rows(t: Any) -> np.ndarray:
    ev = t.events
    st = steps(t)
    gl = link_gpu_to_ops(t)
    if len(st) == 0 or len(gl) == 0 or int(st["device_ops"].sum()) == 0:
        return np.zeros(0, np.int64)
    ts = ev["ts"].to_numpy(np.int64)
    te = ts + ev["dur"].to_numpy(np.int64)
    grow, grt = gl["row"].to_numpy(), gl["runtime"].to_numpy()
    hs0 = int(st["host_start"].iloc[0])
    he = st["host_end"].to_numpy(np.int64)
    hs = st["host_start"].to_numpy(np.int64)
    has_rt = grt >= 0
    rs = np.where(has_rt, ts[np.maximum(grt, 0)], 0)
    re_ = np.where(has_rt, te[np.maximum(grt, 0)], 0)
    k = np.searchsorted(hs, rs, side="right") - 1
    inside = has_rt & (k >= 0) & (re_ <= he[np.maximum(k, 0)])
    first_inside = int(ts[grow[inside]].min()) if inside.any() else np.iinfo(np.int64).max
    early = (has_rt & (rs < hs0)) | (~has_rt & (ts[grow] < first_inside))
    return grow[early]


def early_gpu_rows(t: Any) -> np.ndarray:
    """Positions of the GPU activities launched before the profiled steps: their launch call starts before
    the first ProfilerStep, or (launch not in the trace) they start before the first GPU activity launched
    inside a step. Empty when no GPU work is linked to a step. The step-time breakdown leaves them out."""
    return derived(t, "early_gpu_rows", lambda: _early_gpu_rows(t))


# ---------------------------------------------------------------------------------------------- Tensor Cores
# Operators that can use Tensor Cores (autocast's lower-precision list and their backward ops).
TC_ELIGIBLE_OPS = frozenset({
    "aten::_convolution", "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::conv_tbc",
    "aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d", "aten::convolution",
    "aten::cudnn_convolution", "aten::cudnn_convolution_transpose", "aten::prelu", "aten::addmm", "aten::addmv",
    "aten::addr", "aten::matmul", "aten::mm", "aten::mv", "aten::linear", "aten::addbmm", "aten::baddbmm",
    "aten::bmm", "aten::chain_matmul", "aten::linalg_multi_dot", "aten::_thnn_fused_lstm_cell",
    "aten::_thnn_fused_gru_cell", "aten::lstm_cell", "aten::gru_cell", "aten::rnn_tanh_cell",
    "aten::rnn_relu_cell", "CudnnConvolutionBackward", "BmmBackward0", "aten::cudnn_convolution_transpose_backward",
    "CudnnConvolutionTransposeBackward", "MmBackward", "aten::cudnn_convolution_backward_weight", "aten::addmm_",
    "AddmvBackward", "MvBackward", "aten::cudnn_convolution_transpose_backward_weight",
    "aten::cudnn_convolution_transpose_backward_input", "AddmmBackward", "aten::cudnn_convolution_backward_input",
    "AddbmmBackward", "aten::cudnn_convolution_backward",
    # current PyTorch names of the same work
    "aten::convolution_backward", "aten::_convolution_mode", "aten::cudnn_convolution_relu",
    "aten::cudnn_convolution_add_relu", "aten::_scaled_mm", "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_cudnn_attention",
    "aten::_flash_attention_forward", "aten::_flash_attention_backward", "aten::_efficient_attention_forward",
    "aten::_efficient_attention_backward", "aten::scaled_dot_product_attention",
})


def is_tc_eligible_op(op_name: str) -> bool:
    """True if an operator can use Tensor Cores (it, or an op it calls, is a convolution/GEMM/attention)."""
    return str(op_name) in TC_ELIGIBLE_OPS


# ------------------------------------------------------------------------------------------------- devices
def device_properties(t: Any) -> dict[int, dict]:
    """The trace's deviceProperties by device id (the `id` field, else the list position)."""
    props: dict[int, dict] = {}
    for i, p in enumerate(getattr(t, "device_properties", None) or []):
        if isinstance(p, dict):
            did = p.get("id", i)
            props[int(did) if isinstance(did, (int, float)) and not isinstance(did, bool) else i] = p
    return props


def blocks_per_sm(kernels: pd.DataFrame, props: dict[int, dict]) -> np.ndarray:
    """Each kernel's `blocks per SM` from the trace, else its grid's blocks / the device's SM count when both
    are known (NaN otherwise)."""
    bps = kernels["blocks_per_sm"].to_numpy(np.float64).copy()
    bps[~np.isfinite(bps) | (bps < 0)] = np.nan  # CUPTI can report "inf" (no SM count): estimate instead
    missing = np.isnan(bps)
    if missing.any():
        dev = kernels["device"].to_numpy(np.int64)[missing]
        devices = sorted_unique(dev)
        per_device = np.array([float((props.get(int(d)) or {}).get("numSms") or np.nan) for d in devices])
        sms = per_device[np.searchsorted(devices, dev)]
        grid = [np.maximum(kernels[c].to_numpy(np.float64)[missing], 1 if c != "grid_x" else 0)
                for c in ("grid_x", "grid_y", "grid_z")]
        blocks = grid[0] * grid[1] * grid[2]
        bps[missing] = np.where((blocks > 0) & (sms > 0), blocks / sms, np.nan)
    return bps


# ------------------------------------------------------------------------------------------- launch shapes
#: ROCm launch calls whose `grid` is the global work size in work-items (hipLaunchKernel's is in blocks)
WORK_ITEM_GRID_LAUNCHES = frozenset({"hipExtModuleLaunchKernel", "hipHccModuleLaunchKernel"})
_AMD_NAME_HINTS = ("amd", "instinct", "radeon", "gfx")


def is_amd_device(p: dict | None) -> bool:
    """True for an AMD GPU's deviceProperties entry (its name, or a 64-wide wavefront)."""
    if not isinstance(p, dict):
        return False
    name = str(p.get("name") or "").lower()
    return any(h in name for h in _AMD_NAME_HINTS) or p.get("warpSize") == 64


def _launch_stats(t: Any) -> pd.DataFrame:
    ev = t.events
    rows = np.flatnonzero(category_mask(ev, ("kernel",)))
    k = ev.iloc[rows]
    grid = np.stack([k[c].to_numpy(np.int64) for c in ("grid_x", "grid_y", "grid_z")], axis=1)
    block = np.stack([k[c].to_numpy(np.int64) for c in ("block_x", "block_y", "block_z")], axis=1)
    shared = k["shared_memory"].to_numpy(np.int64).copy()
    launch = np.full(len(rows), -1, np.int64)
    if len(rows):
        gl = link_gpu_to_ops(t)
        rt_of = np.full(len(ev), -1, np.int64)
        rt_of[gl["row"].to_numpy()] = gl["runtime"].to_numpy()
        launch = rt_of[rows]
        has = launch >= 0
        if has.any():  # ROCm kernels may carry the shape only on their launch call
            lr = launch[has]
            for j, c in enumerate(("grid_x", "grid_y", "grid_z")):
                v = ev[c].to_numpy(np.int64)[lr]
                grid[has, j] = np.where(grid[has, j] > 0, grid[has, j], v)
            for j, c in enumerate(("block_x", "block_y", "block_z")):
                v = ev[c].to_numpy(np.int64)[lr]
                block[has, j] = np.where(block[has, j] > 0, block[has, j], v)
            sh = ev["shared_memory"].to_numpy(np.int64)[lr]
            shared[has] = np.where(shared[has] >= 0, shared[has], sh)
            work_items = np.zeros(len(rows), dtype=bool)
            work_items[has] = name_mask(ev, WORK_ITEM_GRID_LAUNCHES.__contains__)[lr]
            if work_items.any():  # global work size -> work-groups, axis by axis
                b = np.maximum(block[work_items], 1)
                grid[work_items] = (grid[work_items] + b - 1) // b
    blocks = np.where(grid[:, 0] > 0, grid[:, 0] * np.maximum(grid[:, 1], 1) * np.maximum(grid[:, 2], 1), 0)
    threads = np.where(block[:, 0] > 0, block[:, 0] * np.maximum(block[:, 1], 1) * np.maximum(block[:, 2], 1), 0)
    props = device_properties(t)
    dev = k["device"].to_numpy(np.int64)
    bps = k["blocks_per_sm"].to_numpy(np.float64).copy()
    bps[~np.isfinite(bps) | (bps < 0)] = np.nan  # CUPTI can report "inf" (no SM count): estimate instead
    occ = k["occupancy"].to_numpy(np.float64).copy()
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
            _optin_occupancy(occ, sel, p, bps, threads, k["registers"].to_numpy(np.int64), shared)
    return pd.DataFrame({"row": rows, "blocks": blocks, "threads": threads, "blocks_per_sm": bps,
                         "occupancy": occ, "amd": amd}, copy=False)


def _optin_occupancy(occ: np.ndarray, sel: np.ndarray, p: dict, bps: np.ndarray, threads: np.ndarray,
                     regs: np.ndarray, shared: np.ndarray) -> None:
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


def launch_stats(t: Any) -> pd.DataFrame:
    """Per kernel (in event order): `row`, `blocks` (grid size in blocks/work-groups: ROCm work-item grids of
    hipExtModuleLaunchKernel/hipHccModuleLaunchKernel divided by the block size), `threads` per block,
    `blocks_per_sm` (the trace's value, else blocks / SMs; on AMD always blocks / CUs), `occupancy` (% : the
    trace's est. achieved occupancy on NVIDIA, recomputed with the shared memory opted in where Kineto wrote 0
    for a kernel above 48 KiB; `cdna_occupancy` on AMD; NaN when unknown), `amd`."""
    return derived(t, "launch_stats", lambda: _launch_stats(t))


def cdna_occupancy(blocks_per_cu: np.ndarray, threads: np.ndarray, shared_bytes: np.ndarray,
                   p: dict) -> np.ndarray:
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
