"""GPU activities with their launch calls, and Holistic Trace Analysis' kernel launch statistics.

`gpu_activities` is the table the GPU-idle stages start from: one row per kernel, memcpy and memset with its
device, stream, times and the cuda_runtime/cuda_driver call that launched it (same correlation), if any.
`kernel_launch_stats` is HTA's `get_cuda_kernel_launch_stats`: per activity launched by a launch API call, the
call's CPU duration, the activity's GPU duration and the launch delay (GPU start minus the call's end, clipped
at 0); `launch_stats_summary` counts what HTA's charts show (activities shorter than their launch, outliers over
the runtime and launch-delay cutoffs). Pure functions of one `TraceData`; times in ns.

Intentional difference: HTA's launch statistics take only cudaLaunchKernel, cudaLaunchKernelExC,
cudaMemcpyAsync and cudaMemsetAsync (and MTIA's launch); by default ours also take cuLaunchKernel (Triton) and
the HIP launches, the calls HTA's own queue length counts (`QUEUE_LAUNCH_NAMES`). Pass `HTA_STATS_LAUNCH_NAMES`
for HTA's set.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from profiler_core.analysis.stages.columns import category_mask
from profiler_core.analysis.stages.gpu_links import link_gpu_to_ops
from profiler_core.trace.categories import GPU_ACTIVITY_CATS

MTIA_LAUNCH = "runFunction - job_prep_and_submit_for_execution"
KERNEL_LAUNCH_NAMES = frozenset({"cudaLaunchKernel", "cudaLaunchKernelExC", MTIA_LAUNCH})
MEMORY_LAUNCH_NAMES = frozenset({"cudaMemcpyAsync", "cudaMemsetAsync"})
#: HTA's get_cuda_kernel_launch_stats launch calls (with include_memory_events=True)
HTA_STATS_LAUNCH_NAMES = KERNEL_LAUNCH_NAMES | MEMORY_LAUNCH_NAMES
#: the launch calls of HTA's queue length (TraceSymbolTable.get_runtime_launch_events_query)
QUEUE_LAUNCH_NAMES = HTA_STATS_LAUNCH_NAMES | frozenset(
    {
        "cuLaunchKernel",
        "hipLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipMemsetAsync",
        "hipMemcpyAsync",
        "hipMemcpyWithStream",
    }
)
_HIP_MEMORY = frozenset({"hipMemsetAsync", "hipMemcpyAsync", "hipMemcpyWithStream"})

#: HTA's defaults for the launch statistics' outliers (µs there)
RUNTIME_CUTOFF_NS = 50_000
LAUNCH_DELAY_CUTOFF_NS = 100_000

NO_GPU = "no GPU activity (kernel, memcpy or memset) in the trace"
NO_LAUNCHES = "no launch calls (cuda_runtime/cuda_driver events with a GPU activity's correlation) in the trace"


def activity_arrays(t: Any, rows: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """`gpu_activities`' numeric columns as int64 arrays (no frame, no launch names): `row`, `device`, `stream`,
    `start`, `end`, `launch`, `launch_start`, `launch_end`."""
    ev = t.events
    links = link_gpu_to_ops(t)
    all_rows = links["row"].to_numpy(np.int64)
    launch = links["runtime"].to_numpy(np.int64)
    if rows is not None:
        keep = np.isin(all_rows, np.asarray(rows, np.int64))
        all_rows, launch = all_rows[keep], launch[keep]
    ts = ev["ts"].to_numpy(np.int64)
    te = ts + ev["dur"].to_numpy(np.int64)
    has = launch >= 0
    lr = np.maximum(launch, 0)
    return {
        "row": all_rows,
        "device": ev["device"].to_numpy(np.int64)[all_rows],
        "stream": ev["stream"].to_numpy(np.int64)[all_rows],
        "start": ts[all_rows],
        "end": te[all_rows],
        "launch": launch,
        "launch_start": np.where(has, ts[lr], -1),
        "launch_end": np.where(has, te[lr], -1),
    }


def gpu_activities(t: Any, rows: np.ndarray | None = None) -> pd.DataFrame:
    """One row per GPU activity (all, or the positions `rows` in t.events), in event order: `row`, `device`,
    `stream`, `start`, `end` (ns), `correlation`, `launch` (position of the launching cuda_runtime/cuda_driver
    call, -1 when it is not in the trace), `launch_name` ("" without one), `launch_start`, `launch_end` (ns,
    -1 without one)."""
    ev = t.events
    a = activity_arrays(t, rows)
    launch = a["launch"]
    has = launch >= 0
    launch_name = np.full(len(launch), "", dtype=object)
    if has.any():
        launch_name[has] = ev["name"].iloc[launch[has]].astype(str).to_numpy()
    return pd.DataFrame(
        {
            "row": a["row"],
            "device": a["device"],
            "stream": a["stream"],
            "start": a["start"],
            "end": a["end"],
            "correlation": ev["correlation"].to_numpy(np.int64)[a["row"]],
            "launch": launch,
            "launch_name": launch_name,
            "launch_start": a["launch_start"],
            "launch_end": a["launch_end"],
        }
    )


def stats_launch_names(include_memory: bool = True) -> frozenset[str]:
    """The default launch calls of `kernel_launch_stats`: kernel launches (CUDA runtime and driver, HIP, MTIA),
    plus the asynchronous memcpy/memset calls when `include_memory`."""
    names = QUEUE_LAUNCH_NAMES if include_memory else QUEUE_LAUNCH_NAMES - MEMORY_LAUNCH_NAMES - _HIP_MEMORY
    return frozenset(names)


def kernel_launch_stats(
    t: Any, rows: np.ndarray | None = None, launch_names: Iterable[str] | None = None
) -> pd.DataFrame:
    """HTA's CUDA kernel launch statistics: one row per GPU activity launched by one of `launch_names` (default
    `stats_launch_names()`): `row`, `launch`, `correlation`, `device`, `stream`, `launch_start`,
    `cpu_duration` (the launch call's duration), `gpu_duration`, `launch_delay` (GPU start - launch end, clipped
    at 0), all ns, and `shorter_than_launch` (GPU duration < CPU duration)."""
    names = frozenset(stats_launch_names() if launch_names is None else launch_names)
    a = gpu_activities(t, rows)
    a = a[(a["launch"] >= 0) & a["launch_name"].isin(names).to_numpy()]
    cpu = (a["launch_end"] - a["launch_start"]).to_numpy(np.int64)
    gpu = (a["end"] - a["start"]).to_numpy(np.int64)
    delay = np.maximum(a["start"].to_numpy(np.int64) - a["launch_end"].to_numpy(np.int64), 0)
    return pd.DataFrame(
        {
            "row": a["row"].to_numpy(),
            "launch": a["launch"].to_numpy(),
            "correlation": a["correlation"].to_numpy(),
            "device": a["device"].to_numpy(),
            "stream": a["stream"].to_numpy(),
            "launch_start": a["launch_start"].to_numpy(np.int64),
            "cpu_duration": cpu,
            "gpu_duration": gpu,
            "launch_delay": delay,
            "shorter_than_launch": gpu < cpu,
        }
    )


def launch_stats_summary(
    stats: pd.DataFrame,
    runtime_cutoff_ns: int = RUNTIME_CUTOFF_NS,
    launch_delay_cutoff_ns: int = LAUNCH_DELAY_CUTOFF_NS,
) -> dict:
    """Counts, sums, means and maxima (µs) of `kernel_launch_stats`' columns, the number of activities shorter
    than their launch and of outliers over HTA's cutoffs; `reason` says why it is empty, else None."""
    n = len(stats)
    out: dict = {
        "count": n,
        "reason": None if n else NO_LAUNCHES,
        "shorter_than_launch": int(stats["shorter_than_launch"].sum()) if n else 0,
        "runtime_outliers": int((stats["cpu_duration"] > runtime_cutoff_ns).sum()) if n else 0,
        "launch_delay_outliers": int((stats["launch_delay"] > launch_delay_cutoff_ns).sum()) if n else 0,
        "runtime_cutoff_us": runtime_cutoff_ns / 1000.0,
        "launch_delay_cutoff_us": launch_delay_cutoff_ns / 1000.0,
    }
    for c in ("cpu_duration", "gpu_duration", "launch_delay"):
        v = stats[c].to_numpy(np.int64) if n else np.zeros(0, np.int64)
        out[f"{c}_sum_us"] = float(v.sum()) / 1000.0
        out[f"{c}_mean_us"] = float(v.mean()) / 1000.0 if n else None
        out[f"{c}_max_us"] = float(v.max()) / 1000.0 if n else None
    return out


