"""The event-args schema (profiler_core/trace/event_args.py) is the single source of the reader's args:
the decoder's fields, the columns and their dtypes follow from its rows, and a row added to it reaches
the reader's output with nothing else changed."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from profiler_core.trace import event_args, model
from profiler_core.trace.read import decode
from profiler_core.trace.read.reader import parse_trace

ROOT = Path(__file__).resolve().parents[1]


def _kernel(name: str, ts: float, args: dict) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": 1, "args": args}


def _op(name: str, ts: float, args: dict) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 1, "args": args}


def _read(events: list) -> object:
    return parse_trace(json.dumps({"baseTimeNanoseconds": 10**18, "traceEvents": events}).encode())


def test_decoder_reads_exactly_the_schema_keys():
    kept = [a for a in event_args.ARGS if a.column is not None]
    keys = {k for a in kept for k in a.keys}
    info = decode._Args.__struct_config__
    assert info.frozen
    encoded = set(decode._Args.__struct_encode_fields__)
    assert encoded == keys
    # args kept only in the full event (no column) are not decoded
    assert not encoded & {"Concrete Inputs", "flops", "Input Strides", "memory bandwidth (GB/s)"}


def test_model_columns_come_from_the_schema():
    arg_columns = [c for a in event_args.ARGS if a.table == "events" for c in a.columns]
    assert ("cat", "name", "pid", "tid", "ts", "dur", *arg_columns, "idx") == model.EVENT_COLUMNS
    memory = ("device_type", "device_id", "addr", "bytes", "total_allocated", "total_reserved")
    assert model.MEMORY_COLUMNS[:3] == ("ts", "pid", "tid") and model.MEMORY_COLUMNS[-1] == "idx"
    assert sorted(model.MEMORY_COLUMNS[3:-1]) == sorted(memory)


def test_absent_args_read_as_their_missing_values_with_their_dtypes():
    t = _read([_kernel("k", 1, {}), _op("op", 2, {"Collective name": "allreduce"})])
    ev = t.dense_events()
    k = ev[ev["name"] == "k"].iloc[0]
    # missing values as docs/internals.md §3 states them
    assert k["registers"] == -1 and k["grid_x"] == 0 and math.isnan(k["occupancy"]) and k["coll_name"] == ""
    assert k["external_id"] == -1 and k["input_dims"] == ""
    kinds = event_args.column_kinds("events")
    for c, (kind, _missing) in kinds.items():
        assert str(ev[c].dtype) == kind.dtype, c


def test_older_spellings_fill_only_where_the_key_is_absent():
    t = _read(
        [
            _op("both", 1, {"Input Dims": [[1]], "Input dims": [[2]], "external id": 9}),
            _op("old", 2, {"Input dims": [[3]], "External id": 4, "external id": 5}),
            _op("none", 3, {"Input type": ["int"]}),
            _kernel("k", 4, {"external id": 6}),
        ]
    )
    ev = t.events.set_index(t.events["name"].astype(str))
    assert ev.loc["both", "input_dims"] == "[[1]]" and ev.loc["old", "input_dims"] == "[[3]]"
    assert ev.loc["none", "input_dims"] == "" and ev.loc["none", "input_type"] == '["int"]'
    assert ev.loc["both", "external_id"] == 9 and ev.loc["old", "external_id"] == 4 and ev.loc["k", "external_id"] == 6


def test_a_family_only_arg_stays_a_constant_column_where_no_event_has_it():
    t = _read([_op("op", 1, {"Input Dims": [[1]]}), _kernel("k", 2, {"grid": [1, 1, 1]})])
    assert t.events["python_id"].to_numpy().strides == (0,)  # the schema's missing value, stored once
    for c in ("in_nelems", "occupancy", "registers"):  # sparse args: no row holds a value, nothing is stored
        assert len(t.sparse[c].rows) == 0 and len(t.sparse[c].values) == 0, c
    assert len(t.sparse["grid_x"].rows) == 1


_ADD_A_ROW = r"""
import json, sys
from profiler_core.trace import event_args as ea

