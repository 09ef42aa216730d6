"""The recoverable-time ledger of one worker: each step's wall time split into exclusive buckets that add up to
the step exactly (integer ns), each with what a fix could win back and the usual fix.

Every instant of a step (`steps` windows, half-open, `intervals` rules) gets exactly one label, the first
of this priority order that holds then:

1. `compute`: a kernel that is not communication runs (any device of the worker);
2. `exposed_copy_pageable`: a memcpy from or to pageable host memory runs ("Pageable" in its name), no compute;
3. `exposed_copy_pinned`: any other memcpy (pinned, device to device) or a memset runs, no compute;
4. `sync_skew`: a collective runs and its member waits for the other members (needs every member: only the
   run-level ledger, `run_ledger`, fills it; per worker it is None with a reason and the time is in 5.);
5. `exposed_comm`: a collective runs and no compute or copy hides it (a pipeline stage's send/recv kernels are
   5b instead): a communication kernel (`classify`'s
   families: NCCL, RCCL, MSCCL, NVSHMEM, DeepEP, custom all-to-all; or a kernel a communication op launched), or
   a CPU communication op whose own time is the exchange (`classify.host_communication`: gloo's and MPI's; any
   collective op of a worker without communication kernels). Where the collectives run as kernels, the CPU
   call (c10d::, record_param_comms, nccl:) only enqueues them: its time is host time (10., or 8./9. when a sync
   or a launch runs inside it);
5b. `pipeline_bubble`: on a pipeline stage (a trace with forward/backward micro-batch annotations,
   `worker.pipeline.parse_span`), a send/recv kernel (its `record_param_comms` names send or recv) runs and no
   compute or copy hides it: the stage waits for its neighbour (the schedule's bubble and the transfers); the
   run-level ledger leaves these calls' waits here, never in sync_skew;
6. `start_up`: no GPU work runs and a one-time CUDA start-up call is in progress (`stages.startup`: context
   creation, module and library loading, a first call far longer than every later call of its name; the rule is
   in that module's docstring): it is never launch overhead nor host compute, whatever call or op holds it;
7. `data_loading`: the GPU is idle and a DataLoader span (`enumerate(DataLoader)#...__next__`) is in progress;
8. `host_sync`: the GPU is idle and a synchronizing runtime call is in progress (SYNC_NAMES: cudaDeviceSynchronize,
   cudaStreamSynchronize, cudaEventSynchronize, blocking cudaMemcpy, their HIP and driver spellings): the host
   waits for the GPU;
9. `launch_overhead`: the GPU is idle and a launch call (LAUNCH_NAMES) is in progress, or the idle gap on the
   device is HTA's "kernel wait" (`idle_causes`: the next activity was already launched, gap < 30 µs);
10. `host_compute`: the GPU is idle and another CPU op (cpu_op / user_annotation other than the step itself) or
   runtime call runs: the host is the bottleneck (in a CPU-only trace this is the work itself);
11. `other`: nothing recorded runs.

Recoverable ns per step: compute what its kernels lose to their roofline bound (`analysis/roofline`: the compute
time whose kernels belong to op calls below their bound, at most the ms those calls lose; 0 where no op has a model:
then it is the work), split in the bucket's `split` (the compute time below / near the bound / without a roof, the
ns lost per cause, each cause with its fix: `roofline.worker.CAUSES`); in a CPU-only trace host_compute is the
work and 0;
start_up 0 (paid once: the steps that follow do not pay it again, so no change to them wins it back);
exposed copies, sync skew, the pipeline bubble and every idle bucket all of their time (an upper bound: what the
fix removes or overlaps); exposed communication at most the compute time of the step that does not already hide a
collective (min(exposed_comm, compute - compute overlapping communication); in a CPU-only trace min(exposed_comm,
host_compute)): the part that could overlap compute.

Where the trace lacks what a bucket needs, the bucket's `ns` is None and `reason` says so in words; its time is
then in the bucket that holds instead (e.g. no launch calls: launch time counts as host_compute or other), so
the buckets with numbers still add up to the step. `worker_ledger(t)` is the per-worker projection stored in the
summary under "ledger" (ints, JSON-able); `ranked(ledger, advice)` is the Overview's JSON (ms, ranked by
recoverable ms, each bucket with its fix and the advice texts attached to it; shape in docs/diagnosis.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from profiler_core.analysis import intervals
from profiler_core.analysis.gpu_idle.gpu_launches import NO_GPU, QUEUE_LAUNCH_NAMES
from profiler_core.analysis.gpu_idle.idle_causes import CATEGORIES, KERNEL_WAIT, idle_gap_arrays
from profiler_core.analysis.roofline.table import roofline_calls
from profiler_core.analysis.stages.classify import (
    communication_events,
    host_communication,
    is_dataloader,
    is_step_name,
)
from profiler_core.analysis.stages.columns import category_mask, name_mask, name_mask_among, sorted_unique
from profiler_core.analysis.stages.gpu_links import link_gpu_to_ops
from profiler_core.analysis.stages.registry import stage
from profiler_core.analysis.stages.startup import SYNC_NAMES, startup_calls
from profiler_core.analysis.stages.steps import steps
from profiler_core.analysis.worker.buckets import (  # noqa: F401 - the bucket names are part of the ledger's vocabulary
    BUCKETS,
    COMPUTE,
    COPY_PAGEABLE,
    COPY_PINNED,
    CPU_ONLY_LABELS,
    DATA_LOADING,
    EXPOSED_COMM,
    FIXES,
    HOST_COMPUTE,
    HOST_SYNC,
    LABELS,
    LAUNCH_OVERHEAD,
    OTHER,
    PIPELINE_BUBBLE,
    START_UP,
    SYNC_SKEW,
    fix_of,
)
from profiler_core.trace.categories import LAUNCH_CATS, OP_CATS

#: the launch calls of `launch_overhead`: the queue length's launches plus graph and cooperative launches
LAUNCH_NAMES = QUEUE_LAUNCH_NAMES | frozenset(
    {"cudaGraphLaunch", "cudaLaunchCooperativeKernel", "cudaLaunchCooperativeKernelMultiDevice", "cuLaunchKernelEx"}
)

NO_STEPS = "no steps and no events in the trace: nothing to split"
NO_LAUNCH_CALLS = (
    "no kernel launch calls (cuda_runtime/cuda_driver) in the trace: time spent launching cannot be seen and "
    "counts as host_compute (a CPU op runs) or other"
)
NO_RUNTIME = (
    "no CUDA runtime calls in the trace: synchronizations cannot be seen and count as host_compute (a CPU op "
    "runs) or other"
)
NO_STARTUP = (
    "no CUDA runtime or driver calls in the trace: start-up (context creation, module loading) cannot be seen and "
    "counts as host_compute (a CPU op runs) or other"
)
NO_COMM = "no communication (communication kernels, collective CPU ops) in the trace"
NEEDS_ALL_RANKS = (
    "waiting for other ranks needs every member's collectives: the run-level ledger moves it out of exposed_comm "
    "(one trace cannot tell waiting from transferring)"
)
CPU_ONLY = NO_GPU


def _is_pageable(name: str) -> bool:
    return "pageable" in name.lower()


def _is_sync(name: str) -> bool:
    return name in SYNC_NAMES


def _is_launch(name: str) -> bool:
    return name in LAUNCH_NAMES


def _names_among(ev: Any, among: np.ndarray, fn: Any) -> np.ndarray:
    """`among & name_mask(ev, fn)`, `fn` asked of the names of the `among` rows only (no whole-trace name mask
    kept for the ledger's own tests: three of them were 30 MB of an 11M-event trace's cached memory)."""
    out = np.zeros(len(ev), dtype=bool)
    rows = np.flatnonzero(among)
    if len(rows):
        out[rows] = name_mask_among(ev, rows, fn)
    return out


def _pipeline_p2p_kernels(t: Any) -> np.ndarray:
    """Mask over t.events: the GPU activities a send/recv `record_param_comms` launched, on a pipeline stage (a
    trace with forward/backward micro-batch annotations, `worker.pipeline.parse_span`); all False elsewhere."""
    from profiler_core.analysis.worker.pipeline import P2P_NAMES, parse_span

    ev = t.events
    out = np.zeros(len(ev), dtype=bool)
    ann = category_mask(ev, ("user_annotation",))
    if not ann.any() or not any(parse_span(str(n)) is not None for n in ev.loc[ann, "name"].unique()):
        return out
    links = link_gpu_to_ops(t)
    grow, gop = links["row"].to_numpy(np.int64), links["op"].to_numpy(np.int64)
    has_op = gop >= 0
    coll = t.arg("coll_name")
    p2p = np.isin(coll[gop[has_op]], sorted(P2P_NAMES))
    out[grow[has_op][p2p]] = True
    return out


def _masks(t: Any) -> tuple[list[np.ndarray], np.ndarray, dict]:
    """Per label (BUCKETS order; sync_skew empty): a boolean mask over t.events; the communication kernels'
    mask; what the trace holds (gpu, launches, runtime, comm)."""
    ev = t.events
    cat = category_mask
    kernel = cat(ev, ("kernel",))
    memcpy = cat(ev, ("gpu_memcpy",))
    memset = cat(ev, ("gpu_memset",))
    cpu = cat(ev, OP_CATS)
    runtime = cat(ev, LAUNCH_CATS)
    comm = communication_events(t)
    host_comm = host_communication(t)  # CPU ops whose range is the exchange; other collective ops: host time
    step = cpu & name_mask(ev, is_step_name)
    loader = cpu & name_mask(ev, is_dataloader) & ~step
    pageable = _names_among(ev, memcpy, _is_pageable)
    sync = _names_among(ev, runtime, _is_sync)
    launch = _names_among(ev, runtime, _is_launch)
    comm_kernel = comm & kernel
    none = np.zeros(len(ev), dtype=bool)
    start_up = np.zeros(len(ev), dtype=bool)
    start_up[startup_calls(t)] = True
    bubble = _pipeline_p2p_kernels(t) & kernel
    masks = [
        kernel & ~comm,
        pageable,
        (memcpy & ~pageable) | memset,
        none,
        (comm_kernel | host_comm) & ~bubble,
        bubble,
        start_up,
        loader,
        sync,
        launch,
        (cpu & ~step & ~host_comm & ~loader) | (runtime & ~sync & ~launch),
    ]
    has = {
        "gpu": bool((kernel | memcpy | memset).any()),
        "launch": bool(launch.any()),
        "runtime": bool(runtime.any()),
        "comm": bool((comm & (kernel | cpu)).any()),
    }
    if not has["gpu"]:  # no GPU to be idle: runtime calls are host work like any other
        masks[-1] = masks[-1] | sync | launch
        masks[BUCKETS.index(HOST_SYNC)] = masks[BUCKETS.index(LAUNCH_OVERHEAD)] = none
    return masks, comm_kernel, has


def _per_step(bounds: np.ndarray, ss: np.ndarray, se: np.ndarray, seg_key: np.ndarray, nkeys: int) -> np.ndarray:
    """[steps x nkeys] int64 ns: the length of the elementary segments of each key inside each step."""
    n = len(ss)
    k = np.searchsorted(ss, bounds[:-1], side="right") - 1
    inside = (k >= 0) & (bounds[:-1] < se[np.maximum(k, 0)])
    seg = np.diff(bounds)[inside]
    key = k[inside].astype(np.int64) * nkeys + seg_key[inside]
    # integer sums: float64 bincount is exact below 2**53 ns (104 days)
    flat = np.bincount(key, weights=seg.astype(np.float64), minlength=n * nkeys)
    return np.rint(flat).astype(np.int64).reshape(n, nkeys)


def _compute(t: Any) -> dict:
    st = steps(t)
    names = [str(s) for s in st["step"]]
    ss, se = st["start"].to_numpy(np.int64), st["end"].to_numpy(np.int64)
    out: dict = {"steps": names, "wall_ns": (se - ss).tolist(), "reason": None if len(st) else NO_STEPS}
    masks, comm_kernel, has = _masks(t)
    nl = len(BUCKETS)
    costs = np.zeros((len(st), nl), np.int64)
    hidden = np.zeros(len(st), np.int64)
    split: dict | None = None
    if len(st):
        ev = t.events
        ts = ev["ts"].to_numpy(np.int64)
        dur = ev["dur"].to_numpy(np.int64)
        s0, s1 = int(ss[0]), int(se[-1])
        # each layer as its union in the steps' window (the same coverage from far fewer bounds; per-segment sums:
        # the same integers), made a block of rows at a time (`merged_where`: no whole-trace temporaries)
        layers = [(i, *intervals.merged_where(ts, dur, m, (s0, s1))) for i, m in enumerate(masks)]
        if has["gpu"] and has["launch"]:
            g = idle_gap_arrays(t, per_stream=False)  # (arrays: no frame of every gap to filter)
            if g is None:
                gs = ge = np.zeros(0, np.int64)
            else:
                wait = (g["kind"] == CATEGORIES.index(KERNEL_WAIT)) & g["launch_known"]
                gs, ge = g["start"][wait], g["end"][wait]
            keep = (ge > s0) & (gs < s1)
            i = BUCKETS.index(LAUNCH_OVERHEAD)
            layers[i] = (
                i,
                *intervals.merged(
                    np.concatenate([layers[i][1], np.clip(gs[keep], s0, s1)]),
                    np.concatenate([layers[i][2], np.clip(ge[keep], s0, s1)]),
                ),
            )
        ck = intervals.merged_where(ts, dur, comm_kernel, (s0, s1))
        split_layers = _split_layers(t, ts, dur, (s0, s1)) if has["gpu"] else None
        extra = [a for lay in (split_layers or {}).get("layers", []) for a in lay]
        bounds = sorted_unique(
            np.concatenate([ss, se, ck[0], ck[1]] + [a for _, s, e in layers for a in (s, e)] + extra)
        )
        if len(bounds) >= 2:
            owner = np.full(len(bounds) - 1, BUCKETS.index(OTHER), dtype=np.int8)
            compute_cov = np.zeros(len(bounds) - 1, dtype=bool)
            for i, s, e in reversed(layers):  # lowest priority first: higher priorities overwrite
                if i == 0 and len(s):
                    compute_cov = intervals.covered(bounds, s, e)
                    owner[compute_cov] = i
                else:
                    intervals.paint(owner, bounds, s, e, i)
            costs = _per_step(bounds, ss, se, owner, nl)
            both = compute_cov & intervals.covered(bounds, *ck) if len(ck[0]) else np.zeros_like(compute_cov)
            hidden = _per_step(bounds, ss, se, both.astype(np.int64), 2)[:, 1]
            if split_layers is not None:
                split = _split(split_layers, bounds, owner == BUCKETS.index(COMPUTE), ss, se)
    out["buckets"] = _buckets(costs, hidden, has, split)
    out["has_gpu"] = has["gpu"]
    out["graph_launches"] = graph_launches(t)
    return out


def graph_launches(t: Any) -> bool:
    """True if the trace launches CUDA/HIP graphs (`cudaGraphLaunch`, ...): the job already replays graphs, so its
    advice never proposes them (`buckets.fix_of`)."""
    from profiler_core.analysis.stages.graph_replay import is_graph_launch

    ev = t.events
    return bool(len(ev)) and any(is_graph_launch(str(n)) for n in ev["name"].unique())


#: the compute split's parts: kernels of a call below its roofline bound, of a call near it, of no roof (no model,
#: a Winograd/FFT algorithm, a device without peaks)
SPLIT_PARTS = ("below_bound", "near_bound", "no_roof")


def _split_layers(t: Any, ts: np.ndarray, dur: np.ndarray, window: tuple[int, int]) -> dict | None:
    """The compute kernels of calls below and near their roofline bound (merged in the steps' window), and the ns
    each below-bound call loses (`roofline_calls`' lost_ns) with its cause and the time of its first kernel."""
    from profiler_core.analysis.roofline import table as roof
    from profiler_core.analysis.roofline.worker import call_causes

    calls = roof.roofline_calls(t)
    if len(calls) == 0:
        return None
    k = roof.kernel_owners(t)
    lost = calls["lost_ns"].to_numpy(np.float64)
    rows = calls["row"].to_numpy(np.int64)
    owner = k["owner"].to_numpy(np.int64)
    n = len(t.events)
    masks = []
    for sel in (np.nan_to_num(lost) > 0, lost == 0):
        m = np.zeros(n, dtype=bool)
        m[k["row"].to_numpy(np.int64)[np.isin(owner, rows[sel])]] = True
        masks.append(intervals.merged_where(ts, dur, m, window))
    kts = ts[k["row"].to_numpy(np.int64)]
    first = np.full(n, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first, owner[owner >= 0], kts[owner >= 0])
    below = np.nan_to_num(lost) > 0
    return {
        "layers": masks,
        "lost_ns": lost[below],
        "at": first[rows[below]],
        "cause": call_causes(t)[below],
    }


def _split(sl: dict, bounds: np.ndarray, in_compute: np.ndarray, ss: np.ndarray, se: np.ndarray) -> dict:
    """Per step: the compute time (the `compute` bucket's segments) whose kernels are below / near their bound or
    have no roof (below first where they overlap), the ns below-bound calls lose by cause (a call counts in the
    step its first kernel starts in), and the recoverable ns: min(below-bound compute time, ns lost)."""
    cls = np.full(len(bounds) - 1, 2, dtype=np.int8)
    for value, (s, e) in ((1, sl["layers"][1]), (0, sl["layers"][0])):
        intervals.paint(cls, bounds, s, e, value)
    key = np.where(in_compute, cls, 3).astype(np.int64)
    per = _per_step(bounds, ss, se, key, 4)
    at = np.searchsorted(ss, sl["at"], side="right") - 1
    inside = (at >= 0) & (sl["at"] < se[np.maximum(at, 0)])
    causes: dict[str, list[int]] = {}
    for c in sorted(set(sl["cause"].tolist())):
        sel = inside & (sl["cause"] == c)
        causes[c] = np.rint(np.bincount(at[sel], weights=sl["lost_ns"][sel], minlength=len(ss))).astype(int).tolist()
    lost = np.sum(list(causes.values()), axis=0) if causes else np.zeros(len(ss), np.int64)
    out: dict = {f"{p}_ns": [int(x) for x in per[:, i]] for i, p in enumerate(SPLIT_PARTS)}
    out["lost_ns"] = [int(x) for x in lost]
    out["recoverable_ns"] = [int(min(b, lo)) for b, lo in zip(per[:, 0], lost)]
    out["causes"] = causes
    return out


def _buckets(costs: np.ndarray, hidden: np.ndarray, has: dict, split: dict | None = None) -> dict:
    """The per-bucket entries from the [steps x buckets] ns, with reasons for what the trace lacks."""
    col = {b: costs[:, i] for i, b in enumerate(BUCKETS)}
    reasons: dict[str, str | None] = dict.fromkeys(BUCKETS)
    if not has["gpu"]:
        for b in (COMPUTE, COPY_PAGEABLE, COPY_PINNED, HOST_SYNC, LAUNCH_OVERHEAD):
            reasons[b] = CPU_ONLY
    else:
        if not has["launch"]:
            reasons[LAUNCH_OVERHEAD] = NO_LAUNCH_CALLS
        if not has["runtime"]:
            reasons[HOST_SYNC] = NO_RUNTIME
    if not has["runtime"]:
        reasons[START_UP] = NO_STARTUP
    if not has["comm"]:
        reasons[EXPOSED_COMM] = reasons[SYNC_SKEW] = NO_COMM
    else:
        reasons[SYNC_SKEW] = NEEDS_ALL_RANKS
    rec = {b: col[b].copy() for b in BUCKETS}
    rec[COMPUTE] = np.zeros_like(col[COMPUTE]) if split is None else np.array(split["recoverable_ns"], np.int64)
    rec[START_UP] = np.zeros_like(col[START_UP])
    if not has["gpu"]:
        rec[HOST_COMPUTE] = np.zeros_like(col[HOST_COMPUTE])
    # what could overlap: the compute no collective hides (CPU-only: the host's work, never under a collective)
    room = np.maximum(col[COMPUTE] - hidden, 0) if has["gpu"] else col[HOST_COMPUTE]
    rec[EXPOSED_COMM] = np.minimum(col[EXPOSED_COMM], room)
    out = {}
    for b in BUCKETS:
        known = reasons[b] is None
        out[b] = {
            "ns": [int(x) for x in col[b]] if known else None,
            "recoverable_ns": [int(x) for x in rec[b]] if known else None,
            "reason": reasons[b],
        }
    if split is not None and reasons[COMPUTE] is None:
        out[COMPUTE]["split"] = split
    return out


@stage(steps, link_gpu_to_ops, startup_calls, roofline_calls)
def worker_ledger(t: Any) -> dict:
    """One worker's ledger: `steps` (names), `wall_ns` (per step), `has_gpu`, `graph_launches` (it replays CUDA
    graphs: `graph_launches`), `reason` (None, or why there is no
    step), `buckets` ({bucket: {"ns": [per step] | None, "recoverable_ns": [per step] | None, "reason"}}). The
    buckets whose ns is not None add up to each step's wall_ns exactly."""
    return _compute(t)


def _mean(xs: list | None) -> float | None:
    return float(np.mean(xs)) if xs else (None if xs is None else 0.0)


def _ms(ns: float | None) -> float | None:
    return None if ns is None else round(float(ns) / 1e6, 6)


#: the compute split's parts in words
SPLIT_LABELS = {
    "below_bound": "below its roofline bound",
    "near_bound": "near its roofline bound",
    "no_roof": "without a roof (no model, Winograd/FFT, or unknown peaks)",
}


def _split_rows(split: Any) -> list[dict]:
    """The compute bucket's split as the Overview shows it (ms per step on average): one row per part, the
    below-bound part with its recoverable ms and its causes (most ms lost first), each with its fix."""
    from profiler_core.analysis.roofline.worker import CAUSES

    def get(key: str) -> Any:
        return split.get(key) if isinstance(split, Mapping) else getattr(split, key)

    rows = []
    for part in SPLIT_PARTS:
        row: dict[str, Any] = {"part": part, "label": SPLIT_LABELS[part], "ms": _ms(_mean(get(f"{part}_ns")))}
        if part == "below_bound":
            row["recoverable_ms"] = _ms(_mean(get("recoverable_ns")))
            causes = [
                {"cause": c, "label": CAUSES[c][0], "fix": CAUSES[c][1], "lost_ms": _ms(_mean(ns))}
                for c, ns in (get("causes") or {}).items()
                if c in CAUSES
            ]
            row["causes"] = sorted(causes, key=lambda r: -(r["lost_ms"] or 0.0))
        rows.append(row)
    return rows


def ranked(ledger: Mapping[str, Any], advice: Iterable[tuple[str | None, str]] = ()) -> dict:
    """The ledger as the Overview shows it (ms; docs/diagnosis.md): `steps` ({step, wall_ms, buckets: {bucket:
    ms | None}}), `average_wall_ms`, `buckets` (ranked by average recoverable ms, then ms: key, label, ms,
    recoverable_ms, share of the average step, steps_ms, fix, advice, reason; compute's `split` where the trace
    has rooflines: `_split_rows`), `recoverable_ms` (their sum),
    `other_advice` (texts of no bucket), `reason`. `advice`: (bucket or None, text) pairs."""
    advice = list(advice)
    names = list(ledger.get("steps") or [])
    wall = list(ledger.get("wall_ns") or [])
    bk = ledger.get("buckets") or {}
    avg_wall = _mean(wall) if wall else None
    # a job without a GPU is not told about a GPU's idle time
    labels = CPU_ONLY_LABELS if (bk.get(COMPUTE) or {}).get("reason") == CPU_ONLY else LABELS
    rows: list[dict[str, Any]] = []
    for b in BUCKETS:
        e = bk.get(b) or {"ns": None, "recoverable_ns": None, "reason": NO_STEPS}
        ns, rec = e.get("ns"), e.get("recoverable_ns")
        ms = _ms(_mean(ns)) if wall else None
        rows.append(
            {
                "key": b,
                "label": labels[b],
                "ms": ms,
                "recoverable_ms": _ms(_mean(rec)) if wall else None,
                "share": (ms * 1e6 / avg_wall) if ms is not None and avg_wall else None,
                "steps_ms": [_ms(x) for x in ns] if ns is not None else None,
                "fix": fix_of(b, bool(ledger.get("graph_launches"))),
                "advice": [text for key, text in advice if key == b],
                "reason": e.get("reason"),
            }
        )
        if b == COMPUTE and e.get("split") and wall:
            rows[-1]["split"] = _split_rows(e["split"])
    rows.sort(key=lambda r: (-(r["recoverable_ms"] or 0.0), -(r["ms"] or 0.0), BUCKETS.index(r["key"])))
    steps = []
    for i, s in enumerate(names):
        steps.append(
            {
                "step": s,
                "wall_ms": _ms(wall[i]),
                "buckets": {
                    b: (_ms(bk[b]["ns"][i]) if bk.get(b) and bk[b]["ns"] is not None else None) for b in BUCKETS
                },
            }
        )
    return {
        "steps": steps,
        "average_wall_ms": _ms(avg_wall),
        "buckets": rows,
        "recoverable_ms": round(sum(r["recoverable_ms"] or 0.0 for r in rows), 6) if wall else None,
        "other_advice": [text for key, text in advice if key is None or key not in BUCKETS],
        "reason": ledger.get("reason"),
    }
