"""The performance models' bytes and the cases without a model, derived by hand."""

from __future__ import annotations

import pytest

from profiler_core.analysis.perf_models import NoModel, OpModel, model_op

F32, BF16 = "float", "c10::BFloat16"


def test_mm_moves_its_operands_and_output_once():
    m = model_op("aten::mm", [[128, 64], [64, 32]], [BF16, BF16])
    assert isinstance(m, OpModel)
    assert (m.family, m.flops, m.dtype, m.matrix) == ("gemm", 2 * 128 * 64 * 32, "bf16", True)
    assert m.bytes == (128 * 64 + 64 * 32 + 128 * 32) * 2


def test_addmm_reads_the_added_input():
    m = model_op("aten::addmm", [[32], [16, 8], [8, 32], [], []], [F32, F32, F32, "Scalar", "Scalar"])
    assert m.flops == 2 * 16 * 8 * 32 and m.bytes == (32 + 16 * 8 + 8 * 32 + 16 * 32) * 4


def test_linear_on_a_batch_of_rows():
    m = model_op("aten::linear", [[4, 6, 5], [9, 5], [9]], [F32, F32, F32])
    assert m.flops == 2 * 24 * 5 * 9 and m.bytes == (4 * 6 * 5 + 9 * 5 + 9 + 24 * 9) * 4


def test_in_place_elementwise_reads_both_and_writes_the_first():
    m = model_op("aten::add_", [[1024, 1024], [1024, 1024], []], [BF16, BF16, "Scalar"])
    assert (m.family, m.flops, m.bytes, m.matrix) == ("elementwise", 1024 * 1024, 3 * 1024 * 1024 * 2, False)


def test_broadcast_elementwise_writes_the_broadcast_shape():
    m = model_op("aten::mul", [[8, 1, 4], [3, 1]], [F32, F32])
    assert m.flops == 8 * 3 * 4 and m.bytes == (32 + 3 + 96) * 4


def test_copy_moves_source_and_destination_in_their_types():
    m = model_op("aten::copy_", [[1000], [1000], []], [BF16, F32, "Scalar"])
    assert (m.flops, m.bytes, m.dtype) == (0, 1000 * 2 + 1000 * 4, "fp32")


def test_embedding_moves_the_looked_up_rows():
    m = model_op(
        "aten::embedding", [[50000, 256], [8, 128], [], [], []], [F32, "long int", "Scalar", "Scalar", "Scalar"]
    )
    assert m.bytes == 8 * 128 * 8 + 2 * 8 * 128 * 256 * 4


def test_layer_norm_reads_input_and_parameters_and_writes_the_output():
    m = model_op(
        "aten::layer_norm", [[2, 16, 64], [], [64], [64], [], []], [F32, "ScalarList", F32, F32, "Scalar", "Scalar"]
    )
    assert (m.family, m.bytes, m.flops) == ("norm", (2 * 16 * 64 * 2 + 128) * 4, 5 * 2 * 16 * 64)


def test_sdpa_grouped_query_heads_and_flash_layout():
    q, kv = [2, 8, 128, 64], [2, 2, 128, 64]
    m = model_op("aten::scaled_dot_product_attention", [q, kv, kv, [], [], [], [], []], [BF16] * 3 + [""] * 5)
    assert m.flops == 2 * (2 * 16 * 128 * 64 * 128)
    assert m.bytes == (2 * 8 * 128 * 64 * 2 + 2 * 2 * 2 * 128 * 64) * 2
    flash = model_op("aten::_flash_attention_forward", [[2, 128, 8, 64], [2, 128, 2, 64], [2, 128, 2, 64]], [BF16] * 3)
    assert flash.flops == m.flops


def test_convolution_output_from_stride_padding_dilation():
    dims = [[1, 8, 17, 17], [16, 4, 3, 3], [16], [], [], [], []]
    types = [F32, F32, F32, "ScalarList", "ScalarList", "ScalarList", "Scalar"]
    m = model_op("aten::conv2d", dims, types, ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "2"])
    out = (17 + 2 - 2 - 1) // 2 + 1  # 9
    assert m.flops == 2 * 1 * out * out * 9 * 16 * 4
    assert m.bytes == (8 * 17 * 17 + 16 * 4 * 9 + 16 + 16 * out * out) * 4


@pytest.mark.parametrize(
    "name, dims, types",
    [
        ("aten::conv2d", [[1, 8, 17, 17], [16, 8, 3, 3], [16], [], [], [], []], [F32, F32, F32, "", "", "", ""]),
        ("aten::mm", [[4, 5], [6, 7]], [F32, F32]),
        ("aten::_flash_attention_forward", [[10, 8, 64], [10, 8, 64], [10, 8, 64], [3], [3]], [BF16] * 5),
    ],
)
def test_calls_that_do_not_say_enough_have_no_model_and_a_reason(name, dims, types):
    m = model_op(name, dims, types)
    assert isinstance(m, NoModel) and str(m)


def test_ops_without_a_model_are_not_guessed():
    assert model_op("aten::nonzero", [[10]], [F32]) is None
    assert model_op("mylib::mm", [[4, 5], [5, 6]], [F32, F32]) is None
