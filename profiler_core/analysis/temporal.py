"""GPU temporal breakdown in Holistic Trace Analysis' terms: per device and time window, the GPU's idle time
(no kernel, copy or memset running), compute time (non-communication kernels) and non-compute time
(communication kernels, memcpy, memset), and their shares of the window; the overview shows it per step and
on average. `kernel_type_times` is HTA's kernel type breakdown (exclusive time per combination of types).
Pure functions of one `TraceData`; times in ns.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from profiler_core.analysis import intervals
from profiler_core.analysis.stages.classify import communication_mask
from profiler_core.analysis.stages.columns import category_mask, ns_to_us, sorted_unique
from profiler_core.analysis.stages.steps import steps
from profiler_core.trace.categories import GPU_ACTIVITY_CATS

#: a recommendation is given when a device is idle for more than this share of the average step
IDLE_THRESHOLD = 0.25
KINDS = ("COMPUTATION", "COMMUNICATION", "MEMORY")  # HTA's kernel types, in HTA's order of bits


def gpu_kinds(t: Any) -> tuple[np.ndarray, np.ndarray]:
    """Rows of every GPU activity (kernel, memcpy, memset) and its kind: 0 computation, 1 communication (NCCL
    kernels), 2 memory (memcpy, memset)."""
    ev = t.events
    rows = np.flatnonzero(category_mask(ev, GPU_ACTIVITY_CATS))
    kind = np.zeros(len(rows), np.int64)
    comm = communication_mask(ev).to_numpy()[rows]
    kernel = category_mask(ev, ("kernel",))[rows]
    kind[kernel & comm] = 1
    kind[~kernel] = 2
    return rows, kind


def _prepare(t: Any, rows: np.ndarray, kinds: np.ndarray) -> tuple:
    ev = t.events
    s = ev["ts"].to_numpy(np.int64)[rows]
    e = s + ev["dur"].to_numpy(np.int64)[rows]
    comp = np.asarray(kinds) == 0
    return intervals.prepare(s, e), intervals.prepare(s[comp], e[comp])


def _window(prep: tuple, start: int, end: int) -> dict:
    total = max(int(end) - int(start), 0)
    busy = intervals.union_in(prep[0], start, end)
    compute = intervals.union_in(prep[1], start, end)
    return {"total": total, "idle": total - busy, "compute": compute, "non_compute": busy - compute}


def window_breakdowns(t: Any, windows: list[tuple[int, int]], rows: np.ndarray, kinds: np.ndarray) -> list[dict]:
    """idle/compute/non-compute ns of the GPU activities at `rows` (kinds as `gpu_kinds`) within each [start, end)
    window of `windows`."""
    prep = _prepare(t, rows, kinds)
    return [_window(prep, start, end) for start, end in windows]


def _shares(d: dict) -> dict:
    out = {f"{k}_us": ns_to_us(d[k]) for k in ("total", "idle", "compute", "non_compute")}
    for k in ("idle", "compute", "non_compute"):
        out[f"{k}_share"] = (d[k] / d["total"]) if d["total"] > 0 else None
    return out


def temporal_breakdown(t: Any) -> dict | None:
    """Per device: the breakdown of every step window (`steps`) and their mean (`average`), µs and shares of the
    step; None when the trace has no GPU activity or no steps."""
    rows, kinds = gpu_kinds(t)
    st = steps(t)
    if not len(rows) or not len(st):
        return None
    dev = t.events["device"].to_numpy(np.int64)[rows]
    names = st["step"].astype(str).tolist()
    windows = list(zip(st["start"].to_numpy(np.int64).tolist(), st["end"].to_numpy(np.int64).tolist()))
    devices = []
    for d in sorted_unique(dev).tolist():
        sel = dev == d
        per = list(zip(names, window_breakdowns(t, windows, rows[sel], kinds[sel])))
        mean = {k: float(np.mean([p[k] for _, p in per])) for k in ("total", "idle", "compute", "non_compute")}
        devices.append(
            {"device": int(d), "average": _shares(mean), "steps": [{"step": name, **_shares(p)} for name, p in per]}
        )
    return {"idle_threshold": IDLE_THRESHOLD, "devices": devices}


def idle_recommendations(temporal: dict | None, graph_launches: bool = False) -> list[str]:
    """One line per device idle for more than IDLE_THRESHOLD of the average step. `graph_launches`: the job already
    replays CUDA graphs, so the line does not propose them."""
    launch = "work launched outside the graphs it replays" if graph_launches else "CUDA graphs"
    out = []
    for d in (temporal or {}).get("devices", []):
        share = d["average"]["idle_share"]
        if share is not None and share > IDLE_THRESHOLD:
            out.append(
                f"GPU {d['device']} is idle {share * 100:.1f}% of the average step (no kernel, copy or memset "
                f"running; threshold {IDLE_THRESHOLD * 100:.0f}%). Idle gaps usually mean the GPU waits for "
                f"the CPU: kernel launch overhead ({launch}, fusing small ops), data loading (more DataLoader "
                "workers, pinned memory), or synchronizations (.item(), .cpu(), blocking copies)."
            )
    return out


def kernel_type_times(t: Any, rows: np.ndarray | None = None, kinds: np.ndarray | None = None) -> dict[str, int]:
    """HTA's kernel type breakdown: ns during which exactly a given set of kinds runs, keyed like HTA
    ("COMPUTATION", "MEMORY", "COMPUTATION overlapping MEMORY", ...); zero entries left out."""
    if rows is None or kinds is None:
        rows, kinds = gpu_kinds(t)
    ev = t.events
    s = ev["ts"].to_numpy(np.int64)[rows]
    e = s + ev["dur"].to_numpy(np.int64)[rows]
    if not len(s):
        return {}
    bounds = sorted_unique(np.concatenate([s, e]))
    mask = np.zeros(len(bounds) - 1, np.int64)
    for k in range(len(KINDS)):
        sel = kinds == k
        if sel.any():
            si = np.searchsorted(bounds, s[sel])
            ei = np.searchsorted(bounds, e[sel])
            cover = np.cumsum(np.bincount(si, minlength=len(bounds)) - np.bincount(ei, minlength=len(bounds)))[:-1]
            mask |= np.where(cover > 0, 1 << k, 0)
    seg = np.diff(bounds)
    out: dict[str, int] = {}
    for m in np.unique(mask[mask > 0]).tolist():
        name = " overlapping ".join(KINDS[k] for k in range(len(KINDS)) if m & (1 << k))
        out[name] = int(seg[mask == m].sum())
    return out
