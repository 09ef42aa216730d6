"""The names the views share: the analysis stages' public functions (owned by profiler_core/analysis/stages,
re-exported here so a view imports one module) and the operators that can use Tensor Cores.

Nothing here computes a stage: each concept has its one module under profiler_core/analysis/stages/
(op_tree, gpu_links, node_stats, steps, launch_stats, classify, columns) or profiler_core/analysis/intervals;
Tensor Core kernel names are views/tensor_cores.py's.
"""

from __future__ import annotations

from profiler_core.analysis.stages.classify import (  # noqa: F401 - re-exported for the views
    COMM_NAMES,
    COMM_PREFIXES,
    STEP_PREFIX,
    communication_mask,
    is_communication,
    is_dataloader,
)
from profiler_core.analysis.stages.columns import (  # noqa: F401
    category_mask,
    codes_and_texts,
    name_mask,
    ns_to_us,
    per_value,
    sorted_unique,
    zeros_column,
)
from profiler_core.analysis.stages.gpu_links import (  # noqa: F401
    first_position_by_key,
    link_gpu_to_ops,
    link_launches_to_ops,
    lookup,
)
from profiler_core.analysis.stages.launch_stats import (  # noqa: F401
    WORK_ITEM_GRID_LAUNCHES,
    cdna_occupancy,
    device_properties,
    is_amd_device,
    launch_stats,
)
from profiler_core.analysis.stages.op_tree import composite, group_codes, innermost_op_at, op_tree  # noqa: F401
from profiler_core.analysis.stages.registry import cached as derived  # noqa: F401
from profiler_core.analysis.stages.steps import early_gpu_rows, steps  # noqa: F401
from profiler_core.trace import categories

from .tensor_cores import TC_KERNEL_PATTERNS, uses_tensor_cores  # noqa: F401

CPU_OP_CATS = categories.OP_CATS
GPU_CATS = categories.GPU_ACTIVITY_CATS
LAUNCH_CATS = categories.LAUNCH_CATS


# ---------------------------------------------------------------------------------------------- Tensor Cores
# Operators that can use Tensor Cores (autocast's lower-precision list and their backward ops).
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