ea.ARGS = ea.ARGS + (
    ea.Arg("launch_cost", ("launch cost", "Launch Cost"), "launch_cost", ea.INT64, ("kernel",), sparse=True),
    ea.Arg("kernel_tag", ("kernel tag",), "kernel_tag", ea.TEXT, ("kernel",)),
)
from profiler_core.trace import model
from profiler_core.trace.read.reader import parse_trace

ev = [
    {"ph": "X", "cat": "kernel", "name": "a", "pid": 0, "tid": 7, "ts": 1, "dur": 1,
     "args": {"launch cost": 42, "kernel tag": "hot"}},
    {"ph": "X", "cat": "kernel", "name": "b", "pid": 0, "tid": 7, "ts": 2, "dur": 1, "args": {"Launch Cost": 7}},
    {"ph": "X", "cat": "cpu_op", "name": "c", "pid": 1, "tid": 1, "ts": 3, "dur": 1, "args": {"launch cost": 5}},
]
t = parse_trace(json.dumps({"baseTimeNanoseconds": 10**18, "traceEvents": ev}).encode())
e = t.dense_events()
print(json.dumps({
    "in_model": "launch_cost" in model.EVENT_COLUMNS and "kernel_tag" in model.EVENT_COLUMNS,
    "sparse": sorted(set(t.sparse) & {"launch_cost", "kernel_tag"}),
    "cost": e["launch_cost"].tolist(), "dtype": str(e["launch_cost"].dtype),
    "tag": e["kernel_tag"].astype(str).tolist(), "tag_dtype": str(e["kernel_tag"].dtype),
    "doc": "`launch cost` (older: `Launch Cost`) | kernels | `launch_cost`" in ea.markdown_table(),
}))
"""


def test_a_row_added_to_the_schema_reaches_the_reader_and_the_docs():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", _ADD_A_ROW], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    # kernels carry it (under either spelling); the cpu_op's is not read: the row says kernels only
    assert got == {
        "in_model": True,
        "sparse": ["launch_cost"],
        "cost": [42, 7, -1],
        "dtype": "int64",
        "tag": ["hot", "", ""],
        "tag_dtype": "category",
        "doc": True,
    }


def test_arg_reads_every_spelling_of_a_key():
    assert event_args.arg({"Input dims": [[1]]}, "Input Dims") == [[1]]
    assert event_args.arg({"Input Dims": [[2]], "Input dims": [[1]]}, "Input Dims") == [[2]]
    assert event_args.arg({"external id": 3}, "External id") == 3
    assert event_args.arg({}, "Call stack") is None
    assert np.isnan(event_args.FLOAT.missing)


def _internals_events_table() -> dict[str, str]:
    """docs/internals.md §3's `events` columns table: column -> its "dtype; missing" cell."""
    text = (ROOT / "docs" / "internals.md").read_text(encoding="utf-8")
    section = text.split("`events` columns (dtype; missing value", 1)[1].split(":\n", 1)[1].split("\n\n", 1)[0]
    out = {}
    for line in section.splitlines()[2:]:
        if not line.startswith("| "):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        names = re.findall(r"`([^`]+)`", cells[0])
        for name in names:
            if name.endswith("..z"):  # grid_x..z
                out.update({f"{name[:-4]}{axis}": cells[1] for axis in "xyz"})
            else:
                out[name] = cells[1]
    return out


def test_internals_doc_states_each_columns_dtype_and_missing_value_as_the_schema():
    doc = _internals_events_table()
    kinds = event_args.column_kinds("events")
    assert set(kinds) <= set(doc), set(kinds) - set(doc)
    words = {-1: "-1", 0: "0", "": '""'}
    for column, (kind, missing) in kinds.items():
        dtype, _, stated = doc[column].partition("; ")
        assert dtype == kind.dtype, column
        assert stated == ("NaN" if missing != missing else words[missing]), column
