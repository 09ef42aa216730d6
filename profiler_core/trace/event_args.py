"""The event-args schema: every Kineto `args` key the reader knows, in one declarative table (`ARGS`).

Each row says which key (and which older spellings of it) the reader keeps, in which column of which
`TraceData` table, as what kind of value, missing as what, and which family of events carries it.
The reader's decoder struct and column coercion (`trace/read/decode.py`, `trace/read/columns.py`), the
column tuples of `trace/model.py`, the spellings `key_averages()` reads (`analysis/build.py`) and the
arguments table of docs/trace-format.md (`python -m profiler_core.trace.event_args`) all follow from it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from profiler_core.trace.categories import (
    CPU_OP,
    CUDA_DRIVER,
    CUDA_RUNTIME,
    CUDA_SYNC,
    GPU_MEMCPY,
    GPU_MEMSET,
    GPU_USER_ANNOTATION,
    KERNEL,
    PYTHON_FUNCTION,
    TRACE,
    USER_ANNOTATION,
)


@dataclass(frozen=True)
class Kind:
    """How an arg's values become a column (the reader converts each kind its own way)."""

    name: str
    dtype: str  # the column's dtype ("category": interned text codes)
    missing: Any  # the column's missing value


INT64 = Kind("int64", "int64", -1)
INT32 = Kind("int32", "int32", -1)
FLOAT = Kind("float", "float64", math.nan)
#: a text (or a number read as text), interned into a category column
TEXT = Kind("text", "category", "")
#: a JSON list kept as its compact JSON text, interned into a category column
JSON = Kind("json", "category", "")
#: an [x, y, z] list split into three int32 columns `{column}_x`, `_y`, `_z`
TRIPLE = Kind("triple", "int32", 0)
#: the value as decoded (the `names` table's object column)
VALUE = Kind("value", "object", None)


#: family -> (the reader's extraction group, the words docs use for it). The reader extracts each
#: group's args from the events whose category is in that group (CATEGORY_GROUP); "other" gets all.
FAMILIES: dict[str, tuple[str, str]] = {
    "op": ("op", "ops"),
    "collective": ("op", "communication ops"),
    "python": ("python", "Python frames"),
    "launch": ("gpu", "API calls"),
    "gpu": ("gpu", "GPU activity"),
    "kernel": ("gpu", "kernels"),
    "memcpy": ("gpu", "copies"),
    "memset": ("gpu", "memsets"),
    "memory": ("memory", "`[memory]`"),
    "metadata": ("metadata", "M events"),
}
#: normalised category of a complete event -> the extraction group of the args it carries
CATEGORY_GROUP: dict[str, str] = {
    CPU_OP: "op",
    USER_ANNOTATION: "op",
    PYTHON_FUNCTION: "python",
    KERNEL: "gpu",
    GPU_MEMCPY: "gpu",
    GPU_MEMSET: "gpu",
    CUDA_RUNTIME: "gpu",
    CUDA_DRIVER: "gpu",
    GPU_USER_ANNOTATION: "gpu",
    CUDA_SYNC: "gpu",
    TRACE: "trace",
}
#: the groups of complete events, in the reader's order ("other": uncategorised events, every arg)
EVENT_GROUPS = ("op", "gpu", "python", "trace", "other")

_DEFAULT = object()


@dataclass(frozen=True)
class Arg:
    """One row of the schema: a Kineto args key and the column the reader keeps it in."""

    field: str  # the decoder's field name (unique)
    keys: tuple[str, ...]  # Kineto's key, then older spellings read as it (first present wins)
    column: str | None  # the column in `table`; None: kept only in the event's full args
    kind: Kind
    on: tuple[str, ...]  # FAMILIES carrying it
    table: str = "events"  # the TraceData frame: events, memory or names
    #: carried by its family's events only (kernel-only, copy/collective-only): the trace model and the parse
    #: cache keep its column(s) as `trace/sparse.py` SparseColumns (`TraceData.sparse`), not in `events`
    sparse: bool = False
    #: the field of the arg Kineto always writes this one with: absent with it (not `warps per SM` with
    #: `blocks per SM`: torch 1.8 writes the warps alone)
    written_with: str | None = None
    missing: Any = _DEFAULT  # the column's missing value (default: the kind's)
    note: str = ""  # said in the docs after the column

    def __post_init__(self) -> None:
        if self.missing is _DEFAULT:
            object.__setattr__(self, "missing", self.kind.missing)

    @property
    def columns(self) -> tuple[str, ...]:
        """The column(s) this arg fills (a TRIPLE fills three)."""
        if self.column is None:
            return ()
        if self.kind is TRIPLE:
            return tuple(f"{self.column}_{axis}" for axis in "xyz")
        return (self.column,)

    @property
    def groups(self) -> frozenset[str]:
        """The reader's extraction groups whose events carry this arg."""
        return frozenset(FAMILIES[f][0] for f in self.on)


_KERNEL = ("kernel",)
_COLL = ("collective",)

