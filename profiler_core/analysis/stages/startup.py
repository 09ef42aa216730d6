"""One-time CUDA start-up inside a trace's window: the runtime and driver calls that create the context, load
modules or libraries, or otherwise pay a process's first-use cost, told apart from the work the steps repeat.

A start-up call is a runtime or driver call (`cuda_runtime`/`cuda_driver`, HIP's included) that is neither a
synchronising call (SYNC_NAMES: it waits for the GPU, host sync) nor a copy (a name holding "Memcpy": its time is
the copy's or the stream's it waits on), and is

* a start-up call by its name (STARTUP_NAMES, STARTUP_PREFIXES: driver initialisation, context creation and
  primary-context retain, module and library loading, their HIP spellings), whatever it lasts; or
* a one-time cost by the evidence of its own name's calls: it lasts at least STARTUP_MIN_NS (50 ms, where a launch,
  an allocation or an attribute query takes µs), and either it is the only call of its name in the trace (the first
  CUDA call of a process, such as cudaDeviceGetStreamPriorityRange or cudaGetDeviceCount, is where the context is
  created) or calls of its name follow it and every one of them is at least STARTUP_RATIO (10) times shorter (the
  cost was not paid again: the first launch that loads its module, the first cudaFree that initialises the
  allocator);

and the GPU ran recorded work (kernel, memcpy, memset, any device) during at most STARTUP_MAX_BUSY (half) of it:
a call the GPU was busy under waits for the GPU, it does not start anything. A slow call that recurs (a hipFree of
70 ms in each iteration, a blocking copy in every step) has a comparable call after it, or is the last of several,
and is never start-up; nor is a launch slow among slow launches (the CUPTI profiler's kernel replay makes every
launch tens of ms: a launch of 1.2 s before launches of 0.16 s is not ten times above them). Left out on purpose: a
cost split over several calls of one name, each under ten times the next (cudaMalloc calls of 0.5 s in a row),
stays where the ledger puts host calls.

`startup_calls(t)` gives the rows (positions in t.events, ascending) of the start-up calls; `startup_facts(t)`
their count, the union of their spans and the largest of them, for the notes and the advice.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...trace.categories import GPU_ACTIVITY_CATS, LAUNCH_CATS
from .. import intervals
from .columns import category_mask, column_codes
from .registry import stage

__all__ = [
    "STARTUP_MAX_BUSY",
    "STARTUP_MIN_NS",
    "STARTUP_NAMES",
    "STARTUP_PREFIXES",
    "STARTUP_RATIO",
    "SYNC_NAMES",
    "is_startup_name",
    "startup_calls",
    "startup_facts",
]

#: the synchronising calls: they wait for the GPU (host sync), never start-up
SYNC_NAMES = frozenset(
    {
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cuCtxSynchronize",
        "cuStreamSynchronize",
        "cuEventSynchronize",
        "hipDeviceSynchronize",
        "hipStreamSynchronize",
        "hipEventSynchronize",
        "hipMemcpy",
    }
)
#: calls that are start-up by their name: driver initialisation, context creation, module and library loading
STARTUP_NAMES = frozenset(
    {"cuInit", "cuDevicePrimaryCtxRetain", "hipInit", "hipDevicePrimaryCtxRetain", "cudaInitDevice", "hipInitDevice"}
)
#: name prefixes of start-up calls (cuCtxCreate_v2, cuModuleLoadData, cuLibraryLoadData, hipModuleLoad, ...)
STARTUP_PREFIXES = ("cuCtxCreate", "cuModuleLoad", "cuLibraryLoad", "hipCtxCreate", "hipModuleLoad", "hipLibraryLoad")
#: a call of another name is start-up from this long (ns) ...
STARTUP_MIN_NS = 50_000_000
#: ... and this many times longer than every later call of its name
STARTUP_RATIO = 10.0
#: the most of a call the GPU may be busy under for it to be start-up (more: it waits for the GPU)
STARTUP_MAX_BUSY = 0.5
#: how many of the longest start-up calls `startup_facts` lists
TOP_CALLS = 5


def is_startup_name(name: str) -> bool:
    """A call that is start-up by its name (STARTUP_NAMES, STARTUP_PREFIXES)."""
    return name in STARTUP_NAMES or name.startswith(STARTUP_PREFIXES)


def _busy_within(gs: np.ndarray, ge: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per range [a, b): how long the sorted disjoint ranges [gs, ge) cover of it (ns)."""
    if not len(gs):
        return np.zeros(len(a), np.int64)
    return np.rint(intervals.busy_before(gs, ge, b) - intervals.busy_before(gs, ge, a)).astype(np.int64)


