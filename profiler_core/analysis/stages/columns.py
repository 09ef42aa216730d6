"""Per-row masks and codes over `TraceData.events` shared by every stage: category and name masks, codes, and
the look-up of positions by integer key."""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pandas as pd

from .registry import cached


def zeros_column(n: int) -> np.ndarray:
    """A read-only length-n float64 array of zeros that takes no memory (derived columns that are zero on
    every row of a trace, e.g. device times of a CPU trace)."""
    return np.broadcast_to(np.float64(0.0), (n,))


def is_zeros_column(values: np.ndarray) -> bool:
    """True for a `zeros_column` (one shared zero: its sums are zeros without a pass)."""
    return values.ndim == 1 and values.strides == (0,) and len(values) > 0 and values[0] == 0


def codes_and_texts(values: Any) -> tuple[np.ndarray, list[str]]:
    """int64 codes of a column's values and the text of each code (categorical as the reader makes it,
    or plain values from elsewhere; missing values read as "")."""
    if isinstance(values, pd.Categorical):
        codes = np.asarray(values.codes, dtype=np.int64)
        texts = [str(v) for v in values.categories]
        if len(codes) and codes.min() < 0:  # missing: its own code, shown as ""
            codes = np.where(codes < 0, len(texts), codes)
            texts.append("")
        return codes, texts
    codes, uniq = pd.factorize(pd.Series(np.asarray(values, dtype=object)).fillna("").astype(str))
    return codes.astype(np.int64), [str(v) for v in uniq]


#: up to this many values per_value's answer is made by comparing the codes with each (else by a gather)
FEW_COMPARES = 4


#: per module-level function asked of names: its answer per value met so far (the files of a run share most of
#: their names; the classifications are pure functions of the text), each cache cleared past VALUE_MEMO_MAX
_VALUE_MEMO: dict[Callable, dict[Any, bool]] = {}
VALUE_MEMO_MAX = 1 << 16


def _memoisable(fn: Callable) -> bool:
    """A module-level function (no lambda, closure or bound method): a pure classification by its name."""
    return isinstance(fn, types.FunctionType) and fn.__closure__ is None and "<" not in fn.__qualname__


def values_answer(values: Any, fn: Callable[[str], bool]) -> np.ndarray:
    """bool(fn(v)) for each of `values`; a module-level `fn`'s answers are remembered across traces."""
    if not _memoisable(fn):
        return np.fromiter((bool(fn(v)) for v in values), dtype=bool, count=len(values))
    memo = _VALUE_MEMO.setdefault(fn, {})
    if len(memo) > VALUE_MEMO_MAX:
        memo.clear()
    out = np.empty(len(values), dtype=bool)
    for i, v in enumerate(values):
        if type(v) is not str:  # (texts only: 1 and True are one key)
            out[i] = bool(fn(v))
            continue
        a = memo.get(v)
        if a is None:
            a = memo[v] = bool(fn(v))
        out[i] = a
    return out


