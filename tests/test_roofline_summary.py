"""The roofline in the per-worker summary, the ledger's compute split and `gpuscope diagnose`'s MFU lines, on the
V100 ResNet-50 run and on the H800 DeepSeek trace (which records no shapes: no MFU, and it says why)."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from profiler_core.analysis.roofline.table import mfu
from profiler_core.analysis.worker.ledger import SPLIT_PARTS, ranked
from profiler_core.trace.read.reader import read_trace
from tb_plugin.run_level import report
from tb_plugin.run_level.run_ledger import run_view
from tb_plugin.summaries import schema
from tb_plugin.summaries import summary as S

from .conftest import TRACES, missing

V100 = TRACES / "kineto_resnet50_v100" / "num_workers_0" / "worker0.1623143089861.pt.trace.json.gz"
H800 = TRACES / "public" / "ds_train_h800" / "train.json"


def _summary(path):
    if not path.exists():
        missing(f"shared trace {path} is absent")
    t = read_trace(str(path))
    s = S.summarize(t)
    back = S.decode(S.encode(s))  # what a stored file gives back: typed and checked
    return t, back


@pytest.fixture(scope="module")
def v100():
    return _summary(V100)


def test_summary_holds_mfu_per_step(v100):
    t, s = v100
    r = s.roofline
    m = mfu(t)
    assert s.version == schema.VERSION and (r.device, r.roof, r.peak_tflops) == ("V100 SXM2", "fp32", 15.7)
    assert r.mfu == pytest.approx(m["mfu"]) and r.steps == [x["step"] for x in m["steps"]]
    assert r.step_mfu == pytest.approx([x["mfu"] for x in m["steps"]])
    assert r.top[0].name == "aten::cudnn_convolution_backward" and r.top[0].cause == "fp32_matrix"
    assert set(r.causes) == {"fp32_matrix", "memory_bound_chain"}


def test_compute_split_adds_up_and_bounds_what_is_recoverable(v100):
    _t, s = v100
    compute = s.ledger.buckets["compute"]
    sp = compute.split
    parts = np.sum([getattr(sp, f"{p}_ns") for p in SPLIT_PARTS], axis=0)
    assert parts.tolist() == compute.ns  # the split is of the compute bucket's own time, exactly
    assert compute.recoverable_ns == sp.recoverable_ns
    assert all(r == min(b, lo) for r, b, lo in zip(sp.recoverable_ns, sp.below_bound_ns, sp.lost_ns))
    assert sum(sum(v) for v in sp.causes.values()) == sum(sp.lost_ns)
    # the buckets with numbers still add up to each step
    total = np.sum([b.ns for b in s.ledger.buckets.values() if b.ns is not None], axis=0)
    assert total.tolist() == s.ledger.wall_ns
    rows = ranked(msgspec.to_builtins(s.ledger))["buckets"]
    split = next(r for r in rows if r["key"] == "compute")["split"]
    assert [p["part"] for p in split] == list(SPLIT_PARTS) and split[0]["causes"][0]["cause"] == "fp32_matrix"


def test_run_ledger_carries_the_split(v100):
    _t, s = v100
    view = run_view({"w0": s})
    compute = next(r for r in view["mean"]["buckets"] if r["key"] == "compute")
    assert compute["recoverable_ms"] > 0 and compute["split"][0]["recoverable_ms"] == pytest.approx(
        compute["recoverable_ms"]
    )


def test_diagnose_text_names_mfu_and_the_ops_losing_most(v100):
    _t, s = v100
    text = report.render_text(report.diagnose({"worker0": s}))
    r = s.roofline
    assert f"MFU {r.mfu * 100:.1f} %, HFU {r.hfu * 100:.1f} % of the V100 SXM2 fp32 roof (15.7 TFLOP/s)" in text
    assert f"aten::cudnn_convolution_backward (fp32): {r.top[0].lost_ms:.1f} ms below its bound" in text
    assert "below its roofline bound:" in text and "FP32 matrix work on CUDA cores" in text


def test_h800_trace_without_shapes_has_no_mfu_and_says_why():
    _t, s = _summary(H800)
    assert s.roofline.mfu is None and "record_shapes" in s.roofline.note
    compute = s.ledger.buckets["compute"]
    assert compute.split is msgspec.UNSET and set(compute.recoverable_ns) == {0}  # no roofline: no split
    text = report.render_text(report.diagnose({"rank0": s}))
    assert "no MFU (no op of this trace has a performance model with its shapes" in text


def test_job_diff_names_the_mfu_change_and_the_op_losing_more(v100):
    """Job B: rank 0's MFU lower and its worst op losing 6 ms more per step than in job A."""
    from tb_plugin.run_level import job_diff

    _t, a = v100
    r = a.roofline
    worse = [msgspec.structs.replace(r.top[0], lost_ms=r.top[0].lost_ms + 6.0 * len(r.steps)), *r.top[1:]]
    b = msgspec.structs.replace(a, roofline=msgspec.structs.replace(r, mfu=r.mfu - 0.05, top=worse))
    m = job_diff.mfu_diff({"w0": a}, {"w0": b})
    assert m["a"] == pytest.approx(r.mfu) and m["b"] == pytest.approx(r.mfu - 0.05)
    top = m["ops"][0]
    assert (top["name"], top["dtype"], top["ranks"]) == ("aten::cudnn_convolution_backward", "fp32", [0])
    assert top["delta_ms"] == pytest.approx(6.0)
    text = job_diff.render_text(job_diff.job_diff({"w0": a}, {"w0": b}))
    expected = f"MFU {r.mfu * 100:.1f} % -> {(r.mfu - 0.05) * 100:.1f} %: aten::cudnn_convolution_backward (fp32) "
    assert expected + "below its bound by +6.0 ms per step on ranks 0" in text
