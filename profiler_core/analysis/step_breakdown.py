"""Overview view: per-step time breakdown with torch-tb-profiler's priority rules, its average, the GPU summary
(utilization, est. SM efficiency, est. achieved occupancy, Tensor Core kernel ratio, and HTA's temporal
breakdown: idle / compute / non-compute per step and device), plain-text recommendations and the environment
(docs/http-api.md `/overview`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

# breakdown roles in priority order; whatever no role covers inside a step is "other"
from profiler_core.analysis import intervals, temporal
from profiler_core.analysis.comm import collectives
from profiler_core.analysis.stages.classify import communication_events, is_communication, is_dataloader, is_step_name
from profiler_core.analysis.stages.columns import category_mask, name_mask, ns_to_us, sorted_unique
from profiler_core.analysis.stages.gpu_links import link_gpu_to_ops
from profiler_core.analysis.stages.launch_stats import device_properties, launch_stats
from profiler_core.analysis.stages.startup import startup_facts
from profiler_core.analysis.stages.steps import steps
from profiler_core.analysis.tensor_cores import uses_tensor_cores
from profiler_core.analysis.worker.buckets import (
    COMPUTE,
    DATA_LOADING,
    EXPOSED_COMM,
    HOST_COMPUTE,
    LAUNCH_OVERHEAD,
    START_UP,
)
from profiler_core.trace.categories import LAUNCH_CATS, OP_CATS

ROLES = ("kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec")
KEYS = ("total_us",) + tuple(f"{r}_us" for r in ROLES) + ("other_us",)


def _role_unions(t: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each role's intervals (ROLES order) as their union (`intervals.merged_where`: a block of rows at a time,
    one role at a time; an 11M-event trace's cost here is a block's, not every role's selected times)."""
    ev = t.events
    ts = ev["ts"].to_numpy(np.int64)
    dur = ev["dur"].to_numpy(np.int64)
    comm = communication_events(t)
    kernel = category_mask(ev, ("kernel",))
    cpu = category_mask(ev, OP_CATS)
    step = cpu & name_mask(ev, is_step_name)
    loader = cpu & name_mask(ev, is_dataloader)
    masks = (
        lambda: kernel & ~comm,
        lambda: category_mask(ev, ("gpu_memcpy",)),
        lambda: category_mask(ev, ("gpu_memset",)),
        lambda: comm & (kernel | cpu),
        lambda: category_mask(ev, LAUNCH_CATS),
        lambda: loader & ~step,
        lambda: cpu & ~step & ~comm & ~loader,
    )
    return [intervals.merged_where(ts, dur, mask()) for mask in masks]


def breakdown(t: Any) -> tuple[pd.DataFrame, np.ndarray]:
    """The steps and a [steps x (roles + other)] array of ns: each instant of a step goes to the first role
    (in ROLES order) active then, else to other, so the parts add up to the step's length."""
    st = steps(t)
    n = len(st)
    costs = np.zeros((n, len(ROLES) + 1))
    if n == 0:
        return st, costs
    ss, se = st["start"].to_numpy(np.int64), st["end"].to_numpy(np.int64)
    # each role as its union: the same coverage, from far fewer bounds than every interval's ends (the
    # per-segment lengths add up to the same integers)
    roles = _role_unions(t)
    bounds = sorted_unique(np.concatenate([ss, se] + [a for r in roles for a in r]))
    if len(bounds) < 2:
        return st, costs
    owner = np.full(len(bounds) - 1, len(ROLES), dtype=np.int8)  # (small dtypes, temporaries
    for r in range(len(ROLES) - 1, -1, -1):  # freed early: this is the overview's peak memory)
        s, e = roles[r]  # lowest priority first, so higher priorities overwrite
        intervals.paint(owner, bounds, s, e, r)
    del roles, s, e
    k = np.searchsorted(ss, bounds[:-1], side="right") - 1
    inside = (k >= 0) & (bounds[:-1] < se[np.maximum(k, 0)])
    seg_len = np.diff(bounds)[inside].astype(np.float64)
    del bounds
    key = k[inside]
    del k
    key *= len(ROLES) + 1
    key += owner[inside]
    del owner, inside
    flat = np.bincount(key, weights=seg_len, minlength=n * (len(ROLES) + 1))
    return st, flat.reshape(n, len(ROLES) + 1)


