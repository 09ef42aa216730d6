"""Sparse args (issue 25 item 4): `profiler_core/trace/sparse.py`'s SparseColumn, the trace model keeping every
`sparse=True` arg of event_args.ARGS that way, the parse cache storing it, and `/event` still giving a kernel's
launch args."""

from __future__ import annotations

import gzip
import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler_core.trace import event_args
from profiler_core.trace.model import FRAME_COLUMNS, SPARSE_COLUMNS, TraceData
from profiler_core.trace.read import cache, cache_format
from profiler_core.trace.read.reader import parse_trace, read_trace
from profiler_core.trace.sparse import SparseColumn, nbytes_of, share_rows


# ------------------------------------------------------------------------------------------ SparseColumn
def test_rows_and_values_give_the_dense_column_back():
    col = SparseColumn(6, np.array([1, 4], np.int32), np.array([7, 9], np.int64), -1)
    assert col.dense().tolist() == [-1, 7, -1, -1, 9, -1]
    assert col.dense([4, 0, 1, 1, -2]).tolist() == [9, -1, 7, 7, 9]  # any order, repeats, negative positions
    assert col.dense(np.array([True, True, False, False, False, False])).tolist() == [-1, 7]
    assert col.dense([]).tolist() == [] and col.dense().dtype == np.int64
    assert [col.at(i) for i in range(6)] == [-1, 7, -1, -1, 9, -1] and col.at(-5) == 7
    with pytest.raises(IndexError):
        col.dense([6])
    with pytest.raises(IndexError):
        col.at(6)
    with pytest.raises(ValueError):
        col.dense(np.ones(5, bool))  # a mask of another length


def test_reading_the_columns_own_rows_gives_its_values_as_a_copy():
    col = SparseColumn(6, np.array([1, 4], np.int32), np.array([7, 9], np.int32), -1)
    for rows in (col.rows, np.array([1, 4], np.int64), np.array([1, 4], np.uint32), [1, 4]):
        out = col.dense(rows)
        assert out.tolist() == [7, 9] and out.dtype == np.int32
        out[0] = 0  # the caller's array, never the column's
        assert col.values.tolist() == [7, 9]
    assert col.dense(np.array([False, True, False, False, True, False])).tolist() == [7, 9]
    assert col.dense([4, 1]).tolist() == [9, 7] and col.dense([1, 5]).tolist() == [7, -1]  # not its rows
    texts = SparseColumn(4, np.array([0, 2], np.int32), np.array([1, 0], np.int32), "", np.array(["a", "b"], object))
    out = texts.dense(texts.rows)
    assert out.tolist() == ["b", "a"] and out.dtype == object
    assert texts.dense([2, 0]).tolist() == ["a", "b"] and texts.dense([0, 1]).tolist() == ["b", ""]


@pytest.mark.parametrize("n", [0, 5])
def test_an_empty_column(n):
    col = SparseColumn.empty(n, "int32", 0)
    assert len(col) == n and len(col.rows) == 0 and col.dense().tolist() == [0] * n and col.nbytes == 0
    text = SparseColumn.empty(n, "category", "")
    assert text.is_text and text.dense().tolist() == [""] * n
    assert SparseColumn.from_dense(np.zeros(n, np.int32), 0).equals(col)


def test_a_column_every_row_holds():
    values = np.array([3.5, 1.0, 2.25])
    col = SparseColumn.from_dense(values, math.nan)
    assert col.rows.tolist() == [0, 1, 2] and col.rows.dtype == np.int32
    assert np.array_equal(col.dense(), values) and col.at(2) == 2.25


def test_unsorted_repeated_or_outside_rows_are_refused():
    for rows in ([3, 1], [1, 1], [-1, 2], [2, 5]):
        with pytest.raises(ValueError):
            SparseColumn(5, np.array(rows, np.int32), np.zeros(2, np.int64), -1)
    with pytest.raises(ValueError):
        SparseColumn(5, np.array([1.0, 2.0]), np.zeros(2), -1)  # float positions
    with pytest.raises(ValueError):
        SparseColumn(5, np.array([1, 2], np.int32), np.zeros(3), -1)  # more values than rows
    with pytest.raises(ValueError):
        SparseColumn(5, np.array([1], np.int32), np.array([2], np.int32), "", np.array(["a"], object))  # bad code


