"""Issue 23, item 6: Tensor Core / Matrix Core kernels by documented name families, without the false positives
of plain substrings (FP32 FFMA xmma GEMMs, MIOpen's element-wise SubTensorOp kernels)."""

from __future__ import annotations

import pytest

from profiler_core.analysis.tables import kernels
from profiler_core.analysis.tensor_cores import uses_tensor_cores
from profiler_core.trace.read.reader import read_trace

from .conftest import SHARED, missing

PUBLIC = SHARED / "traces" / "public"


@pytest.mark.parametrize(
    "name",
    [
        # cuBLAS's FP32 GEMMs on the FMA path (name shape of cuBLAS 12 sm80/sm90 xmma kernels)
        "sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel"
        "__5x_cublas",
        "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_kernel"
        "__5x_cublas",
        # MIOpen's element-wise kernels on MI300X (tl_mi300_ddp_resnet18, tl_mi300_resnet_ckpt, tl_xdit_sd35)
        "SubTensorOpWithScalar1d",
        "SubTensorOpWithCastTensor1d",
        # Tensile kernels without a matrix-instruction token run on the vector ALUs
        "Cijk_Ailk_Bljk_SB_MT64x64x8_SE_K1",
    ],
)
def test_false_positives(name):
    assert not uses_tensor_cores(name)


TRUE_POSITIVES = {  # run: a name fragment of a Tensor Core / Matrix Core kernel in that real trace
    "tl_xdit_sd35": "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT320x224x64_MI16x16x1_",  # hipBLASLt MFMA
    "hta_amd_mi250": "Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_",
    "tl_mi300_ddp_resnet18": "kernel_grouped_conv_fwd_xdl_cshuffle_v3",  # Composable Kernel XDL (MFMA)
    "hta_nccl_data": "_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolution",  # MmaTensorOp
    "hta_neg_queue": "cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1",
    "hta_file_list_inf": "cutlass_70_wmma_tensorop_f16_s161616gemm",
    "ds_train_h800": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x64_warpgroupsize1x1x1",
    "hta_cp_alexnet": "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32",
    "tl_b200_eager": "nvjet_tst_144x128_64x6_2x1_v_bz_bias_TNN",
}


def _trace_file(run: str):
    files = sorted(p for p in (PUBLIC / run).glob("*.json*")) if (PUBLIC / run).is_dir() else []
    if not files:
        missing(f"../shared/traces/public/{run} is absent")
    return files[0]


@pytest.mark.parametrize("run", sorted(TRUE_POSITIVES))
def test_true_positives_from_real_traces(run):
    rows = kernels.kernels(read_trace(_trace_file(run), processes=0))["rows"]
    hits = [r for r in rows if TRUE_POSITIVES[run] in r["name"]]
    assert hits, f"no kernel named like {TRUE_POSITIVES[run]!r} in {run}"
    assert all(r["tensor_cores"] for r in hits)


def test_mi300_subtensorop_kernels_are_not_tensor_core_work():
    rows = kernels.kernels(read_trace(_trace_file("tl_mi300_ddp_resnet18"), processes=0))["rows"]
    sub = [r for r in rows if r["name"].startswith("SubTensorOp")]
    assert {r["name"] for r in sub} == {"SubTensorOpWithScalar1d", "SubTensorOpWithCastTensor1d"}
    assert not any(r["tensor_cores"] for r in sub)
