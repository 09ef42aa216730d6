"""The /roofline answer and `Profile.roofline()` / `Profile.mfu()` on the V100 ResNet-50 run (read through a folder
of links: nothing is written beside the shared trace)."""

from __future__ import annotations

import json
import math

import pytest

import gpuscope

from .conftest import TRACES, missing

V100 = TRACES / "kineto_resnet50_v100" / "num_workers_0" / "worker0.1623143089861.pt.trace.json.gz"


@pytest.fixture(scope="module")
def prof(tmp_path_factory):
    if not V100.exists():
        missing(f"shared trace {V100} is absent")
    run = tmp_path_factory.mktemp("roofline_view") / "run"
    run.mkdir()
    (run / V100.name).symlink_to(V100)
    return gpuscope.open(str(run / V100.name))


def test_the_answer_is_json_and_names_its_device_and_source(prof):
    ans = prof._call("/roofline", **prof._file_args(None, None, None))
    json.dumps(ans, allow_nan=False)  # NaN is never sent: null instead
    assert ans["device"]["product"] == "V100 SXM2" and "datasheet" in ans["device"]["source"]
    assert ans["device"]["roofs_tflops"]["fp32"] == 15.7 and ans["device"]["bandwidth_gbps"] == 900
    assert ans["fraction"] == 0.8
    # the modelled and unmodelled device time are the trace's compute kernels' time
    assert ans["modelled_ms"] > 20 * ans["no_model_ms"] > 0


def test_ops_are_sorted_by_ms_lost(prof):
    ops = prof.roofline()
    lost = ops["lost_ms"].dropna().tolist()
    assert lost == sorted(lost, reverse=True) and lost[0] > 0
    assert ops.iloc[0]["name"] == "aten::cudnn_convolution_backward" and ops.iloc[0]["roof"] == "fp32"
    assert set(ops["family"]) >= {"conv", "norm", "elementwise", "gemm", "no model"}


def test_mfu_per_step(prof):
    steps = prof.mfu()
    assert steps["step"].tolist() == ["5", "6", "7", "8", "9", "10"]  # its ProfilerStep#5..#10
    assert all(0.2 < m < 0.35 for m in steps["mfu"]) and all(h >= m for h, m in zip(steps["hfu"], steps["mfu"]))
    assert all(math.isclose(r.model_tflop / (r.ms * 1e-3) / 15.7, r.mfu, rel_tol=1e-9) for r in steps.itertuples())
