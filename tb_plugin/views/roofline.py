"""Roofline view: the device's roofs, each op group as a point under them (intensity, achieved TFLOP/s, time),
the table sorted by ms lost to the bound, the kernels' achieved numbers and MFU per step
(`analysis.roofline`'s tables; docs/http-api.md)."""

from __future__ import annotations

import math
from typing import Any

from profiler_core.analysis import device_peaks
from profiler_core.analysis.roofline import table

#: rows of each table sent (the largest first); the rest are counted in `more`
MAX_ROWS = 500


def _clean(v: Any) -> Any:
    if isinstance(v, float):
        return None if math.isnan(v) or math.isinf(v) else v
    if hasattr(v, "item"):
        return _clean(v.item())
    return v


def _records(df: Any, columns: list[str]) -> list[dict]:
    cols = [c for c in columns if c in df.columns]
    return [{c: _clean(v) for c, v in zip(cols, row)} for row in df[cols].itertuples(index=False, name=None)]


def roofline(t: Any) -> dict:
    """The /roofline answer of one trace."""
    ops = table.roofline_ops(t)
    kernels = table.roofline_kernels(t)
    m = table.mfu(t)
    k = table.kernel_owners(t)
    dev = table.main_device(t, k)
    props = table.props_of(table.device_props(t), dev) if dev is not None else None
    peaks = device_peaks.peaks_for(props) if props is not None else None
    roofs = {}
    if peaks is not None:
        roofs = {c: getattr(peaks, c) for c in device_peaks.PEAKS_COLUMNS if getattr(peaks, c) is not None}
    modelled = ops[ops["family"] != "no model"] if len(ops) else ops
    no_model = ops[ops["family"] == "no model"] if len(ops) else ops
    op_cols = ["name", "shapes", "dtype", "family", "calls", "device_ms", "flops", "bytes", "tflops", "gbps",
               "intensity", "bound", "roof", "fraction", "lost_ms", "tc"]  # fmt: skip
    kernel_cols = ["kernel", "count", "device_ms", "modelled", "tc", "tflops", "gbps", "peak_tflops", "fraction"]
    return {
        "device": {
            "name": str((props or {}).get("name") or ""),
            "product": peaks.product if peaks is not None else None,
            "known": bool(peaks is not None and peaks.known),
            "source": peaks.source if peaks is not None else None,
            "about": device_peaks.describe(props) if props is not None else "no deviceProperties in the trace",
            "roofs_tflops": roofs,
            "bandwidth_gbps": peaks.bandwidth_gbps if peaks is not None else None,
        },
        "fraction": table.fraction_setting(),
        "modelled_ms": float(modelled["device_ms"].sum()) if len(modelled) else 0.0,
        "no_model_ms": float(no_model["device_ms"].sum()) if len(no_model) else 0.0,
        "lost_ms": float(ops["lost_ms"].sum(min_count=1) or 0.0) if len(ops) and "lost_ms" in ops else 0.0,
        "ops": _records(ops.head(MAX_ROWS), op_cols),
        "more_ops": max(0, len(ops) - MAX_ROWS),
        "kernels": _records(kernels.head(MAX_ROWS), kernel_cols),
        "more_kernels": max(0, len(kernels) - MAX_ROWS),
        "mfu": m,
    }