def test_from_dense_keeps_the_rows_that_differ_from_missing():
    nan = math.nan
    floats = SparseColumn.from_dense(np.array([nan, 0.0, nan, -1.0]), nan)
    assert floats.rows.tolist() == [1, 3] and floats.values.tolist() == [0.0, -1.0]
    assert np.array_equal(floats.dense(), [nan, 0.0, nan, -1.0], equal_nan=True) and math.isnan(floats.at(0))
    texts = SparseColumn.from_dense(pd.Categorical(["", "allreduce", "", "send", "allreduce"]), "")
    assert texts.rows.tolist() == [1, 3, 4] and texts.dense().tolist() == ["", "allreduce", "", "send", "allreduce"]
    assert texts.at(3) == "send" and texts.at(0) == "" and texts.dense([4, 2]).tolist() == ["allreduce", ""]
    objs = SparseColumn.from_dense(np.array(["", "x"], dtype=object), "")
    assert objs.rows.tolist() == [1] and objs.dense().tolist() == ["", "x"]


def test_equal_row_sets_are_shared_and_counted_once():
    a = SparseColumn.from_dense(np.array([0, 2, 0, 3], np.int32), 0)
    b = SparseColumn.from_dense(np.array([-1, 5, -1, 6], np.int64), -1)
    c = SparseColumn.from_dense(np.array([1, 0, 0, 0], np.int32), 0)
    cols = share_rows({"a": a, "b": b, "c": c})
    assert cols["a"].rows is cols["b"].rows and cols["c"].rows is not cols["a"].rows
    assert nbytes_of(cols.values()) == 2 * 4 + 2 * 4 + 2 * 8 + 1 * 4 + 1 * 4


# ------------------------------------------------------------------------------------------ the trace model
def _kernel(i: int, ts: int) -> dict:
    return {
        "ph": "X",
        "cat": "kernel",
        "name": f"k{i}",
        "pid": 0,
        "tid": 7,
        "ts": ts,
        "dur": 2,
        "args": {
            "device": 0,
            "stream": 7,
            "correlation": 100 + i,
            "registers per thread": 32 + i,
            "shared memory": 1024 * i,
            "blocks per SM": 0.5 * i,
            "warps per SM": 2.0 * i,
            "grid": [i + 1, 2, 1],
            "block": [128, 1, 1],
            "est. achieved occupancy %": 10 + i,
        },
    }


def _doc() -> dict:
    evs: list = []
    for i in range(4):
        evs.append({"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5})
        evs.append(_kernel(i, 10 * i + 3))
    coll = {"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 8, "Out msg nelems": 8}
    coll.update({"Group size": 2, "Process Group Name": "0"})
    evs.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 50, "dur": 4})
    evs[-1]["args"] = coll
    evs.append(
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7, "ts": 60, "dur": 1}
        | {"args": {"bytes": 64, "device": 0, "stream": 7}}
    )
    return {"schemaVersion": 1, "baseTimeNanoseconds": 10**18, "traceEvents": evs}


def test_every_sparse_arg_is_stored_sparsely_with_the_file_values():
    doc = _doc()
    t = parse_trace(json.dumps(doc).encode())
    sparse = {c for a in event_args.ARGS if a.sparse and a.table == "events" for c in a.columns}
    assert sparse == set(SPARSE_COLUMNS) and {"grid_x", "block_z", "coll_name", "bytes", "graph_id"} <= sparse
    assert set(t.sparse) == sparse and not sparse & set(t.events.columns)
    assert tuple(t.events.columns) == FRAME_COLUMNS
    for c in sparse:
        col = t.sparse[c]
        assert isinstance(col, SparseColumn) and col.n == len(t.events), c
    names = t.events["name"].astype(str).tolist()
    by_name = {n: i for i, n in enumerate(names)}
    kernel_rows = np.array([by_name[f"k{i}"] for i in range(4)])
    # the kernel columns hold the kernels' rows only, one row array for all the columns every kernel carries
    assert t.sparse["grid_x"].rows.tolist() == sorted(kernel_rows.tolist())
    assert t.sparse["registers"].rows is t.sparse["grid_x"].rows is t.sparse["block_x"].rows
    assert t.arg("grid_x", kernel_rows).tolist() == [1, 2, 3, 4]
    assert t.arg("registers", kernel_rows).tolist() == [32, 33, 34, 35]
    assert t.arg("occupancy", kernel_rows).tolist() == [10.0, 11.0, 12.0, 13.0]
    assert t.sparse["shared_memory"].rows.tolist() == sorted(kernel_rows.tolist())  # 0 is a value, not missing
    rpc = by_name["record_param_comms"]
    assert t.sparse["coll_name"].rows.tolist() == [rpc] and t.arg_at("coll_name", rpc) == "allreduce"
    assert t.arg_at("group_size", rpc) == 2 and t.arg_at("pg_name", rpc) == "0" and t.arg_at("dtype", rpc) == "Float"
    assert t.arg_at("bytes", by_name["Memcpy HtoD"]) == 64 and t.arg_rows("bytes").tolist() == [by_name["Memcpy HtoD"]]
    assert t.arg_at("grid_x", by_name["op0"]) == 0 and t.arg_at("registers", by_name["op0"]) == -1
    assert t.arg("coll_name", [by_name["op0"]]).tolist() == [""] and len(t.sparse["graph_id"].rows) == 0
    # the dense view of every column is the file's, row for row
    dense = t.dense_events()
    for i, e in enumerate(doc["traceEvents"]):
        row = dense[dense["idx"] == i].iloc[0]
        args = e.get("args", {})
        assert row["grid_y"] == (args["grid"][1] if "grid" in args else 0)
        assert row["coll_name"] == args.get("Collective name", "") and row["bytes"] == args.get("bytes", -1)