#: The schema. Rows are in the order Kineto writes the keys (cpu_op's first, then `[memory]`'s, Python frames',
#: GPU activities', M events'): msgspec looks keys up fastest in its struct's field order. The columns of each
#: frame follow the rows' order.
ARGS: tuple[Arg, ...] = (
    Arg("external_id", ("External id", "external id"), "external_id", INT64, ("op", "python", "launch", "gpu")),
    Arg("input_type", ("Input type",), "input_type", JSON, ("op",)),
    Arg("input_dims", ("Input Dims", "Input dims"), "input_dims", JSON, ("op",), note="torch <= 1.8: `Input dims`"),
    Arg("sequence_nr", ("Sequence number",), "sequence_nr", INT64, ("op",), note="autograd"),
    Arg("fwd_thread", ("Fwd thread id",), "fwd_thread", INT64, ("op",), written_with="sequence_nr", note="autograd"),
    Arg("call_stack", ("Call stack",), "call_stack", TEXT, ("op",)),
    Arg("coll_name", ("Collective name",), "coll_name", TEXT, _COLL, sparse=True),
    Arg("dtype", ("dtype",), "dtype", TEXT, _COLL, sparse=True, written_with="coll_name"),
    Arg("in_nelems", ("In msg nelems",), "in_nelems", INT64, _COLL, sparse=True, written_with="coll_name"),
    Arg("out_nelems", ("Out msg nelems",), "out_nelems", INT64, _COLL, sparse=True, written_with="coll_name"),
    Arg("group_size", ("Group size",), "group_size", INT64, _COLL, sparse=True, written_with="coll_name"),
    Arg("pg_name", ("Process Group Name",), "pg_name", TEXT, _COLL, sparse=True, written_with="coll_name"),
    # [memory] instant events: the `memory` table
    Arg("mem_total_reserved", ("Total Reserved",), "total_reserved", INT64, ("memory",), table="memory"),
    Arg("mem_total_allocated", ("Total Allocated",), "total_allocated", INT64, ("memory",), table="memory"),
    Arg("mem_bytes", ("Bytes",), "bytes", INT64, ("memory",), table="memory"),
    Arg("mem_device_id", ("Device Id",), "device_id", INT64, ("memory",), table="memory"),
    Arg("mem_device_type", ("Device Type",), "device_type", INT64, ("memory",), table="memory", note="0 CPU, 1 CUDA"),
    Arg("mem_addr", ("Addr",), "addr", INT64, ("memory",), table="memory"),
    Arg("python_parent_id", ("Python parent id",), "python_parent_id", INT64, ("python",)),
    Arg("python_id", ("Python id",), "python_id", INT64, ("python",)),
    Arg("python_module_id", ("Python module id",), "python_module_id", INT64, ("python",)),
    Arg("device", ("device",), "device", INT64, ("gpu",), note="GPU events: from pid if args lack it"),
    Arg("stream", ("stream",), "stream", INT64, ("gpu",), note="GPU events: from tid if args lack it"),
    Arg("correlation", ("correlation",), "correlation", INT64, ("launch", "gpu"), note="flows use `id`"),
    Arg("registers", ("registers per thread",), "registers", INT32, _KERNEL, sparse=True),
    Arg("shared_memory", ("shared memory",), "shared_memory", INT32, _KERNEL, sparse=True),
    Arg(
        "static_shared_memory",
        ("static shared memory",),
        "static_shared_memory",
        INT32,
        _KERNEL,
        sparse=True,
        note="our CUPTI converter only; Kineto writes the total",
    ),
    Arg(
        "dynamic_shared_memory",
        ("dynamic shared memory",),
        "dynamic_shared_memory",
        INT32,
        _KERNEL,
        sparse=True,
        note="our CUPTI converter only",
    ),
    Arg("blocks_per_sm", ("blocks per SM",), "blocks_per_sm", FLOAT, _KERNEL, sparse=True),
    Arg("warps_per_sm", ("warps per SM",), "warps_per_sm", FLOAT, _KERNEL, sparse=True),
    Arg("grid", ("grid",), "grid", TRIPLE, _KERNEL, sparse=True),
    Arg("block", ("block",), "block", TRIPLE, _KERNEL, sparse=True, written_with="grid"),
    Arg("occupancy", ("est. achieved occupancy %",), "occupancy", FLOAT, _KERNEL, sparse=True, note="the % value"),
    Arg(
        "bytes",
        ("bytes",),
        "bytes",
        INT64,
        ("memcpy", "memset", "collective"),
        sparse=True,
        note="MPI ops: message bytes",
    ),
    Arg(
        "graph_id",
        ("graph id",),
        "graph_id",
        INT64,
        ("gpu",),
        sparse=True,
        note="the CUDA graph that ran it: CUPTI's `graphId`, written by our CUPTI converter; Kineto writes none",
    ),
    Arg(
        "graph_node_id",
        ("graph node id",),
        "graph_node_id",
        INT64,
        ("gpu",),
        sparse=True,
        written_with="graph_id",
        note="CUPTI's `graphNodeId`",
    ),
    # M events: the `names` table's value, the first of these present
    Arg("m_name", ("name",), "value", VALUE, ("metadata",), table="names"),
    Arg("m_labels", ("labels",), "value", VALUE, ("metadata",), table="names"),
    Arg("m_sort_index", ("sort_index",), "value", VALUE, ("metadata",), table="names"),
    # kept only in each event's full args (not decoded); key_averages() reads them from the raw args
    Arg("input_strides", ("Input Strides",), None, JSON, ("op",)),
    Arg("concrete_inputs", ("Concrete Inputs",), None, JSON, ("op",)),
    Arg("flops", ("flops",), None, INT64, ("op",)),
    Arg("bandwidth", ("memory bandwidth (GB/s)",), None, FLOAT, ("memcpy",)),
)

