"""Parallel reading: byte ranges parsed apart (in other processes) merge into exactly the serial result,
and a range boundary that is not between two events falls back to the serial reader."""
import gzip
import json
from concurrent.futures import Future

import pandas as pd
import pytest

import profiler_core.trace.reader as reader
from profiler_core.trace.reader import parse_trace, read_trace

from .test_reader_pieces import _doc


class _InlinePool:
    """Runs submitted jobs at once in this process (the range logic without processes)."""

    def __init__(self):
        self.jobs = []

    def submit(self, fn, *args):
        self.jobs.append(args)
        fut = Future()
        try:
            fut.set_result(fn(*args))
        except BaseException as e:  # noqa: BLE001 - handed over like a process pool does
            fut.set_exception(e)
        return fut


def _same(t, whole, doc):
    for a, b in ((t.events, whole.events), (t.memory, whole.memory), (t.flows, whole.flows)):
        pd.testing.assert_frame_equal(a, b, check_categorical=False)
    pd.testing.assert_frame_equal(t.names, whole.names)
    assert t.metadata == whole.metadata and t.warnings == whole.warnings
    n = len(doc["traceEvents"])
    for i in (0, 1, n // 3, n // 2, n - 2, n - 1):
        assert t.event(i) == doc["traceEvents"][i]


def _write(tmp_path, doc, gz):
    text = json.dumps(doc, indent=1).encode()
    path = tmp_path / ("t.pt.trace.json.gz" if gz else "t.pt.trace.json")
    path.write_bytes(gzip.compress(text) if gz else text)
    return path, text


@pytest.mark.parametrize("gz", [True, False])
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_ranges_merge_into_the_serial_result(tmp_path, monkeypatch, gz, workers):
    doc = _doc(3000)  # strings holding "}, {", events longer than a piece, flows
    path, text = _write(tmp_path, doc, gz)
    whole = parse_trace(text, str(path))
    monkeypatch.setattr(reader, "BLOCK", 2048)
    monkeypatch.setattr(reader, "IO_BLOCK", 8192)
    merged = 0
    for share in (0.2, 0.37, 0.5, 0.61, 0.8):
        monkeypatch.setattr(reader, "MAIN_SHARE", share)
        pool = _InlinePool()
        try:
            t = reader._parallel_parse(str(path), pool, workers)
        except reader._NotStreamable:  # a boundary inside a string: read_trace reads serially
            continue
        assert len(pool.jobs) == workers
        _same(t, whole, doc)
        merged += 1
    assert merged >= 3  # most boundaries fall between events


def test_boundary_inside_a_string_is_caught_and_read_trace_falls_back(tmp_path, monkeypatch):
    ev = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1,
           "args": {"External id": i}} for i in range(400)]
    ev[200]["args"]["text"] = '}, {"ph": "X", "name": "fake"}, {' * 400  # a long string of separators
    doc = {"traceEvents": ev}
    path, text = _write(tmp_path, doc, True)
    whole = parse_trace(text, str(path))
    start = text.index(b'"text"')
    monkeypatch.setattr(reader, "MAIN_SHARE", (start + 200) / len(text))  # inside that string
    monkeypatch.setattr(reader, "BLOCK", 4096)
    with pytest.raises(reader._NotStreamable):
        reader._parallel_parse(str(path), _InlinePool(), 1)
    monkeypatch.setattr(reader, "_parse_pool", lambda p, w: _InlinePool())
    _same(read_trace(path, processes=1), whole, doc)


def test_boundary_past_the_event_array(tmp_path, monkeypatch):
    ev = [{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": i, "dur": 1}
          for i in range(300)]
    doc = {"traceEvents": ev, "deviceProperties": [{"id": i, "name": "gpu"} for i in range(3000)]}
    path, text = _write(tmp_path, doc, True)
    whole = parse_trace(text, str(path))
    monkeypatch.setattr(reader, "MAIN_SHARE", 0.9)  # in the metadata after the events
    monkeypatch.setattr(reader, "BLOCK", 4096)
    with pytest.raises(reader._NotStreamable):
        reader._parallel_parse(str(path), _InlinePool(), 1)
    monkeypatch.setattr(reader, "_parse_pool", lambda p, w: _InlinePool())
    t = read_trace(path, processes=1)
    _same(t, whole, doc)
    assert len(t.device_properties) == 3000


def test_no_separator_after_a_boundary_leaves_that_range_empty(tmp_path, monkeypatch):
    ev = [{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": i, "dur": 1}
          for i in range(300)]
    doc = {"traceEvents": ev, "trailer": "x" * 200000}  # no "}, {" after the events
    path, text = _write(tmp_path, doc, False)
    whole = parse_trace(text, str(path))
    monkeypatch.setattr(reader, "MAIN_SHARE", 0.5)
    monkeypatch.setattr(reader, "BLOCK", 4096)
    pool = _InlinePool()
    _same(reader._parallel_parse(str(path), pool, 1), whole, doc)
    b = reader._Builder()
    assert reader._parse_span(str(path), b, len(text) // 2, None) == (0, [], None)


def test_a_worker_s_read_error_is_the_file_s_error(tmp_path):
    doc = _doc(3000)
    path, _ = _write(tmp_path, doc, True)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] + b"\0" * 64 + data[len(data) // 2 + 64:])  # corrupt
    with pytest.raises(reader.TraceReadError, match="corrupt gzip"):
        reader._parallel_parse(str(path), _InlinePool(), 1)


def test_worker_processes_give_the_serial_result(shared_traces, monkeypatch):
    path = sorted((shared_traces / "kineto_resnet50_v100").rglob("*.pt.trace.json.gz"))[0]
    monkeypatch.setattr(reader, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.delenv("GPUSCOPE_PARSE_PROCESSES", raising=False)
    used = []
    real = reader._parallel_parse

    def spy(*args):
        t = real(*args)
        used.append(t is not None)
        return t

    monkeypatch.setattr(reader, "_parallel_parse", spy)
    try:
        par = read_trace(path, processes=2)
    finally:
        reader.shutdown_parse_pool()
    assert used == [True]  # the parallel path ran and its result was used
    seq = read_trace(path)
    doc = json.loads(gzip.decompress(path.read_bytes()))
    _same(par, seq, doc)
    assert par.base_ns == seq.base_ns and par.labels == seq.labels
