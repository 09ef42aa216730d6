"""Performance models per op: the FLOPs and bytes one recorded op call must do, from its `Input Dims`,
`Input type` and (where torch recorded them) `Concrete Inputs`.

`model_op(name, dims, types, concrete=None, hints=None) -> OpModel | None | NoModel`: an `OpModel` (family, FLOPs,
bytes, dtype, whether the FLOPs are model FLOPs), None for an op no model covers, or a `NoModel` carrying the
reason when the op has a model but this call's recorded inputs do not say enough. Nothing is guessed: an op
without a model is counted as "no model" by the callers (the roofline stage, `analysis/roofline.py`).

Families (one module each): `gemm` (mm, addmm, bmm, baddbmm, matmul, linear, _scaled_mm), `conv` (forward and
backward), `attention` (SDPA and the flash / efficient / cuDNN ops), `memory` (elementwise, reductions, norms,
softmax, embedding, copies). The matrix families' FLOPs are exactly torch's `FlopCounterMode` counts
(tests/test_perf_models_torch.py checks them against it op by op); the GEMM formulas the collection core already
owns (`profiler_core.flops`) are used from there."""

from __future__ import annotations

from . import attention, conv, gemm, memory  # noqa: F401 - each registers its models
from .model import MODELS, NoModel, OpModel
from .shapes import DTYPES, Call

__all__ = ["MODELS", "DTYPES", "Call", "NoModel", "OpModel", "model_op", "has_model", "short_name"]


def short_name(name: str) -> str:
    """The op name a model is registered under: `aten::mm` -> `mm` (other namespaces keep theirs)."""
    return name[6:] if name.startswith("aten::") else name


def has_model(name: str) -> bool:
    """Whether some model covers op `name`."""
    return short_name(name) in MODELS


def model_op(
    name: str, dims: list, types: list | None = None, concrete: list | None = None, hints: dict | None = None
) -> OpModel | NoModel | None:
    """The model of one call of op `name` (see the module's docstring)."""
    model = MODELS.get(short_name(name))
    if model is None:
        return None
    try:
        return model(Call(dims, types, concrete), short_name(name), hints or {})
    except NoModel as e:
        return e
    except (TypeError, ValueError, IndexError) as e:  # inputs of an unexpected form: a reason, never a crash
        return NoModel(f"{name}: inputs not understood ({type(e).__name__})")
