"""Parallel reading: byte ranges parsed apart (in other processes) merge into exactly the serial result,
and a range boundary that is not between two events falls back to the serial reader."""

import gzip
import json

import pandas as pd
import pytest

import profiler_core.trace.read.columns as columns
import profiler_core.trace.read.reader as reader
import profiler_core.trace.read.stream as stream
from profiler_core.trace.read.lookup import trace_event
from profiler_core.trace.read.reader import parse_trace, read_trace

from .test_reader_pieces import _doc


@pytest.fixture(autouse=True)
def _python_reader(monkeypatch):
    """These tests are about the Python reader's parser processes: the native reader would read first."""
    monkeypatch.setenv("GPUSCOPE_NATIVE_READER", "0")


class _InlineSpan:
    """A worker range parsed at once in this process (the range logic without processes)."""

    started: list = []

    def __init__(self, path, lo, hi, version):
        self.started.append((lo, hi))
        try:
            self.data, self.error = stream.parse_span_job(path, lo, hi, version), None
        except BaseException as e:  # noqa: BLE001 - raised from result(), as a worker's would be
            self.data, self.error = None, e

    def result(self):
        if self.error is not None:
            raise self.error
        return self.data

    def cancel(self):
        pass


def _parallel(path, workers):
    _InlineSpan.started = []
    return stream.parallel_parse(str(path), workers, start=_InlineSpan)


