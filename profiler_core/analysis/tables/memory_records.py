"""The trace's memory records (stage `memory_records`: allocations and frees with device names, allocated and
reserved totals) and the op that made each (stage `memory_record_ops`); the Memory view windows and renders them."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from profiler_core.analysis.stages.columns import trace_origin_ns
from profiler_core.analysis.stages.op_tree import innermost_op_at, op_tree
from profiler_core.analysis.stages.registry import stage

_CPU_TYPES = (0, 2, 5)  # CPU, MKLDNN, IDEEP
_GPU_TYPES = (1, 6)  # CUDA, HIP


def _device_names(dtype: np.ndarray, did: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Per-record device label code and the sorted label list (CPU first, then GPUs by id)."""
    keys = pd.DataFrame({"t": dtype, "i": did})
    uniq = keys.drop_duplicates().to_numpy()
    labels = {}
    for t_, i_ in uniq.tolist():
        if t_ in _CPU_TYPES:
            labels[(t_, i_)] = ((0, 0), "CPU")
        elif t_ in _GPU_TYPES:
            labels[(t_, i_)] = ((1, i_), f"GPU{max(i_, 0)}")
        else:
            labels[(t_, i_)] = ((2, t_ * 1000 + i_), f"device{t_}:{i_}")
    names = sorted(set(labels.values()))
    order = []
    for _, nm in names:
        if nm not in order:
            order.append(nm)
    code_of = {k: order.index(v[1]) for k, v in labels.items()}
    if not len(dtype):
        return np.zeros(0, np.int64), order
    idx = pd.MultiIndex.from_frame(keys)
    codes = (
        np.array([code_of[k] for k in idx.tolist()], dtype=np.int64)
        if len(uniq) > 1
        else np.zeros(len(dtype), np.int64)
    )
    return codes, order


@stage()
def memory_records(t: Any) -> tuple[pd.DataFrame, list[str]]:
    """The memory records stage: per device-sorted record, dev, rel ts (ns), allocated, reserved, pid, tid, abs ts;
    and the device names."""
    m = t.memory
    if m is None or not len(m):
        return pd.DataFrame(
            {
                c: np.zeros(0, np.int64)
                for c in ("ts", "dev", "bytes", "addr", "alloc", "reserved", "pid", "tid", "abs_ts")
            }
        ), []
    origin = trace_origin_ns(t)
    dev, names = _device_names(m["device_type"].to_numpy(np.int64), m["device_id"].to_numpy(np.int64))
    ts = m["ts"].to_numpy(np.int64)
    order = np.lexsort((m["idx"].to_numpy(np.int64) if "idx" in m else np.arange(len(m)), ts))
    b = m["bytes"].to_numpy(np.int64)[order]
    dev = dev[order]
    alloc = m["total_allocated"].to_numpy(np.int64)[order].copy()
    missing = alloc < 0
    if missing.any():  # no Total Allocated: running sum of the sizes, per device
        run = pd.Series(b).groupby(dev).cumsum().to_numpy()
        alloc[missing] = run[missing]
    reserved = m["total_reserved"].to_numpy(np.int64)[order]
    pid, tid = m["pid"].to_numpy(np.int64)[order], m["tid"].to_numpy(np.int64)[order]
    df = pd.DataFrame(
        {
            "ts": ts[order] - origin,
            "dev": dev,
            "bytes": b,
            "addr": m["addr"].to_numpy(np.int64)[order],
            "alloc": alloc,
            "reserved": reserved,
            "pid": pid,
            "tid": tid,
            "abs_ts": ts[order],
        }
    )
    return df, names


@stage(memory_records, op_tree)
def memory_record_ops(t: Any) -> np.ndarray:
    """Per record (in memory_records order): position in t.events of the innermost op around it, or -1."""
    rec, _ = memory_records(t)
    if not len(rec) or not len(t.events):
        return np.full(len(rec), -1, np.int64)
    return innermost_op_at(t, rec["pid"].to_numpy(), rec["tid"].to_numpy(), rec["abs_ts"].to_numpy())


def device_windows(t: Any, a: float, b: float) -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray]]:
    """Per device (in `memory_records`' order): the allocated and reserved bytes over [a, b] ns (ts as floats),
    starting with the level held when the window opens, reserved clipped at 0."""
    rec, names = memory_records(t)
    ts_all = rec["ts"].to_numpy()
    devs = rec["dev"].to_numpy()
    al_all, rs_all = rec["alloc"].to_numpy(), rec["reserved"].to_numpy()
    out = []
    for code, name in enumerate(names):
        sel = np.flatnonzero(devs == code)
        ts, al, rs = ts_all[sel], al_all[sel], rs_all[sel]
        i0 = np.searchsorted(ts, a, side="left")
        i1 = np.searchsorted(ts, b, side="right")
        ts_w, al_w, rs_w = ts[i0:i1].astype(np.float64), al[i0:i1], rs[i0:i1]
        if i0 > 0 and math.isfinite(a):  # the level held when the window opens
            ts_w = np.concatenate([[a], ts_w])
            al_w = np.concatenate([[al[i0 - 1]], al_w])
            rs_w = np.concatenate([[rs[i0 - 1]], rs_w])
        out.append((name, ts_w, al_w, np.maximum(rs_w, 0)))
    return out


def downsample(ts: np.ndarray, alloc: np.ndarray, res: np.ndarray, max_points: int) -> np.ndarray:
    """Indices of a curve's points to keep: per time bucket min/max allocated and max reserved, plus both ends."""
    n = len(ts)
    if n <= max_points:
        return np.arange(n)
    nb = max(1, (max_points - 2) // 3)
    lo, hi = float(ts[0]), float(ts[-1])
    width = (hi - lo) / nb or 1.0
    bucket = np.minimum(((ts - lo) / width).astype(np.int64), nb - 1)
    df = pd.DataFrame({"b": bucket, "a": alloc, "r": res})
    g = df.groupby("b", sort=False)
    keep = np.concatenate(
        [g["a"].idxmax().to_numpy(), g["a"].idxmin().to_numpy(), g["r"].idxmax().to_numpy(), [0, n - 1]]
    )
    return np.unique(keep)
