"""What one recorded op call says about its tensors: shapes (`Input Dims`), element types (`Input type`) and,
where torch recorded them, the scalar arguments (`Concrete Inputs`), in the forms the models need.

Kept apart from the models so that every model reads the three lists the same way: a tensor is an entry whose
dims are a list of ints and whose type names a dtype; a scalar or a list argument is read from its concrete text."""

from __future__ import annotations

import ast
import math
from typing import Any

#: torch's C++ scalar-type names as `Input type` writes them -> (our dtype name, bytes per element)
DTYPES: dict[str, tuple[str, int]] = {
    "float": ("fp32", 4),
    "double": ("fp64", 8),
    "c10::Half": ("fp16", 2),
    "c10::BFloat16": ("bf16", 2),
    "c10::Float8_e4m3fn": ("fp8", 1),
    "c10::Float8_e5m2": ("fp8", 1),
    "c10::Float8_e4m3fnuz": ("fp8", 1),
    "c10::Float8_e5m2fnuz": ("fp8", 1),
    "c10::Float8_e8m0fnu": ("fp8", 1),
    "signed char": ("int8", 1),
    "unsigned char": ("uint8", 1),
    "bool": ("bool", 1),
    "short int": ("int16", 2),
    "int": ("int32", 4),
    "long int": ("int64", 8),
    "c10::complex<float>": ("complex64", 8),
    "c10::complex<double>": ("complex128", 16),
}


class Call:
    """One op call's inputs: `dims[i]`, `types[i]`, `concrete[i]` (texts, "" where torch recorded none)."""

    __slots__ = ("dims", "types", "concrete")

    def __init__(self, dims: list, types: list | None = None, concrete: list | None = None) -> None:
        self.dims = list(dims or [])
        self.types = list(types or [])
        self.concrete = list(concrete or [])

    def shape(self, i: int) -> list[int] | None:
        """The shape of input `i` when it is a tensor (a list of ints whose type names a dtype), else None."""
        if i >= len(self.dims):
            return None
        d = self.dims[i]
        if not isinstance(d, list) or not all(type(x) is int and x >= 0 for x in d):
            return None
        if i < len(self.types) and self.types[i] not in DTYPES:
            return None  # ScalarList, GenericList, Scalar, "": an argument, not a tensor
        return d

    def itemsize(self, i: int) -> int | None:
        t = self.types[i] if i < len(self.types) else None
        return DTYPES[t][1] if t in DTYPES else None

    def dtype(self, i: int) -> str | None:
        t = self.types[i] if i < len(self.types) else None
        return DTYPES[t][0] if t in DTYPES else None

    def nbytes(self, i: int) -> int:
        """Bytes of tensor input `i` (0 when it is not a tensor or its dtype is unknown)."""
        s, size = self.shape(i), self.itemsize(i)
        return math.prod(s) * size if s is not None and size is not None else 0

    def tensors(self) -> list[int]:
        """Positions of the inputs that are tensors."""
        return [i for i in range(len(self.dims)) if self.shape(i) is not None and self.itemsize(i) is not None]

    def value(self, i: int) -> Any:
        """The concrete value of argument `i` (int, float, bool, list or str), None where torch recorded none."""
        if i >= len(self.concrete):
            return None
        text = self.concrete[i]
        if not isinstance(text, str):
            return text
        if text == "":
            return None
        if text in ("True", "False"):
            return text == "True"
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text  # "same", "valid", "cuda:0": a word

    def ints(self, i: int, n: int, default: int) -> list[int] | None:
        """Argument `i` as `n` ints (one int repeated, or a list of n or of 1), `default` x n where absent, None
        when the value is there but not such a list."""
        v = self.value(i)
        if v is None:
            return [default] * n
        if type(v) is int:
            return [v] * n
        if isinstance(v, (list, tuple)) and all(type(x) is int for x in v):
            if len(v) == n:
                return list(v)
            if len(v) == 1:
                return [v[0]] * n
        return None


def broadcast(shapes: list[list[int]]) -> list[int] | None:
    """numpy's broadcast of `shapes`, None when they do not broadcast."""
    width = max((len(s) for s in shapes), default=0)
    out = [1] * width
    for s in shapes:
        for j, x in enumerate([1] * (width - len(s)) + list(s)):
            if x != 1:
                if out[j] not in (1, x):
                    return None
                out[j] = x
    return out
