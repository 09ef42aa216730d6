"""Tensor Core (NVIDIA) and Matrix Core (AMD MFMA/WMMA) kernels recognised by the name families their libraries
use. A name counts when it holds a matrix-instruction family and no marker of the scalar FMA path:

- MMA instruction names: hmma/imma/bmma/dmma (Volta-Ampere mma.sync), wmma (CUDA WMMA API, RDNA WMMA),
  gmma/wgmma/hgmma/qgmma and "warpgroup" (Hopper warp-group MMA), mfma and Tensile's `_MI<m>x<n>x<k>` token
  (AMD matrix instructions), Composable Kernel's xdl/xdlops;
- cuBLAS/cuDNN families: h884/s884/h1688/s1688/c1688/i8816/16816/16832 (the MMA shape in the name), xmma
  (sm75+ cuBLAS/cuDNN kernels: Tensor Core unless the name says ffma/hfma2/dfma, the FP32/FP16/FP64 FMA
  variants), nvjet (cuBLASLt Hopper/Blackwell GEMMs), torch-tb-profiler's cuDNN Tensor Core convolutions;
- CUTLASS: `tensorop` as a word of the kernel name (`cutlass_80_tensorop_...`), or anywhere in a CUTLASS
  kernel's name (`OpClassTensorOp`, `MmaTensorOp`, `TensorOpMultiplicand` template arguments), never inside
  another word of another library's name (MIOpen's element-wise `SubTensorOp*` kernels);
- FlashAttention-2/3: flash_fwd/flash_bwd; FlashAttention 3's Hopper kernels
  `cutlass::device_kernel<flash::FlashAttnFwd<` / `flash::FlashAttnBwd<` (WGMMA; not its Preprocess kernel, an
  element-wise dO*O sum);
- CUTLASS 3.x GEMMs on Hopper/Blackwell (WGMMA/UTCMMA): `cutlass::device_kernel<...>` whose kernel type names a GEMM
  (`cutlass::gemm::kernel::GemmUniversal`, DeepSeek's FP8 `grouped_gemm::...::GemmKernel`), unless its mainloop is the
  SIMT `MainloopSm70`;
- Blackwell (tcgen05 UTCMMA): the instruction names utcmma/tcgen05/umma, TensorRT-LLM's generated GEMMs
  (`bmm_..._sm100f`, `gemm_..._sm100a`: an `sm1xx` architecture suffix) and FMHA kernels (`fmhaSm100aKernel_...`).
"""

from __future__ import annotations

import re

#: plain name fragments (lower case) of Tensor Core / Matrix Core kernels
TC_KERNEL_PATTERNS = (
    "h884",
    "s884",
    "h1688",
    "s1688",
    "c1688",
    "hmma",
    "imma",
    "bmma",
    "dmma",
    "i8816",
    "16816",
    "16832",
    "dgrad_1x1_stride_2x2",
    "first_layer_wgrad_kernel",
    "conv1x1",
    "conv2d_c1_k1",
    "direct_group",
    "xmma",
    "wmma",
    "gmma",
    "warpgroup",
    "nvjet",
    "flash_fwd",
    "flash_bwd",
    "mfma",
    "xdlops",
)
#: fragments that need word boundaries: CUTLASS's tensorop, Tensile's matrix-instruction token, CK's xdl
_TC_WORDS = re.compile(r"(?:^|[^a-z0-9])tensorop|_mi\d+x\d+x\d+|(?:^|[^a-z0-9])xdl(?:[^a-z]|$)")
#: Hopper/Blackwell families (module docstring): FlashAttention 3, CUTLASS 3.x GEMM kernels, UTCMMA instruction names,
#: TensorRT-LLM's generated sm1xx GEMMs and FMHA kernels
_TC_HOPPER_BLACKWELL = re.compile(
    r"flash::flashattn(?:fwd|bwd)<"
    r"|cutlass::device_kernel<[^<>(]*gemm"
    r"|utcmma|tcgen05|(?:^|[^a-z0-9])umma(?:[^a-z]|$)"
    r"|(?:^|[^a-z0-9])(?:bmm|gemm)_[a-z0-9_]*_sm1\d\d[a-z]?(?:[^a-z0-9]|$)"
    r"|(?:^|[^a-z0-9])fmhasm1\d\d"
)
#: markers of the scalar (SIMT / FMA) path: such a kernel never runs on Tensor Cores
NOT_TC_MARKERS = ("simt", "ffma", "hfma2", "dfma", "mainloopsm70")


