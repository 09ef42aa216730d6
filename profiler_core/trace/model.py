"""The columnar trace model the plugin's views read (docs/internals.md §3).

A `TraceData` holds one Kineto trace as pandas DataFrames; `profiler_core.trace.read.reader.read_trace`
builds it and `profiler_core.trace.read.cache` stores it on disk. The model does no I/O: one raw
event is read back from the file by `profiler_core.trace.read.lookup`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from profiler_core.trace.event_args import column_kinds, event_columns, sparse_columns, table_columns
from profiler_core.trace.sparse import SparseColumn, share_rows

if TYPE_CHECKING:  # pandas is imported lazily: profiler_core must stay light at import time
    import pandas as pd

#: Every column of a complete event, in order (the reader builds them all); the dtype and missing value of each
#: arg column, and the args they come from: `profiler_core.trace.event_args.ARGS`
EVENT_COLUMNS = event_columns()
#: those kept as `trace/sparse.py` SparseColumns in `TraceData.sparse` (the ARGS rows with `sparse=True`)
SPARSE_COLUMNS = sparse_columns()
#: the columns of the `TraceData.events` frame: EVENT_COLUMNS less the sparse ones
FRAME_COLUMNS = tuple(c for c in EVENT_COLUMNS if c not in SPARSE_COLUMNS)
#: Columns of `TraceData.memory`, `.flows` and `.names`, in order
MEMORY_COLUMNS = ("ts", "pid", "tid") + table_columns("memory") + ("idx",)
FLOW_COLUMNS = ("cat", "name", "id", "ph", "pid", "tid", "ts", "bp", "idx")
NAME_COLUMNS = ("pid", "tid", "kind", "value")


def constant_column(value: Any, n: int) -> Any:
    """A read-only length-n array of one value that takes no memory (a zero-stride view).

    Columns absent from a trace (e.g. the kernel columns of a CPU trace) are stored this way;
    reading them works as usual, writing into them raises (TraceData is shared: copy first)."""
    import numpy as np

    return np.broadcast_to(np.asarray(value), (n,))


def _row_count(rows: Any) -> int:
    """How many rows a row selection (positions or a boolean mask) picks."""
    import numpy as np

    sel = np.asarray(rows)
    return int(sel.sum()) if sel.dtype == bool else int(sel.size)


def _is_constant(values: Any) -> bool:
    return getattr(values, "strides", None) == (0,) and len(values) > 0


#: deviceProperties keys whose value is text; every other key must be a number
_TEXT_PROPERTIES = frozenset({"name", "uuid", "pciBusId", "arch", "gcnArchName"})


def clean_device_properties(props: Any) -> tuple[list, int]:
    """The trace's `deviceProperties` with values of the wrong type left out (a number given as
    text, a name given as a number, an entry that is not an object), and how many were left out."""
    if not isinstance(props, list):
        return [], 0 if props is None else 1
    out, dropped = [], 0
    for p in props:
        if not isinstance(p, dict):
            dropped += 1
            continue
        kept = {}
        for k, v in p.items():
            if k in _TEXT_PROPERTIES:
                ok = isinstance(v, str)
            else:
                ok = (isinstance(v, int) and not isinstance(v, bool) and -(1 << 63) <= v < 1 << 63) or (
                    isinstance(v, float) and v == v and v not in (float("inf"), float("-inf"))
                )
            if ok or v is None:
                kept[k] = v
            else:
                dropped += 1
        out.append(kept)
    return out, dropped


@dataclass
class TraceData:
    """One parsed Kineto trace in columns; times are int64 ns relative to `base_ns`."""

    path: str
    metadata: dict
    device_properties: list
    base_ns: int
    events: pd.DataFrame
    memory: pd.DataFrame
    flows: pd.DataFrame
    names: pd.DataFrame
    warnings: list = field(default_factory=list)
    #: negative pid/tid codes -> the original strings ("Spans", "PyTorch Profiler", ...)
    labels: dict = field(default_factory=dict)
    #: `storage.fingerprint` of the file when it was parsed; `read.lookup` checks it before a look-up
    source_stat: tuple = (-1, -1)
    #: (first event idx, start, end) byte ranges of the reader's pieces, for fast event look-ups
    event_index: tuple = ()
    #: the SPARSE_COLUMNS of `events` (row positions in it + values); read them with `arg` / `arg_at`
    sparse: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Moves any sparse arg column given in `events` (a hand-built frame) into `sparse`."""
        ev = self.events
        moved = [c for c in SPARSE_COLUMNS if hasattr(ev, "columns") and c in ev.columns]
        if moved:
            kinds = column_kinds()
            self.sparse = dict(self.sparse)
            for c in moved:
                self.sparse[c] = SparseColumn.from_dense(ev[c], kinds[c][1])
            self.events = ev.drop(columns=moved)
            self.sparse = share_rows(self.sparse)
        n = len(ev)
        for c, col in self.sparse.items():
            if col.n != n:
                raise ValueError(f"sparse column {c!r} has {col.n} rows, the events {n}")

    def arg(self, column: str, rows: Any = None) -> Any:
        """The dense values of an events column (sparse or not) for every row, the row positions `rows`
        or a boolean mask: a numpy array (texts: object array of str); an arg column absent from both
        `events` and `sparse` reads as its missing value."""
        import numpy as np

        col = self.sparse.get(column)
        if col is not None:
            return col.dense(rows)
        if column in self.events.columns:
            values = self.events[column].to_numpy()
            return values if rows is None else values[np.asarray(rows)]
        kind = column_kinds().get(column)
        if kind is None:
            raise KeyError(column)
        n = len(self.events) if rows is None else _row_count(rows)
        if kind[0].dtype == "category":
            out = np.empty(n, dtype=object)
            out[:] = kind[1]
            return out
        return np.full(n, kind[1], dtype=np.dtype(kind[0].dtype))

    def dense_events(self) -> pd.DataFrame:
        """`events` with every EVENT_COLUMNS column, the sparse ones made dense (texts as categories), in order:
        for tests and tools that compare whole tables; views read the sparse columns with `arg` instead."""
        import pandas as pd

        data = {}
        for c in EVENT_COLUMNS:
            if c in self.events.columns:
                data[c] = self.events[c]
            elif c in self.sparse or c in SPARSE_COLUMNS:
                values = self.arg(c)
                data[c] = pd.Categorical(values) if values.dtype == object else values
        return pd.DataFrame(data, index=self.events.index, copy=False)

    def arg_rows(self, column: str) -> Any:
        """The row positions (sorted) whose value of an events column is not its missing value."""
        col = self.sparse.get(column)
        if col is None:
            kind = column_kinds().get(column)
            if kind is None:
                raise KeyError(column)
            col = SparseColumn.from_dense(self.arg(column), kind[1])
        return col.rows

    def arg_at(self, column: str, row: int) -> Any:
        """The value of an events column (sparse or not) at one row position, as a Python scalar."""
        col = self.sparse.get(column)
        if col is not None:
            return col.at(row)
        value = self.arg(column, [row])[0]
        return value.item() if hasattr(value, "item") else value

    # pickling (the disk cache) keeps constant columns as one value each
    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        for name in ("events", "memory", "flows"):
            df = state.get(name)
            if df is None or not hasattr(df, "columns"):
                continue
            consts = {}
            for c in df.columns:
                if isinstance(df[c].dtype, type(None)) or df[c].dtype == object:
                    continue
                try:
                    values = df[c].to_numpy(copy=False)
                except (TypeError, ValueError):
                    continue
                if _is_constant(values):
                    consts[c] = (values.dtype.str, values[0].item())
            if consts:
                state[name] = ("__gpuscope_frame__", df.drop(columns=list(consts)), consts, list(df.columns), len(df))
        return state

    def __setstate__(self, state: dict) -> None:
        import numpy as np
        import pandas as pd

        for name in ("events", "memory", "flows"):
            packed = state.get(name)
            if isinstance(packed, tuple) and packed and packed[0] == "__gpuscope_frame__":
                _, df, consts, columns, n = packed
                data = {}
                for c in columns:
                    if c in consts:
                        dtype, value = consts[c]
                        data[c] = constant_column(np.asarray(value, dtype=np.dtype(dtype)), n)
                    else:
                        data[c] = df[c]
                state[name] = pd.DataFrame(data, columns=columns, copy=False)
        self.__dict__.update(state)

    def label(self, code: int) -> str:
        """The original pid/tid text for a column value (numbers print as themselves)."""
        return self.labels.get(int(code), str(int(code)))
