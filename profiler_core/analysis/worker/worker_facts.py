"""Per-worker facts for the cross-rank diagnosis, stored in the per-worker summary (never the trace at run level).

`worker_facts(t)` -> {"collective_calls": {...}, "phases": {...}}, both columnar (lists that go together):

  "collective_calls": {
      "groups": [key...],            # process group keys (`group_waits.group_key`: name with ranks, else size)
      "group_pg": [name...],         # the `Process Group Name` of each group
      "group_ranks": [[rank...] | None...], "group_size": [int...],   # per group (-1: size unknown)
      "group_how": [text...],        # how its calls are matched across ranks (`collectives.PG_SEQ`, ...)
      "names": [collective name...], # `nccl:all_reduce`, ...
      "group": [i...],               # per call (in time order): its group; its sequence number in the group is
                                     # its place among the group's non-wait calls here (`sequence`)
      "name": [i...], "step": [step index | -1...],
      "start": [ns...], "dur": [ns...],  # start relative to the worker's origin (`distributed.origin`)
      "bytes": [int...] (-1 unknown), "wait": [0|1...],
      "covered": [ns...],            # of the call's range, the time compute ran on this worker (its wait
                                     # there cost nothing: the cross-rank analysis counts only the rest)
      "lead": [ns...],               # how long before its start this worker was ready for the call (`ready_times`)
      "tail": [ns...],               # how long its compute had been idle when the call ended, if its next
                                     # compute waited for this call (`idle_tails`), else 0
      "dropped": n}                  # calls left out beyond MAX_CALLS
  "phases": {
      "step": [name...], "start": [ns...], "end": [ns...],   # steps as `steps`, relative to the origin
      "data_loading", "h2d", "host_sync", "launch", "gpu_idle", "compute", "comm": [ns | None...],
      "names": [text...],            # kernel and operator names the tops index
      "top_kernels": [[[i, ns]...]...], "top_ops": [[[i, ns]...]...],   # per step, largest first, TOP_N each
      "reasons": {phase: text},      # why a phase is None (the trace lacks what it needs)
      "dropped_steps": n,
      "whole_trace": bool}           # True: the trace has no ProfilerStep, its one step "0" is the whole trace
                                     # window (the `steps` stage's rule), not a training step

Phases (union of the events' ranges clipped to the step, so nothing counts twice within one phase; phases
may overlap each other): `data_loading` DataLoader/DataPipe ranges; `h2d` host-to-device copies on the GPU;
`host_sync` cudaDeviceSynchronize/StreamSynchronize/EventSynchronize and synchronous cudaMemcpy calls, outside the
time communication kernels run (a sync blocked on a collective is waiting for the other ranks, not a cause);
`launch` kernel-launch runtime calls; `gpu_idle` step time with no GPU activity; `compute` non-communication
kernels (CPU ops when the worker has no kernels); `comm` collectives. Top kernels: summed kernel time per
name; top ops: summed host self time per operator name (nested ops never count twice); both leave out
communication (its time holds waiting for other ranks, which the collective calls measure).
Bounds: at most MAX_CALLS calls (the first in time order), MAX_STEPS steps (the first), TOP_N kernels and
ops per step, names cut at NAME_LEN characters: a few hundred KB at most.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from profiler_core.analysis import intervals
from profiler_core.analysis.comm import collectives, group_waits
from profiler_core.analysis.stages.classify import STEP_PREFIX, communication_events, is_dataloader, is_step_name
from profiler_core.analysis.stages.columns import category_mask, name_mask
from profiler_core.analysis.stages.node_stats import node_stats
from profiler_core.analysis.stages.registry import cached
from profiler_core.analysis.stages.startup import SYNC_NAMES, startup_calls
from profiler_core.analysis.stages.steps import steps
from profiler_core.trace.categories import GPU_ACTIVITY_CATS, LAUNCH_CATS, OP_CATS

MAX_CALLS = 20_000
MAX_STEPS = 1_000
TOP_N = 8
NAME_LEN = 200
PHASES = ("data_loading", "h2d", "host_sync", "launch", "gpu_idle", "compute", "comm")
#: the synchronizing calls of the `host_sync` phase: the ledger's (`stages.startup.SYNC_NAMES`)
SYNC_CALLS = SYNC_NAMES
_LAUNCH_PREFIXES = ("cudaLaunch", "cuLaunch", "hipLaunch", "hipExtLaunch", "hipModuleLaunch")


def _origin(t: Any) -> int:
    from profiler_core.analysis.stages.columns import trace_origin_ns

    return int(trace_origin_ns(t))


def step_of(starts: np.ndarray, ends: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The step whose [start, end] holds each time (the later one on a shared edge), else -1."""
    out = np.full(len(x), -1, np.int64)
    if len(starts) and len(x):
        k = np.searchsorted(starts, x, side="right") - 1
        out = np.where((k >= 0) & (x <= ends[np.maximum(k, 0)]), k, -1)
    return out


