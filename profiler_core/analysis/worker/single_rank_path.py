"""The single-rank critical path: the chain of dependent CPU and GPU work that set the length of one trace's step
(or of its whole window), found as the longest path of a dependency graph, the way Holistic Trace Analysis'
critical path analysis builds it (docs/diagnosis.md, "Single-rank critical path").

Graph: a start and an end node per CPU op (`cpu_op`) and runtime/driver call (`cuda_runtime`, `cuda_driver`)
of positive duration that starts in the window, and per GPU activity (kernel, memcpy, memset) whose launch call
is one of those. Edges, each weighted with the time it spans unless said otherwise:

* CPU: per thread, the nodes in nesting order (enter parent, enter child, leave child, ..., leave parent);
  the step from one top-level op's end to the next one's start is an `idle_gap` (weight 0: time the trace does
  not attribute, such as Python between ops), and the span of a blocking call (`BLOCKING_CALLS`) is a
  `sync_wait` (weight 0: its time is carried by the GPU work it waited for).
* launch -> GPU activity: from the launch call's start to the activity's start (`launch_delay`) when its
  stream was empty when the call started (the previous activity on the stream, over the whole trace, had
  ended); otherwise the previous activity's end -> this one's start (`gpu_gap`, stream order; no edge when
  that activity is outside the window). Each activity's own span is a `kernel` edge.
* synchronisation (weight 0, `sync_wait`): the last activity started on each stream before a
  cudaDeviceSynchronize, cudaEventSynchronize or cudaStreamSynchronize (or their HIP and driver spellings) ends
  (that call's stream only when the trace has its `Stream Sync` record) -> the call's end; a blocking call's own
  GPU activity -> the call's end; for a `Stream Wait Event` record, the latest-ending activity of another stream
  launched before the cudaStreamWaitEvent call -> the next activity launched onto the waiting stream (which is
  then not bound by its launch or predecessor when that activity ended later).

The path is the longest (most weight) in this graph (`longest_path.heaviest_path`); its edges tile the time
from its first to its last node.

`critical_path(t, step=None)` returns a JSON-able dict:

    {"scope": "trace" | "step" | "window", "step": step name or None, "start_ns", "end_ns",
     "window_ns" (end - start: the step or window the shares are of),
     "length_ns": the path's weight (the time work on the path took), "span_ns": its last node - its first,
     "segments": [{"kind", "name", "start_ns", "end_ns", "lane" ("thread <tid>" | "device <d> stream <s>"),
                   "weighted": False for sync_wait and idle_gap}, ...]  (time order, consecutive equal
                   kind/name/lane joined; at most MAX_SEGMENTS, the longest),
     "segments_total": how many segments there are in all,
     "by_kind": {kind: {"ns": total, "share": ns / window_ns}} for every kind in KINDS,
     "top": [{"kind", "name", "ns"}] (the TOP_N largest (kind, name) totals),
     "reason": None, or why there is no path (then "segments" is empty and the totals are None)}

Kinds (`KINDS`): `cpu_op`, `launch` (a launch call's CPU time), `runtime` (other runtime/driver calls),
`start_up` (a launch or runtime call that is one-time CUDA start-up, `stages.startup`: context creation, module
loading; never launch or runtime time), `launch_delay`, `kernel` (any GPU activity), `gpu_gap`, `sync_wait`,
`idle_gap`. Times are ns relative to the trace's origin, like t.events.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from profiler_core.analysis.gpu_idle.gpu_launches import QUEUE_LAUNCH_NAMES, gpu_activities
from profiler_core.analysis.stages.columns import category_mask
from profiler_core.analysis.stages.gpu_links import first_position_by_key, lookup
from profiler_core.analysis.stages.op_tree import group_codes, innermost_op_at
from profiler_core.analysis.stages.startup import SYNC_NAMES, startup_calls
from profiler_core.analysis.stages.steps import steps as steps_stage
from profiler_core.analysis.worker.longest_path import heaviest_path
from profiler_core.trace.categories import CPU_OP, CUDA_SYNC, LAUNCH_CATS

__all__ = [
    "BLOCKING_CALLS",
    "KINDS",
    "NO_EVENTS",
    "NO_STEP",
    "critical_path",
    "critical_path_window",
    "single_rank_path",
]

#: runtime calls that block the host until the GPU catches up (HTA's list, with the HIP and driver spellings of the
#: synchronising calls): their span weighs 0
BLOCKING_CALLS = (
    frozenset(
        {
            "cudaDeviceSynchronize",
            "cudaStreamSynchronize",
            "cudaEventQuery",
            "cudaEventSynchronize",
            "cudaMemcpy",
            "cudaMemcpyAsync",
        }
    )
    | SYNC_NAMES
)
#: blocking calls that wait for earlier GPU work (sync edges from the streams' last activities)
WAIT_CALLS = frozenset(
    {
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "hipDeviceSynchronize",
        "hipStreamSynchronize",
        "hipEventSynchronize",
        "cuCtxSynchronize",
        "cuStreamSynchronize",
        "cuEventSynchronize",
    }
)
#: the calls whose stream a `Stream Sync` record names
STREAM_SYNC_CALLS = frozenset({"cudaStreamSynchronize", "hipStreamSynchronize", "cuStreamSynchronize"})
KINDS = ("cpu_op", "launch", "runtime", "start_up", "launch_delay", "kernel", "gpu_gap", "sync_wait", "idle_gap")
_ZERO_WEIGHT = ("sync_wait", "idle_gap")
TOP_N = 20
#: the most segments a result lists (the longest ones, in time order; `segments_total` counts them all)
MAX_SEGMENTS = 2000
NO_EVENTS = "no CPU op or runtime call of positive duration starts in the window"
NO_STEP = "the trace has no step {step!r} (it has {n})"

# edge kinds (codes into KINDS); _ENCLOSING: a CPU gap inside an op, attributed to the op that holds it
_K = {k: i for i, k in enumerate(KINDS)}
_ENCLOSING = -1


def single_rank_path(t: Any, step: int | None = None) -> dict:
    """The critical path of one trace: over its whole window, or of its `step`-th step (see `critical_path`)."""
    return critical_path(t, step)


def critical_path(t: Any, step: int | None = None) -> dict:
    """The critical path over the trace's window (`step` None) or over the `step`-th step of the steps stage
    (0-based); the dict is described in the module docstring."""
    if step is None:
        ev = t.events
        if len(ev) == 0:
            return _empty("trace", None, 0, 0, NO_EVENTS)
        ts = ev["ts"].to_numpy(np.int64)
        te = ts + ev["dur"].to_numpy(np.int64)
        return critical_path_window(t, int(ts.min()), int(te.max()), scope="trace")
    st = steps_stage(t)
    if not 0 <= step < len(st):
        return _empty("step", None, 0, 0, NO_STEP.format(step=step, n=len(st)))
    r = st.iloc[step]
    return critical_path_window(
        t,
        int(r["host_start"]),
        int(r["host_end"]),
        scope="step",
        step_name=str(r["step"]),
        span=(int(r["start"]), int(r["end"])),
    )


def _empty(scope: str, step_name: str | None, start: int, end: int, reason: str) -> dict:
    return {
        "scope": scope,
        "step": step_name,
        "start_ns": start,
        "end_ns": end,
        "window_ns": end - start,
        "length_ns": None,
        "span_ns": None,
        "segments": [],
        "segments_total": 0,
        "by_kind": {k: {"ns": None, "share": None} for k in KINDS},
        "top": [],
        "reason": reason,
    }


class _Graph:
    """Nodes (time, order key) and edges (src, dst, weight, kind, attributed event row) of one window."""

    def __init__(self) -> None:
        self.src: list[np.ndarray] = []
        self.dst: list[np.ndarray] = []
        self.w: list[np.ndarray] = []
        self.kind: list[np.ndarray] = []
        self.attr: list[np.ndarray] = []

    def add(self, src, dst, w, kind, attr) -> None:
        n = len(src)
        self.src.append(np.asarray(src, np.int64))
        self.dst.append(np.asarray(dst, np.int64))
        self.w.append(np.broadcast_to(np.asarray(w, np.int64), n).copy())
        self.kind.append(np.broadcast_to(np.asarray(kind, np.int64), n).copy())
        self.attr.append(np.broadcast_to(np.asarray(attr, np.int64), n).copy())

    def arrays(self) -> tuple[np.ndarray, ...]:
        def cat(parts: list[np.ndarray]) -> np.ndarray:
            return np.concatenate(parts) if parts else np.zeros(0, np.int64)

        return cat(self.src), cat(self.dst), cat(self.w), cat(self.kind), cat(self.attr)


def critical_path_window(
    t: Any,
    start_ns: int,
    end_ns: int,
    *,
    scope: str = "window",
    step_name: str | None = None,
    span: tuple[int, int] | None = None,
) -> dict:
    """The critical path of the CPU events starting in [start_ns, end_ns] and the GPU work they launched;
    shares are of `span` (default: the window)."""
    lo, hi = span if span is not None else (start_ns, end_ns)
    ev = t.events
    ts_all = ev["ts"].to_numpy(np.int64)
    dur_all = ev["dur"].to_numpy(np.int64)
    cpu_cat = category_mask(ev, (CPU_OP,))
    rt_cat = category_mask(ev, LAUNCH_CATS)
    crows = np.flatnonzero((cpu_cat | rt_cat) & (dur_all > 0) & (ts_all >= start_ns) & (ts_all <= end_ns))
    if len(crows) == 0:
        return _empty(scope, step_name, lo, hi, NO_EVENTS)
    names = _Names(ev)
    nc = len(crows)
    cs, ce = ts_all[crows], ts_all[crows] + dur_all[crows]
    cname = names.codes[crows]
    blocking = np.isin(cname, names.codes_of(BLOCKING_CALLS)) & rt_cat[crows]
    pos_of_row = np.full(len(ev), -1, np.int64)
    pos_of_row[crows] = np.arange(nc)

    a_all = gpu_activities(t)
    launch_all = a_all["launch"].to_numpy(np.int64)
    inside = np.flatnonzero((launch_all >= 0) & (pos_of_row[np.maximum(launch_all, 0)] >= 0))
    a = a_all.iloc[inside]
    ng = len(a)
    gs, ge = a["start"].to_numpy(np.int64), a["end"].to_numpy(np.int64)
    grow = a["row"].to_numpy(np.int64)
    glaunch = pos_of_row[a["launch"].to_numpy(np.int64)]
    skey = group_codes(a["device"].to_numpy(np.int64), a["stream"].to_numpy(np.int64))
    # each activity's predecessor on its stream over the whole trace (work queued before the window counts)
    prev_all = _stream_predecessors(a_all)
    win_of = np.full(len(a_all), -1, np.int64)
    win_of[inside] = np.arange(ng)
    prev_any = prev_all[inside]
    prev_end = np.where(prev_any >= 0, a_all["end"].to_numpy(np.int64)[np.maximum(prev_any, 0)], -1)
    prev = np.where(prev_any >= 0, win_of[np.maximum(prev_any, 0)], -1)  # -1 also when outside the window

    # node ids: CPU starts [0, nc), CPU ends [nc, 2nc), GPU starts [2nc, 2nc+ng), GPU ends [2nc+ng, 2nc+2ng)
    node_ts = np.concatenate([cs, ce, gs, ge])
    g = _Graph()

    # CPU: nesting order per thread (a parent enters before and leaves after its children)
    thread = group_codes(ev["pid"].to_numpy()[crows], ev["tid"].to_numpy()[crows])
    enter = np.lexsort((crows, -(ce - cs), cs, thread))
    entry_rank = np.empty(nc, np.int64)
    entry_rank[enter] = np.arange(nc)
    ids = np.concatenate([np.arange(nc), nc + np.arange(nc)])
    k_thread = np.concatenate([thread, thread])
    k_time = np.concatenate([cs, ce])
    k_isstart = np.concatenate([np.ones(nc, np.int64), np.zeros(nc, np.int64)])
    k_tie = np.concatenate([entry_rank, -entry_rank])
    order = np.lexsort((k_tie, k_isstart, k_time, k_thread))
    seq = ids[order]
    depth_after = np.cumsum(np.where(k_isstart[order] == 1, 1, -1))
    u, v = seq[:-1], seq[1:]
    same = k_thread[order][:-1] == k_thread[order][1:]
    depth_before_v = depth_after[:-1]
    u, v, depth_before_v = u[same], v[same], depth_before_v[same]
    v_start = v < nc
    u_start = u < nc
    ev_u, ev_v = u % nc, v % nc
    gap = v_start & (depth_before_v == 0)
    sync_end = ~v_start & blocking[ev_v]
    attr = np.where(u_start, ev_u, np.where(~v_start, ev_v, _ENCLOSING))
    kind = np.full(len(u), _K["cpu_op"], np.int64)
    kind[gap] = _K["idle_gap"]
    kind[sync_end & ~gap] = _K["sync_wait"]
    w = node_ts[v] - node_ts[u]
    w[gap | sync_end] = 0
    attr[gap] = _ENCLOSING
    g.add(u, v, w, kind, attr)
    cpu_seq = np.empty(2 * nc, np.int64)
    cpu_seq[seq] = np.arange(2 * nc)

    if ng:
        gstart, gend = 2 * nc + np.arange(ng), 2 * nc + ng + np.arange(ng)
        g.add(gstart, gend, ge - gs, _K["kernel"], -2 - np.arange(ng))
        so = np.lexsort((grow, gs, skey))
        ls = cs[glaunch]
        # bound by its launch when its stream was empty when the call started; else by its predecessor (no edge
        # when that one is outside the window); by its launch also when it overlaps its predecessor
        # (and not when it waited for another stream's work that ended after that: a stream wait edge instead)
        w_dst, w_src, w_call = _stream_waits(t, names, crows, cs, thread, a, glaunch)
        wait_end = np.full(ng, -1, np.int64)
        wait_end[w_dst] = ge[w_src]
        has_prev = prev >= 0
        pp = np.maximum(prev, 0)
        by_launch = ((prev_any < 0) | (prev_end < ls)) & (gs >= ls) & (wait_end < ls)
        by_prev = ~by_launch & has_prev & (gs >= ge[pp]) & (wait_end < ge[pp])
        fallback = ~by_launch & has_prev & (gs < ge[pp]) & (gs >= ls) & (wait_end < ls)
        lk = by_launch | fallback
        g.add(glaunch[lk], gstart[lk], gs[lk] - ls[lk], _K["launch_delay"], glaunch[lk])
        g.add(gend[prev[by_prev]], gstart[by_prev], gs[by_prev] - ge[prev[by_prev]], _K["gpu_gap"], -1)
        g.add(gend[w_src], gstart[w_dst], 0, _K["sync_wait"], w_call)
        _add_sync_edges(t, g, crows, ce, names, blocking, a, skey, so, nc, ng)
        gpu_seq = np.empty(2 * ng, np.int64)
        rank_in_stream = np.empty(ng, np.int64)
        rank_in_stream[so] = np.arange(ng)
        gpu_seq[:ng] = 2 * rank_in_stream
        gpu_seq[ng:] = 2 * rank_in_stream + 1
    else:
        gpu_seq = np.zeros(0, np.int64)

    src, dst, wt, knd, att = g.arrays()
    # a topological order: time, then (at equal times) GPU ends, CPU nodes, GPU starts, each in its own order
    cls = np.concatenate(
        [np.ones(2 * nc, np.int64), np.full(ng, 2, np.int64), np.where(ge > gs, 0, 3).astype(np.int64)]
    )
    within = np.concatenate([cpu_seq, gpu_seq])
    topo = np.lexsort((within, cls, node_ts))
    pos = np.empty(len(node_ts), np.int64)
    pos[topo] = np.arange(len(node_ts))
    ok = pos[src] < pos[dst]
    src, dst, wt, knd, att = src[ok], dst[ok], wt[ok], knd[ok], att[ok]
    path_edges = heaviest_path(pos, src, dst, wt)
    if not len(path_edges):
        return _empty(scope, step_name, lo, hi, NO_EVENTS)
    e_src, e_dst = src[path_edges], dst[path_edges]
    seg = pd.DataFrame(
        {
            "kind": knd[path_edges],
            "attr": att[path_edges],
            "start_ns": node_ts[e_src],
            "end_ns": node_ts[e_dst],
            "weight": wt[path_edges],
            "src": e_src,
            "dst": e_dst,
        }
    )
    return _report(t, seg, crows, names, rt_cat[crows], a, scope, step_name, lo, hi)


def _stream_predecessors(a: pd.DataFrame) -> np.ndarray:
    """For each row of `a` (gpu_activities), the row of the activity before it on its (device, stream) by
    start, or -1."""
    n = len(a)
    prev = np.full(n, -1, np.int64)
    if n < 2:
        return prev
    key = group_codes(a["device"].to_numpy(np.int64), a["stream"].to_numpy(np.int64))
    o = np.lexsort((a["row"].to_numpy(), a["start"].to_numpy(np.int64), key))
    prev[o[1:]] = np.where(key[o[1:]] == key[o[:-1]], o[:-1], -1)
    return prev


def _stream_waits(t, names, crows, cs, thread, a, glaunch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cross-stream waits from `Stream Wait Event` records: (waiting activity, the activity it waited for, the
    cudaStreamWaitEvent call's position), in-window activity indices. The waiting activity is the next launch
    on the call's thread onto the record's stream; the waited-for one the latest-ending activity of another
    stream of that device launched before the call and ended by the waiting one's start."""
    ev = t.events
    none = (np.zeros(0, np.int64),) * 3
    rec = np.flatnonzero(category_mask(ev, (CUDA_SYNC,)) & np.isin(names.codes, names.codes_of({"Stream Wait Event"})))
    calls = np.flatnonzero(np.isin(names.codes[crows], names.codes_of({"cudaStreamWaitEvent"})))
    if not len(rec) or not len(calls) or not len(a):
        return none
    corr = ev["correlation"].to_numpy(np.int64)
    keys, vals = first_position_by_key(corr[crows[calls]], calls)
    call = lookup(keys, vals, corr[rec])
    ok = call >= 0
    rec, call = rec[ok], call[ok]
    dev = a["device"].to_numpy(np.int64)
    stm = a["stream"].to_numpy(np.int64)
    gs, ge = a["start"].to_numpy(np.int64), a["end"].to_numpy(np.int64)
    ls = cs[glaunch]
    lthread = thread[glaunch]
    by_lane: dict[tuple[int, int, int], list[int]] = {}
    for i in np.lexsort((ls, stm, dev, lthread)).tolist():
        by_lane.setdefault((int(lthread[i]), int(dev[i]), int(stm[i])), []).append(i)
    by_end: dict[int, np.ndarray] = {}
    for d in np.unique(dev).tolist():
        m = np.flatnonzero(dev == d)
        by_end[d] = m[np.argsort(ge[m], kind="stable")]
    rdev = ev["device"].to_numpy(np.int64)[rec]
    rstm = ev["stream"].to_numpy(np.int64)[rec]
    dst, src, via = [], [], []
    for c, d, s_ in zip(call.tolist(), rdev.tolist(), rstm.tolist()):
        lane = np.asarray(by_lane.get((int(thread[c]), d, s_), []), np.int64)
        k = np.searchsorted(ls[lane], cs[c], side="right") if len(lane) else 0
        if k >= len(lane):
            continue
        j = int(lane[k])
        cand = by_end.get(d)
        if cand is None:
            continue
        stop = int(np.searchsorted(ge[cand], gs[j], side="right"))
        for q in cand[max(0, stop - 64) : stop][::-1].tolist():  # the latest-ending first
            if stm[q] != s_ and ls[q] < cs[c]:
                dst.append(j)
                src.append(q)
                via.append(c)
                break
    if not dst:
        return none
    return np.asarray(dst, np.int64), np.asarray(src, np.int64), np.asarray(via, np.int64)