#: the fragments above as one search each (a name is tested against every fragment in one pass)
_NOT_TC = re.compile("|".join(map(re.escape, NOT_TC_MARKERS)))
_TC_ANY = re.compile("|".join(map(re.escape, TC_KERNEL_PATTERNS)))


def uses_tensor_cores(kernel_name: str) -> bool:
    """True if a kernel's name places it in a Tensor Core / Matrix Core family (see the module docstring)."""
    name = str(kernel_name).lower()
    if _NOT_TC.search(name) is not None:
        return False
    if _TC_ANY.search(name) is not None or _TC_WORDS.search(name) is not None:
        return True
    if _TC_HOPPER_BLACKWELL.search(name) is not None:
        return True
    return "cutlass" in name and "tensorop" in name


#: operators that can use Tensor Cores (autocast's lower-precision list and their backward ops)
TC_ELIGIBLE_OPS = frozenset(
    {
        "aten::_convolution",
        "aten::conv1d",
        "aten::conv2d",
        "aten::conv3d",
        "aten::conv_tbc",
        "aten::conv_transpose1d",
        "aten::conv_transpose2d",
        "aten::conv_transpose3d",
        "aten::convolution",
        "aten::cudnn_convolution",
        "aten::cudnn_convolution_transpose",
        "aten::prelu",
        "aten::addmm",
        "aten::addmv",
        "aten::addr",
        "aten::matmul",
        "aten::mm",
        "aten::mv",
        "aten::linear",
        "aten::addbmm",
        "aten::baddbmm",
        "aten::bmm",
        "aten::chain_matmul",
        "aten::linalg_multi_dot",
        "aten::_thnn_fused_lstm_cell",
        "aten::_thnn_fused_gru_cell",
        "aten::lstm_cell",
        "aten::gru_cell",
        "aten::rnn_tanh_cell",
        "aten::rnn_relu_cell",
        "CudnnConvolutionBackward",
        "BmmBackward0",
        "aten::cudnn_convolution_transpose_backward",
        "CudnnConvolutionTransposeBackward",
        "MmBackward",
        "aten::cudnn_convolution_backward_weight",
        "aten::addmm_",
        "AddmvBackward",
        "MvBackward",
        "aten::cudnn_convolution_transpose_backward_weight",
        "aten::cudnn_convolution_transpose_backward_input",
        "AddmmBackward",
        "aten::cudnn_convolution_backward_input",
        "AddbmmBackward",
        "aten::cudnn_convolution_backward",
        # current PyTorch names of the same work
        "aten::convolution_backward",
        "aten::_convolution_mode",
        "aten::cudnn_convolution_relu",
        "aten::cudnn_convolution_add_relu",
        "aten::_scaled_mm",
        "aten::_scaled_dot_product_flash_attention",
        "aten::_scaled_dot_product_efficient_attention",
        "aten::_scaled_dot_product_cudnn_attention",
        "aten::_flash_attention_forward",
        "aten::_flash_attention_backward",
        "aten::_efficient_attention_forward",
        "aten::_efficient_attention_backward",
        "aten::scaled_dot_product_attention",
    }
)


def is_tc_eligible_op(op_name: str) -> bool:
    """True if an operator can use Tensor Cores (it, or an op it calls, is a convolution/GEMM/attention)."""
    return str(op_name) in TC_ELIGIBLE_OPS
