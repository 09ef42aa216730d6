"""The op API: how a library declares an operator and its inputs, recorded as a ``cpu_op`` event.

    with record_op("mylib::matmul", a, b):            # context manager
        ...
    @operator("mylib::matmul")                        # decorator (name defaults to __qualname__)
    def matmul(a, b): ...

With ``record_shapes`` (or ``with_flops``) the event gets torch's ``Input Dims``, ``Input type``,
``Input Strides`` and ``Concrete Inputs`` for every input: anything with ``.shape`` and ``.dtype``
(numpy, cupy, pycuda GPUArray) is a tensor; int/float/bool are ``Scalar``; lists of those are
``ScalarList``/``TensorList``; ``None`` is ``""``. Keyword inputs are appended after the positional
ones, in call order. ``args={...}`` adds extra trace args (e.g. the MPI integration's
communication args). When no profiler records, ``record_op`` returns a shared no-op context.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import AbstractContextManager
from operator import index as _index
from types import TracebackType
from typing import Any, Literal

from . import recording
from .recording import CAT_OP, Record, is_recording

# numpy dtype name -> the name torch writes in "Input type"
DTYPE_NAMES = {
    "float32": "float",
    "float64": "double",
    "float16": "c10::Half",
    "bfloat16": "c10::BFloat16",
    "int64": "long int",
    "int32": "int",
    "int16": "short int",
    "int8": "signed char",
    "uint8": "unsigned char",
    "uint16": "unsigned short",
    "uint32": "unsigned int",
    "uint64": "unsigned long",
    "bool": "bool",
    "complex64": "c10::complex<float>",
    "complex128": "c10::complex<double>",
}

_SCALARS = (bool, int, float, complex)


_ARRAY_TYPES: set = set()  # types seen to have .shape and .dtype (fast path)
_INT_SHAPE_TYPES: set = set()  # array types whose .shape is always a tuple of Python ints
_DTYPE_INFO: dict = {}  # dtype -> (torch name, itemsize)


def _is_array(x: Any) -> bool:
    t = type(x)
    if t in _ARRAY_TYPES:
        return True
    if hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, type):
        _ARRAY_TYPES.add(t)
        if t.__name__ == "ndarray" and str(t.__module__).partition(".")[0] in ("numpy", "cupy"):
            _INT_SHAPE_TYPES.add(t)
        return True
    return False


def _dtype_info(dtype: Any) -> tuple:
    try:
        return _DTYPE_INFO[dtype]
    except (KeyError, TypeError):
        pass
    name = getattr(dtype, "name", None)
    if not isinstance(name, str):
        name = str(dtype)
    itemsize = getattr(dtype, "itemsize", None)
    info = (DTYPE_NAMES.get(name, name), int(itemsize) if isinstance(itemsize, int) else 0)
    try:
        _DTYPE_INFO[dtype] = info
    except TypeError:  # unhashable dtype object
        pass
    return info


def _dtype_name(dtype: Any) -> str:
    return _dtype_info(dtype)[0]


def _int_like(v: Any) -> int:
    """A dim/stride as an int: int-likes (numpy ints) converted, anything else (None, nan, str) -1."""
    try:
        return _index(v)
    except Exception:
        return -1


def _array_dims(x: Any) -> list:
    if type(x) in _INT_SHAPE_TYPES:  # numpy/cupy ndarray: a tuple of ints, no check needed
        return list(x.shape)
    dims = list(x.shape)
    for d in dims:
        if type(d) is not int:  # numpy ints, unknown (nan/None) dims, or a shape that is not a tuple
            return [_int_like(v) for v in dims] if isinstance(x.shape, (tuple, list)) else []
    return dims


def _stride_elems(stride: Any, itemsize: int) -> int:
    try:
        return _index(stride) // itemsize
    except Exception:
        return -1


def _array_strides(x: Any, itemsize: int) -> list:
    strides = getattr(x, "strides", None)
    if strides is None or not itemsize:
        return []
    out = list(map(itemsize.__rfloordiv__, strides))  # byte strides -> element strides
    if type(x) not in _INT_SHAPE_TYPES and NotImplemented in out:  # numpy-int or junk strides
        out = [_stride_elems(s, itemsize) for s in strides]
    return out


def _concrete(x: Any) -> str:
    if isinstance(x, bool):
        return "True" if x else "False"
    return str(x)


def describe_input(x: Any) -> tuple:
    """(dims, type, strides, concrete) of one op input, in torch's trace vocabulary."""
    try:
        if type(x) in _INT_SHAPE_TYPES:  # numpy/cupy ndarray: the fast path, nothing to check
            name, itemsize = _dtype_info(x.dtype)
            return (list(x.shape), name, list(map(itemsize.__rfloordiv__, x.strides)) if itemsize else [], "")
        if x is None:
            return [], "", [], ""
        if type(x) in _ARRAY_TYPES or (not isinstance(x, _SCALARS) and _is_array(x)):
            name, itemsize = _dtype_info(x.dtype)
            return _array_dims(x), name, _array_strides(x, itemsize), ""
        if isinstance(x, _SCALARS):
            return [], "Scalar", [], _concrete(x)
        if isinstance(x, str):
            return [], "String", [], x
        if isinstance(x, (list, tuple)):
            if all(isinstance(v, _SCALARS) for v in x):
                return [], "ScalarList", [], "[" + ", ".join(_concrete(v) for v in x) + "]"
            if all(_is_array(v) for v in x):
                return (
                    [_array_dims(v) for v in x],
                    "TensorList",
                    [_array_strides(v, _dtype_info(v.dtype)[1]) for v in x],
                    "",
                )
            return [], "GenericList", [], ""
    except Exception:  # an odd object (broken .shape): record it as an opaque input
        return [], "", [], ""
    return [], "", [], ""


