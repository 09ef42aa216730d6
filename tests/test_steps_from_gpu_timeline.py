"""Issue 23, items 2, 3 and 8: the GPU's own timeline decides what ran in a step (work launched before the
first profiled step, kernels with no launch record while the host waits in a sync), and a trace without
ProfilerStep ranges says so instead of showing a made-up step.

Expected values come from the raw trace files (JSON read here, independent of the reader) or by hand.
"""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import pytest

from profiler_core.analysis import step_breakdown as overview
from profiler_core.analysis.stages.steps import steps
from profiler_core.trace.read.reader import read_trace

from .conftest import SHARED, missing, requires
from .test_views_common_support import kernel, make_trace, op, runtime

DATA = Path(__file__).parent / "data" / "issue11"
MI300_CKPT = SHARED / "traces" / "public" / "tl_mi300_resnet_ckpt" / "resnet_act_checkpoint.json.gz"


def _raw_events(path: Path) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        d = json.load(f, parse_float=Decimal)  # exact: µs timestamps near 1.7e15 lose digits as floats
    return d["traceEvents"] if isinstance(d, dict) else d


def _union_us(intervals: list[tuple[Decimal, Decimal]], a: Decimal, b: Decimal) -> float:
    """Length of the union of [s, e) clipped to [a, b), by a plain sweep."""
    total, reach = Decimal(0), a
    for s, e in sorted((max(s, a), min(e, b)) for s, e in intervals if s < b and e > a):
        if e > reach:
            total += e - max(s, reach)
            reach = e
    return float(total)


def test_early_gpu_work_running_in_the_first_step_is_its_kernel_time():
    path = DATA / "early_gpu_work.pt.trace.json.gz"
    raw = _raw_events(path)
    step10 = next(e for e in raw if e.get("name") == "ProfilerStep#10")
    a, b = Decimal(step10["ts"]), Decimal(step10["ts"]) + Decimal(step10["dur"])
    kernels = [(Decimal(e["ts"]), Decimal(e["ts"]) + Decimal(e["dur"])) for e in raw if e.get("cat") == "kernel"]
    expected = _union_us(kernels, a, b)  # 50 early kernels (99,858 µs: 50 x 1,997.2 less 0.1 µs gaps) + 10 x 12 µs
    assert expected == pytest.approx(99_978)
    ov = overview.overview(read_trace(path, processes=0))
    s10 = ov["steps"][0]
    assert s10["step"] == "10"
    assert s10["kernel_us"] == pytest.approx(expected, abs=0.01)
    # the 50 early kernels have no launch record (launched before the profiler started)
    assert any(n.startswith("50 of 70 kernels have no launch record") for n in ov["notes"])


@requires(None if MI300_CKPT.is_file() else "../shared/traces/public/tl_mi300_resnet_ckpt is absent")
def test_mi300_first_step_kernel_time_matches_the_gpu_timeline_and_the_temporal_breakdown():
    raw = _raw_events(MI300_CKPT)
    t = read_trace(MI300_CKPT, processes=0)
    st = steps(t)
    ov = overview.overview(t)
    temporal = ov["gpu"]["temporal"]["devices"]
    assert len(temporal) == 1
    kernels = [
        (Decimal(e["ts"]), Decimal(e["ts"]) + Decimal(e["dur"]))
        for e in raw
        if e.get("ph") == "X" and e.get("cat") == "kernel" and "nccl" not in e["name"].lower()
    ]
    first_raw = min((e for e in raw if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])
    offset_us = Decimal(first_raw["ts"]) - Decimal(int(st["host_start"].iloc[0])) / 1000  # raw clock - reader's
    for i, row in enumerate(ov["steps"]):
        a = offset_us + Decimal(int(st["start"].iloc[i])) / 1000
        b = offset_us + Decimal(int(st["end"].iloc[i])) / 1000
        assert row["kernel_us"] == pytest.approx(_union_us(kernels, a, b), abs=0.01), row["step"]
        assert row["kernel_us"] == pytest.approx(temporal[0]["steps"][i]["compute_us"], abs=0.01), row["step"]
    first = ov["steps"][0]
    # the host mostly waits while the GPU runs work launched before the window: that is not Runtime
    assert first["runtime_us"] < 0.05 * first["total_us"]