def _startup_calls(t: Any) -> np.ndarray:
    ev = t.events
    if len(ev) == 0:
        return np.zeros(0, np.int64)
    rows = np.flatnonzero(category_mask(ev, LAUNCH_CATS))
    if not len(rows):
        return rows.astype(np.int64)
    dur = ev["dur"].to_numpy(np.int64)[rows]
    codes, table = column_codes(ev["name"].take(rows))
    texts = [str(x) for x in table]
    never = np.array([x in SYNC_NAMES or "Memcpy" in x for x in texts], dtype=bool)
    by_name = np.array([is_startup_name(x) for x in texts], dtype=bool)
    cand = ~never[codes] & (by_name[codes] | (dur >= STARTUP_MIN_NS))
    if not cand.any():
        return np.zeros(0, np.int64)
    keep = cand & by_name[codes]
    ts_rows = ev["ts"].to_numpy(np.int64)[rows]
    order = np.lexsort((rows, ts_rows, codes))  # by name, then in time order
    bounds = np.searchsorted(codes[order], np.arange(len(texts) + 1))
    for c in np.unique(codes[cand & ~by_name[codes]]).tolist():
        same = order[bounds[c] : bounds[c + 1]]
        d = dur[same]
        if len(same) == 1:
            keep[same] = True
            continue
        later = np.empty(len(d), np.int64)  # the longest call after each one (-1: none follows)
        later[-1] = -1
        later[:-1] = np.maximum.accumulate(d[::-1])[::-1][1:]
        keep[same] = cand[same] & (later >= 0) & (d >= STARTUP_RATIO * later)
    if not keep.any():
        return np.zeros(0, np.int64)
    ts = ev["ts"].to_numpy(np.int64)
    gs, ge = intervals.merged_where(ts, ev["dur"].to_numpy(np.int64), category_mask(ev, GPU_ACTIVITY_CATS))
    k = np.flatnonzero(keep)
    a = ts[rows[k]]
    busy = _busy_within(gs, ge, a, a + dur[k])
    ok = busy <= STARTUP_MAX_BUSY * dur[k]
    return np.sort(rows[k[ok]]).astype(np.int64)


@stage()
def startup_calls(t: Any) -> np.ndarray:
    """Positions in t.events (ascending) of the one-time start-up calls (module doc: the rule)."""
    return _startup_calls(t)


def startup_facts(t: Any, window: tuple[int, int] | None = None) -> dict:
    """The start-up calls (of those that overlap `window`, clipped to it): `count`, `ns` (the union of their
    spans), `idle_ns` (of that, the time no GPU activity ran: what the GPU lost to start-up), `calls` (the
    TOP_CALLS longest: name, ts_ns, dur_ns, longest first)."""
    rows = startup_calls(t)
    ev = t.events
    ts = ev["ts"].to_numpy(np.int64)[rows]
    te = ts + ev["dur"].to_numpy(np.int64)[rows]
    if window is not None:
        lo, hi = window
        sel = (te > lo) & (ts < hi)
        rows, ts, te = rows[sel], np.clip(ts[sel], lo, hi), np.clip(te[sel], lo, hi)
    out: dict = {"count": int(len(rows)), "ns": 0, "idle_ns": 0, "calls": []}
    if not len(rows):
        return out
    span = intervals.merge_ranges(ts, te)
    gs, ge = intervals.merged_where(
        ev["ts"].to_numpy(np.int64), ev["dur"].to_numpy(np.int64), category_mask(ev, GPU_ACTIVITY_CATS)
    )
    out["ns"] = intervals.total_length(span)
    out["idle_ns"] = intervals.total_length(intervals.subtract_ranges(span, np.stack([gs, ge], axis=1)))
    names = ev["name"].take(rows).astype(str).to_numpy()
    longest = np.argsort(-(te - ts), kind="stable")[:TOP_CALLS]
    out["calls"] = [{"name": str(names[i]), "ts_ns": int(ts[i]), "dur_ns": int(te[i] - ts[i])} for i in longest]
    return out