def _add_sync_edges(t, g, crows, ce, names, blocking, a, skey, so, nc, ng) -> None:
    """GPU -> host edges into the end of each blocking call that waits for the GPU (see the module docstring)."""
    ev = t.events
    gs, ge = a["start"].to_numpy(np.int64), a["end"].to_numpy(np.int64)
    gend = 2 * nc + ng + np.arange(ng)
    # a blocking call's own activity (cudaMemcpy) -> the call's end
    gl = a["launch"].to_numpy(np.int64)
    lpos = np.searchsorted(crows, gl)
    own = blocking[lpos] & (ge <= ce[lpos])
    g.add(gend[own], nc + lpos[own], 0, _K["sync_wait"], lpos[own])
    cname = names.codes[crows]
    waits = np.flatnonzero(np.isin(cname, names.codes_of(WAIT_CALLS)))
    if not len(waits):
        return
    # the stream of a cudaStreamSynchronize, from its Stream Sync record (same correlation), when present
    sync_rows = np.flatnonzero(category_mask(ev, (CUDA_SYNC,)))
    corr = ev["correlation"].to_numpy(np.int64)
    stream_of: dict[int, tuple[int, int]] = {}
    if len(sync_rows):
        keep = np.isin(names.codes[sync_rows], names.codes_of({"Stream Sync"}))
        for c, d, s in zip(
            corr[sync_rows][keep].tolist(),
            ev["device"].to_numpy(np.int64)[sync_rows][keep].tolist(),
            ev["stream"].to_numpy(np.int64)[sync_rows][keep].tolist(),
        ):
            stream_of[c] = (d, s)
    dev = a["device"].to_numpy(np.int64)
    stm = a["stream"].to_numpy(np.int64)
    wend = ce[waits]
    wcorr = corr[crows[waits]]
    only = np.array([stream_of.get(int(c), (-1, -1)) for c in wcorr.tolist()], np.int64).reshape(-1, 2)
    is_stream_sync = np.isin(cname[waits], names.codes_of(STREAM_SYNC_CALLS))
    for k in np.unique(skey).tolist():
        members = so[skey[so] == k]  # this stream's activities by start
        i = np.searchsorted(gs[members], wend, side="right") - 1
        last = members[np.maximum(i, 0)]
        d0, s0 = int(dev[members[0]]), int(stm[members[0]])
        applies = ~is_stream_sync | (only[:, 0] < 0) | ((only[:, 0] == d0) & (only[:, 1] == s0))
        use = (i >= 0) & (ge[last] <= wend) & applies
        g.add(gend[last[use]], nc + waits[use], 0, _K["sync_wait"], waits[use])


