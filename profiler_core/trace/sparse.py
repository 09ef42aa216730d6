"""Sparse columns: a column of `n` rows kept as the rows that hold a value and those values.

The kernel-only and collective-only args of `TraceData.events` (the `ARGS` rows with `sparse=True`:
grid, block, registers, shared memory, occupancy, bytes, the collective args, graph ids) are each held
by a few percent of a trace's rows, so the trace model and the parse cache keep them this way
(docs/internals.md §3). The API, the only one that reads or builds them:

- `SparseColumn(n, rows, values, missing, categories=None)`: `rows` strictly increasing row positions
  (int32, or int64 past 2**31 rows; anything else is refused), `values[i]` the value at `rows[i]`; every
  other row holds `missing`. A text column keeps int32 codes in `values` and the texts in `categories`.
- `SparseColumn.empty(n, dtype, missing)`: a column no row holds a value of.
- `SparseColumn.from_dense(values, missing)`: the rows of a dense column that differ from `missing`
  (NaN for floats; a pandas Categorical or an object array for texts, `""` missing).
- `.dense(rows=None)`: the dense values of every row, of the row positions `rows` (any order, repeats
  allowed) or of a boolean mask; texts as an object array of str.
- `.at(row)`: the value of one row (a Python scalar).
- `share_rows(columns)`: makes columns whose row sets are equal share one `rows` array (grid_x..block_z
  of a trace: one array), which `nbytes_of` and the parse cache count and store once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

__all__ = ["SparseColumn", "share_rows", "nbytes_of", "rows_dtype"]


def rows_dtype(n: int) -> np.dtype:
    """The dtype of the row positions of an `n`-row column: int32 while it can hold them, else int64."""
    return np.dtype(np.int32) if n <= np.iinfo(np.int32).max else np.dtype(np.int64)


def _is_nan(value: Any) -> bool:
    """True for a float NaN (the missing value of float columns)."""
    return isinstance(value, float) and value != value


class SparseColumn:
    """An `n`-row column stored as its sorted row positions that hold a value, and those values."""

    __slots__ = ("n", "rows", "values", "missing", "categories")

    def __init__(self, n: int, rows: Any, values: Any, missing: Any, categories: Any = None) -> None:
        rows, values = np.asarray(rows), np.asarray(values)
        if n < 0:
            raise ValueError(f"a column of {n} rows")
        if rows.ndim != 1 or rows.dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
            raise ValueError(f"row positions must be a 1-D int32 or int64 array, not {rows.dtype} of {rows.ndim} dims")
        if values.ndim != 1 or len(values) != len(rows):
            raise ValueError(f"{len(values)} values for {len(rows)} rows")
        if len(rows) and (rows[0] < 0 or rows[-1] >= n):
            raise ValueError(f"row positions outside 0..{n - 1}")
        if len(rows) > 1 and not bool((rows[1:] > rows[:-1]).all()):
            raise ValueError("row positions must be strictly increasing (sorted, no repeats)")
        if categories is not None:
            categories = np.asarray(categories, dtype=object)
            if values.dtype.kind not in "iu" or (len(values) and (values.min() < 0 or values.max() >= len(categories))):
                raise ValueError("text codes outside the categories")
        self.n = int(n)
        self.rows = rows
        self.values = values
        self.missing = missing
        self.categories = categories

    @classmethod
    def empty(cls, n: int, dtype: Any, missing: Any) -> SparseColumn:
        """An `n`-row column with no value (`dtype` object or "category": a text column)."""
        text = str(dtype) in ("object", "category")
        values = np.empty(0, np.int32 if text else np.dtype(dtype))
        return cls(n, np.empty(0, rows_dtype(n)), values, missing, np.empty(0, object) if text else None)

    @classmethod
    def from_dense(cls, values: Any, missing: Any) -> SparseColumn:
        """The sparse form of a dense column: the rows whose value is not `missing`."""
        import pandas as pd

        n = len(values)
        if isinstance(values, pd.Series):
            values = values.array if isinstance(values.dtype, pd.CategoricalDtype) else values.to_numpy()
        if isinstance(values, pd.Categorical) or (isinstance(values, np.ndarray) and values.dtype == object):
            cat = values if isinstance(values, pd.Categorical) else pd.Categorical(values)
            texts = np.asarray(cat.categories, dtype=object)
            keep = np.fromiter((t is not None and t != missing for t in texts), dtype=bool, count=len(texts))
            codes = np.asarray(cat.codes)
            present = np.zeros(len(texts) + 1, dtype=bool)  # code -1 (NaN): missing
            present[:-1] = keep
            rows = np.flatnonzero(present[codes]).astype(rows_dtype(n))
            remap = np.cumsum(keep) - 1
            return cls(n, rows, remap[codes[rows]].astype(np.int32), missing, texts[keep])
        arr = np.asarray(values)
        has = ~np.isnan(arr) if _is_nan(missing) else arr != missing
        rows = np.flatnonzero(has).astype(rows_dtype(n))
        return cls(n, rows, arr[rows], missing)

    @property
    def is_text(self) -> bool:
        """True for a text column (codes into `categories`)."""
        return self.categories is not None

    @property
    def dtype(self) -> np.dtype:
        """The dtype of the dense column (object for texts)."""
        return np.dtype(object) if self.is_text else self.values.dtype

    @property
    def nbytes(self) -> int:
        """Bytes of its arrays (row positions counted even where shared; see `nbytes_of`)."""
        return int(self.rows.nbytes + self.values.nbytes)

    def __len__(self) -> int:
        """The column's row count (rows with and without a value)."""
        return self.n

    def __repr__(self) -> str:
        """Rows, rows with a value and dtype."""
        return f"SparseColumn({self.n} rows, {len(self.rows)} with a value, {self.dtype})"

    def _decoded(self, values: np.ndarray) -> np.ndarray:
        """Stored values as the column's values (a text column's codes as its texts)."""
        if self.categories is None:
            return values
        return self.categories[values] if len(values) else np.empty(0, dtype=object)

    def _full(self, m: int) -> np.ndarray:
        """`m` missing values of the column's dense dtype."""
        if self.is_text:
            out = np.empty(m, dtype=object)
            out[:] = self.missing
            return out
        return np.full(m, self.missing, dtype=self.values.dtype)

    def dense(self, rows: Any = None) -> np.ndarray:
        """The dense values of every row (`rows` None), of the row positions `rows`, or of a boolean mask."""
        if rows is None:
            out = self._full(self.n)
            out[self.rows] = self._decoded(self.values)
            return out
        want = np.asarray(rows)
        if want.dtype == bool:
            if want.shape != (self.n,):
                raise ValueError(f"a mask of {len(want)} rows for a column of {self.n}")
            want = np.flatnonzero(want)
        elif want.dtype.kind not in "iu" and len(want):
            raise TypeError(f"row positions must be integers, not {want.dtype}")
        if (
            want.dtype.kind == "i"
            and want.ndim == 1
            and len(want) == len(self.rows)
            and len(want)
            and self._own_rows(want)
        ):
            # the column's own rows (every kernel arg read of a trace whose kernels all carry it): no search
            return self._decoded(self.values) if self.is_text else self.values.copy()
        want = want.astype(np.int64, copy=False).ravel()
        if len(want) and (want.min() < -self.n or want.max() >= self.n):
            raise IndexError(f"row position outside a column of {self.n} rows")
        out = self._full(len(want))
        if len(self.rows) and len(want):
            want = np.where(want < 0, want + self.n, want)
            pos = np.searchsorted(self.rows, want)
            hit = pos < len(self.rows)
            hit[hit] = self.rows[pos[hit]] == want[hit]
            out[hit] = self._decoded(self.values[pos[hit]])
        return out

    def _own_rows(self, want: np.ndarray) -> bool:
        """True when the signed row positions `want` (as many as the column's) are its `rows`, in order."""
        return want is self.rows or bool(np.array_equal(want, self.rows))

    def at(self, row: int) -> Any:
        """The value of one row, as a Python scalar."""
        row = int(row)
        if not -self.n <= row < self.n:
            raise IndexError(f"row {row} outside a column of {self.n} rows")
        row %= max(self.n, 1)
        pos = int(np.searchsorted(self.rows, row))
        if pos < len(self.rows) and int(self.rows[pos]) == row:
            value = self.values[pos]
            return self.categories[value] if self.is_text else value.item()
        return self.missing

    def equals(self, other: Any) -> bool:
        """Same length, rows, values (NaN equal to NaN), missing value and texts."""
        if not isinstance(other, SparseColumn) or self.n != other.n or self.is_text != other.is_text:
            return False
        if self.rows.dtype != other.rows.dtype or self.values.dtype != other.values.dtype:
            return False
        if not np.array_equal(self.rows, other.rows):
            return False
        if not (self.missing == other.missing or (_is_nan(self.missing) and _is_nan(other.missing))):
            return False
        if self.is_text:
            return bool((self._decoded(self.values) == other._decoded(other.values)).all())
        return bool(np.array_equal(self.values, other.values, equal_nan=self.values.dtype.kind == "f"))

    def __getstate__(self) -> tuple:
        """Pickled as its fields (a shared rows array stays shared within one pickle)."""
        return (self.n, self.rows, self.values, self.missing, self.categories)

    def __setstate__(self, state: tuple) -> None:
        """Restores the fields `__getstate__` gave."""
        self.n, self.rows, self.values, self.missing, self.categories = state


def share_rows(columns: Mapping[str, SparseColumn]) -> dict[str, SparseColumn]:
    """The columns, those with equal row sets sharing one `rows` array (in place; returned as a dict)."""
    seen: list[np.ndarray] = []
    out = {}
    for name, col in columns.items():
        for rows in seen:
            if rows is col.rows:
                break
            if rows.dtype == col.rows.dtype and np.array_equal(rows, col.rows):
                col.rows = rows
                break
        else:
            seen.append(col.rows)
        out[name] = col
    return out


def nbytes_of(columns: Iterable[SparseColumn]) -> int:
    """Bytes held by the columns, a shared `rows` array counted once."""
    total, counted = 0, set()
    for col in columns:
        if id(col.rows) not in counted:
            counted.add(id(col.rows))
            total += col.rows.nbytes
        total += col.values.nbytes
    return total