def has_profiler_steps(t: Any) -> bool:
    """True when the trace holds ProfilerStep# ranges (else the breakdown covers the whole trace window)."""
    ev = t.events
    if len(ev) == 0:
        return False
    return bool((category_mask(ev, OP_CATS) & name_mask(ev, is_step_name)).any())


def _in_step_ns(st: pd.DataFrame, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Per step: the length of the union of the intervals [s, e) clipped to the step window."""
    out = np.zeros(len(st), np.int64)
    for i, (a, b) in enumerate(zip(st["start"].to_numpy(np.int64), st["end"].to_numpy(np.int64))):
        sel = (s < b) & (e > a)
        if sel.any():
            out[i] = intervals.union_length(np.clip(s[sel], a, b), np.clip(e[sel], a, b))
    return out


def gpu_work_notes(t: Any) -> list[str]:
    """Plain-text labels for GPU work the breakdown counts by when it ran rather than where it was launched:
    work launched before the first profiled step that runs inside a step, and kernels with no launch record."""
    ev = t.events
    st = steps(t)
    if len(st) == 0 or len(ev) == 0:
        return []
    ts = ev["ts"].to_numpy(np.int64)
    te = ts + ev["dur"].to_numpy(np.int64)
    links = link_gpu_to_ops(t)
    grow, grt = links["row"].to_numpy(), links["runtime"].to_numpy()
    notes = []
    before = grow[(grt >= 0) & (ts[np.maximum(grt, 0)] < int(st["host_start"].iloc[0]))]
    if len(before):
        for name, ns in zip(st["step"].astype(str), _in_step_ns(st, ts[before], te[before])):
            if ns > 0:
                notes.append(
                    f"Step {name}: {ns_to_us(ns):,.3f} µs of GPU work launched before the profiled steps "
                    "runs in this step and counts as its GPU time."
                )
    kernel = category_mask(ev, ("kernel",))
    no_launch = grow[(grt < 0) & kernel[grow]]
    if len(no_launch):
        inside = int(_in_step_ns(st, ts[no_launch], te[no_launch]).sum())
        if inside > 0:
            notes.append(
                f"{len(no_launch):,} of {int(kernel.sum()):,} kernels have no launch record in the trace; "
                f"they count as GPU time of the steps they ran in ({ns_to_us(inside):,.3f} µs)."
            )
    return notes


# ----------------------------------------------------------------------------------------------- GPU summary
def _device_summary(
    ks: np.ndarray, kd: np.ndarray, dur: np.ndarray, tc: np.ndarray, bps: np.ndarray, occ: np.ndarray, s0: int, s1: int
) -> dict:
    """One device's summary from its kernels' starts and durations (int64 ns; `dur` as float64) and Tensor Core
    mask."""
    ke = ks + kd
    span = max(s1 - s0, 0)
    cs, ce = np.clip(ks, s0, s1), np.clip(ke, s0, s1)
    util = intervals.union_length(cs, ce) / span if span > 0 else None

    sm_eff = None
    has = bps > 0
    if span > 0 and has.any():
        s, e, w = ks[has], ke[has], bps[has]
        bounds = sorted_unique(np.concatenate([s, e, [s0, s1]]))
        level = intervals.coverage(bounds, s, e, w)
        level = np.where(level > 1e-9, np.minimum(level, 1.0), 0.0)
        lo, hi = np.clip(bounds[:-1], s0, s1), np.clip(bounds[1:], s0, s1)
        sm_eff = float((level * (hi - lo)).sum() / span)

    has = np.isfinite(occ) & (occ >= 0)
    w = (ce - cs).astype(np.float64)
    achieved = float((occ[has] * w[has]).sum() / w[has].sum() / 100.0) if has.any() and w[has].sum() > 0 else None

    total = dur.sum()
    tc_ratio = float(dur[tc].sum() / total) if total > 0 else 0.0
    return {"utilization": util, "sm_efficiency": sm_eff, "achieved_occupancy": achieved, "tensor_core_ratio": tc_ratio}


def gpu_summary(t: Any) -> dict | None:
    """GPU utilization, est. SM efficiency, est. achieved occupancy (fraction) and Tensor Core kernel-time ratio
    over [first step start, last step end]; per device under `devices`, their mean at top level; None when
    the trace has no kernels."""
    ev = t.events
    kmask = category_mask(ev, ("kernel",))
    if not kmask.any():
        return None
    st = steps(t)
    if len(st):
        s0, s1 = int(st["start"].iloc[0]), int(st["end"].iloc[-1])
    else:
        s0, s1 = int(ev["ts"].min()), int((ev["ts"] + ev["dur"]).max())
    krows = np.flatnonzero(kmask)  # the kernels' columns as arrays (no copy of their frame rows)
    ks, kd = ev["ts"].to_numpy(np.int64)[krows], ev["dur"].to_numpy(np.int64)[krows]
    kdur = ev["dur"].to_numpy(np.float64)[krows]
    tc = name_mask(ev, uses_tensor_cores)[krows]
    props = device_properties(t)
    launches = launch_stats(t)  # ROCm grids in blocks; AMD occupancy from CDNA limits, never NVIDIA's
    bps = launches["blocks_per_sm"].to_numpy(np.float64)
    occ = launches["occupancy"].to_numpy(np.float64)
    devices = []
    dev = ev["device"].to_numpy()[krows]
    for d in sorted_unique(dev):
        sel = dev == d
        summary = _device_summary(ks[sel], kd[sel], kdur[sel], tc[sel], bps[sel], occ[sel], s0, s1)
        p = props.get(int(d)) or {}
        cc = (
            f"{p['computeMajor']}.{p['computeMinor']}"
            if p.get("computeMajor") is not None and p.get("computeMinor") is not None
            else None
        )
        devices.append(
            {
                "device": int(d),
                "name": p.get("name"),
                "memory_bytes": p.get("totalGlobalMem"),
                "compute_capability": cc,
                **summary,
            }
        )
    out: dict[str, Any] = {}
    for key in ("utilization", "sm_efficiency", "achieved_occupancy", "tensor_core_ratio"):
        vals = [d[key] for d in devices if d[key] is not None]
        out[key] = float(np.mean(vals)) if vals else None
    out["devices"] = devices
    out["temporal"] = temporal.temporal_breakdown(t)  # HTA's idle / compute / non-compute, per step and device
    return out


# ------------------------------------------------------------------------------------------ recommendations
def _peak_device_memory(t: Any) -> dict[int, int]:
    mem = getattr(t, "memory", None)
    if mem is None or len(mem) == 0 or "device_type" not in mem:
        return {}
    sel = (mem["device_type"] == 1).to_numpy()
    if not sel.any():
        return {}
    total, dev = mem["total_allocated"].to_numpy()[sel], mem["device_id"].to_numpy()[sel]
    if total.dtype.kind not in "iu" or dev.dtype.kind not in "iu":  # (the reader's int64; else pandas' NaN rules)
        return {int(d): int(v) for d, v in mem[sel].groupby("device_id")["total_allocated"].max().items()}
    return {int(d): int(total[dev == d].max()) for d in sorted_unique(dev)}


#: how the utilization and idle advice say that they judge the steps without their one-time start-up
STARTUP_LEFT_OUT = " (one-time CUDA start-up left out)"


def _startup_in_steps(t: Any) -> dict | None:
    """The one-time CUDA start-up inside the steps (`stages.startup`): None when there is none, else its
    `idle_ns` (start-up with the GPU idle), the steps' `window_ns`, their number `steps` and the advice `text`."""
    st = steps(t)
    if not len(st):
        return None
    s0, s1 = int(st["start"].iloc[0]), int(st["end"].iloc[-1])
    facts = startup_facts(t, (s0, s1))
    if not facts["count"] or facts["idle_ns"] <= 0:
        return None
    window = int((st["end"] - st["start"]).sum())
    calls = ", ".join(f"{c['name']} {c['dur_ns'] / 1e6:,.1f} ms" for c in facts["calls"])
    text = (
        f"{facts['ns'] / 1e6:,.1f} ms of the profiled window ({facts['ns'] / max(window, 1) * 100:.1f}%) is one-time "
        f"CUDA start-up (context creation, module loading) in {facts['count']} runtime call"
        f"{'s' if facts['count'] != 1 else ''} ({calls}), not a cost of the steps that follow: it is neither "
        "launch overhead nor CPU-bound work. Profile after warm-up (torch.profiler.schedule with wait and warmup "
        "steps) to see the steady state."
    )
    return {"idle_ns": int(facts["idle_ns"]), "window_ns": window, "steps": len(st), "text": text}


def _without_startup(utilization: float, start_up: dict | None) -> float:
    """A device's utilization of the steps' window with the start-up time the GPU was idle left out of the window."""
    if start_up is None:
        return utilization
    rest = start_up["window_ns"] - start_up["idle_ns"]
    return utilization * start_up["window_ns"] / rest if rest > 0 else 1.0


def _idle_without_startup(temporal_part: dict | None, start_up: dict | None) -> dict | None:
    """HTA's temporal breakdown with the start-up time the GPU was idle left out of each device's average idle
    time and step (the idle advice is about the steps' own gaps)."""
    if temporal_part is None or start_up is None:
        return temporal_part
    cut_us = start_up["idle_ns"] / 1e3 / start_up["steps"]
    devices = []
    for d in temporal_part.get("devices", []):
        avg = dict(d["average"])
        total = (avg.get("total_us") or 0.0) - cut_us
        idle = max((avg.get("idle_us") or 0.0) - cut_us, 0.0)
        avg["idle_share"] = idle / total if total > 0 else None
        devices.append({**d, "average": avg})
    return {**temporal_part, "devices": devices}


def recommendations(t: Any, avg: dict, gpu: dict | None) -> list[str]:
    """Plain-text advice with torch-tb-profiler's triggers (data loading, DP vs DDP, NCCL, communication,
    low GPU utilization, AMP for Tensor Core eligible work, device memory near capacity)."""
    return [text for _, text in advice(t, avg, gpu)]


def advice(t: Any, avg: dict, gpu: dict | None) -> list[tuple[str | None, str]]:
    """`recommendations` with the ledger bucket (analysis/worker/buckets.py) each text belongs to, None for
    advice of no bucket (device memory)."""
    from profiler_core.analysis.tables.operators import tensor_core_eligible_kernel_ratio

    out: list[tuple[str | None, str]] = []
    total = avg.get("total_us") or 0.0
    if total > 0:
        ratio = avg["dataloader_us"] / total
        if ratio > 0.05:
            out.append(
                (
                    DATA_LOADING,
                    f"{ratio * 100:.1f}% of the step time is spent loading input data (DataLoader). "
                    "Try num_workers > 0 on the DataLoader to load data in parallel processes.",
                )
            )
    ev = t.events
    names = set(map(str, ev["name"].unique())) if len(ev) else set()
    kdev = ev.loc[category_mask(ev, ("kernel", "gpu_memcpy", "gpu_memset")), "device"].unique() if len(ev) else []
    props = getattr(t, "device_properties", None) or []
    if "DataParallel.forward" in names and len(kdev) > 1:
        out.append(
            (
                EXPOSED_COMM,
                "DataParallel is used on several GPUs: DistributedDataParallel is faster for multi-GPU training.",
            )
        )
    comm_names = {n for n in names if is_communication(n, "cpu_op")}
    # NCCL in use: nccl:* ranges (torch < 2.1), or NCCL kernels / a nccl backend (record_param_comms traces)
    uses_nccl = (
        any(n.startswith("nccl:") for n in comm_names)
        or any("nccl" in n.lower() for n in names)
        or collectives.backend_of(t, False) == "nccl"
    )
    if "DistributedDataParallel.forward" in names and not uses_nccl:
        for p in props:
            major, minor = p.get("computeMajor"), p.get("computeMinor")
            if major is not None and minor is not None and float(f"{major}.{minor}") >= 3.5:
                out.append(
                    (
                        EXPOSED_COMM,
                        "DistributedDataParallel runs without the NCCL backend: NCCL is the fastest backend "
                        "for training on GPUs.",
                    )
                )
                break
    if total > 0 and avg["communication_us"] / total > 0.1:
        out.append(
            (
                EXPOSED_COMM,
                f"{avg['communication_us'] / total * 100:.1f}% of the step time is communication. Consider "
                "gradient compression, gradient accumulation or a larger batch size (larger effective batch "
                "sizes may need an optimizer such as LAMB to keep accuracy).",
            )
        )
    start_up = _startup_in_steps(t)
    if start_up is not None:
        out.append((START_UP, start_up["text"]))
    if gpu:
        low = [
            d["device"]
            for d in gpu["devices"]
            if d["utilization"] is not None and _without_startup(d["utilization"], start_up) < 0.5
        ]
        if low:
            which = ", ".join(str(d) for d in low)
            out.append(
                (
                    HOST_COMPUTE,
                    f"GPU {which} {'is' if len(low) == 1 else 'are'} busy less than half of the step time"
                    f"{STARTUP_LEFT_OUT if start_up else ''}. A larger batch size may help (it can affect "
                    "convergence).",
                )
            )
        major = props[0].get("computeMajor") if props else None
        if major is not None and major >= 7 and gpu["tensor_core_ratio"] == 0.0:
            eligible = tensor_core_eligible_kernel_ratio(t)
            if eligible > 0:
                out.append(
                    (
                        COMPUTE,
                        f"Kernels with {round(eligible * 100)}% of the time are launched by Tensor Core "
                        "eligible operators, but no kernel uses Tensor Cores. Automatic Mixed Precision "
                        "(FP16/BF16) could speed them up.",
                    )
                )
    if gpu:
        idle = _idle_without_startup(gpu.get("temporal"), start_up)
        from profiler_core.analysis.worker.ledger import graph_launches

        for text in temporal.idle_recommendations(idle, graph_launches(t)):
            out.append((LAUNCH_OVERHEAD, text + (STARTUP_LEFT_OUT if start_up else "")))
    for dev, peak in sorted(_peak_device_memory(t).items()):
        p = props[dev] if 0 <= dev < len(props) else {}
        cap = p.get("totalGlobalMem")
        if cap and peak > 0.9 * cap:
            out.append(
                (
                    None,
                    f"Device memory use peaks at {peak / cap * 100:.1f}% of the {cap / 2**30:.1f} GB of GPU "
                    f"{dev}. Gradient checkpointing or mixed precision reduce memory use.",
                )
            )
            break
    return out


# ---------------------------------------------------------------------------------------------- environment
def environment(t: Any, gpu: dict | None) -> dict:
    """Device type, the properties of the devices used, and the distributed setup recorded in the trace."""
    meta = getattr(t, "metadata", None) or {}
    dist = meta.get("distributedInfo") if isinstance(meta.get("distributedInfo"), dict) else None
    used = {d["device"] for d in gpu["devices"]} if gpu else set()
    devices = []
    for d, p in sorted(device_properties(t).items()):
        if d in used:
            devices.append(
                {
                    "id": d,
                    "name": p.get("name"),
                    "memory_bytes": p.get("totalGlobalMem"),
                    "compute_capability": (
                        f"{p.get('computeMajor')}.{p.get('computeMinor')}"
                        if p.get("computeMajor") is not None
                        else None
                    ),
                    "num_sms": p.get("numSms"),
                }
            )
    return {
        "device_type": "GPU" if gpu else "CPU",
        "devices": devices,
        "distributed": dist,
        "world_size": dist.get("world_size") if dist else None,
        "schema_version": meta.get("schemaVersion"),
    }


# ------------------------------------------------------------------------------------------------- the view
def _row(step: str, costs: np.ndarray, total_ns: float) -> dict:
    row: dict[str, Any] = {"step": step, "total_us": ns_to_us(total_ns)}
    for i, r in enumerate(ROLES):
        row[f"{r}_us"] = ns_to_us(costs[i])
    row["other_us"] = ns_to_us(costs[len(ROLES)])
    return row


def overview(t: Any) -> dict:
    """The per-trace part of the `/overview` answer (docs/http-api.md): steps, average, gpu (or None),
    recommendations, environment (the Overview view adds the trace's ledger: `tb_plugin/views/overview.py`)."""
    return overview_with_advice(t)[0]


def overview_with_advice(t: Any) -> tuple[dict, list[tuple[str | None, str]]]:
    """`overview(t)` and its recommendations as (ledger bucket or None, text) pairs, for the ledger."""
    st, costs = breakdown(t)
    lengths = (st["end"] - st["start"]).to_numpy(np.float64)
    rows = [_row(str(s), costs[i], lengths[i]) for i, s in enumerate(st["step"])]
    avg = _row("average", costs.mean(axis=0), float(lengths.mean())) if len(rows) else dict.fromkeys(KEYS, 0.0)
    avg.pop("step", None)
    gpu = gpu_summary(t)
    has_steps = has_profiler_steps(t)
    notes = gpu_work_notes(t)
    if not has_steps and rows:
        notes.insert(
            0, "No steps in this trace (no ProfilerStep# ranges): the breakdown covers the whole trace window."
        )
    tips = advice(t, avg, gpu)
    out = {
        "steps": rows,
        "average": avg,
        "gpu": gpu,
        "recommendations": [text for _, text in tips],
        "environment": environment(t, gpu),
        "has_steps": has_steps,
        "notes": notes,
    }
    return out, tips
