"""The memory-bound families: elementwise, reductions, norms, softmax, embedding and copies.

Bytes are the tensors each call must move at least: every tensor input read once, the output written once
(elementwise: the broadcast shape of the tensor inputs in the first input's type; in-place `op_`: written over
the first input). FLOPs are the operations per output element the math needs, as a count and not a cost
(elementwise 1, softmax 5: max, subtract, exp, sum, divide; norms 5 forward: mean, variance, normalise, scale,
shift, 8 backward); a reduction counts one per input element and its output is not counted (it is at most its
input and usually far smaller: without the reduced dims, which only `Concrete Inputs` holds, its size is
unknown). None of these are model FLOPs (MFU counts matrix work only)."""

from __future__ import annotations

import math

from .model import NoModel, OpModel, register
from .shapes import Call, broadcast

ELEMENTWISE = (
    "add", "sub", "mul", "div", "rsub", "add_", "sub_", "mul_", "div_", "addcmul", "addcmul_", "addcdiv",
    "addcdiv_", "lerp_", "lerp", "pow", "pow_", "neg", "abs", "exp", "log", "sqrt", "rsqrt", "rsqrt_", "sqrt_",
    "reciprocal", "sin", "cos", "tanh", "sigmoid", "relu", "relu_", "gelu", "gelu_", "silu", "silu_", "hardtanh",
    "hardtanh_", "leaky_relu", "leaky_relu_", "elu", "clamp", "clamp_", "clamp_min", "clamp_min_", "clamp_max",
    "clamp_max_", "where", "threshold_backward", "gelu_backward", "silu_backward", "sigmoid_backward",
    "tanh_backward", "masked_fill", "masked_fill_", "fill_", "zero_", "native_dropout", "native_dropout_backward",
    "eq", "ne", "lt", "gt", "le", "ge", "maximum", "minimum", "exp_", "neg_", "sign", "floor", "ceil", "round",
    "logical_not", "bitwise_and", "erf", "log1p", "expm1", "square", "_foreach_add_", "hardswish", "mish",
)  # fmt: skip
REDUCTIONS = (
    "sum", "mean", "amax", "amin", "max", "min", "prod", "var", "std", "norm", "argmax", "argmin", "any", "all",
    "linalg_vector_norm", "logsumexp",
)  # fmt: skip
NORMS_FWD = (
    "layer_norm", "native_layer_norm", "batch_norm", "native_batch_norm", "_native_batch_norm_legit",
    "_native_batch_norm_legit_no_training", "cudnn_batch_norm", "miopen_batch_norm", "group_norm",
    "native_group_norm", "rms_norm", "_fused_rms_norm", "instance_norm",
)  # fmt: skip
NORMS_BWD = (
    "native_layer_norm_backward", "native_batch_norm_backward", "cudnn_batch_norm_backward",
    "miopen_batch_norm_backward", "native_group_norm_backward", "_fused_rms_norm_backward",
)  # fmt: skip
SOFTMAX = (
    "softmax", "_softmax", "log_softmax", "_log_softmax", "_softmax_backward_data", "_log_softmax_backward_data",
    "_safe_softmax",
)  # fmt: skip


def _first_tensor(call: Call, name: str) -> tuple[int, list[int]]:
    for i in call.tensors():
        return i, call.shape(i)  # type: ignore[return-value]
    raise NoModel(f"{name}: no tensor input")


def _read(call: Call) -> int:
    return sum(call.nbytes(i) for i in call.tensors())


def elementwise(call: Call, name: str, hints: dict) -> OpModel:
    first, _ = _first_tensor(call, name)
    shapes = [call.shape(i) for i in call.tensors()]
    out = broadcast(shapes)  # type: ignore[arg-type]
    if out is None:
        raise NoModel(f"{name}: inputs do not broadcast")
    n = math.prod(out)
    size = call.itemsize(first) or 0
    if name in ("fill_", "zero_"):  # only written
        return OpModel("elementwise", n, n * size, call.dtype(first) or "", False)
    return OpModel("elementwise", n, _read(call) + n * size, call.dtype(first) or "", False)


def reduction(call: Call, name: str, hints: dict) -> OpModel:
    first, shape = _first_tensor(call, name)
    n = math.prod(shape)
    return OpModel("reduction", n, _read(call), call.dtype(first) or "", False, "output not counted")


def norm(call: Call, name: str, hints: dict) -> OpModel:
    first, shape = _first_tensor(call, name)
    n = math.prod(shape)
    back = name in NORMS_BWD
    # forward: input and parameters read, output written; backward: grad_output, input, saved statistics and
    # parameters read, grad_input written (grad_weight/bias are parameter-sized: in the reads' order of size)
    written = math.prod(call.shape(1) or shape) if back else n
    size = call.itemsize(first) or 0
    return OpModel("norm", (8 if back else 5) * n, _read(call) + written * size, call.dtype(first) or "", False)


def softmax(call: Call, name: str, hints: dict) -> OpModel:
    first, shape = _first_tensor(call, name)
    n = math.prod(shape)
    return OpModel("softmax", 5 * n, _read(call) + n * (call.itemsize(first) or 0), call.dtype(first) or "", False)


def embedding(call: Call, name: str, hints: dict) -> OpModel:
    """embedding(weight, indices): the rows looked up are read and written once, with the indices."""
    w, idx = call.shape(0), call.shape(1)
    if w is None or idx is None or len(w) != 2:
        raise NoModel(f"{name}: not a 2-d table and indices")
    rows = math.prod(idx)
    moved = call.nbytes(1) + 2 * rows * w[1] * (call.itemsize(0) or 0)
    return OpModel("embedding", 0, moved, call.dtype(0) or "", False)


def copy(call: Call, name: str, hints: dict) -> OpModel:
    """copy_(dst, src): src read, dst written (in their own types: a cast moves both sizes)."""
    dst, src = call.shape(0), call.shape(1)
    if dst is None or src is None:
        raise NoModel(f"{name}: not two tensors")
    return OpModel("copy", 0, call.nbytes(0) + call.nbytes(1), call.dtype(1) or "", False)


register(ELEMENTWISE, elementwise)
register(REDUCTIONS, reduction)
register(NORMS_FWD + NORMS_BWD, norm)
register(SOFTMAX, softmax)
register(("embedding",), embedding)
register(("copy_",), copy)