def _compute_mask(t: Any) -> np.ndarray:
    """Compute: non-communication kernels, or (no kernels) CPU ops other than steps, collectives, DataLoader
    (computed once per trace: the facts, the phases and the readiness all read it)."""
    mask = cached(t, "worker_facts.compute_mask", lambda: _compute_mask_of(t))
    mask.flags.writeable = False  # shared by its readers
    return mask


def _compute_mask_of(t: Any) -> np.ndarray:
    ev = t.events
    kernel = category_mask(ev, ("kernel",))
    comm = communication_events(t)
    if kernel.any():
        return kernel & ~comm
    cpu = category_mask(ev, OP_CATS)
    is_step = name_mask(ev, lambda n: n.startswith(STEP_PREFIX))
    return cpu & ~is_step & ~comm & ~name_mask(ev, is_dataloader)


def collective_calls(t: Any, steps: pd.DataFrame, origin: int, compute: tuple | None = None) -> dict:
    """The worker's collective calls with their process group and sequence number (see the module doc);
    `compute`: the compute ranges (`intervals.prepare`), computed when not given."""
    calls = group_waits.worker_calls(t, "w")
    ranks = [r if isinstance(r, tuple) else None for r in calls["pg_ranks"]]
    sizes = calls["group_size"].to_numpy(np.int64)
    keys = [group_waits.group_key(str(g), r, int(s)) for g, r, s in zip(calls["pg"], ranks, sizes)]
    is_wait = calls["is_wait"].to_numpy(bool)
    groups = sorted(set(keys))
    gi = {k: i for i, k in enumerate(groups)}
    g_pg, g_ranks, g_size = [""] * len(groups), [None] * len(groups), [-1] * len(groups)
    g_how = [collectives.PG_SEQ] * len(groups)
    for k, pg, r, s, h in zip(keys, calls["pg"], ranks, sizes.tolist(), calls["how"].tolist()):
        i = gi[k]
        g_pg[i], g_ranks[i], g_size[i] = str(pg), list(r) if r is not None else None, max(g_size[i], int(s))
        g_how[i] = str(h)
    names = sorted(set(calls["name"].astype(str)))
    ni = {n: i for i, n in enumerate(names)}
    start = calls["start"].to_numpy(np.int64)
    end = start + calls["dur"].to_numpy(np.int64)
    step = step_of(steps["start"].to_numpy(np.int64), steps["end"].to_numpy(np.int64), start)
    n = min(len(calls), MAX_CALLS)
    in_order = collectives.collectives(t).sort_values("start", kind="stable")  # as `worker_calls` orders them
    nbytes = in_order["bytes"].to_numpy(np.int64)
    if compute is None:
        ts = t.events["ts"].to_numpy(np.int64)
        m = _compute_mask(t)
        compute = intervals.prepare(ts[m], (ts + t.events["dur"].to_numpy(np.int64))[m])
    covered = [intervals.union_in(compute, a, b) for a, b in zip(start[:n].tolist(), end[:n].tolist())]
    ready = ready_times(t, in_order)
    tail = idle_tails(compute, start[:n], end[:n])
    return {
        "groups": groups,
        "group_pg": g_pg,
        "group_ranks": g_ranks,
        "group_size": g_size,
        "group_how": g_how,
        "names": names,
        "group": [gi[k] for k in keys[:n]],
        "name": [ni[x] for x in calls["name"].astype(str).tolist()[:n]],
        "step": step[:n].tolist(),
        "start": (start[:n] - origin).tolist(),
        "dur": (end[:n] - start[:n]).tolist(),
        "bytes": nbytes[:n].tolist(),
        "wait": is_wait[:n].astype(np.int64).tolist(),
        "covered": covered,
        "lead": np.maximum(start[:n] - ready[:n], 0).tolist(),
        "tail": tail.tolist(),
        "dropped": int(len(calls) - n),
    }


