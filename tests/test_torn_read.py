"""Issue 26, item 19: a trace rewritten in place while it is parsed is never returned torn."""

import json
import os

import pytest

from profiler_core.trace.read import reader, stream
from profiler_core.trace.read.reader import TraceReadError, read_trace


def _doc(n: int, name: str) -> bytes:
    ev = [{"ph": "X", "name": name, "ts": i * 10, "dur": 5, "pid": 1, "tid": 1} for i in range(n)]
    return json.dumps({"schemaVersion": 1, "traceEvents": ev}).encode()


def _rewrite_in_place(path, data: bytes) -> None:
    with open(path, "r+b") as f:  # same inode: what a writer without rename does
        f.write(data)
        f.truncate()


def test_a_rewrite_during_the_parse_is_read_again(tmp_path, monkeypatch):
    path = tmp_path / "w.pt.trace.json"
    path.write_bytes(_doc(5, "old"))
    monkeypatch.setenv("GPUSCOPE_NATIVE_READER", "0")  # the rewrite is made from the streaming reader's parse
    real = stream.stream_parse
    calls: list = []

    def parse_then_rewrite(p, *a, **k):
        t = real(p, *a, **k)
        if not calls:  # the first parse read the old content; the file is rewritten meanwhile
            _rewrite_in_place(p, _doc(7, "new"))
        calls.append(1)
        return t

    monkeypatch.setattr(stream, "stream_parse", parse_then_rewrite)
    t = read_trace(path, processes=0)
    assert len(calls) == 2
    assert len(t.events) == 7 and set(t.events["name"].astype(str)) == {"new"}
    assert t.source_stat == reader.storage.fingerprint(str(path))


def test_a_file_rewritten_at_every_read_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "w.pt.trace.json"
    path.write_bytes(_doc(5, "a"))
    monkeypatch.setenv("GPUSCOPE_NATIVE_READER", "0")  # the rewrite is made from the streaming reader's parse
    real = stream.stream_parse
    n = [0]

    def parse_then_rewrite(p, *a, **k):
        t = real(p, *a, **k)
        n[0] += 1
        _rewrite_in_place(p, _doc(5 + n[0], "b"))
        return t

    monkeypatch.setattr(stream, "stream_parse", parse_then_rewrite)
    with pytest.raises(TraceReadError, match="changed while it was read"):
        read_trace(path, processes=0)
    assert n[0] == reader.READ_ATTEMPTS


def test_a_half_written_file_that_is_then_completed_is_read_whole(tmp_path, monkeypatch):
    path = tmp_path / "w.pt.trace.json"
    whole = _doc(6, "x")
    path.write_bytes(whole[: len(whole) // 2])
    real = stream.stream_parse

    def fail_then_complete(p, *a, **k):
        if os.path.getsize(p) != len(whole):  # the half-written file fails, and is completed meanwhile
            _rewrite_in_place(p, whole)
            raise TraceReadError(f"{p}: invalid or truncated JSON")
        return real(p, *a, **k)

    monkeypatch.setattr(stream, "stream_parse", fail_then_complete)
    t = read_trace(path, processes=0)
    assert len(t.events) == 6


def test_a_bad_file_that_does_not_change_fails_once(tmp_path, monkeypatch):
    path = tmp_path / "w.pt.trace.json"
    path.write_bytes(b'{"traceEvents": [{"ph": "X", "na')
    calls: list = []
    real = stream.stream_parse
    monkeypatch.setattr(stream, "stream_parse", lambda p, *a, **k: (calls.append(1), real(p, *a, **k))[1])
    with pytest.raises(TraceReadError):
        read_trace(path, processes=0)
    assert len(calls) == 1


def test_a_fifo_or_device_at_a_trace_path_is_refused_without_waiting(tmp_path):
    import threading

    fifo = tmp_path / "f.pt.trace.json"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/zero"):
        out: list = []

        def read(p=path, out=out):
            try:
                read_trace(p, processes=0)
            except TraceReadError as e:
                out.append(str(e))

        th = threading.Thread(target=read, daemon=True)
        th.start()
        th.join(60)
        assert out and "not a regular file" in out[0], (path, out)