BY_FIELD: dict[str, Arg] = {a.field: a for a in ARGS}


def _rows(args: tuple[Arg, ...] | None) -> tuple[Arg, ...]:
    """`args`, or the module's ARGS as it is now (a test may extend it before the reader is imported)."""
    return ARGS if args is None else args


#: canonical key -> the older spellings read as it, oldest first
SPELLINGS: dict[str, tuple[str, ...]] = {a.keys[0]: a.keys[1:] for a in ARGS if len(a.keys) > 1}

#: the complete events' own fields before the arg columns, and after them
EVENT_HEAD = ("cat", "name", "pid", "tid", "ts", "dur")
EVENT_TAIL = ("idx",)


def table_columns(table: str, args: tuple[Arg, ...] | None = None) -> tuple[str, ...]:
    """The arg columns of one TraceData frame, in order (a column filled by several rows once)."""
    return tuple(dict.fromkeys(c for a in _rows(args) if a.table == table for c in a.columns))


def event_columns(args: tuple[Arg, ...] | None = None) -> tuple[str, ...]:
    """The columns of `TraceData.events`, in order."""
    return EVENT_HEAD + table_columns("events", args) + EVENT_TAIL


def sparse_columns(table: str = "events", args: tuple[Arg, ...] | None = None) -> tuple[str, ...]:
    """The arg columns of one frame that the model keeps sparse (rows with `sparse=True`), in order."""
    return tuple(dict.fromkeys(c for a in _rows(args) if a.table == table and a.sparse for c in a.columns))


def column_kinds(table: str = "events", args: tuple[Arg, ...] | None = None) -> dict[str, tuple[Kind, Any]]:
    """Arg column -> (its kind, its missing value) for one frame."""
    return {c: (a.kind, a.missing) for a in _rows(args) if a.table == table for c in a.columns}


def key(field: str) -> str:
    """The Kineto key of a schema row (by its field name)."""
    return BY_FIELD[field].keys[0]


def arg(args: dict, key: str) -> Any:
    """`args[key]` for a canonical key, else the value under its first older spelling present, else None."""
    value = args.get(key)
    if value is not None:
        return value
    for alt in SPELLINGS.get(key, ()):
        value = args.get(alt)
        if value is not None:
            return value
    return None


def markdown_table(args: tuple[Arg, ...] | None = None) -> str:
    """The arguments table of docs/trace-format.md."""
    args = _rows(args)
    lines = ["| key | on | column of the reader |", "| --- | --- | --- |"]
    for a in args:
        if a.table != "events" or a.column is None:
            continue
        olds = ", ".join(f"`{k}`" for k in a.keys[1:])
        key = f"`{a.keys[0]}`" + (f" (older: {olds})" if olds else "")
        on = ", ".join(FAMILIES[f][1] for f in a.on)
        cols = ", ".join(f"`{c}`" for c in a.columns) + (f" ({a.note})" if a.note else "")
        lines.append(f"| {key} | {on} | {cols} |")
    mem = [a for a in args if a.table == "memory"]
    lines.append(
        f"| {', '.join(f'`{a.keys[0]}`' for a in mem)} | `[memory]` | the `memory` table: "
        f"{', '.join(f'`{a.column}`' for a in mem)} |"
    )
    kept = [a for a in args if a.table == "events" and a.column is None]
    words = ", ".join(f"`{a.keys[0]}` ({', '.join(FAMILIES[f][1] for f in a.on)})" for a in kept)
    sparse = ", ".join(f"`{a.keys[0]}`" for a in args if a.table == "events" and a.sparse and a.column)
    return "\n".join(lines) + (
        f"\n\n{words} are written as torch writes them and kept only in each event's full args (read back by\n"
        "`profiler_core.trace.read.lookup.trace_event_args`).\n"
        + (
            f"\nThe reader keeps the columns of {sparse} sparse: only for the events that carry them\n"
            "(`TraceData.sparse`, docs/internals.md §3).\n"
            if sparse
            else ""
        )
    )


if __name__ == "__main__":
    print(markdown_table(), end="")