def test_a_hand_built_frame_with_dense_args_is_kept_sparse():
    ev = pd.DataFrame({"name": ["a", "b", "c"], "grid_x": np.array([0, 4, 0], np.int32), "ts": [1, 2, 3]})
    empty = pd.DataFrame()
    t = TraceData("<x>", {}, [], 0, ev, empty, empty, empty)
    assert list(t.events.columns) == ["name", "ts"] and t.sparse["grid_x"].rows.tolist() == [1]
    assert t.arg("grid_x").tolist() == [0, 4, 0] and t.arg("registers").tolist() == [-1, -1, -1]  # absent: missing
    with pytest.raises(KeyError):
        t.arg("no such column")
    with pytest.raises(ValueError):
        TraceData(
            "<x>",
            {},
            [],
            0,
            ev.drop(columns="grid_x"),
            empty,
            empty,
            empty,
            sparse={"x": SparseColumn.empty(2, "int64", -1)},
        )


# ------------------------------------------------------------------------------------------ the parse cache
def test_the_cache_stores_the_sparse_form(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    p = tmp_path / "w.pt.trace.json"
    p.write_text(json.dumps(_doc()))
    t = read_trace(str(p))
    cache.store(str(p), t)
    t2 = cache.load(str(p))
    assert t2 is not None and list(t2.sparse) == list(t.sparse)
    assert all(t2.sparse[c].equals(t.sparse[c]) for c in t.sparse)
    assert t2.sparse["grid_x"].rows is t2.sparse["block_z"].rows  # one row array, stored once
    entry = cache.entry_path(str(p))
    with open(entry, "rb") as f:
        cache_format.read_key(f)
        header = cache_format.read_header(f)
    assert "grid_x" not in [c["name"] for c in header["frames"]["events"]["columns"]]
    kernel_rows = [s for s in header["sparse"]["rows"] if s["count"] == 4]
    assert len(kernel_rows) == 1  # grid..occupancy: their shared rows written once


def test_a_cache_entry_with_unsorted_sparse_rows_is_refused(tmp_path):
    t = parse_trace(json.dumps(_doc()).encode())
    col = SparseColumn(len(t.events), np.array([3, 5], np.int32), np.array([1, 2], np.int64), -1)
    col.rows = np.array([5, 3], np.int32)  # damaged after the check: what a bad entry on disk holds
    t.sparse["bytes"] = col
    entry = tmp_path / "e.gpc"
    with open(entry, "wb") as f:
        cache_format.dump(f, ["k"], t)
    with open(entry, "rb") as f, pytest.raises(cache_format.CacheFormatError, match="strictly increasing"):
        cache_format.load(f, os.path.getsize(entry), ["k"])


# ------------------------------------------------------------------------------------------ /event
def test_event_route_gives_a_kernel_its_launch_args(tmp_path, monkeypatch):
    from tensorboard.backend import application
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    from tb_plugin.plugin import GpuscopePlugin

    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    doc = _doc()
    run = tmp_path / "logs" / "run1"
    run.mkdir(parents=True)
    Path(run / "w0.1000.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    plugin = GpuscopePlugin(base_plugin.TBContext(logdir=str(tmp_path / "logs")))
    c = Client(application.TensorBoardWSGI([plugin]))
    idx = next(i for i, e in enumerate(doc["traceEvents"]) if e["name"] == "k2")
    r = c.get(f"/data/plugin/gpuscope/event?run=run1&worker=w0&span=1&idx={idx}")
    assert r.status_code == 200, r.get_data()
    args = r.json["args"]
    assert args["grid"] == [3, 2, 1] and args["block"] == [128, 1, 1] and args["registers per thread"] == 34
    assert args["shared memory"] == 2048 and args["est. achieved occupancy %"] == 12


def test_an_entry_of_the_dense_format_is_parsed_again(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    p = tmp_path / "w.pt.trace.json"
    p.write_text(json.dumps(_doc()))
    t = read_trace(str(p))
    current = cache.FORMAT_VERSION
    assert current >= 8  # 8: the sparse args
    monkeypatch.setattr(cache, "FORMAT_VERSION", 7)
    cache.store(str(p), t)
    assert cache.load(str(p)) is not None
    monkeypatch.setattr(cache, "FORMAT_VERSION", current)
    assert cache.load(str(p)) is None  # the reader parses the file again
