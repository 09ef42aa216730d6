"""What one worker's trace gives the run level about its distance from the hardware: the summary's `roofline` part
(`worker_roofline`: MFU/HFU per step, the ops losing the most ms to their bound, each with the cause and the fix
that fits it) and each below-bound call's cause (`call_causes`, which the ledger's compute split reads).

Causes, the first that holds (a call is below its bound when it loses ms to it: `table.roofline_calls`):
- `fp32_matrix`: a GEMM or convolution in FP32 whose kernels did not use Tensor Cores on a GPU that has them;
- `memory_bound_chain`: an elementwise, norm, softmax, reduction, embedding or copy op (memory-bound by nature);
- `small_matrix`: a GEMM or convolution bound by memory (too small for the Tensor Core tile to be fed);
- `attention`: an attention op below its roof;
- `matrix_kernel`: any other matrix op below its compute roof.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import device_peaks
from .table import device_props, fraction_setting, main_device, mfu, props_of, roofline_calls, roofline_ops

CAUSES: dict[str, tuple[str, str]] = {
    "fp32_matrix": (
        "FP32 matrix work on CUDA cores of a Tensor Core GPU",
        "Use the Tensor Cores: allow TF32 (torch.backends.cuda.matmul.allow_tf32, cudnn.allow_tf32) where the GPU "
        "has it, or train in BF16/FP16 (torch.autocast).",
    ),
    "memory_bound_chain": (
        "memory-bound elementwise / norm / softmax ops below the memory roof",
        "Fuse the chain so intermediates stay on chip: torch.compile, fused norm / optimizer kernels.",
    ),
    "small_matrix": (
        "small GEMMs or convolutions bound by memory (under the Tensor Core tile)",
        "Batch the small matrix products (bmm, grouped GEMM) or pad dimensions to multiples of 64-128.",
    ),
    "attention": (
        "attention below its roof",
        "Use a fused attention kernel: scaled_dot_product_attention's flash / memory-efficient backends.",
    ),
    "matrix_kernel": (
        "GEMMs / convolutions below their compute roof",
        "Tune the kernels: dimensions multiple of 8/16, channels_last convolutions, cudnn.benchmark, "
        "torch.compile(mode='max-autotune').",
    ),
}
_MEMORY_FAMILIES = frozenset(("elementwise", "norm", "softmax", "reduction", "embedding", "copy"))
#: ops the summary keeps, most ms lost first
TOP = 16


def _has_tensor_cores(p: device_peaks.Peaks | None) -> bool:
    """A GPU the peaks table knows to have Tensor / Matrix Cores (a device with roofs from the settings: unknown)."""
    return p is not None and p.known and any(getattr(p, c) is not None for c in ("tf32_tc", "fp16_tc", "bf16_tc"))


def call_causes(t: Any) -> np.ndarray:
    """Per row of `roofline_calls(t)`: its cause key (module docstring), "" when it loses nothing to its bound."""
    calls = roofline_calls(t)
    if len(calls) == 0:
        return np.zeros(0, dtype=object)
    props = device_props(t)
    peaks_of: dict[int, Any] = {}
    out = np.full(len(calls), "", dtype=object)
    lost = np.nan_to_num(calls["lost_ns"].to_numpy(np.float64))
    for i, (fam, dtype, tc, bound, dev) in enumerate(
        zip(calls["family"], calls["dtype"], calls["tc"], calls["bound"], calls["device"])
    ):
        if lost[i] <= 0:
            continue
        if dev not in peaks_of:
            dp = props_of(props, int(dev))
            peaks_of[dev] = device_peaks.peaks_for(dp) if dp is not None else None
        if fam in ("gemm", "conv") and dtype == "fp32" and not tc and _has_tensor_cores(peaks_of[dev]):
            out[i] = "fp32_matrix"
        elif fam in _MEMORY_FAMILIES:
            out[i] = "memory_bound_chain"
        elif fam in ("gemm", "conv") and bound == "memory":
            out[i] = "small_matrix"
        elif fam == "attention":
            out[i] = "attention"
        else:
            out[i] = "matrix_kernel"
    return out


def worker_roofline(t: Any) -> dict:
    """The summary's `roofline` part: `device`, `roof`, `peak_tflops`, `mfu`, `hfu` (over the steps), `steps`,
    `step_ms`, `step_model_tflop`, `step_all_tflop`, `step_mfu`, `note`, `fraction` (the setting), `modelled_ms`,
    `no_model_ms`, `lost_ms`, `top` (the TOP op groups by ms lost: name, dtype, family, calls, device_ms, lost_ms,
    fraction, bound, cause) and `causes` (per cause key: lost_ms, label, fix), plain JSON values."""
    m = mfu(t)
    ops = roofline_ops(t)
    calls = roofline_calls(t)
    causes = call_causes(t)
    steps = m["steps"]
    out: dict = {
        "device": m["device"],
        "roof": m["roof"],
        "peak_tflops": m["peak_tflops"],
        "mfu": m["mfu"],
        "hfu": m["hfu"],
        "steps": [s["step"] for s in steps],
        "step_ms": [s["ms"] for s in steps],
        "step_model_tflop": [s["model_tflop"] for s in steps],
        "step_all_tflop": [s["all_tflop"] for s in steps],
        "step_mfu": [s["mfu"] for s in steps],
        "note": m["note"],
        "fraction": fraction_setting(),
        "modelled_ms": 0.0,
        "no_model_ms": 0.0,
        "lost_ms": 0.0,
        "top": [],
        "causes": {},
    }
    if len(ops):
        nm = ops["family"] == "no model"
        out["modelled_ms"] = float(ops.loc[~nm, "device_ms"].sum())
        out["no_model_ms"] = float(ops.loc[nm, "device_ms"].sum())
        out["lost_ms"] = float(np.nansum(ops["lost_ms"].to_numpy(np.float64)))
    if len(calls):
        ev_names = t.events["name"].to_numpy()[calls["row"].to_numpy(np.int64)].astype(str)
        cause_by_group: dict[tuple, str] = {}
        lost = np.nan_to_num(calls["lost_ns"].to_numpy(np.float64))
        for name, dtype, cause, ns in zip(ev_names, calls["dtype"], causes, lost):
            if cause:
                key = (name, dtype)
                cause_by_group.setdefault(key, cause)
                entry = out["causes"].setdefault(
                    cause, {"label": CAUSES[cause][0], "fix": CAUSES[cause][1], "lost_ms": 0.0}
                )
                entry["lost_ms"] += float(ns) / 1e6
        groups = ops[~ops["family"].eq("no model") & (ops["lost_ms"].fillna(0) > 0)]
        by = groups.groupby(["name", "dtype", "family"], sort=False).agg(
            calls=("calls", "sum"), device_ms=("device_ms", "sum"), lost_ms=("lost_ms", "sum"),
            bound=("bound", "first"), fraction=("fraction", "mean"),
        )  # fmt: skip
        by = by.sort_values("lost_ms", ascending=False).head(TOP).reset_index()
        out["top"] = [
            {
                "name": str(r.name),
                "dtype": str(r.dtype),
                "family": str(r.family),
                "calls": int(r.calls),
                "device_ms": float(r.device_ms),
                "lost_ms": float(r.lost_ms),
                "fraction": None if r.fraction != r.fraction else float(r.fraction),
                "bound": str(r.bound),
                "cause": cause_by_group.get((str(r.name), str(r.dtype)), ""),
            }
            for r in by.itertuples(index=False)
        ]
    return out


def main_product(t: Any) -> str | None:
    """The peaks table's product of the device most of the trace's kernels ran on (None: unknown)."""
    from .table import kernel_owners

    dev = main_device(t, kernel_owners(t))
    dp = props_of(device_props(t), dev) if dev is not None else None
    p = device_peaks.peaks_for(dp) if dp is not None else None
    return p.product if p is not None else None


def empty(note: str = "no steps") -> dict:
    """A `roofline` part with nothing in it (hand-made summaries, traces without steps)."""
    return {
        "device": "", "roof": "", "peak_tflops": None, "mfu": None, "hfu": None, "steps": [], "step_ms": [],
        "step_model_tflop": [], "step_all_tflop": [], "step_mfu": [], "note": note, "fraction": fraction_setting(),
        "modelled_ms": 0.0, "no_model_ms": 0.0, "lost_ms": 0.0, "top": [], "causes": {},
    }  # fmt: skip