class _Names:
    """Event names as integer codes (the categorical column's), and codes of given names."""

    def __init__(self, ev: pd.DataFrame) -> None:
        col = ev["name"]
        if isinstance(col.dtype, pd.CategoricalDtype):
            self.codes = col.cat.codes.to_numpy().astype(np.int64)
            self.text = np.asarray(col.cat.categories.astype(str), dtype=object)
        else:
            text, self.codes = np.unique(col.astype(str).to_numpy(), return_inverse=True)
            self.text = np.asarray(text, dtype=object)
        self.index = {n: i for i, n in enumerate(self.text.tolist())}

    def codes_of(self, names: Iterable[str]) -> np.ndarray:
        return np.asarray([self.index[n] for n in names if n in self.index], np.int64)


def _report(t, seg: pd.DataFrame, crows, names: _Names, is_rt, a: pd.DataFrame, scope, step_name, lo, hi) -> dict:
    ev = t.events
    nc, ng = len(crows), len(a)
    seg = seg[(seg["end_ns"] > seg["start_ns"]).to_numpy()]  # instants (touching kernels, equal times) say nothing
    kind = seg["kind"].to_numpy().copy()
    attr = seg["attr"].to_numpy()
    start, end = seg["start_ns"].to_numpy(), seg["end_ns"].to_numpy()
    src, dst = seg["src"].to_numpy(), seg["dst"].to_numpy()
    tid = ev["tid"].to_numpy(np.int64)
    on_cpu = attr >= 0  # attributed to the CPU event at that position
    ap = np.maximum(attr, 0)
    cname = names.codes[crows[ap]] if nc else np.zeros(len(seg), np.int64)
    rt = on_cpu & is_rt[ap] & (kind == _K["cpu_op"])
    kind[rt] = np.where(np.isin(cname[rt], names.codes_of(QUEUE_LAUNCH_NAMES)), _K["launch"], _K["runtime"])
    su = startup_calls(t)
    if len(su) and nc:
        kind[rt & np.isin(crows[ap], su)] = _K["start_up"]
    name = np.where(on_cpu, cname, -1)
    gpu = attr <= -2  # the GPU activity -2 - attr
    j = np.maximum(-2 - attr, 0)
    grow = a["row"].to_numpy(np.int64)
    if ng:
        name[gpu] = names.codes[grow[j[gpu]]]
    # a gap inside an op: the op that holds it, on the thread of the gap's first node
    thread_row = crows[src % nc]
    enc = (attr == _ENCLOSING) & (kind == _K["cpu_op"])
    if enc.any():
        holder = innermost_op_at(t, ev["pid"].to_numpy()[thread_row[enc]], tid[thread_row[enc]], start[enc])
        name[enc] = np.where(holder >= 0, names.codes[np.maximum(holder, 0)], -1)
    # lanes: a GPU activity's stream (also for the gap or launch delay that leads to it), else a thread
    dst_gpu = dst >= 2 * nc
    on_stream = gpu | dst_gpu
    k = np.where(gpu, j, np.where(dst_gpu, (dst - 2 * nc) % max(ng, 1), 0))
    lane_a = np.where(on_stream, a["device"].to_numpy(np.int64)[k] if ng else 0, 0)
    lane_b = np.where(
        on_stream, a["stream"].to_numpy(np.int64)[k] if ng else 0, tid[np.where(on_cpu, crows[ap], thread_row)]
    )
    dur = end - start
    weighted = ~np.isin(kind, [_K[x] for x in _ZERO_WEIGHT])
    window = hi - lo
    by = (
        np.bincount(kind, weights=dur, minlength=len(KINDS)).astype(np.int64)
        if len(kind)
        else np.zeros(len(KINDS), np.int64)
    )
    by_kind = {
        x: {"ns": int(by[i]), "share": (int(by[i]) / window) if window > 0 else None} for i, x in enumerate(KINDS)
    }
    # the largest (kind, name) totals
    key = kind * (len(names.text) + 1) + (name + 1)
    uk, inv = np.unique(key, return_inverse=True)
    tot = np.bincount(inv, weights=dur).astype(np.int64)
    best = np.argsort(-tot, kind="stable")[:TOP_N]
    top = [
        {
            "kind": KINDS[int(uk[b] // (len(names.text) + 1))],
            "name": _text(names, int(uk[b] % (len(names.text) + 1)) - 1),
            "ns": int(tot[b]),
        }
        for b in best.tolist()
    ]
    merged = _merged(kind, name, on_stream, lane_a, lane_b, start, end)
    out = {
        "scope": scope,
        "step": step_name,
        "start_ns": int(lo),
        "end_ns": int(hi),
        "window_ns": int(window),
        "length_ns": int(dur[weighted].sum()),
        "span_ns": int(end[-1] - start[0]) if len(end) else 0,
        "segments": [],
        "segments_total": len(merged[0]),
        "by_kind": by_kind,
        "top": top,
        "reason": None,
    }
    mk, mn, ms, ma, mb, m0, m1 = merged
    keep = np.arange(len(mk))
    if len(keep) > MAX_SEGMENTS:  # the longest, in time order
        keep = np.sort(np.argsort(-(m1 - m0), kind="stable")[:MAX_SEGMENTS])
    out["segments"] = [
        {
            "kind": KINDS[kd],
            "name": _text(names, nm),
            "start_ns": s0,
            "end_ns": s1,
            "lane": f"device {la} stream {lb}" if st else f"thread {lb}",
            "weighted": KINDS[kd] not in _ZERO_WEIGHT,
        }
        for kd, nm, st, la, lb, s0, s1 in zip(
            mk[keep].tolist(),
            mn[keep].tolist(),
            ms[keep].tolist(),
            ma[keep].tolist(),
            mb[keep].tolist(),
            m0[keep].tolist(),
            m1[keep].tolist(),
        )
    ]
    return out


def _text(names: _Names, code: int) -> str:
    return "" if code < 0 else str(names.text[code])


def _merged(kind, name, on_stream, lane_a, lane_b, start, end) -> tuple[np.ndarray, ...]:
    """The segments' columns with consecutive equal (kind, name, lane) joined."""
    n = len(kind)
    if not n:
        z = np.zeros(0, np.int64)
        return z, z, z.astype(bool), z, z, z, z
    first = np.ones(n, dtype=bool)
    first[1:] = (
        (kind[1:] != kind[:-1])
        | (name[1:] != name[:-1])
        | (on_stream[1:] != on_stream[:-1])
        | (lane_a[1:] != lane_a[:-1])
        | (lane_b[1:] != lane_b[:-1])
    )
    at = np.flatnonzero(first)
    return kind[at], name[at], on_stream[at], lane_a[at], lane_b[at], start[at], np.maximum.reduceat(end, at)