def test_kernels_without_launch_record_during_a_device_sync_count_as_kernel_time():
    ev = [
        op("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        runtime("cudaDeviceSynchronize", 10, 600, corr=1),
        # three kernels whose launch (e.g. a driver-API launch) the trace lacks, run while the host waits
        kernel("triton_poi_fused_0", 20, 200, corr=-1),
        kernel("triton_poi_fused_1", 220, 200, corr=-1),
        kernel("triton_poi_fused_2", 500, 100, corr=-1),
        op("aten::mm", 700, 50, ext=5),
        runtime("cudaLaunchKernel", 710, 10, corr=9, ext=5),
        kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 730, 40, corr=9),
    ]
    ov = overview.overview(make_trace(ev))
    s = ov["steps"][0]
    assert s["kernel_us"] == pytest.approx(200 + 200 + 100 + 40)
    # the sync (10..610) minus the kernels under it (20..420, 500..600) is the host's own waiting
    assert s["runtime_us"] == pytest.approx(600 - 400 - 100 + 10)
    assert any("3 of 4 kernels have no launch record" in n for n in ov["notes"])


def test_no_profiler_steps_says_so_and_uses_the_whole_window():
    ev = [
        op("aten::add", 10, 5),
        op("aten::mul", 30, 20, tid=2),
        runtime("cudaLaunchKernel", 31, 2, corr=1),
        kernel("k", 40, 30, corr=1),
    ]
    ov = overview.overview(make_trace(ev))
    assert ov["has_steps"] is False
    assert ov["notes"][0].startswith("No steps in this trace")
    assert len(ov["steps"]) == 1 and ov["average"]["total_us"] == pytest.approx(70 - 10)
    with_steps = overview.overview(make_trace([op("ProfilerStep#3", 0, 100, cat="user_annotation")] + ev))
    assert with_steps["has_steps"] is True
    assert not any(n.startswith("No steps") for n in with_steps["notes"])


def test_work_launched_before_the_first_step_is_labelled_in_the_step_it_runs_in():
    ev = [
        op("ProfilerStep#3", 100, 100, cat="user_annotation"),
        runtime("cudaLaunchKernel", 50, 1, corr=500),
        kernel("warmup", 90, 30, corr=500),
        op("aten::relu", 110, 20, ext=1),
        runtime("cudaLaunchKernel", 112, 2, corr=1, ext=1),
        kernel("relu_kernel", 150, 10, corr=1),
    ]
    ov = overview.overview(make_trace(ev))
    s = ov["steps"][0]
    assert s["kernel_us"] == pytest.approx((120 - 100) + 10)  # the warmup kernel's part inside the step + relu
    assert "Step 3: 20.000 µs of GPU work launched before the profiled steps" in ov["notes"][0]


@pytest.mark.parametrize(
    "run",
    [
        "hta_mtia_inference/mtia_inference_rank_0.json.gz",
        "hta_cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz",
    ],
)
def test_real_traces_without_steps_use_the_whole_window(run):
    path = SHARED / "traces" / "public" / run
    if not path.is_file():
        missing(f"../shared/traces/public/{run} is absent")
    raw = [e for e in _raw_events(path) if e.get("ph") == "X" and str(e.get("cat", "")).lower() != "trace"]
    assert not any(str(e.get("name", "")).startswith("ProfilerStep#") for e in raw)
    window = max(Decimal(e["ts"]) + Decimal(e.get("dur", 0)) for e in raw) - min(Decimal(e["ts"]) for e in raw)
    ov = overview.overview(read_trace(path, processes=0))
    assert ov["has_steps"] is False and len(ov["steps"]) == 1
    assert ov["average"]["total_us"] == pytest.approx(float(window), abs=0.01)
