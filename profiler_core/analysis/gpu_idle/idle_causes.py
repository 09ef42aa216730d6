"""Why a GPU stream is idle: Holistic Trace Analysis' idle time breakdown, per (device, stream) and per step.

An idle gap is the time between the end of a GPU activity (kernel, memcpy, memset) and the start of the next
one on the same stream. HTA's classification of a gap, by the activity after it:

* host wait: its launch call started after the gap began (the CPU had not enqueued it yet);
* kernel wait: otherwise, if the gap is shorter than `kernel_wait_threshold_ns` (the overhead of launching
  back-to-back kernels; HTA's consecutive_kernel_delay = 30 trace units, i.e. µs, though its docstring says ns);
* other: the rest (e.g. waiting on an event from another stream, a synchronization).

Gaps before a stream's first activity are not idle time here (as in HTA). Per step, a gap is split at step
boundaries (`steps` windows) and each piece keeps the gap's category; the pieces outside every step are
reported under step "". Pure functions of one `TraceData` or of the tables made here; times in ns, µs in the
JSON-able summary.

Differences from HTA, on purpose: HTA groups by stream number alone, ours by (device, stream); HTA measures a
gap from the previous activity's end, ours from the latest end so far on the stream and leaves out overlaps
(negative gaps: HTA adds them to kernel wait), so nested or overlapping activities never make idle time.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from profiler_core.analysis.gpu_idle.gpu_launches import NO_GPU, activity_arrays, gpu_activities
from profiler_core.analysis.stages.steps import steps

HOST_WAIT, KERNEL_WAIT, OTHER = "host_wait", "kernel_wait", "other"
CATEGORIES = (HOST_WAIT, KERNEL_WAIT, OTHER)
#: HTA's default consecutive_kernel_delay (30, in the trace's µs)
KERNEL_WAIT_THRESHOLD_NS = 30_000
OUTSIDE_STEPS = ""
ALL_STREAMS = -1
NO_LAUNCH_LINKS = (
    "no launch calls linked to the GPU activities after idle gaps (no cuda_runtime/cuda_driver "
    "events with their correlation): host wait cannot be told from other idle time"
)


def idle_gaps(
    t: Any,
    kernel_wait_threshold_ns: int = KERNEL_WAIT_THRESHOLD_NS,
    rows: np.ndarray | None = None,
    per_stream: bool = True,
) -> pd.DataFrame:
    """Every idle gap on every stream (of all GPU activities, or of those at `rows`), with HTA's category:
    columns `device`, `stream`, `start`, `end`, `duration` (ns), `category` (host_wait / kernel_wait / other),
    `row` (the activity after the gap), `launch_known` (its launch call is in the trace). With
    `per_stream=False`, the gaps of each device as a whole (no activity on any of its streams; `stream` is
    ALL_STREAMS), classified by the activity that ends the gap by the same rule."""
    g = idle_gap_arrays(t, kernel_wait_threshold_ns, rows, per_stream)
    if g is None:
        return _empty_gaps()
    return pd.DataFrame(
        {
            "device": g["device"],
            "stream": g["stream"],
            "start": g["start"],
            "end": g["end"],
            "duration": g["end"] - g["start"],
            "category": np.array(CATEGORIES, dtype=object)[g["kind"]],
            "row": g["row"],
            "launch_known": g["launch_known"],
        }
    )


def idle_gap_arrays(
    t: Any,
    kernel_wait_threshold_ns: int = KERNEL_WAIT_THRESHOLD_NS,
    rows: np.ndarray | None = None,
    per_stream: bool = True,
) -> dict[str, np.ndarray] | None:
    """`idle_gaps` as arrays (None without GPU activity): `device`, `stream`, `start`, `end`, `row` (int64),
    `kind` (the category's position in CATEGORIES), `launch_known`."""
    a = activity_arrays(t, rows)  # plain arrays: a lexsort and a running maximum, no frame sort or groupby
    n = len(a["row"])
    if not n:
        return None
    if not per_stream:
        a["stream"] = np.full(n, ALL_STREAMS, np.int64)
    order = np.lexsort((a["row"], a["start"], a["stream"], a["device"]))  # (rows are unique: a total order)
    a = {k: v[order] for k, v in a.items()}
    dev, stream = a["device"], a["stream"]
    start, end = a["start"], a["end"]
    new = np.ones(n, dtype=bool)
    new[1:] = (dev[1:] != dev[:-1]) | (stream[1:] != stream[:-1])
    group = np.cumsum(new) - 1
    reach = _group_cummax(group, end)  # latest end so far on the stream
    prev = np.empty_like(reach)
    prev[1:] = reach[:-1]
    gap = ~new & (start > prev)
    gap[0] = False
    idx = np.flatnonzero(gap)
    g_start, g_end = prev[idx], start[idx]
    launch_start = a["launch_start"][idx]
    known = a["launch"][idx] >= 0
    kind = np.where(
        known & (launch_start > g_start),
        CATEGORIES.index(HOST_WAIT),
        np.where(g_end - g_start < kernel_wait_threshold_ns, CATEGORIES.index(KERNEL_WAIT), CATEGORIES.index(OTHER)),
    )
    return {
        "device": dev[idx],
        "stream": stream[idx],
        "start": g_start,
        "end": g_end,
        "kind": kind,
        "row": a["row"][idx],
        "launch_known": known,
    }


def _group_cummax(group: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The running maximum of int64 `v` within each run of equal, ascending `group` codes: one accumulate over
    (group, value) keys, which order the groups first."""
    if len(v) == 0:
        return v.copy()
    lo = int(v.min())
    span = int(v.max()) - lo + 1
    if (int(group[-1]) + 1) * span >= 2**62:  # pragma: no cover - absurd time ranges
        return pd.Series(v).groupby(group).cummax().to_numpy(np.int64)
    base = group.astype(np.int64) * np.int64(span)
    key = base + (v - np.int64(lo))
    np.maximum.accumulate(key, out=key)
    key -= base
    key += np.int64(lo)
    return key


def _empty_gaps() -> pd.DataFrame:
    z = np.zeros(0, np.int64)
    return pd.DataFrame(
        {
            "device": z,
            "stream": z,
            "start": z,
            "end": z,
            "duration": z,
            "category": np.zeros(0, object),
            "row": z,
            "launch_known": np.zeros(0, bool),
        }
    )


def idle_by_step(gaps: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Idle ns per (device, stream, step) and category: columns `device`, `stream`, `step` ("" for the time
    outside every step), `host_wait`, `kernel_wait`, `other`, `idle` (their sum), `unknown_launch` (idle before
    activities whose launch call is not in the trace). Gaps are split at the step windows (`start`, `end` of
    `steps`); one row per (device, stream, step) with idle time, in (device, stream, step order)."""
    names = [str(s) for s in steps["step"]] if len(steps) else []
    s_start = steps["start"].to_numpy(np.int64) if len(steps) else np.zeros(0, np.int64)
    s_end = steps["end"].to_numpy(np.int64) if len(steps) else np.zeros(0, np.int64)
    g_start, g_end = gaps["start"].to_numpy(np.int64), gaps["end"].to_numpy(np.int64)
    pieces = []  # (gap index, step index, ns); step index len(names) = outside every step
    inside = np.zeros(len(gaps), np.int64)
    for k in range(len(names)):
        ns = np.maximum(np.minimum(g_end, s_end[k]) - np.maximum(g_start, s_start[k]), 0)
        hit = np.flatnonzero(ns > 0)
        pieces.append((hit, np.full(len(hit), k), ns[hit]))
        inside += ns
    outside = (g_end - g_start) - inside
    hit = np.flatnonzero(outside > 0)
    pieces.append((hit, np.full(len(hit), len(names)), outside[hit]))
    gi = np.concatenate([p[0] for p in pieces]).astype(np.int64)
    si = np.concatenate([p[1] for p in pieces]).astype(np.int64)
    ns = np.concatenate([p[2] for p in pieces]).astype(np.int64)
    cat = gaps["category"].to_numpy()[gi]
    df = pd.DataFrame(
        {
            "device": gaps["device"].to_numpy(np.int64)[gi],
            "stream": gaps["stream"].to_numpy(np.int64)[gi],
            "step_index": si,
            HOST_WAIT: np.where(cat == HOST_WAIT, ns, 0),
            KERNEL_WAIT: np.where(cat == KERNEL_WAIT, ns, 0),
            OTHER: np.where(cat == OTHER, ns, 0),
            "unknown_launch": np.where(gaps["launch_known"].to_numpy(bool)[gi], 0, ns),
        }
    )
    out = df.groupby(["device", "stream", "step_index"], sort=True, as_index=False).sum()
    out["idle"] = out[HOST_WAIT] + out[KERNEL_WAIT] + out[OTHER]
    labels = np.array(names + [OUTSIDE_STEPS], dtype=object)
    out.insert(2, "step", labels[out["step_index"].to_numpy(np.int64)])
    return out.drop(columns="step_index").reset_index(drop=True)


def _us(ns: float) -> float:
    return round(float(ns) / 1000.0, 3)


def idle_breakdown(
    t: Any, kernel_wait_threshold_ns: int = KERNEL_WAIT_THRESHOLD_NS, rows: np.ndarray | None = None
) -> dict:
    """The idle time breakdown as a JSON-able dict: `streams` (HTA's: per device and stream, µs per category,
    `idle_us`, `unknown_launch_us`, and `steps` with the same per step), `total` (summed over the streams, as
    HTA's per-stream numbers add up), `devices` (the same per device as a whole: time with no activity on any
    of its streams, which is what a step's wall time can lose), `reason` (why there is nothing, or why host
    wait is unknown; else None), `kernel_wait_threshold_us`. Host wait is None where no idle gap's next
    activity has its launch call in the trace."""
    if not len(gpu_activities(t, rows)):
        return {
            "kernel_wait_threshold_us": _us(kernel_wait_threshold_ns),
            "reason": NO_GPU,
            "streams": [],
            "devices": [],
            "total": None,
        }
    st = steps(t)
    gaps = idle_gaps(t, kernel_wait_threshold_ns, rows)
    per = idle_by_step(gaps, st)
    per_dev = idle_by_step(idle_gaps(t, kernel_wait_threshold_ns, rows, per_stream=False), st)
    host_known = bool(gaps["launch_known"].any()) if len(gaps) else True
    keys = (*CATEGORIES, "idle", "unknown_launch")

    def amounts(sums: Any) -> dict:
        d = {f"{k}_us": _us(sums[k]) for k in keys}
        if not host_known:
            d[f"{HOST_WAIT}_us"] = None
        return d

    def listed(df: pd.DataFrame, with_stream: bool) -> list[dict]:
        out = []
        for (dev, stream), g in df.groupby(["device", "stream"], sort=True):
            key = {"device": int(dev), "stream": int(stream)} if with_stream else {"device": int(dev)}
            out.append(
                {
                    **key,
                    **amounts(g[list(keys)].sum()),
                    "steps": [{"step": r["step"], **amounts(r)} for r in g.to_dict(orient="records")],
                }
            )
        return out

    return {
        "kernel_wait_threshold_us": _us(kernel_wait_threshold_ns),
        "reason": None if host_known else NO_LAUNCH_LINKS,
        "streams": listed(per, True),
        "devices": listed(per_dev, False),
        "total": amounts(per[list(keys)].sum()),
    }
