"""The result of a performance model and the registry of models by op name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .shapes import Call


@dataclass(frozen=True)
class OpModel:
    """What one op call must do at least: `flops` (torch's count: a multiply-add is 2, FlopCounterMode's
    formulas for the matrix ops) and `bytes` (each input tensor read once and each output written once: the
    traffic of a kernel that keeps nothing in cache between calls). `family` names the model; `matrix` marks
    the FLOPs that count as model FLOPs (GEMMs, convolutions, attention: what MFU counts); `dtype` is the
    element type the op computes in (of its first tensor input); `note` says what the model assumed."""

    family: str
    flops: int
    bytes: int
    dtype: str
    matrix: bool
    note: str = ""


class NoModel(ValueError):
    """The op has a model, but this call's recorded inputs do not say enough to apply it (the reason)."""


#: a model: (call, op name without its namespace, hints) -> OpModel; raises NoModel with the reason
Model = Callable[[Call, str, dict], OpModel]

MODELS: dict[str, Model] = {}


def register(names: tuple[str, ...] | list[str], model: Model) -> None:
    """Register `model` for the aten op names in `names` (without the `aten::` prefix)."""
    for n in names:
        MODELS[n] = model
