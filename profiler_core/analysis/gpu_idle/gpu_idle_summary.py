"""The GPU-idle stages projected onto one worker's steps, as a small JSON-able dict for the per-worker summaries
(a run-level analysis such as the recoverable-time ledger reads this, never the trace): per step and device, the
device's idle ns by cause (`idle_causes`, device as a whole), the kernel launch statistics per step
(`gpu_launches`), and the largest CUDA queue length per stream (`queue_length`). Where the trace lacks what a
number needs, `reasons` says so and the numbers are absent (None), never zero.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from profiler_core.analysis.gpu_idle.gpu_launches import (
    NO_GPU,
    NO_LAUNCHES,
    has_gpu_activity,
    kernel_launch_stats,
    launch_stats_by_step,
)
from profiler_core.analysis.gpu_idle.idle_causes import (
    CATEGORIES,
    KERNEL_WAIT_THRESHOLD_NS,
    NO_LAUNCH_LINKS,
    idle_by_step,
    idle_gaps,
)
from profiler_core.analysis.gpu_idle.queue_length import queue_length_series
from profiler_core.analysis.stages.columns import category_mask, sorted_unique
from profiler_core.analysis.stages.steps import steps
from profiler_core.trace.categories import GPU_ACTIVITY_CATS

LAUNCH_KEYS = ("count", "cpu_duration", "gpu_duration", "launch_delay", "shorter_than_launch")


def gpu_idle_summary(t: Any, kernel_wait_threshold_ns: int = KERNEL_WAIT_THRESHOLD_NS) -> dict:
    """`steps` (names, as `steps`), `devices` ({device: {category: [ns per step], "unknown_launch": [...]}};
    None without GPU activity), `launches` ({key: [per step]} of LAUNCH_KEYS, ns sums and counts; None without
    launch calls), `queue_max` ({"device:stream": largest queue length}), `kernel_wait_threshold_ns`, `reasons`."""
    st = steps(t)
    names = [str(s) for s in st["step"]]
    out: dict = {
        "steps": names,
        "kernel_wait_threshold_ns": int(kernel_wait_threshold_ns),
        "devices": None,
        "launches": None,
        "queue_max": {},
        "reasons": [],
    }
    if not has_gpu_activity(t):
        out["reasons"].append(NO_GPU)
        return out
    gaps = idle_gaps(t, kernel_wait_threshold_ns, per_stream=False)
    per = idle_by_step(gaps, st)
    per = per[per["step"] != ""]
    pos = {n: i for i, n in enumerate(names)}
    devices: dict[str, dict] = {}
    gpu = category_mask(t.events, GPU_ACTIVITY_CATS)
    for d in sorted_unique(t.events["device"].to_numpy(np.int64)[gpu]).tolist():
        devices[str(d)] = {k: [0] * len(names) for k in (*CATEGORIES, "unknown_launch")}
    for r in per.to_dict(orient="records"):
        for k in (*CATEGORIES, "unknown_launch"):
            devices[str(r["device"])][k][pos[r["step"]]] = int(r[k])
    if len(gaps) and not gaps["launch_known"].any():
        out["reasons"].append(NO_LAUNCH_LINKS)
        for d in devices.values():
            d["host_wait"] = None
    out["devices"] = devices
    stats = kernel_launch_stats(t)
    if len(stats):
        by = launch_stats_by_step(stats, st)
        by = by[by["step"] != ""].set_index("step").reindex(names, fill_value=0)
        out["launches"] = {k: [int(v) for v in by[k]] for k in LAUNCH_KEYS}
    else:
        out["reasons"].append(NO_LAUNCHES)
    q = queue_length_series(t)
    if len(q):
        mx = q.groupby(["device", "stream"])["queue_length"].max()
        out["queue_max"] = {f"{int(d)}:{int(s)}": int(v) for (d, s), v in mx.items()}
    return out
