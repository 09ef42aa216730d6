"""GEMMs: mm, addmm, bmm, baddbmm, matmul, linear, _scaled_mm, _addmm_activation.

FLOPs are torch's (2 x M x N x K per matrix product; the bias add of addmm/linear not counted, as
FlopCounterMode counts none): the names `profiler_core.flops` already has formulas for use those formulas
(the collection core's `with_flops` count), the others compute the same product here. Bytes: the operands,
the added input (addmm's `self`, linear's bias) and the output, each once."""

from __future__ import annotations

import math

from ...flops import compute_flops
from .model import NoModel, OpModel, register
from .shapes import Call


def _out_bytes(call: Call, first: int, out_shape: list[int]) -> int:
    return math.prod(out_shape) * (call.itemsize(first) or 0)


def _finish(call: Call, name: str, first: int, flops: int, out_shape: list[int], note: str = "") -> OpModel:
    if flops <= 0:
        raise NoModel(f"{name}: operand shapes do not multiply")
    read = sum(call.nbytes(i) for i in call.tensors())
    return OpModel("gemm", flops, read + _out_bytes(call, first, out_shape), call.dtype(first) or "", True, note)


def _two_d(call: Call, name: str, first: int) -> OpModel:
    a, b = call.shape(first), call.shape(first + 1)
    if a is None or b is None or len(a) != 2 or len(b) != 2 or a[1] != b[0]:
        raise NoModel(f"{name}: not two matrices")
    formula = "aten::mm" if first == 0 else "aten::addmm"  # _addmm_activation has addmm's operands
    return _finish(call, name, first, compute_flops(formula, call.dims), [a[0], b[1]])


def _three_d(call: Call, name: str, first: int) -> OpModel:
    a, b = call.shape(first), call.shape(first + 1)
    if a is None or b is None or len(a) != 3 or len(b) != 3 or a[0] != b[0] or a[2] != b[1]:
        raise NoModel(f"{name}: not two batches of matrices")
    return _finish(call, name, first, compute_flops(f"aten::{name}", call.dims), [a[0], a[1], b[2]])


def mm(call: Call, name: str, hints: dict) -> OpModel:
    return _two_d(call, name, 0)


def addmm(call: Call, name: str, hints: dict) -> OpModel:
    return _two_d(call, name, 1)


def bmm(call: Call, name: str, hints: dict) -> OpModel:
    return _three_d(call, name, 0)


def baddbmm(call: Call, name: str, hints: dict) -> OpModel:
    return _three_d(call, name, 1)


def matmul(call: Call, name: str, hints: dict) -> OpModel:
    a, b = call.shape(0), call.shape(1)
    if not a or not b:
        raise NoModel("matmul: an operand is not a tensor of rank >= 1")
    a2 = [1] + a if len(a) == 1 else a
    b2 = b + [1] if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise NoModel("matmul: inner dimensions differ")
    batch_a, batch_b = a2[:-2], b2[:-2]
    width = max(len(batch_a), len(batch_b))
    batch = [max(x, y) for x, y in zip([1] * (width - len(batch_a)) + batch_a, [1] * (width - len(batch_b)) + batch_b)]
    return _finish(call, name, 0, compute_flops("aten::matmul", call.dims), batch + [a2[-2], b2[-1]])


def linear(call: Call, name: str, hints: dict) -> OpModel:
    x, w = call.shape(0), call.shape(1)
    if not x or w is None or len(w) != 2 or x[-1] != w[1]:
        raise NoModel("linear: input and weight do not match")
    rows = math.prod(x[:-1])
    return _finish(call, name, 0, 2 * rows * w[1] * w[0], x[:-1] + [w[0]])


def scaled_mm(call: Call, name: str, hints: dict) -> OpModel:
    """_scaled_mm(a, b, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum): the output's type is
    `out_dtype` where recorded, else a's (torch's default)."""
    a, b = call.shape(0), call.shape(1)
    if a is None or b is None or len(a) != 2 or len(b) != 2 or a[1] != b[0]:
        raise NoModel("_scaled_mm: not two matrices")
    read = sum(call.nbytes(i) for i in call.tensors())
    out_size = call.itemsize(0) or 1
    out_dtype = call.value(6)
    note = ""
    if isinstance(out_dtype, int) and out_dtype in _SCALAR_TYPE_SIZE:  # a ScalarType code
        out_size = _SCALAR_TYPE_SIZE[out_dtype]
    elif out_dtype is None:
        note = "output dtype not recorded: a's"
    return OpModel("gemm", 2 * a[0] * a[1] * b[1], read + a[0] * b[1] * out_size, call.dtype(0) or "", True, note)


#: c10::ScalarType codes -> bytes per element (Half 5, Float 6, Double 7, BFloat16 15, Float8 23-26)
_SCALAR_TYPE_SIZE = {0: 1, 1: 1, 2: 2, 3: 4, 4: 8, 5: 2, 6: 4, 7: 8, 11: 1, 15: 2, 23: 1, 24: 1, 25: 1, 26: 1}

register(("mm",), mm)
register(("addmm", "_addmm_activation"), addmm)
register(("bmm",), bmm)
register(("baddbmm",), baddbmm)
register(("matmul",), matmul)
register(("linear",), linear)
register(("_scaled_mm",), scaled_mm)
