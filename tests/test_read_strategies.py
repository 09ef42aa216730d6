"""The read strategies (parse cache, parser processes, streaming, whole file) are chosen in one
place, `reader.choose_strategies`, and `read_trace` follows its order, falling through to the next."""

import json

import pytest

from profiler_core.trace.read import reader, stream
from profiler_core.trace.read.decode import NotStreamable
from profiler_core.trace.read.reader import CACHE, PROCESSES, STREAM, WHOLE_FILE, choose_strategies, read_trace

BIG = stream.PARALLEL_MIN_BYTES


@pytest.mark.parametrize(
    "size, workers, use_cache, expected",
    [
        (100, 0, False, (STREAM, WHOLE_FILE)),
        (100, 3, False, (STREAM, WHOLE_FILE)),  # small: not worth starting processes
        (BIG - 1, 3, True, (CACHE, STREAM, WHOLE_FILE)),
        (BIG, 0, False, (STREAM, WHOLE_FILE)),  # processes turned off
        (BIG, 1, False, (PROCESSES, STREAM, WHOLE_FILE)),
        (BIG, 3, True, (CACHE, PROCESSES, STREAM, WHOLE_FILE)),
    ],
)
def test_choose_strategies(size, workers, use_cache, expected):
    assert choose_strategies(size, workers, use_cache) == expected


def test_no_processes_without_a_python_to_start(monkeypatch):
    monkeypatch.setattr(reader.sys, "executable", "")
    assert choose_strategies(BIG, 3, False) == (STREAM, WHOLE_FILE)


def _trace(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(
        json.dumps(
            {
                "traceEvents": [
                    {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1}
                    for i in range(5)
                ]
            }
        )
    )
    return path


def _refuse(*args, **kwargs):
    raise AssertionError("parsed although the cache holds the trace")


def test_cache_first_then_a_parse_that_is_stored(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    path = _trace(tmp_path)
    stored = []
    t = read_trace(path, use_cache=True, store=lambda p, t: stored.append(p))
    assert stored == [str(path)]  # a fresh parse goes to `store`, not to the default writer
    assert len(t.events) == 5
    read_trace(path, use_cache=True)  # the default store writes the entry now
    monkeypatch.setattr(stream, "stream_parse", _refuse)
    monkeypatch.setattr(reader, "parse_trace", _refuse)
    monkeypatch.setattr(reader, "_native_parse", _refuse)
    stored.clear()
    t = read_trace(path, use_cache=True, store=lambda p, t: stored.append(p))
    assert t.events["name"].tolist() == [f"op{i}" for i in range(5)] and stored == []
    with pytest.raises(reader.TraceReadError, match="parsed although"):  # without the cache: a parse
        read_trace(path)


def test_a_file_streaming_cannot_cut_is_read_whole(tmp_path, monkeypatch):
    def not_streamable(*args, **kwargs):
        raise NotStreamable

    monkeypatch.setattr(stream, "stream_parse", not_streamable)
    t = read_trace(_trace(tmp_path), processes=0)
    assert t.events["name"].tolist() == [f"op{i}" for i in range(5)]