def ready_times(t: Any, c: pd.DataFrame) -> np.ndarray:
    """When the worker was ready for each collective call (ns; `c`: `collectives` in time order), which
    can be before the call started: a call queued behind the worker's previous one on its comm stream started when
    that one ended, not when the worker was ready (the cross-rank matching adds that queue: `critical_path.match`).
    For a call that ran NCCL kernels: the later of its host call's start (its kernels cannot start before their
    launch; a call that is a kernel itself: its launch) and the end of the last compute kernel launched before it
    (the comm stream waits for the compute enqueued before the launch, as DDP's buckets do). A CPU call (gloo, MPI)
    blocks its thread, so it is ready when it starts."""
    from profiler_core.analysis.gpu_idle.gpu_launches import activity_arrays

    start = c["start"].to_numpy(np.int64)
    on_gpu = c["kernels"].to_numpy(np.int64) > 0
    if not on_gpu.any():
        return start
    ev = t.events
    rows = c["row"].to_numpy(np.int64)
    host = ev["ts"].to_numpy(np.int64)[rows]
    a = activity_arrays(t)
    # a call that is a kernel itself (no host range names it): its launch, where the trace has it
    at = np.searchsorted(a["row"], rows)
    at = np.minimum(at, max(len(a["row"]) - 1, 0))
    is_act = (a["row"][at] == rows) if len(a["row"]) else np.zeros(len(rows), bool)
    host = np.where(is_act & (a["launch_start"][at] >= 0), a["launch_start"][at], host)
    comp = _compute_mask(t)[a["row"]] & (a["launch"] >= 0)
    launched, ends = a["launch_start"][comp], a["end"][comp]
    o = np.argsort(launched, kind="stable")
    launched, ends = launched[o], np.maximum.accumulate(ends[o]) if len(o) else ends
    k = np.searchsorted(launched, host, side="left") - 1  # compute launched strictly before the call
    dep = np.where(k >= 0, ends[np.maximum(k, 0)] if len(ends) else 0, np.iinfo(np.int64).min)
    return np.where(on_gpu, np.minimum(np.maximum(host, dep), start), start)


