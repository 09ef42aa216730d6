"""The steps stage: ProfilerStep ranges (torch-tb-profiler's rules, stretched to the GPU work launched in
them) and the GPU work launched before the first step."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...trace.categories import OP_CATS, PYTHON_FUNCTION, TRACE
from .classify import STEP_PREFIX, is_step_name
from .columns import category_mask, name_mask
from .gpu_links import link_gpu_to_ops
from .registry import stage

__all__ = ["steps", "early_gpu_rows", "AROUND_OPS"]

#: what a trace without ProfilerStep holds around its operators and leaves out of its window: the profiler's own
#: span, Python frames (with_stack / python tracer) and the profiler's overhead records
AROUND_OPS = (TRACE, PYTHON_FUNCTION, "overhead")


def _step_number(name: str) -> str:
    return name[len(STEP_PREFIX) :] if name.startswith(STEP_PREFIX) else name


def _empty_steps() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "step": pd.Series([], dtype=object),
            "start": pd.Series([], dtype=np.int64),
            "end": pd.Series([], dtype=np.int64),
            "host_start": pd.Series([], dtype=np.int64),
            "host_end": pd.Series([], dtype=np.int64),
            "device_ops": pd.Series([], dtype=np.int64),
        }
    )


def _steps(t: Any) -> pd.DataFrame:
    ev = t.events
    if len(ev) == 0:
        return _empty_steps()
    ts = ev["ts"].to_numpy(np.int64)
    dur = ev["dur"].to_numpy(np.int64)

    def te(rows: np.ndarray) -> np.ndarray:  # end times of some rows (not a whole-trace column: 88 MB at 11M)
        return ts[rows] + dur[rows]

    is_cpu = category_mask(ev, OP_CATS)
    is_step = is_cpu & name_mask(ev, is_step_name)
    srows = np.flatnonzero(is_step)
    if len(srows):
        srows = srows[np.lexsort((srows, ts[srows]))]
        names = [_step_number(str(n)) for n in ev["name"].take(srows).to_numpy()]  # (not every row's text)
        hs, he = ts[srows], te(srows)
    else:  # no ProfilerStep: one step "0" over the operators' span (module doc)
        sel = ~category_mask(ev, AROUND_OPS)
        if not sel.any():
            sel = ~category_mask(ev, (TRACE,))
        if not sel.any():
            return _empty_steps()
        rows = np.flatnonzero(sel)
        names, hs, he = ["0"], np.array([ts[rows].min()]), np.array([te(rows).max()])
    n = len(hs)

    gl = link_gpu_to_ops(t)
    grow, grt = gl["row"].to_numpy(), gl["runtime"].to_numpy()
    matched_count = np.zeros(n, np.int64)
    dev_max = np.full(n, np.iinfo(np.int64).min)
    matched = np.zeros(len(grow), dtype=bool)
    has_rt = grt >= 0
    if has_rt.any():
        rs, re_ = ts[grt[has_rt]], te(grt[has_rt])
        k = np.searchsorted(hs, rs, side="right") - 1
        inside = (k >= 0) & (re_ <= he[np.maximum(k, 0)])
        idx = np.flatnonzero(has_rt)[inside]
        kk = k[inside]
        matched[idx] = True
        matched_count = np.bincount(kk, minlength=n).astype(np.int64)
        np.maximum.at(dev_max, kk, te(grow[idx]))
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
    return pd.DataFrame(
        {
            "step": names,
            "start": start.astype(np.int64),
            "end": end.astype(np.int64),
            "host_start": hs.astype(np.int64),
            "host_end": he.astype(np.int64),
            "device_ops": matched_count.astype(np.int64),
        }
    )


@stage(link_gpu_to_ops)
def steps(t: Any) -> pd.DataFrame:
    """ProfilerStep ranges with torch-tb-profiler's rules: columns `step` ("5"), `start`, `end` (ns, after the
    GPU adjustment), `host_start`, `host_end` (the CPU range), `device_ops` (GPU activities launched inside).

    Without ProfilerStep events: one step "0" over the operators' span, from the first start to the last end of
    every event but those AROUND_OPS (the profiler's own `Trace` span, Python frames, the profiler's overhead
    records): CPU ops and annotations, runtime calls and GPU activity. Python frames enclose the ops (the script's
    module, the profiler's __exit__) and would add time nothing recorded explains; a trace of Python frames
    only keeps them (every event but the `Trace` span, torch-tb-profiler's rule). When GPU work
    is linked to launches inside steps, each step runs from max(previous step end, its CPU start) to max(its CPU
    end, the end of the GPU work it launched); trailing steps that launched nothing, or under 80% of the previous
    step's GPU activities (work not fully captured), are dropped. Unlike torch-tb-profiler 0.4.3, GPU work launched
    before the first step never moves its start (the first step starts with its CPU range, every step ends no
    earlier than its CPU range); `early_gpu_rows` names that work so views can leave it out."""
    return _steps(t)


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


@stage(steps, link_gpu_to_ops)
def early_gpu_rows(t: Any) -> np.ndarray:
    """Positions of the GPU activities launched before the profiled steps: their launch call starts before
    the first ProfilerStep, or (launch not in the trace) they start before the first GPU activity launched
    inside a step. Empty when no GPU work is linked to a step. The step-time breakdown leaves them out."""
    return _early_gpu_rows(t)
