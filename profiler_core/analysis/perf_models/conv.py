"""Convolutions, forward and backward, with FlopCounterMode's counts (`conv_flop_count`: 2 x batch x output
positions x kernel positions x output channels x input channels per group; a transposed convolution counts its
input positions; the backward's grad-input and grad-weight as the convolutions they are).

A forward convolution's FLOPs need its output size: from stride, padding and dilation where torch recorded
them (`Concrete Inputs`), else from the output shape the caller found elsewhere (`hints["out"]`: the trace's
autograd node of the call, whose input is the output's gradient); without either there is no model. A
backward's output mask (which gradients it computes) comes from `Concrete Inputs`, else from `hints["mask"]`
(the grad-input/grad-weight sub-ops it ran), else both gradients are counted and the note says so."""

from __future__ import annotations

import math

from .model import NoModel, OpModel, register
from .shapes import Call

#: forward op -> positions of (bias, stride, padding, dilation, transposed, output_padding, groups); None: absent
_FWD_ARGS: dict[str, tuple] = {
    "conv1d": (2, 3, 4, 5, None, None, 6),
    "conv2d": (2, 3, 4, 5, None, None, 6),
    "conv3d": (2, 3, 4, 5, None, None, 6),
    "convolution": (2, 3, 4, 5, 6, 7, 8),
    "_convolution": (2, 3, 4, 5, 6, 7, 8),
    "convolution_overrideable": (2, 3, 4, 5, 6, 7, 8),
    "cudnn_convolution": (None, 3, 2, 4, None, None, 5),
    "miopen_convolution": (2, 4, 3, 5, None, None, 6),
    "mkldnn_convolution": (2, 4, 3, 5, None, None, 6),
    "conv_transpose1d": (2, 3, 4, 7, "T", 5, 6),
    "conv_transpose2d": (2, 3, 4, 7, "T", 5, 6),
    "conv_transpose3d": (2, 3, 4, 7, "T", 5, 6),
}


def conv_flops(x: list[int], w: list[int], out: list[int], transposed: bool) -> int:
    """FlopCounterMode's count of one convolution (`w` as stored: [out, in/groups, *kernel] for a plain one)."""
    spatial = (x if transposed else out)[2:]
    return 2 * x[0] * math.prod(spatial) * math.prod(w[2:]) * w[0] * w[1]


def _out_spatial(x: list[int], w: list[int], call: Call, pos: tuple, transposed: bool) -> list[int] | None:
    n = len(x) - 2
    _, s_at, p_at, d_at, _, op_at, _ = pos
    stride = call.ints(s_at, n, 1)
    dilation = call.ints(d_at, n, 1) if d_at is not None else [1] * n
    pad_value = call.value(p_at)
    if call.value(s_at) is None or pad_value is None:
        return None  # not recorded: no guess
    if pad_value == "same":
        return list(x[2:])
    padding = [0] * n if pad_value == "valid" else call.ints(p_at, n, 0)
    outpad = call.ints(op_at, n, 0) if op_at is not None else [0] * n
    if stride is None or padding is None or dilation is None or outpad is None:
        return None
    shape = zip(x[2:], w[2:], stride, padding, dilation, outpad)
    if transposed:
        return [(h - 1) * s - 2 * p + d * (k - 1) + o + 1 for h, k, s, p, d, o in shape]
    return [(h + 2 * p - d * (k - 1) - 1) // s + 1 for h, k, s, p, d, _o in shape]


def forward(call: Call, name: str, hints: dict) -> OpModel:
    x, w = call.shape(0), call.shape(1)
    if x is None or w is None or len(x) < 3 or len(x) != len(w):
        raise NoModel(f"{name}: input and weight are not tensors of one rank")
    pos = _FWD_ARGS[name]
    transposed = pos[4] == "T" or (isinstance(pos[4], int) and call.value(pos[4]) is True)
    groups = call.value(pos[6]) if isinstance(pos[6], int) else None
    out = hints.get("out")
    note = ""
    spatial: list[int] | None
    if out is not None and len(out) == len(x):
        spatial = list(out[2:])
        note = "output shape from the autograd node"
    else:
        spatial = _out_spatial(x, w, call, pos, transposed)
        if spatial is None:
            raise NoModel(f"{name}: stride/padding not recorded and no output shape")
    if any(s <= 0 for s in spatial):
        raise NoModel(f"{name}: empty output")
    if transposed:
        if not isinstance(groups, int):
            raise NoModel(f"{name}: transposed without its groups")
        channels = w[1] * groups
    else:
        channels = w[0]
    flops = conv_flops(x, w, [x[0], channels, *spatial], transposed)
    read = sum(call.nbytes(i) for i in call.tensors())
    written = x[0] * channels * math.prod(spatial) * (call.itemsize(0) or 0)
    return OpModel("conv", flops, read + written, call.dtype(0) or "", True, note)


#: backward op -> positions of (grad_out, input, weight, transposed, output_mask)
_BWD_ARGS: dict[str, tuple] = {
    "convolution_backward": (0, 1, 2, 7, 10),
    "convolution_backward_overrideable": (0, 1, 2, 7, 10),
    "cudnn_convolution_backward": (1, 0, 2, None, 10),
    "miopen_convolution_backward": (1, 0, 2, None, 9),
}


def _t(s: list[int]) -> list[int]:
    return [s[1], s[0], *s[2:]]


def backward(call: Call, name: str, hints: dict) -> OpModel:
    g_at, x_at, w_at, t_at, m_at = _BWD_ARGS[name]
    go, x, w = call.shape(g_at), call.shape(x_at), call.shape(w_at)
    if go is None or x is None or w is None or not (len(go) == len(x) == len(w) >= 3):
        raise NoModel(f"{name}: grad_output, input and weight are not tensors of one rank")
    transposed = t_at is not None and call.value(t_at) is True
    mask = call.value(m_at)
    note = ""
    if not (isinstance(mask, list) and len(mask) >= 2):
        mask = hints.get("mask")
        if mask is None:
            mask = [True, True, True]
            note = "output_mask not recorded: grad-input and grad-weight counted"
    flops = 0
    if mask[0]:  # grad-input: the transposed convolution of grad_output by the weight
        flops += conv_flops(go, w, x, not transposed)
    if mask[1]:  # grad-weight: input and grad_output convolved, batch and channels swapped
        if transposed:
            flops += conv_flops(_t(go), _t(x), _t(w), False)
        else:
            flops += conv_flops(_t(x), _t(go), _t(w), False)
    size = call.itemsize(g_at) or 0
    written = (math.prod(x) if mask[0] else 0) + (math.prod(w) if mask[1] else 0)
    read = call.nbytes(g_at) + call.nbytes(x_at) + call.nbytes(w_at)
    return OpModel("conv", flops, read + written * size, call.dtype(g_at) or "", True, note)


register(tuple(_FWD_ARGS), forward)
register(tuple(_BWD_ARGS), backward)