def idle_tails(compute: tuple, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per call (calls of one worker): how long the worker's compute (`intervals.prepare`d ranges) had been idle
    when the call ended, if its next compute waited for this call: no other call of the worker ended between this
    one's end and that compute's start (where no compute follows: the last call to end). 0 for a call its compute
    ran on through or that another call took over; from the call's start where no compute came before it."""
    s, _, reach = compute
    n = len(end)
    if not n:
        return np.zeros(0, np.int64)
    if not len(s):
        return (end - start).astype(np.int64)
    i = np.searchsorted(s, end, side="left")  # compute that started before the call's end: s[:i]
    last = np.where(i > 0, reach[np.maximum(i - 1, 0)], start)  # the end of the latest of them
    nxt = np.where(i < len(s), s[np.minimum(i, len(s) - 1)], np.iinfo(np.int64).max)  # the next compute starts
    ends = np.sort(end)
    j = np.searchsorted(ends, end, side="right")
    later = np.where(j < n, ends[np.minimum(j, n - 1)], np.iinfo(np.int64).max)  # the next end of another call
    big = np.iinfo(np.int64).max
    holds = (last < end) & ((later > nxt) | ((nxt == big) & (later == big)))  # no compute after: the last call
    return np.where(holds, end - np.minimum(last, end), 0).astype(np.int64)


def _union(mask: np.ndarray, ts: np.ndarray, te: np.ndarray) -> tuple:
    return intervals.prepare(ts[mask], te[mask])


def _sync_not_waiting(sync: np.ndarray, comm_kernels: np.ndarray, ts: np.ndarray, te: np.ndarray) -> tuple:
    """The host-sync phase: the synchronizing calls' time outside the time communication kernels run (a sync
    blocked on a collective waits for the other ranks, which the collective calls measure: it is not this
    worker's own cause), prepared as `intervals.prepare`."""
    ranges = intervals.merge_ranges(ts[sync], te[sync])
    if comm_kernels.any() and len(ranges):
        ranges = intervals.subtract_ranges(ranges, intervals.merge_ranges(ts[comm_kernels], te[comm_kernels]))
    return intervals.prepare(ranges[:, 0], ranges[:, 1])


def _tops(names: np.ndarray, values: np.ndarray, where: np.ndarray, table: dict) -> list:
    """The TOP_N names by summed value among the rows in `where`, as [[name index, ns]...]."""
    if not len(where):
        return []
    s = pd.Series(values[where]).groupby(names[where]).sum().sort_values(ascending=False, kind="stable")
    out = []
    for name, v in s.head(TOP_N).items():
        if v <= 0:
            break
        key = str(name)[:NAME_LEN]
        out.append([table.setdefault(key, len(table)), int(v)])
    return out


def phases(t: Any, steps: pd.DataFrame, origin: int) -> dict:
    """Per step: the phases' ns, the top kernels and top operators (see the module doc)."""
    ev = t.events
    ts = ev["ts"].to_numpy(np.int64)
    te = ts + ev["dur"].to_numpy(np.int64)
    name = ev["name"].astype(str).to_numpy()
    cpu = category_mask(ev, OP_CATS)
    gpu = category_mask(ev, GPU_ACTIVITY_CATS)
    kernel = category_mask(ev, ("kernel",))
    comm = communication_events(t)
    runtime = category_mask(ev, LAUNCH_CATS)
    dl = cpu & name_mask(ev, is_dataloader)
    memcpy = category_mask(ev, ("gpu_memcpy",)) & name_mask(ev, lambda n: "HtoD" in n)
    start_up = np.zeros(len(ev), dtype=bool)
    start_up[startup_calls(t)] = True  # one-time CUDA start-up: never launch overhead nor host sync
    sync = runtime & name_mask(ev, lambda n: n in SYNC_CALLS) & ~start_up
    launch = runtime & name_mask(ev, lambda n: n.startswith(_LAUNCH_PREFIXES)) & ~start_up
    is_step = name_mask(ev, lambda n: n.startswith(STEP_PREFIX))
    reasons: dict[str, str] = {}
    has_gpu = bool(gpu.any())
    if not has_gpu:
        for k in ("h2d", "gpu_idle"):
            reasons[k] = "no GPU activity in the trace"
    if not runtime.any():
        for k in ("host_sync", "launch"):
            reasons.setdefault(k, "no CUDA/HIP runtime calls in the trace")
    comp = _compute_mask(t)
    commr = (kernel & comm) if kernel.any() else (cpu & comm)
    prepared = {
        "data_loading": _union(dl, ts, te),
        "h2d": _union(memcpy, ts, te),
        "host_sync": _sync_not_waiting(sync, kernel & comm, ts, te),
        "launch": _union(launch, ts, te),
        "gpu_busy": _union(gpu, ts, te),
        "compute": _union(comp, ts, te),
        "comm": _union(commr, ts, te),
    }
    starts = steps["start"].to_numpy(np.int64)[:MAX_STEPS]
    ends = steps["end"].to_numpy(np.int64)[:MAX_STEPS]
    out: dict = {k: [] for k in PHASES}
    for a, b in zip(starts.tolist(), ends.tolist()):
        for k in PHASES:
            if k in reasons:
                out[k].append(None)
            elif k == "gpu_idle":
                out[k].append(int(b - a) - intervals.union_in(prepared["gpu_busy"], a, b))
            else:
                out[k].append(intervals.union_in(prepared[k], a, b))
    table: dict[str, int] = {}
    k_rows = np.flatnonzero(kernel & ~comm)
    k_step = step_of(starts, ends, ts[k_rows])
    ns = node_stats(t) if cpu.any() else None
    if ns is not None and len(ns):
        op_node = np.flatnonzero(ns["is_op"].to_numpy(bool))
        op_rows = ns["row"].to_numpy(np.int64)[op_node]
        keep = ~is_step[op_rows] & ~comm[op_rows]
        op_node, op_rows = op_node[keep], op_rows[keep]
        op_self = ns["host_self"].to_numpy(np.float64)[op_node]
        op_step = step_of(starts, ends, ts[op_rows])
    else:
        op_rows, op_self, op_step = np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64)
    top_k, top_o = [], []
    kdur = (te - ts)[k_rows].astype(np.float64)
    for i in range(len(starts)):
        top_k.append(_tops(name[k_rows], kdur, np.flatnonzero(k_step == i), table))
        top_o.append(_tops(name[op_rows], op_self, np.flatnonzero(op_step == i), table))
    return {
        "step": steps["step"].astype(str).tolist()[:MAX_STEPS],
        "start": (starts - origin).tolist(),
        "end": (ends - origin).tolist(),
        **out,
        "names": list(table),
        "top_kernels": top_k,
        "top_ops": top_o,
        "reasons": reasons,
        "dropped_steps": max(0, len(steps) - MAX_STEPS),
        # the `steps` stage's rule: without a ProfilerStep range its one step is the whole trace window
        "whole_trace": bool(len(steps)) and not bool((cpu & name_mask(ev, is_step_name)).any()),
    }