def has_gpu_activity(t: Any) -> bool:
    """True when the trace holds any kernel, memcpy or memset."""
    return bool(category_mask(t.events, GPU_ACTIVITY_CATS).any())


def launch_stats_by_step(stats: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """`kernel_launch_stats` per step, by the launch call's start (in [start, end) of `steps`; "" outside every
    step): columns `step`, `count`, `cpu_duration`, `gpu_duration`, `launch_delay` (sums, ns),
    `shorter_than_launch` (count); one row per step of `steps` in order, then "" if any launch is outside."""
    names = [str(x) for x in steps["step"]] if len(steps) else []
    s_start = steps["start"].to_numpy(np.int64) if len(steps) else np.zeros(0, np.int64)
    s_end = steps["end"].to_numpy(np.int64) if len(steps) else np.zeros(0, np.int64)
    ls = stats["launch_start"].to_numpy(np.int64)
    k = np.searchsorted(s_start, ls, side="right") - 1
    inside = (k >= 0) & (ls < s_end[np.maximum(k, 0)]) if len(s_start) else np.zeros(len(ls), dtype=bool)
    idx = np.where(inside, k, len(names))
    n = len(names) + 1
    cols = {"count": np.bincount(idx, minlength=n).astype(np.int64)}
    for c in ("cpu_duration", "gpu_duration", "launch_delay", "shorter_than_launch"):
        cols[c] = np.bincount(idx, weights=stats[c].to_numpy(np.float64), minlength=n).astype(np.int64)
    out = pd.DataFrame({"step": names + [""], **cols})
    return out if cols["count"][-1] else out.iloc[:-1].reset_index(drop=True)