def _same(t, whole, doc):
    for a, b in ((t.events, whole.events), (t.memory, whole.memory), (t.flows, whole.flows)):
        pd.testing.assert_frame_equal(a, b, check_categorical=False)
    pd.testing.assert_frame_equal(t.names, whole.names)
    assert t.metadata == whole.metadata and t.warnings == whole.warnings
    n = len(doc["traceEvents"])
    for i in (0, 1, n // 3, n // 2, n - 2, n - 1):
        assert trace_event(t, i) == doc["traceEvents"][i]


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
    monkeypatch.setattr(stream, "BLOCK", 2048)
    monkeypatch.setattr(stream, "IO_BLOCK", 8192)
    merged = 0
    for share in (0.2, 0.37, 0.5, 0.61, 0.8):
        monkeypatch.setattr(stream, "MAIN_SHARE", share)
        try:
            t = _parallel(path, workers)
        except reader.NotStreamable:  # a boundary inside a string: read_trace reads serially
            continue
        assert len(_InlineSpan.started) == workers
        _same(t, whole, doc)
        merged += 1
    assert merged >= 3  # most boundaries fall between events


def test_boundary_inside_a_string_is_caught_and_read_trace_falls_back(tmp_path, monkeypatch):
    ev = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"op{i}",
            "pid": 1,
            "tid": 1,
            "ts": i,
            "dur": 1,
            "args": {"External id": i},
        }
        for i in range(400)
    ]
    ev[200]["args"]["text"] = '}, {"ph": "X", "name": "fake"}, {' * 400  # a long string of separators
    doc = {"traceEvents": ev}
    path, text = _write(tmp_path, doc, True)
    whole = parse_trace(text, str(path))
    start = text.index(b'"text"')
    monkeypatch.setattr(stream, "MAIN_SHARE", (start + 200) / len(text))  # inside that string
    monkeypatch.setattr(stream, "BLOCK", 4096)
    with pytest.raises(reader.NotStreamable):
        _parallel(path, 1)
    monkeypatch.setattr(stream, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(stream, "SpanProcess", _InlineSpan)
    _same(read_trace(path, processes=1), whole, doc)


def test_boundary_past_the_event_array(tmp_path, monkeypatch):
    ev = [{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(300)]
    doc = {"traceEvents": ev, "deviceProperties": [{"id": i, "name": "gpu"} for i in range(3000)]}
    path, text = _write(tmp_path, doc, True)
    whole = parse_trace(text, str(path))
    monkeypatch.setattr(stream, "MAIN_SHARE", 0.9)  # in the metadata after the events
    monkeypatch.setattr(stream, "BLOCK", 4096)
    with pytest.raises(reader.NotStreamable):
        _parallel(path, 1)
    monkeypatch.setattr(stream, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(stream, "SpanProcess", _InlineSpan)
    t = read_trace(path, processes=1)
    _same(t, whole, doc)
    assert len(t.device_properties) == 3000


def test_no_separator_after_a_boundary_leaves_that_range_empty(tmp_path, monkeypatch):
    ev = [{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(300)]
    doc = {"traceEvents": ev, "trailer": "x" * 200000}  # no "}, {" after the events
    path, text = _write(tmp_path, doc, False)
    whole = parse_trace(text, str(path))
    monkeypatch.setattr(stream, "MAIN_SHARE", 0.5)
    monkeypatch.setattr(stream, "BLOCK", 4096)
    _same(_parallel(path, 1), whole, doc)
    b = columns.Builder()
    assert stream._parse_span(str(path), b, len(text) // 2, None) == (0, [], None)


def test_a_worker_s_read_error_is_the_file_s_error(tmp_path):
    doc = _doc(3000)
    path, _ = _write(tmp_path, doc, True)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] + b"\0" * 64 + data[len(data) // 2 + 64 :])  # corrupt
    with pytest.raises(reader.TraceReadError, match="corrupt gzip"):
        _parallel(path, 1)


def test_worker_processes_give_the_serial_result(shared_traces, monkeypatch):
    path = sorted((shared_traces / "kineto_resnet50_v100").rglob("*.pt.trace.json.gz"))[0]
    monkeypatch.setattr(stream, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.delenv("GPUSCOPE_PARSE_PROCESSES", raising=False)
    used = []
    real = stream.parallel_parse

    def spy(*args):
        t = real(*args)
        used.append(t is not None)
        return t

    monkeypatch.setattr(stream, "parallel_parse", spy)
    par = read_trace(path, processes=2)
    assert used == [True]  # the parallel path ran and its result was used
    seq = read_trace(path)
    doc = json.loads(gzip.decompress(path.read_bytes()))
    _same(par, seq, doc)
    assert par.base_ns == seq.base_ns and par.labels == seq.labels


def test_a_worker_process_s_read_error_reaches_the_caller(tmp_path, monkeypatch):
    doc = _doc(3000)
    path, _ = _write(tmp_path, doc, True)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 3 // 4])  # truncated in the worker's range
    monkeypatch.setattr(stream, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(stream, "BLOCK", 2048)
    with pytest.raises(reader.TraceReadError, match="truncated gzip"):
        stream.parallel_parse(str(path), 1)  # a real worker process
    with pytest.raises(reader.TraceReadError, match="truncated gzip"):
        read_trace(path, processes=1)


class _BrokenSpan(_InlineSpan):
    def result(self):
        raise RuntimeError("parser process exited with -9: killed")


def test_a_failed_worker_process_means_a_serial_read_and_a_warning(tmp_path, monkeypatch, caplog):
    doc = _doc(3000)
    path, text = _write(tmp_path, doc, True)
    monkeypatch.setattr(stream, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(stream, "BLOCK", 2048)
    monkeypatch.setattr(stream, "SpanProcess", _BrokenSpan)
    with caplog.at_level("WARNING"):
        t = read_trace(path, processes=1)
    _same(t, parse_trace(text, str(path)), doc)
    assert "parallel parsing failed" in caplog.text and "killed" in caplog.text


def test_the_environment_turns_parallel_parsing_off(tmp_path, monkeypatch):
    path, _ = _write(tmp_path, _doc(300), True)
    monkeypatch.setattr(stream, "PARALLEL_MIN_BYTES", 0)
    calls = []
    monkeypatch.setattr(stream, "parallel_parse", lambda *a: calls.append(a))
    monkeypatch.setenv("GPUSCOPE_PARSE_PROCESSES", "0")
    read_trace(path, processes=2)
    assert calls == []
    monkeypatch.setenv("GPUSCOPE_PARSE_PROCESSES", "2")
    read_trace(path, processes=0)
    assert [a[1] for a in calls] == [2]


def test_span_worker_command_line(tmp_path):
    import pickle
    import subprocess
    import sys

    path, text = _write(tmp_path, _doc(300), False)
    out = subprocess.run(
        [sys.executable, "-m", "profiler_core.trace.read.span_worker", str(path), "0", "-"],
        capture_output=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    part = pickle.loads(out.stdout)
    assert part["meta"] == {"schemaVersion": 1, "after": {"x": "]"}} and part["n"] > 0
    bad = subprocess.run(
        [sys.executable, "-m", "profiler_core.trace.read.span_worker", str(tmp_path / "nope"), "0", "-"],
        capture_output=True,
        check=False,
    )
    assert bad.returncode == stream.SPAN_READ_ERROR and b"No such file" in bad.stderr
    usage = subprocess.run(
        [sys.executable, "-m", "profiler_core.trace.read.span_worker"], capture_output=True, check=False
    )
    assert usage.returncode == 2 and b"PATH LO HI" in usage.stderr
    size, *rest = stream.file_version(str(path))
    other = subprocess.run(
        [
            sys.executable,
            "-m",
            "profiler_core.trace.read.span_worker",
            str(path),
            "0",
            "-",
            ":".join(map(str, [size + 1, *rest])),
        ],
        capture_output=True,
        check=False,
    )
    assert other.returncode == stream.SPAN_NOT_STREAMABLE and other.stdout == b""


def test_a_file_replaced_before_a_worker_starts_is_read_serially(tmp_path, monkeypatch):
    doc = _doc(3000)
    path, text = _write(tmp_path, doc, True)
    monkeypatch.setattr(stream, "BLOCK", 2048)
    real = stream.file_version
    calls = []

    def changed_after_the_first_look(p):
        calls.append(p)
        size, *rest = real(p)
        return (size, *rest) if len(calls) == 1 else (size + 1, *rest)

    monkeypatch.setattr(stream, "file_version", changed_after_the_first_look)
    with pytest.raises(stream.NotStreamable):
        _parallel(path, 1)
    assert len(calls) == 2  # the main process, then the worker
    monkeypatch.setattr(stream, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(stream, "SpanProcess", _InlineSpan)
    _same(read_trace(path, processes=1), parse_trace(text, str(path)), doc)