def sequence(group: np.ndarray, is_wait: np.ndarray) -> np.ndarray:
    """Each call's number among its group's non-wait calls before it (0-based; -1 for `wait` calls): calls of one
    worker in time order. The calls a summary leaves out are the last ones, so the numbers do not change."""
    out = np.full(len(group), -1, np.int64)
    real = np.flatnonzero(~is_wait)
    if len(real):
        g = group[real]
        o = np.argsort(g, kind="stable")
        sg = g[o]
        first = np.ones(len(sg), dtype=bool)
        first[1:] = sg[1:] != sg[:-1]
        pos = np.arange(len(sg))
        rank = pos - np.maximum.accumulate(np.where(first, pos, 0))
        out[real[o]] = rank
    return out


def empty_facts() -> dict:
    """The facts of a worker with no collective calls and no steps (the shape, for hand-made summaries)."""
    cc_keys = ("groups", "group_pg", "group_ranks", "group_size", "group_how", "names", "group", "name", "step")
    cc: dict = {k: [] for k in (*cc_keys, "start", "dur", "bytes", "wait", "covered", "lead", "tail")}
    ph: dict = {k: [] for k in ("step", "start", "end", *PHASES, "names", "top_kernels", "top_ops")}
    return {
        "collective_calls": {**cc, "dropped": 0},
        "phases": {**ph, "reasons": {}, "dropped_steps": 0, "whole_trace": False},
    }


def worker_facts(t: Any) -> dict:
    """What the cross-rank critical path and the straggler analysis need of one worker (module doc)."""
    st = steps(t)
    origin = _origin(t)
    ts = t.events["ts"].to_numpy(np.int64)
    m = _compute_mask(t)
    compute = intervals.prepare(ts[m], (ts + t.events["dur"].to_numpy(np.int64))[m])
    return {"collective_calls": collective_calls(t, st, origin, compute), "phases": phases(t, st, origin)}
