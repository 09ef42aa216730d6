"""The roofline over every shared real GPU trace: achieved FLOP/s of a call never above its device's compute
roof (where the trace names a device the peaks table knows), sgemm kernels held to the FP32 roof, and what the
V100 ResNet-50 run's calls reach, from the raw facts of the trace."""

from __future__ import annotations

import numpy as np
import pytest

from profiler_core.analysis import device_peaks
from profiler_core.analysis.roofline.table import device_props, props_of, roofline_calls, roofline_kernels
from profiler_core.trace.read.reader import fused_ranks, read_trace

from .conftest import TRACES, missing

V100 = "kineto_resnet50_v100/num_workers_0/worker0.1623143089861.pt.trace.json.gz"
#: traces whose GPU the table knows and whose ops carry shapes: each must have roofed calls (not a vacuous check)
ROOFED = {
    V100: "V100 SXM2",
    "public/tl_b200_eager/eager_trace.json.gz": "B200",
    "public/tl_mi300_resnet_ckpt/resnet_act_checkpoint.json.gz": "MI300X",
    "public/tl_xdit_sd35/profile_trace_rank_0.json.gz": "MI300X",
    "public/hta_diff_control/control.json.gz": "A100 40GB SXM",
    "public/hta_diff_test/test.json.gz": "V100 SXM2",
    "public/hta_neg_queue/rank0.json.gz": "A100 80GB SXM",
}


def _gpu_traces() -> list[str]:
    if not TRACES.is_dir():
        return []
    files = sorted(TRACES.glob("public/*/*.json*")) + sorted(TRACES.glob("kineto_resnet50_v100/*/*.json*"))
    return [str(p.relative_to(TRACES)) for p in files if "hta_et_file" not in str(p)]


def _read(relpath: str, rank: int | None = None):
    path = TRACES / relpath
    if not path.exists():
        missing(f"shared trace {path} is absent")
    return read_trace(str(path) if rank is None else f"{path}@rank{rank}")


def _parts(relpath: str) -> list:
    path = TRACES / relpath
    ranks = fused_ranks(str(path)) if "merged" in relpath else None
    return [_read(relpath, r) for r in ranks] if ranks else [_read(relpath)]


@pytest.mark.parametrize("relpath", _gpu_traces() or ["(shared traces absent)"])
def test_achieved_flops_never_above_the_devices_peak(relpath):
    if relpath.startswith("("):
        missing(f"the shared traces are not at {TRACES}")
    roofed = 0
    for t in _parts(relpath):
        calls = roofline_calls(t)
        held = calls[(calls["algorithm"] == "") & np.isfinite(calls["peak_flops"].to_numpy(np.float64))]
        over = held[held["achieved_flops"] > held["peak_flops"]]  # NaN (a kernel of 0 µs) is never over
        assert len(over) == 0, over
        # the peak held to is the largest the device's row has for that dtype on that unit: never a lower one
        props = device_props(t)
        for dev, dtype, tc, peak in held[["device", "dtype", "tc", "peak_flops"]].drop_duplicates().itertuples(False):
            assert device_peaks.roof(device_peaks.peaks_for(props_of(props, dev)), dtype, tc)[0] == peak
        roofed += len(held)
    if relpath in ROOFED:
        t = _parts(relpath)[0]
        products = {device_peaks.peaks_for(p).product for p in t.device_properties}
        assert products == {ROOFED[relpath]} and roofed > 0


def test_sgemm_kernels_are_held_to_the_fp32_roof():
    """cuBLAS's sgemm kernels (volta_/ampere_sgemm_*) compute FP32 on CUDA cores: their roof is the FP32 peak,
    and what they reach stays under it."""
    seen = 0
    for relpath, fp32 in ((V100, 15.7), ("public/hta_diff_control/control.json.gz", 19.5)):
        k = roofline_kernels(_read(relpath))
        sgemm = k[k["kernel"].str.contains(r"^(?:volta|ampere)_sgemm_", regex=True) & (k["peak_tflops"] > 0)]
        assert len(sgemm) and (sgemm["peak_tflops"] == fp32).all() and not sgemm["tc"].any()
        assert (sgemm["tflops"] <= fp32).all() and (sgemm["fraction"] <= 1).all()
        seen += len(sgemm)
    assert seen >= 5


def test_v100_resnet50_convolutions_reach_about_half_the_fp32_roof():
    """The V100 run computes in FP32 on CUDA cores (no Tensor Core kernel): its direct (non-Winograd)
    convolutions reach between a third and all of the 15.7 TFLOP/s roof; the Winograd ones are named."""
    calls = roofline_calls(_read(V100))
    conv = calls[calls["family"] == "conv"]
    plain = conv[conv["algorithm"] == ""]
    frac = plain["flops"].sum() / (plain["device_ns"].sum() * 1e-9) / 15.7e12
    assert 0.33 < frac < 1.0
    assert set(conv["algorithm"]) == {"", "winograd"} and not conv["tc"].any()
    assert set(plain["roof"]) == {"fp32"}
