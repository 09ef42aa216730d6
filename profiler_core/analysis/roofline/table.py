"""Achieved vs bound, per op call, per op and per kernel; model FLOPs utilisation per step.

Each kernel belongs to the counted op call at or above its launching op in the op tree (`ops.op_models`; the
launch links are `stages.gpu_links`', CUDA-graph replays included). A call's device time is the sum of its
kernels' durations; over it:

- achieved FLOP/s = FLOPs / device time, achieved bytes/s = bytes / device time, arithmetic intensity = FLOPs /
  bytes;
- the roofline bound: the time the call needs at the device's roofs, max(FLOPs / compute roof, bytes /
  bandwidth) (`device_peaks.roof`: the dtype's peak on the unit the kernels used: Tensor Cores when the call's
  longest kernel is a Tensor Core kernel, `tensor_cores.uses_tensor_cores`); `bound` says which roof binds;
- fraction of the bound reached = bound time / device time (1: at the roof; above 1 where the bytes stayed in the
  GPU's cache: the memory roof is DRAM bandwidth and the bytes each tensor once from DRAM);
- ms lost to the bound = device time - bound time / `GPUSCOPE_ROOFLINE_FRACTION` (default 0.8: what a good kernel
  reaches), never below 0.

Convolutions cuDNN/MIOpen run by Winograd or FFT do fewer multiplications than the direct form torch's FLOPs
count (`algorithm` names it, from the kernel names): their achieved FLOP/s is in model FLOPs and may pass the
compute roof, so they get no fraction and no ms lost (NaN), never a made-up hardware count.
Kernels of no counted call are "no model" (grouped by their launching op's name): counted, never guessed. A
device the peaks table does not know has no roofs (NaN), unless the settings give them.
MFU per step: the matrix FLOPs (GEMMs, convolutions, attention) whose kernels ran in the step, over the step's
wall time x the matrix roof (the roof of the dtype and unit that carry most of the trace's matrix FLOPs); HFU
counts every modelled FLOP (the memory-bound families' too) over the same roof. A call's FLOPs go to the steps
its kernels ran in, in proportion to their time. Recomputed forwards (activation checkpointing) are counted as
they run: a trace cannot tell them from the first forward.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from ... import settings
from ...trace.categories import KERNEL
from .. import device_peaks
from ..stages.classify import communication_events
from ..stages.columns import category_mask, codes_and_texts, name_mask
from ..stages.gpu_links import link_gpu_to_ops
from ..stages.registry import stage
from ..stages.steps import steps
from ..tensor_cores import uses_tensor_cores
from .ops import op_models, owners

NS = 1e-9


def fraction_setting() -> float:
    """`GPUSCOPE_ROOFLINE_FRACTION`: the fraction of its bound a call can realistically reach."""
    return float(settings.get("GPUSCOPE_ROOFLINE_FRACTION"))


def is_winograd(name: str) -> bool:
    """A Winograd-transform convolution kernel (fewer multiplications than the direct convolution)."""
    return "winograd" in name.lower()


def is_fft(name: str) -> bool:
    """An FFT convolution kernel."""
    low = name.lower()
    return "fft" in low and ("conv" in low or "cudnn" in low or "miopen" in low or "fft2d" in low or "fft_" in low)


def device_props(t: Any) -> dict[int, dict]:
    """deviceProperties by device id. A kernel's device id may be one the trace does not list (Kineto lists the
    devices the process saw, numbered from 0 after CUDA_VISIBLE_DEVICES, while kernels carry the physical
    index): where every listed device is the same product, any other id reads as it (`props_of`)."""
    out: dict[int, dict] = {}
    for i, p in enumerate(t.device_properties or []):
        if isinstance(p, dict):
            out[int(p.get("id", i)) if isinstance(p.get("id", i), int) else i] = p
    return out


def props_of(props: dict[int, dict], device: int) -> dict | None:
    """The deviceProperties of `device` (see `device_props`), None when the trace does not say."""
    if device in props:
        return props[device]
    kinds = {(p.get("name"), p.get("numSms"), p.get("totalGlobalMem")) for p in props.values()}
    return next(iter(props.values())) if len(kinds) == 1 else None


@stage(op_models, link_gpu_to_ops, communication_events)
def kernel_owners(t: Any) -> pd.DataFrame:
    """Each compute kernel (communication kernels are the collectives', not compute: `classify`): `row`,
    `owner` (the counted op call it belongs to, -1: no model), `op` (its launching op, -1: none), `dur` (ns),
    `device`, `tc` (a Tensor Core kernel by name), `algorithm` (0, or 1 Winograd, 2 FFT)."""
    ev = t.events
    links = link_gpu_to_ops(t)
    rows = links["row"].to_numpy(np.int64)
    is_kernel = (category_mask(ev, (KERNEL,)) & ~communication_events(t))[rows]
    rows, op = rows[is_kernel], links["op"].to_numpy(np.int64)[is_kernel]
    m = op_models(t)
    counted = m["row"].to_numpy(np.int64)[m["counted"].to_numpy(bool)]
    owner_of = owners(t, counted)
    owner = np.where(op >= 0, owner_of[np.maximum(op, 0)], -1)
    tc = name_mask(ev, uses_tensor_cores)[rows]
    algorithm = np.where(name_mask(ev, is_winograd)[rows], 1, np.where(name_mask(ev, is_fft)[rows], 2, 0))
    return pd.DataFrame(
        {
            "row": rows,
            "owner": owner,
            "op": op,
            "dur": ev["dur"].to_numpy(np.int64)[rows],
            "device": ev["device"].to_numpy(np.int64)[rows],
            "tc": tc,
            "algorithm": algorithm,
        }
    )


@stage(kernel_owners, op_models)
def roofline_calls(t: Any) -> pd.DataFrame:
    """One row per counted op call with kernels: `row`, `family`, `dtype`, `matrix`, `flops`, `bytes`, `kernels`,
    `device_ns`, `device`, `tc`, `roof` (the compute roof's name), `peak_flops`, `bandwidth` (bytes/s),
    `bound_ns`, `bound` ("compute"/"memory"), `achieved_flops`, `achieved_bytes`, `intensity`, `fraction`,
    `lost_ns` (module docstring); roof columns NaN where the device has no peaks."""
    k = kernel_owners(t)
    k = k[k["owner"] >= 0]
    if len(k) == 0:
        return _empty_calls()
    g = k.groupby("owner", sort=True)
    agg = g.agg(device_ns=("dur", "sum"), kernels=("dur", "size"), device=("device", "first"), alg=("algorithm", "max"))
    longest = k.loc[g["dur"].idxmax().to_numpy(), ["owner", "tc"]].set_index("owner")["tc"]
    m = op_models(t).set_index("row")
    calls = agg.join(m[["family", "dtype", "matrix", "flops", "bytes"]], how="left")
    calls["tc"] = longest.reindex(calls.index).to_numpy(bool)
    calls = calls.reset_index().rename(columns={"owner": "row"})
    calls["algorithm"] = np.array(["", "winograd", "fft"], dtype=object)[calls.pop("alg").to_numpy(np.int64)]
    props = device_props(t)
    peak = np.full(len(calls), np.nan)
    bw = np.full(len(calls), np.nan)
    roof_name = np.full(len(calls), "", dtype=object)
    cache: dict[tuple, tuple] = {}
    for i, (dev, dtype, tc) in enumerate(zip(calls["device"].tolist(), calls["dtype"].tolist(), calls["tc"].tolist())):
        key = (dev, dtype, tc)
        if key not in cache:
            dp = props_of(props, dev)
            p = device_peaks.peaks_for(dp) if dp is not None else None
            if p is None:
                cache[key] = (np.nan, np.nan, "")
            else:
                value, name = device_peaks.roof(p, dtype, tc)
                gbps = p.bandwidth_gbps
                cache[key] = (value if value else np.nan, gbps * 1e9 if gbps else np.nan, name)
        peak[i], bw[i], roof_name[i] = cache[key]
    flops = calls["flops"].to_numpy(np.float64)
    nbytes = calls["bytes"].to_numpy(np.float64)
    dev_s = calls["device_ns"].to_numpy(np.float64) * NS
    with np.errstate(divide="ignore", invalid="ignore"):
        t_compute = flops / peak
        t_memory = nbytes / bw
        bound_s = np.fmax(t_compute, t_memory)
        calls["roof"] = roof_name
        calls["peak_flops"] = peak
        calls["bandwidth"] = bw
        calls["bound_ns"] = bound_s / NS
        calls["bound"] = np.where(np.isnan(bound_s), "", np.where(t_compute >= t_memory, "compute", "memory"))
        calls["achieved_flops"] = np.where(dev_s > 0, flops / dev_s, np.nan)
        calls["achieved_bytes"] = np.where(dev_s > 0, nbytes / dev_s, np.nan)
        calls["intensity"] = np.where(nbytes > 0, flops / nbytes, np.nan)
        fewer = calls["algorithm"].to_numpy() != ""  # fewer multiplications than counted: no roof applies
        calls["fraction"] = np.where((dev_s > 0) & ~fewer, bound_s / dev_s, np.nan)
        lost = np.maximum(calls["device_ns"].to_numpy(np.float64) - bound_s / NS / fraction_setting(), 0)
        calls["lost_ns"] = np.where(fewer, np.nan, lost)
        calls.loc[fewer, "bound"] = calls.loc[fewer, "algorithm"]
        calls.loc[fewer, "bound_ns"] = np.nan
    return calls


_CALL_COLUMNS = (
    "row", "device_ns", "kernels", "device", "algorithm", "family", "dtype", "matrix", "flops", "bytes", "tc", "roof",
    "peak_flops", "bandwidth", "bound_ns", "bound", "achieved_flops", "achieved_bytes", "intensity", "fraction",
    "lost_ns",
)  # fmt: skip


def _empty_calls() -> pd.DataFrame:
    return pd.DataFrame({c: [] for c in _CALL_COLUMNS})


def _sum_or_nan(s: pd.Series) -> float:
    return float(s.sum(min_count=1))


def _shape(text: str) -> str:
    """`Input Dims` as the table shows them: the tensor shapes only."""
    try:
        dims = json.loads(text) if text else []
    except ValueError:
        return text
    return ", ".join("x".join(map(str, d)) for d in dims if isinstance(d, list) and d and type(d[0]) is int)


def roofline_ops(t: Any) -> pd.DataFrame:
    """Counted calls grouped by (op name, input shapes, dtype), sorted by ms lost to the bound: `name`, `shapes`,
    `family`, `dtype`, `calls`, `device_ms`, `flops`, `bytes`, `tflops` / `gbps` achieved, `intensity`,
    `bound`, `roof`, `fraction` (bound time / device time over the group), `lost_ms`, `tc`; then the kernels of
    no counted call as rows of family "no model" (grouped by launching op, or kernel name without one)."""
    calls = roofline_calls(t)
    ev = t.events
    parts = []
    if len(calls):
        rows = calls["row"].to_numpy(np.int64)
        names = ev["name"].to_numpy()[rows].astype(str)
        dims = ev["input_dims"].to_numpy()[rows].astype(str)
        df = calls.assign(name=names, shapes=[_shape(d) for d in dims])
        g = df.groupby(["name", "shapes", "dtype"], sort=False, dropna=False)
        out = g.agg(
            family=("family", "first"),
            calls=("row", "size"),
            device_ns=("device_ns", "sum"),
            flops=("flops", "sum"),
            bytes=("bytes", "sum"),
            bound_ns=("bound_ns", _sum_or_nan),
            lost_ns=("lost_ns", _sum_or_nan),
            bound=("bound", lambda s: s.mode().iat[0] if len(s.mode()) else ""),
            roof=("roof", "first"),
            tc=("tc", "mean"),
            matrix=("matrix", "first"),
        ).reset_index()
        parts.append(out)
    k = kernel_owners(t)
    free = k[k["owner"] < 0]
    if len(free):
        op = free["op"].to_numpy(np.int64)
        who = np.where(op >= 0, op, free["row"].to_numpy(np.int64))
        names = ev["name"].to_numpy()[who].astype(str)
        nm = pd.DataFrame({"name": names, "device_ns": free["dur"].to_numpy(np.int64)})
        g = nm.groupby("name", sort=False).agg(calls=("device_ns", "size"), device_ns=("device_ns", "sum"))
        g = g.reset_index().assign(shapes="", dtype="", family="no model", flops=0, bytes=0, bound_ns=np.nan)
        g = g.assign(lost_ns=np.nan, bound="", roof="", tc=np.nan, matrix=False)
        parts.append(g)
    if not parts:
        return pd.DataFrame(columns=["name", "shapes", "dtype", "family", "calls", "device_ms", "lost_ms"])
    out = pd.concat(parts, ignore_index=True)
    dev_s = out["device_ns"].to_numpy(np.float64) * NS
    with np.errstate(divide="ignore", invalid="ignore"):
        out["device_ms"] = out["device_ns"] / 1e6
        out["tflops"] = np.where(dev_s > 0, out["flops"] / dev_s / 1e12, np.nan)
        out["gbps"] = np.where(dev_s > 0, out["bytes"] / dev_s / 1e9, np.nan)
        out["intensity"] = np.where(out["bytes"] > 0, out["flops"] / out["bytes"].where(out["bytes"] > 0, 1), np.nan)
        out["fraction"] = np.where(out["device_ns"] > 0, out["bound_ns"] / out["device_ns"], np.nan)
        out["lost_ms"] = out["lost_ns"] / 1e6
    out = out.drop(columns=["device_ns", "bound_ns", "lost_ns"])
    order = np.lexsort((-out["device_ms"].to_numpy(), -np.nan_to_num(out["lost_ms"].to_numpy(), nan=-1.0)))
    return out.iloc[order].reset_index(drop=True)


def roofline_kernels(t: Any) -> pd.DataFrame:
    """Per kernel name: `kernel`, `count`, `device_ms`, `modelled` (the share of its launches that belong to a
    counted call), `tc`, and over the launches of counted calls without a Winograd/FFT algorithm: `flops`,
    `bytes` (each launch's share of its call's, in proportion to its time), `tflops`, `gbps`, `peak_tflops` (the
    compute roof of its calls) and `fraction` (achieved FLOP/s over that roof)."""
    k = kernel_owners(t)
    calls = roofline_calls(t).set_index("row")
    ev = t.events
    codes, texts = codes_and_texts(ev["name"].to_numpy()[k["row"].to_numpy(np.int64)])
    dur = k["dur"].to_numpy(np.float64)
    owner = k["owner"].to_numpy(np.int64)
    flops = np.zeros(len(k))
    nbytes = np.zeros(len(k))
    peak = np.full(len(k), np.nan)
    roofed = np.zeros(len(k), bool)
    has = owner >= 0
    if has.any() and len(calls):
        c = calls.reindex(owner[has])
        plain = c["algorithm"].to_numpy() == ""
        share = dur[has] / np.maximum(c["device_ns"].to_numpy(np.float64), 1)
        flops[has] = np.where(plain, share * c["flops"].to_numpy(np.float64), 0)
        nbytes[has] = np.where(plain, share * c["bytes"].to_numpy(np.float64), 0)
        peak[has] = np.where(plain, c["peak_flops"].to_numpy(np.float64), np.nan)
        roofed[has] = plain
    with np.errstate(divide="ignore", invalid="ignore"):
        peak_time = np.where(np.isnan(peak), 0.0, flops / np.where(np.isnan(peak), 1, peak) / NS)
    df = pd.DataFrame(
        {
            "kernel": np.array(texts, dtype=object)[codes],
            "dur": dur,
            "roofed_dur": np.where(roofed, dur, 0.0),
            "peaked_dur": np.where(roofed & ~np.isnan(peak), dur, 0.0),
            "flops": flops,
            "bytes": nbytes,
            "peak_time": peak_time,
            "tc": k["tc"].to_numpy(bool),
            "modelled": has,
            "peak": peak,
        }
    )
    out = (
        df.groupby("kernel", sort=False)
        .agg(
            count=("dur", "size"),
            dur=("dur", "sum"),
            roofed_dur=("roofed_dur", "sum"),
            peaked_dur=("peaked_dur", "sum"),
            flops=("flops", "sum"),
            bytes=("bytes", "sum"),
            peak_time=("peak_time", "sum"),
            tc=("tc", "first"),
            modelled=("modelled", "mean"),
            peak=("peak", "max"),
        )
        .reset_index()
    )
    s = out["roofed_dur"].to_numpy(np.float64) * NS
    with np.errstate(divide="ignore", invalid="ignore"):
        out["device_ms"] = out["dur"] / 1e6
        out["tflops"] = np.where(s > 0, out["flops"] / s / 1e12, np.nan)
        out["gbps"] = np.where(s > 0, out["bytes"] / s / 1e9, np.nan)
        out["peak_tflops"] = out["peak"] / 1e12
        out["fraction"] = np.where(out["peaked_dur"] > 0, out["peak_time"] / out["peaked_dur"], np.nan)
    out = out.drop(columns=["dur", "roofed_dur", "peaked_dur", "peak_time", "peak"])
    return out.sort_values("device_ms", ascending=False, ignore_index=True)


def main_device(t: Any, k: pd.DataFrame) -> int | None:
    if len(k) == 0:
        return None
    return int(k.groupby("device")["dur"].sum().idxmax())


def mfu(t: Any) -> dict:
    """Model FLOPs utilisation per step (module docstring): `device` (the product, or why none), `roof` (the
    matrix roof's name), `peak_tflops`, `mfu` and `hfu` over the steps together, `steps` (per step: `step`,
    `ms`, `model_tflop`, `all_tflop`, `mfu`, `hfu`), `note` (why a number is missing). MFU and HFU are
    fractions (0.41 = 41 %), None where the trace has no model FLOPs or no roof."""
    k = kernel_owners(t)
    calls = roofline_calls(t)
    st = steps(t)
    answer: dict = {"device": "", "roof": "", "peak_tflops": None, "mfu": None, "hfu": None, "steps": [], "note": ""}
    if len(calls) == 0:
        modelled = op_models(t)
        answer["note"] = (
            "no op of this trace has a performance model with its shapes (record_shapes=False?): no model FLOPs"
            if len(modelled) == 0 or not modelled["family"].astype(bool).any()
            else "no modelled op launched a kernel"
        )
        return answer
    dev = main_device(t, k)
    dp = props_of(device_props(t), dev) if dev is not None else None
    peaks = device_peaks.peaks_for(dp) if dp is not None else None
    matrix = calls[calls["matrix"].astype(bool)]
    if len(matrix):
        by = matrix.groupby(["dtype", "tc"])["flops"].sum()
        dtype, tc = by.idxmax()
    else:
        dtype, tc = "fp32", False
    if peaks is None:
        answer["device"] = device_peaks.describe(dp) if dp is not None else "no deviceProperties in the trace"
        answer["note"] = "the device's peaks are unknown (set GPUSCOPE_PEAK_TFLOPS, or diagnose --peak-tflops)"
        peak = None
    else:
        peak, answer["roof"] = device_peaks.roof(peaks, str(dtype), bool(tc))
        answer["device"] = peaks.product
        answer["peak_tflops"] = float(peak / 1e12) if peak else None
    owned = k[k["owner"] >= 0]
    c = calls.set_index("row").reindex(owned["owner"].to_numpy())
    share = owned["dur"].to_numpy(np.float64) / np.maximum(c["device_ns"].to_numpy(np.float64), 1)
    all_flops = share * c["flops"].to_numpy(np.float64)
    model_flops = np.where(c["matrix"].to_numpy(bool), all_flops, 0.0)
    ts = t.events["ts"].to_numpy(np.int64)[owned["row"].to_numpy(np.int64)]
    starts, ends = st["start"].to_numpy(np.int64), st["end"].to_numpy(np.int64)
    at = np.searchsorted(starts, ts, side="right") - 1
    inside = (at >= 0) & (ts < ends[np.maximum(at, 0)])
    rows = []
    for i, name in enumerate(st["step"].astype(str).tolist()):
        sel = inside & (at == i)
        ms = float(ends[i] - starts[i]) / 1e6
        mf, af = float(model_flops[sel].sum()), float(all_flops[sel].sum())
        rows.append(
            {
                "step": name,
                "ms": ms,
                "model_tflop": mf / 1e12,
                "all_tflop": af / 1e12,
                "mfu": float(mf / (ms * 1e-3 * peak)) if peak and ms > 0 else None,
                "hfu": float(af / (ms * 1e-3 * peak)) if peak and ms > 0 else None,
            }
        )
    answer["steps"] = rows
    total_s = sum(r["ms"] for r in rows) * 1e-3
    if peak and total_s > 0:
        answer["mfu"] = float(sum(r["model_tflop"] for r in rows) * 1e12 / (total_s * peak))
        answer["hfu"] = float(sum(r["all_tflop"] for r in rows) * 1e12 / (total_s * peak))
    return answer