def describe_inputs(inputs: tuple, kwinputs: dict | None = None) -> dict:
    """torch's shape args for a call: Concrete Inputs, Input type, Input Strides, Input Dims."""
    if kwinputs:
        inputs = tuple(inputs) + tuple(kwinputs.values())
    described = [describe_input(x) for x in inputs]
    return {
        "Concrete Inputs": [d[3] for d in described],
        "Input type": [d[1] for d in described],
        "Input Strides": [d[2] for d in described],
        "Input Dims": [d[0] for d in described],
    }


class _OpRecord(Record):
    """An open cpu_op; its args are computed when it is created (outside its own timing)."""

    __slots__ = ()
    _cat = CAT_OP

    def __init__(self, name: str, inputs: tuple, kwinputs: dict | None, extra: dict | None) -> None:
        self.name = name
        args = None
        if recording.record_shapes_enabled():
            args = describe_inputs(inputs, kwinputs)
            if recording.flops_enabled():
                from .flops import compute_flops

                n = compute_flops(name, args["Input Dims"], args["Concrete Inputs"])
                if n > 0:
                    args["flops"] = n
        if extra:
            args = dict(extra) if args is None else {**args, **extra}
        self.args = args


class _NullContext:
    """The shared do-nothing context returned when no profiler records."""

    __slots__ = ()

    def __enter__(self) -> _NullContext:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        return False


_NULL = _NullContext()


def record_op(name: str, *inputs: Any, args: dict | None = None, **kwinputs: Any) -> AbstractContextManager[Any]:
    """Context manager recording a ``cpu_op`` named ``name`` with its inputs (shapes/types/FLOPs)."""
    if not is_recording():
        return _NULL
    if args is not None and not isinstance(args, dict):
        raise TypeError(
            f"record_op({name!r}, args=...): args must be a dict of extra trace args, got {type(args).__name__}"
        )
    return _OpRecord(name, inputs, kwinputs, args)


def operator(name: str | None = None) -> Callable:
    """Decorator: every call of the function is a ``cpu_op`` (name defaults to its __qualname__)."""
    if callable(name):  # used bare: @operator
        return operator(None)(name)
    if name is not None and not isinstance(name, str):
        raise TypeError(f"operator(name): name must be a str (or omitted), got {type(name).__name__} {name!r}")

    def decorate(func: Callable) -> Callable:
        if not callable(func):
            raise TypeError(f"operator({name!r}) decorates a function, got {type(func).__name__} {func!r}")
        opname = name or getattr(func, "__qualname__", None) or repr(func)

        @functools.wraps(func)
        def wrapper(*a: Any, **kw: Any) -> Any:
            if not is_recording():
                return func(*a, **kw)
            with _OpRecord(opname, a, kw, None):
                return func(*a, **kw)

        return wrapper

    return decorate