def per_value(col: pd.Series, fn: Callable[[str], bool]) -> np.ndarray:
    """Evaluate `fn` once per distinct value of a (categorical) column; boolean array per row."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        cats = col.cat.categories
        vals = values_answer(cats, fn)
        codes = col.cat.codes.to_numpy()
        yes = np.flatnonzero(vals)
        if len(yes) <= FEW_COMPARES:  # a few values hold (a category mask): compares of the small codes are
            out = codes == yes[0] if len(yes) else np.zeros(len(codes), dtype=bool)  # quicker than a gather
            for c in yes[1:]:
                out |= codes == c
            return out
        no = np.flatnonzero(~vals)
        if len(no) <= FEW_COMPARES:  # (missing values are code -1: never true)
            out = codes >= 0
            for c in no:
                out &= codes != c
            return out
        if not len(codes) or codes.min() >= 0:  # no missing value (the reader's columns): one gather
            return vals.take(codes)
        out = np.zeros(len(codes), dtype=bool)
        ok = codes >= 0
        out[ok] = vals[codes[ok]]
        return out
    codes, uniques = pd.factorize(col, use_na_sentinel=True)
    vals = values_answer(uniques, fn)
    out = np.zeros(len(codes), dtype=bool)
    ok = codes >= 0
    out[ok] = vals[codes[ok]]
    return out


def _shared(mask: np.ndarray) -> np.ndarray:
    """A memoised mask made read-only (shared between callers); one false everywhere (a category or kind of name
    the trace lacks: most of them on a CPU trace) as one shared False that takes no memory (a trace of 11M
    events held a dozen of those, 10 MB each, for its lifetime)."""
    if len(mask) and not mask.any():
        return np.broadcast_to(np.False_, mask.shape)  # (read-only)
    mask.flags.writeable = False
    return mask


def category_mask(events: pd.DataFrame, cats: Iterable[str]) -> np.ndarray:
    """Boolean array: rows whose `cat` is one of `cats` (memoised per events frame; do not modify it)."""
    wanted = frozenset(cats)

    def build() -> np.ndarray:
        return _shared(per_value(events["cat"], lambda c: c in wanted))

    return cached(events, "cat:" + "|".join(sorted(wanted)), build)


def name_mask(events: pd.DataFrame, fn: Callable[[str], bool]) -> np.ndarray:
    """Boolean array: rows whose `name` satisfies `fn` (evaluated once per distinct name). Memoised per events
    frame when `fn` is a module-level function (not a lambda, closure or bound method: those have no stable
    name): the array is then shared between callers, read-only (do not modify it)."""
    if _memoisable(fn):

        def build() -> np.ndarray:
            return _shared(per_value(events["name"], fn))

        return cached(events, f"name:{fn.__module__}.{fn.__qualname__}", build)
    return per_value(events["name"], fn)


def name_mask_among(events: pd.DataFrame, rows: np.ndarray, fn: Callable[[str], bool]) -> np.ndarray:
    """`fn` of the names of the rows `rows` only (asked once per distinct name among them): a bool per row of
    `rows` (no whole-trace mask made or kept)."""
    col = events["name"]
    if not isinstance(col.dtype, pd.CategoricalDtype):
        return per_value(col.take(rows), fn)
    codes = col.cat.codes.to_numpy()[rows]
    cats = col.cat.categories
    if not len(codes):
        return np.zeros(0, dtype=bool)
    present = np.flatnonzero(np.bincount(codes[codes >= 0], minlength=len(cats)))
    vals = np.zeros(len(cats) + 1, dtype=bool)  # (the last: a missing value, code -1: never true)
    vals[present] = values_answer(cats.take(present), fn)
    return vals[codes]


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """np.unique by sorting (numpy 2's hash-based unique is far slower on millions of int64)."""
    a = np.sort(np.asarray(values), kind="stable")
    if len(a) < 2:
        return a
    keep = np.empty(len(a), dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def ns_to_us(ns: float | int | np.ndarray) -> Any:
    """ns -> µs rounded to the ns (3 decimals), as plain float(s)."""
    if isinstance(ns, np.ndarray):
        return np.round(ns / 1000.0, 3)
    return round(float(ns) / 1000.0, 3)


def _is_sorted(a: np.ndarray) -> bool:
    return len(a) < 2 or bool((a[1:] >= a[:-1]).all())


def first_position_by_key(keys: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique keys and, for each, the smallest position carrying it."""
    in_order = _is_sorted(positions)
    if in_order and _is_sorted(keys):  # (External ids grow with time: often in order already)
        k, p = keys, positions
    else:
        order = np.argsort(keys, kind="stable") if in_order else np.lexsort((positions, keys))
        k, p = keys[order], positions[order]
    first = np.ones(len(k), dtype=bool)
    first[1:] = k[1:] != k[:-1]
    return k[first], p[first]


def lookup(sorted_keys: np.ndarray, values: np.ndarray, query: np.ndarray) -> np.ndarray:
    """For each query key, the value of the equal sorted key (`first_position_by_key`'s output), else -1."""
    if len(sorted_keys) == 0:
        return np.full(len(query), -1, np.int64)
    i = np.searchsorted(sorted_keys, query)
    i = np.minimum(i, len(sorted_keys) - 1)
    return np.where(sorted_keys[i] == query, values[i], -1)


def trace_origin_ns(t: Any) -> int:
    """ts (ns) of the trace's first event: the zero of every `_us` time the views return."""
    ev = t.events
    if len(ev):
        return int(ev["ts"].min())
    mem = getattr(t, "memory", None)
    if mem is not None and len(mem):
        return int(mem["ts"].min())
    return 0


def column_codes(col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes and the string table of a (categorical or plain) column, in the table's order of first
    appearance (a categorical column: its categories' order)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return col.cat.codes.to_numpy(np.int64), np.asarray(col.cat.categories.astype(str), dtype=object)
    codes, uniques = pd.factorize(col.astype(str), sort=False)
    return codes.astype(np.int64), np.asarray(uniques, dtype=object)
