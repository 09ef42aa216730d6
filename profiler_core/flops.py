"""with_flops: torch's FLOP formulas from recorded input shapes, plus a registry for new op names.

A formula is ``fn(input_dims: list, concrete_inputs: list) -> int`` (the op's ``Input Dims`` and
``Concrete Inputs`` as recorded in the trace). Names match exactly, or without an ``aten::``
prefix: ``mm``, ``aten::mm`` and ``mylib::mm`` -> only the first two share the ``mm`` formula.
"""

from __future__ import annotations

import ast
import math
import operator
import warnings
from collections.abc import Callable, Iterable

FlopsFormula = Callable[[list, list], int]
_FORMULAS: dict[str, FlopsFormula] = {}
_warned: set = set()


def _prod(xs: Iterable[int]) -> int:
    return math.prod(int(x) for x in xs)


def _mm(dims: list, _c: list, first: int = 0) -> int:
    a, b = dims[first], dims[first + 1]
    if len(a) != 2 or len(b) != 2:
        return 0
    return 2 * a[0] * a[1] * b[1]


def _addmm(dims: list, c: list) -> int:
    return _mm(dims, c, first=1)


def _bmm(dims: list, _c: list, first: int = 0) -> int:
    a, b = dims[first], dims[first + 1]
    if len(a) != 3 or len(b) != 3:
        return 0
    return 2 * a[0] * a[1] * a[2] * b[2]


def _baddbmm(dims: list, c: list) -> int:
    return _bmm(dims, c, first=1)


def _matmul(dims: list, _c: list) -> int:
    """numpy/torch matmul semantics: 1-D operands promoted, batch dims broadcast."""
    a, b = list(dims[0]), list(dims[1])
    if not a or not b:
        return 0
    if len(a) == 1:
        a = [1] + a
    if len(b) == 1:
        b = b + [1]
    m, k, n = a[-2], a[-1], b[-1]
    batch_a, batch_b = a[:-2], b[:-2]
    width = max(len(batch_a), len(batch_b))
    batch_a = [1] * (width - len(batch_a)) + batch_a
    batch_b = [1] * (width - len(batch_b)) + batch_b
    batch = _prod(max(x, y) for x, y in zip(batch_a, batch_b))
    return 2 * batch * m * k * n


def _pair(text: str, default: int) -> tuple:
    if text in ("", None):
        return default, default
    try:
        v = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return default, default
    if isinstance(v, int):
        return v, v
    if isinstance(v, (list, tuple)) and len(v) == 2 and all(isinstance(x, int) for x in v):
        return v[0], v[1]
    if isinstance(v, (list, tuple)) and len(v) == 1 and isinstance(v[0], int):
        return v[0], v[0]
    raise ValueError(f"not a 2-element parameter: {text!r}")


def _conv2d(dims: list, c: list) -> int:
    """2*N*Hout*Wout*kh*kw*Cin*Cout/groups (torch's computeFlops for conv2d)."""
    x, w = dims[0], dims[1]
    if len(x) != 4 or len(w) != 4:
        return 0
    c = list(c) + [""] * (7 - len(c))
    sh, sw = _pair(c[3], 1)
    ph, pw = _pair(c[4], 0)
    dh, dw = _pair(c[5], 1)
    groups = int(c[6]) if c[6] not in ("", None) else 1
    n, cin, h, wd = x
    cout, _, kh, kw = w
    hout = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    wout = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if hout <= 0 or wout <= 0 or groups <= 0:
        return 0
    return 2 * n * hout * wout * kh * kw * cin * cout // groups


def _numel0(dims: list, _c: list) -> int:
    return _prod(dims[0]) if dims and dims[0] else 0


for _n, _f in (
    ("mm", _mm),
    ("addmm", _addmm),
    ("matmul", _matmul),
    ("bmm", _bmm),
    ("baddbmm", _baddbmm),
    ("conv2d", _conv2d),
    ("mul", _numel0),
    ("add", _numel0),
):
    _FORMULAS[_n] = _f


def register_flops_formula(name: str, fn: FlopsFormula) -> None:
    """Register (or replace) the FLOP formula of op ``name``: ``fn(input_dims, concrete_inputs) -> int``."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"register_flops_formula: name must be a non-empty str, got {name!r}")
    if not callable(fn):
        raise TypeError(f"register_flops_formula: formula for {name!r} must be callable, got {fn!r}")
    _FORMULAS[name] = fn


def _lookup(name: str) -> Callable | None:
    if not isinstance(name, str):  # record_op(5, ...): no formula (and no error from here)
        return None
    f = _FORMULAS.get(name)
    if f is None and name.startswith("aten::"):
        f = _FORMULAS.get(name[6:])
    return f


def compute_flops(name: str, input_dims: list, concrete_inputs: list | None = None) -> int:
    """FLOPs of one call of op ``name`` from its recorded inputs; 0 if unknown or not computable."""
    f = _lookup(name)
    if f is None:
        return 0
    concrete = list(concrete_inputs or [])
    try:
        n = f(list(input_dims), concrete)
    except Exception as e:  # wrong arity / odd shapes: no FLOPs, one warning per op name
        _warn_once(name, f"FLOPs formula for {name!r} failed on inputs {input_dims!r}: {type(e).__name__}: {e}")
        return 0
    count = _flop_count(n)
    if count is None:
        _warn_once(name, f"FLOPs formula for {name!r} returned {n!r}, not a number of FLOPs; ignored")
        return 0
    return count


# The largest count kept: readers store FLOPs as int64.
_MAX_FLOPS = 2**63 - 1


def _flop_count(n: object) -> int | None:
    """A formula's result as a non-negative int (0 for None/<= 0), None when it is not a number."""
    if n is None:
        return 0
    if isinstance(n, float):
        if n != n or n in (float("inf"), float("-inf")):
            return None
        n = int(n)
    else:
        try:
            n = operator.index(n)  # type: ignore[arg-type]  # int, bool, numpy ints; TypeError otherwise
        except TypeError:
            try:
                n = int(float(n)) if hasattr(n, "__float__") and not isinstance(n, (str, bytes)) else None
            except (TypeError, ValueError, OverflowError):
                n = None
            if n is None:
                return None
    return min(n, _MAX_FLOPS) if n > 0 else 0


def _warn_once(name: str, message: str) -> None:
    if name not in _warned:
        _warned.add(name)
        warnings.warn(message, stacklevel=4)
