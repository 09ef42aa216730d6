"""The roofline's arithmetic on a hand-made trace whose answers are worked out here: one bf16 GEMM on an A100, an
in-place add, an op without a model, a Winograd convolution, two steps."""

from __future__ import annotations

import json

import pytest

from profiler_core.analysis.roofline.table import kernel_owners, mfu, roofline_calls, roofline_kernels, roofline_ops
from profiler_core.trace.read.reader import read_trace

N = 4096
BF16 = "c10::BFloat16"
A100 = {"id": 0, "name": "NVIDIA A100-SXM4-40GB", "totalGlobalMem": 42505273344, "numSms": 108}


def _op(name, ts, dur, ext, dims, types):
    args = {"External id": ext, "Input Dims": dims, "Input type": types}
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


def _launch(ts, corr, ext):
    args = {"External id": ext, "correlation": corr}
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "pid": 1,
        "tid": 1,
        "ts": ts,
        "dur": 2,
        "args": args,
    }  # noqa: E501


def _kernel(name, ts, dur, corr, ext):
    args = {"External id": ext, "correlation": corr, "device": 0, "stream": 7}
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": args}


def _events() -> list:
    return [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": 1, "tid": 1, "ts": 3000, "dur": 1000},
        # step 1: aten::linear -> aten::mm (the linear counts: outermost), its kernel 1000 µs
        _op("aten::linear", 10, 100, 1, [[N, N], [N, N], []], [BF16, BF16, ""]),
        _op("aten::mm", 20, 50, 2, [[N, N], [N, N]], [BF16, BF16]),
        _launch(30, 100, 2),
        _kernel("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32", 200, 1000, 100, 2),
        # an in-place add of two 1M-element bf16 tensors: 100 µs
        _op("aten::add_", 200, 50, 3, [[1 << 20], [1 << 20], []], [BF16, BF16, "Scalar"]),
        _launch(210, 101, 3),
        _kernel("void at::native::vectorized_elementwise_kernel<4, add>", 1300, 100, 101, 3),
        # step 2: an op without a model, and a convolution that cuDNN ran with Winograd
        _op("aten::nonzero", 3100, 50, 4, [[1000]], [BF16]),
        _launch(3110, 102, 4),
        _kernel("void nonzero_kernel", 3200, 10, 102, 4),
        _op("aten::convolution_backward", 3300, 50, 5, [[8, 64, 28, 28], [8, 64, 28, 28], [64, 64, 3, 3]], [BF16] * 3),
        _launch(3310, 103, 5),
        _kernel("volta_scudnn_winograd_128x128_ldg1_ldg4_tile148n_nt", 3400, 100, 103, 5),
    ]


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("roofline") / "t.pt.trace.json"
    path.write_text(json.dumps({"deviceProperties": [A100], "traceEvents": _events()}))
    return read_trace(str(path))


def test_a_composite_op_counts_once_with_its_inner_kernels(trace):
    k = kernel_owners(trace)
    names = trace.events["name"].to_numpy()
    owners = {names[r]: (names[o] if o >= 0 else None) for r, o in zip(k["row"], k["owner"])}
    assert owners["sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32"] == "aten::linear"
    assert owners["void nonzero_kernel"] is None


def test_gemm_against_the_bf16_tensor_roof(trace):
    calls = roofline_calls(trace)
    gemm = calls[calls["family"] == "gemm"].iloc[0]
    flops, nbytes = 2 * N**3, 3 * N * N * 2
    assert (gemm["flops"], gemm["bytes"], gemm["roof"], gemm["bound"]) == (flops, nbytes, "bf16_tc", "compute")
    assert gemm["achieved_flops"] == pytest.approx(flops / 1e-3)
    assert gemm["intensity"] == pytest.approx(flops / nbytes)
    bound_s = flops / 312e12  # compute-bound: 0.4405 ms
    assert gemm["fraction"] == pytest.approx(bound_s / 1e-3)
    assert gemm["lost_ns"] == pytest.approx(1e6 - bound_s * 1e9 / 0.8)


def test_elementwise_against_the_memory_roof(trace):
    add = roofline_calls(trace).query("family == 'elementwise'").iloc[0]
    nbytes = 3 * (1 << 20) * 2
    assert (add["bytes"], add["bound"]) == (nbytes, "memory")
    assert add["fraction"] == pytest.approx(nbytes / 1555e9 / 100e-6)
    assert add["lost_ns"] == pytest.approx(100e3 - nbytes / 1555e9 * 1e9 / 0.8)


def test_winograd_has_no_roof_and_unmodelled_kernels_are_listed(trace):
    ops = roofline_ops(trace)
    conv = ops[ops["name"] == "aten::convolution_backward"].iloc[0]
    assert conv["bound"] == "winograd" and conv["fraction"] != conv["fraction"]  # NaN
    nm = ops[ops["family"] == "no model"]
    assert nm[["name", "calls", "device_ms"]].values.tolist() == [["aten::nonzero", 1, 0.01]]
    assert ops.iloc[0]["name"] == "aten::linear"  # the most ms lost first
    k = roofline_kernels(trace).set_index("kernel")
    assert k.loc["void nonzero_kernel", "modelled"] == 0
    assert k.loc["volta_scudnn_winograd_128x128_ldg1_ldg4_tile148n_nt", "tflops"] != 0  # NaN: not roofed


def test_mfu_per_step(trace):
    m = mfu(trace)
    assert (m["device"], m["roof"], m["peak_tflops"]) == ("A100 40GB SXM", "bf16_tc", 312.0)
    s1, s2 = m["steps"]
    gemm = 2 * N**3
    # the steps are stretched to the GPU work launched in them: step 1 ends with the add's kernel (1400 µs)
    assert s1["ms"] == pytest.approx(1.4)
    assert s1["mfu"] == pytest.approx(gemm / (1.4e-3 * 312e12))
    assert s1["hfu"] == pytest.approx((gemm + (1 << 20)) / (1.4e-3 * 312e12))
    conv = 2 * 2 * 8 * 28 * 28 * 9 * 64 * 64  # grad-input and grad-weight (mask not recorded)
    assert s2["model_tflop"] == pytest.approx(conv / 1e12)
    assert m["mfu"] == pytest.approx((gemm + conv) / ((s1["ms"] + s2["ms"]) * 1e-3 * 312e12))


def test_diagnose_takes_the_peak_of_an_unknown_gpu(tmp_path, monkeypatch, capsys):
    """`gpuscope diagnose --peak-tflops` gives a GPU the table does not know its roof; without it, no MFU."""
    from tb_plugin.summaries import cli

    ev = json.loads(json.dumps(_events()))
    for run, flag in (("without", []), ("with", ["--peak-tflops", "100"])):
        folder = tmp_path / run / "job"
        folder.mkdir(parents=True)
        props = {**A100, "name": "Mystery GPU 9000"}
        (folder / "w.pt.trace.json").write_text(json.dumps({"deviceProperties": [props], "traceEvents": ev}))
        monkeypatch.setenv("GPUSCOPE_PEAK_TFLOPS", "")  # restored after the test: the flag sets it
        assert cli.main(["diagnose", str(folder), *flag]) == 0
        out = capsys.readouterr().out
        if flag:
            assert "MFU" in out and "of the Mystery GPU 9000 bf16_tc roof (100 TFLOP/s)" in out
            assert "Use the Tensor Cores" not in out  # a GPU the table does not know is not claimed to have them
        else:
            assert "no MFU (the device's peaks are unknown (set GPUSCOPE_PEAK_TFLOPS, or diagnose --peak-tflops" in out
