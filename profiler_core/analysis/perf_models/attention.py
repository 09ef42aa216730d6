"""Attention: scaled_dot_product_attention and the flash / memory-efficient / cuDNN ops it dispatches to,
forward and backward, with FlopCounterMode's counts (`sdpa_flop_count`: the two batched products Q K^T and
P V over every query head, grouped-query heads broadcast; the backward's five products). Like torch's counter,
a causal mask does not halve the count (a causal kernel skips about half of the products: the model's
`note` says `causal` where torch recorded the flag). Variable-length (nested) calls have no model."""

from __future__ import annotations

import math

from .model import NoModel, OpModel, register
from .shapes import Call

#: op -> (layout "bhsd" or "bshd", position of is_causal, whether it is a backward, first of q/k/v, position of a
#: cumulative-sequence tensor that makes the call variable-length or None)
_OPS: dict[str, tuple] = {
    "scaled_dot_product_attention": ("bhsd", 5, False, 0, None),
    "_scaled_dot_product_flash_attention": ("bhsd", 4, False, 0, None),
    "_scaled_dot_product_flash_attention_for_cpu": ("bhsd", 4, False, 0, None),
    "_scaled_dot_product_efficient_attention": ("bhsd", 6, False, 0, None),
    "_scaled_dot_product_cudnn_attention": ("bhsd", 6, False, 0, None),
    "_flash_attention_forward": ("bshd", 8, False, 0, 3),
    "_efficient_attention_forward": ("bshd", 7, False, 0, 4),
    "_scaled_dot_product_flash_attention_backward": ("bhsd", 11, True, 1, None),
    "_scaled_dot_product_flash_attention_for_cpu_backward": ("bhsd", 7, True, 1, None),
    "_scaled_dot_product_efficient_attention_backward": ("bhsd", 11, True, 1, None),
    "_scaled_dot_product_cudnn_attention_backward": ("bhsd", None, True, 1, None),
    "_flash_attention_backward": ("bshd", 11, True, 1, 6),
    "_efficient_attention_backward": ("bshd", None, True, 1, 6),
}


def _bhsd(s: list[int], layout: str) -> list[int]:
    return s if layout == "bhsd" else [s[0], s[2], s[1], s[3]]


def _bmm(b: int, m: int, k: int, n: int) -> int:
    return 2 * b * m * k * n


def sdpa_flops(q: list[int], k: list[int], v: list[int], backward: bool) -> int:
    """FLOPs of one attention call over [batch, heads, seq, dim] shapes (torch's sdpa_flop_count, or its
    backward's sdpa_backward_flop_count)."""
    b, hq, sq, dq = q
    sk, dv = k[2], v[3]
    bh = b * hq
    if not backward:
        return _bmm(bh, sq, dq, sk) + _bmm(bh, sq, sk, dv)
    return (
        _bmm(bh, sq, dq, sk) + _bmm(bh, sq, dv, sk) + _bmm(bh, sk, sq, dv) + _bmm(bh, sq, sk, dq) + _bmm(bh, dq, sq, sk)
    )


def attention(call: Call, name: str, hints: dict) -> OpModel:
    layout, causal_at, backward, first, varlen_at = _OPS[name]
    if varlen_at is not None and call.shape(varlen_at):
        raise NoModel(f"{name}: variable-length (nested) call")
    raw = [call.shape(first + i) for i in range(3)]
    if any(s is None or len(s) != 4 for s in raw):
        raise NoModel(f"{name}: query/key/value are not 4-d tensors")
    q, k, v = (_bhsd(s, layout) for s in raw)  # type: ignore[arg-type]
    if not (q[0] == k[0] == v[0] and k[1] == v[1] and k[2] == v[2] and q[3] == k[3]) or k[1] == 0 or q[1] % k[1]:
        raise NoModel(f"{name}: query/key/value shapes do not match")
    flops = sdpa_flops(q, k, v, backward)
    causal = call.value(causal_at) if causal_at is not None else None
    note = "causal" if causal is True else ("" if causal is False else "causal mask not recorded")
    size = call.itemsize(first) or 0
    out = q[0] * q[1] * q[2] * v[3]
    if backward:  # read grad_out, q, k, v, out (and the logsumexp); write dq, dk, dv
        moved = sum(call.nbytes(i) for i in call.tensors()) + (math.prod(q) + math.prod(k) + math.prod(v)) * size
    else:  # read q, k, v (and a mask); write the output
        moved = sum(call.nbytes(i) for i in call.tensors()) + out * size
    return OpModel("attention", flops, moved, call.dtype(first) or "", True, note)


register(tuple(_OPS), attention)
