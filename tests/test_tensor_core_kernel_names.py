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


#: Hopper/Blackwell families, each with a kernel name as the real traces ds_train_h800 (H800) and tl_b200_eager
#: (B200) spell it; a family missed here is Tensor Core time read as CUDA-core time (the H800 trace's 37 % as 2.6 %)
HOPPER_BLACKWELL = {
    "CUTLASS 3 FP8 grouped GEMM (WGMMA)": (
        "ds_train_h800",
        "void cutlass::device_kernel<dpsk::grouped_gemm::cuda::m_grouped_fp8_ptp128c::GemmKernel>"
        "(dpsk::grouped_gemm::cuda::m_grouped_fp8_ptp128c::GemmKernel::Params)",
    ),
    "FlashAttention 3 backward (WGMMA)": (
        "ds_train_h800",
        "void cutlass::device_kernel<flash::FlashAttnBwd<flash::CollectiveMainloopBwd<2, cute::tuple<cute::C<1>, "
        "cute::C<1>, cute::C<1> >, cute::tuple<cute::C<64>, cute::C<128>, cute::C<192> >",
    ),
    "TensorRT-LLM generated sm100 GEMM (UTCMMA)": (
        "tl_b200_eager",
        "bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_transOut_"
        "schedP2x1x2x3_biasM_bN_tma_tmaOpt_clmp_swiGlu_dynBatch_sm100f",
    ),
    "TensorRT-LLM sm100 FMHA (UTCMMA)": (
        "tl_b200_eager",
        "fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext",
    ),
}


@pytest.mark.parametrize("family", sorted(HOPPER_BLACKWELL))
def test_hopper_blackwell_families(family):
    run, name = HOPPER_BLACKWELL[family]
    assert uses_tensor_cores(name), family
    rows = kernels.kernels(read_trace(_trace_file(run), processes=0))["rows"]
    hits = [r for r in rows if r["name"].startswith(name)]
    assert hits, f"no kernel named like {name!r} in {run}"
    assert all(r["tensor_cores"] for r in hits)


@pytest.mark.parametrize(
    "name",
    [
        # FlashAttention 3's backward preprocessing: an element-wise dO*O row sum, no MMA
        "void cutlass::device_kernel<flash::FlashAttnBwdPreprocess<cute::tuple<cute::C<64>, cute::C<192> >, "
        "cute::tuple<cute::C<64>, cute::C<128> >, cutlass::bfloat16_t, float, cutlass::arch::Sm90, true, true> >",
        # the grouped GEMM library's helpers (ds_train_h800) and a MoE kernel naming a CUTLASS type (tl_b200_eager)
        "void dpsk::grouped_gemm::cuda::utils::transpose<512, 128, 4, 4>(unsigned char const*, unsigned char*, int, "
        "int, int, int)",
        "dpsk::grouped_gemm::cuda::utils::fill_tensormaps_kernel(CUtensorMap_st, CUtensorMap_st*, void*, int, long)",
        "void moe::dev::finalize::finalizeKernelVecLoad<moe::dev::finalize::KernelParams<cutlass::bfloat16_t, "
        "cutlass::bfloat16_t, 4, true> >",
    ],
)
def test_hopper_helpers_are_not_tensor_core_work(name):
    assert not uses_tensor_cores(name)


def test_h800_tensor_core_share_of_kernel_time():
    """The FP8 grouped GEMMs and FlashAttention 3 kernels are over a third of the H800 trace's kernel time."""
    rows = kernels.kernels(read_trace(_trace_file("ds_train_h800"), processes=0))["rows"]
    total = sum(r["total_us"] for r in rows)
    tc = sum(r["total_us"] for r in rows if r["tensor_cores"])
    assert 0.35 < tc / total < 0.45
