"""CUDA queue length over time, as Holistic Trace Analysis' `get_queue_length_time_series` / summary define it:
per (device, stream), the number of GPU activities launched but not yet started. It goes up by one at the start
of each launch call (of `QUEUE_LAUNCH_NAMES`) whose activity is in the trace and down by one when that activity
starts; at equal times a launch counts before a start. The series holds the change points (a step function);
`queue_length_counter` turns it into Chrome-trace counter events for a timeline track. Pure functions; ns.

Difference from HTA, on purpose: HTA keys the series by stream number alone; ours by (device, stream).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from profiler_core.analysis.gpu_idle.gpu_launches import NO_GPU, QUEUE_LAUNCH_NAMES, gpu_activities
from profiler_core.analysis.stages.gpu_links import link_gpu_to_ops
from profiler_core.analysis.stages.registry import stage

NO_QUEUE = "no GPU activity launched by a kernel/memcpy/memset launch call in the trace"
#: HTA's CUDA_MAX_LAUNCH_QUEUE_PER_STREAM: a launch blocks the CPU when its stream has this many pending
MAX_LAUNCH_QUEUE = 1024
STATS = ("count", "mean", "std", "min", "25%", "50%", "75%", "max")


def queue_length_series(
    t: Any, rows: np.ndarray | None = None, launch_names: Iterable[str] = QUEUE_LAUNCH_NAMES
) -> pd.DataFrame:
    """The queue length time series: columns `device`, `stream`, `ts` (ns), `queue_length` (its value from ts on),
    one row per launch or activity start, in (device, stream, time) order."""
    names = frozenset(launch_names)
    a = gpu_activities(t, rows)
    a = a[(a["launch"] >= 0) & a["launch_name"].isin(names).to_numpy()]
    n = len(a)
    dev = np.concatenate([a["device"].to_numpy(np.int64)] * 2)
    stream = np.concatenate([a["stream"].to_numpy(np.int64)] * 2)
    ts = np.concatenate([a["launch_start"].to_numpy(np.int64), a["start"].to_numpy(np.int64)])
    delta = np.concatenate([np.ones(n, np.int64), -np.ones(n, np.int64)])
    order = np.lexsort((-delta, ts, stream, dev))  # a launch before a start at the same time
    dev, stream, ts, delta = dev[order], stream[order], ts[order], delta[order]
    new = np.ones(len(ts), dtype=bool)
    new[1:] = (dev[1:] != dev[:-1]) | (stream[1:] != stream[:-1])
    total = np.cumsum(delta)
    base = np.maximum.accumulate(np.where(new, np.arange(len(ts)), 0)) if len(ts) else np.zeros(0, np.int64)
    before = np.where(base > 0, total[np.maximum(base - 1, 0)], 0)
    return pd.DataFrame({"device": dev, "stream": stream, "ts": ts, "queue_length": total - before})


@stage(link_gpu_to_ops)
def queue_track(t: Any) -> pd.DataFrame:
    """`queue_length_series` of every stream with the default launch names, computed once per trace (the
    timeline's counter track)."""
    return queue_length_series(t)


def queue_length_summary(series: pd.DataFrame) -> pd.DataFrame:
    """HTA's queue length summary: per (device, stream), pandas' describe() of the series' values (count, mean,
    std, min, 25%, 50%, 75%, max over the change points, not weighted by time), plus `time_weighted_mean` over
    [first change, last change]."""
    rows = []
    for (dev, stream), g in series.groupby(["device", "stream"], sort=True):
        q = g["queue_length"].astype(np.float64)
        d = q.describe()
        ts = g["ts"].to_numpy(np.int64)
        span = int(ts[-1] - ts[0])
        twm = float((q.to_numpy()[:-1] * np.diff(ts)).sum() / span) if span > 0 else float(q.iloc[-1])
        rows.append(
            {"device": int(dev), "stream": int(stream), **{s: float(d[s]) for s in STATS}, "time_weighted_mean": twm}
        )
    cols = ["device", "stream", *STATS, "time_weighted_mean"]
    return pd.DataFrame(rows, columns=cols)


def time_at_queue_length(series: pd.DataFrame, at_least: int = MAX_LAUNCH_QUEUE) -> pd.DataFrame:
    """Per (device, stream): `ns` during which the queue length is >= `at_least` (each value holds until the
    stream's next change; HTA's get_time_spent_blocked_on_full_queue per stream); streams that never reach it
    are left out."""
    rows = []
    for (dev, stream), g in series.groupby(["device", "stream"], sort=True):
        ts = g["ts"].to_numpy(np.int64)
        full = g["queue_length"].to_numpy(np.int64)[:-1] >= at_least
        if full.any():
            rows.append({"device": int(dev), "stream": int(stream), "ns": int(np.diff(ts)[full].sum())})
    return pd.DataFrame(rows, columns=["device", "stream", "ns"])


def queue_length_counter(series: pd.DataFrame, base_ns: int = 0) -> list[dict]:
    """Chrome-trace counter events ("ph": "C", µs) of the series, one track per (device, stream): name
    "Queue length stream N", pid = device."""
    out = []
    for d, s, ts, q in zip(
        series["device"].to_numpy(),
        series["stream"].to_numpy(),
        series["ts"].to_numpy(),
        series["queue_length"].to_numpy(),
    ):
        out.append(
            {
                "ph": "C",
                "name": f"Queue length stream {int(s)}",
                "pid": int(d),
                "tid": int(s),
                "ts": (int(ts) + int(base_ns)) / 1000.0,
                "args": {"queue_length": int(q)},
            }
        )
    return out


def queue_length(t: Any, rows: np.ndarray | None = None) -> dict:
    """The summary as a JSON-able dict: `streams` (rows of `queue_length_summary`), `reason` (why empty, or None)."""
    s = queue_length_series(t, rows)
    if not len(s):
        return {"streams": [], "reason": NO_GPU if not len(gpu_activities(t, rows)) else NO_QUEUE}
    return {"streams": queue_length_summary(s).to_dict(orient="records"), "reason": None}
