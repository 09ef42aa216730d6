"""Issue 40 items 1 and 2: no input hangs the Python reader (every scan linear; a fuzz loop of long escaped
strings and backslash runs, windows cut inside them, each read in a child process that must end), and a
document has one reading in every reader and strategy: the top-level `traceEvents` (the last one when it is
repeated, as json.loads, Perfetto and chrome://tracing read it), never one nested in another value."""

from __future__ import annotations

import gzip
import json
import logging
import os
import random
import subprocess
import sys
import time

import pytest

import profiler_core
from profiler_core import settings
from profiler_core.trace.read import decode, native, reader, stream
from profiler_core.trace.read.reader import TraceReadError, parse_trace, parse_trace_native, read_trace

from .test_reader_parallel import _InlineSpan

#: seconds a child process may take for one input: a hang detector (the reads take milliseconds to a second)
HANG_SECONDS = 30


def _events(n: int, name: str = "op") -> list:
    return [
        {"ph": "X", "cat": "cpu_op", "name": f"{name}{i}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5} for i in range(n)
    ]


def _names(t) -> list:
    return sorted(t.events["name"].astype(str).tolist())


# ---------------------------------------------------------------- item 1: linear scans, no hang
def test_a_window_cut_inside_a_string_ends_the_exact_scan():
    """The scan window ends inside a string holding escaped quotes and `}, {`: the quotes inside it are not
    taken for strings (which found a comma between elements there, and made the scan quadratic)."""
    buf = b'{"name": "a"}, {"name": "ab\\"}, {\\"c\\"}, {\\"d'
    bounds, rest = decode.element_bounds(buf, 0, len(buf))
    assert bounds == [(0, buf.index(b"}, {") + 1)]
    assert rest == buf.index(b"}, {") + 2  # after the first comma, not inside the string


def _hostile(rng: random.Random, big: bool) -> tuple[bytes, dict]:
    """A trace with one long hostile string and stream sizes that cut windows inside it."""
    evs = _events(rng.randrange(50, 400) if not big else 2000)
    n = 600_000 if big else rng.randrange(1000, 60_000)
    text = '"' * n if big else rng.choice(['"', "\\", '\\"', "}, {", '"}, {"', "\\\\}, {"]) * (n // 4)
    at = len(evs) - 1 if big else rng.randrange(len(evs))
    evs[at]["name" if big or rng.random() < 0.7 else "cat"] = text
    if big or rng.random() < 0.5:  # shapes the native reader declines: the Python reader reads the file
        evs[1]["ts"] = "20"
    doc = {"traceEvents": evs, "k": rng.choice(["\\" * 3000, '"' * 3000, "x"])}
    sizes = {} if big else {"BLOCK": rng.choice([64, 512, 4096]), "MAX_EVENT_SCAN": rng.choice([64, 1024, 8192])}
    if not big:
        sizes["IO_BLOCK"] = rng.choice([256, 4096, 65536])
    return json.dumps(doc).encode(), sizes


_CHILD = """
import json, sys
from profiler_core.trace.read import stream
from profiler_core.trace.read.reader import TraceReadError, read_trace
for k, v in json.loads(sys.argv[2]).items():
    setattr(stream, k, v)
try:
    t = read_trace(sys.argv[1], processes=0)
except TraceReadError as e:
    print(json.dumps({"error": str(e)}))
else:
    print(json.dumps({"names": sorted(t.events["name"].astype(str).tolist())}))
"""


def _read_in_child(path: str, sizes: dict, native_reader: bool) -> dict:
    root = os.path.dirname(os.path.dirname(os.path.abspath(profiler_core.__file__)))
    env = dict(os.environ, PYTHONPATH=root, GPUSCOPE_NATIVE_READER="1" if native_reader else "0")
    try:
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, path, json.dumps(sizes)],
            env=env,
            capture_output=True,
            text=True,
            timeout=HANG_SECONDS,
            cwd=root,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the read of {path} ({sizes}) did not end in {HANG_SECONDS} s")
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def test_no_input_hangs_the_reader(tmp_path):
    """The issue's file (14 KB of gzip that took hours), then random long escaped strings and backslash
    runs with windows cut inside them, for GPUSCOPE_READER_FUZZ_SECONDS: each read in a child process must
    end, with json.loads's events or a clean TraceReadError."""
    seconds = settings.get("GPUSCOPE_READER_FUZZ_SECONDS")
    rng = random.Random(40)
    end = time.monotonic() + seconds
    runs = 0
    while runs < 3 or time.monotonic() < end:
        data, sizes = _hostile(rng, big=runs == 0)
        path = tmp_path / f"h{runs}.pt.trace.json.gz"
        path.write_bytes(gzip.compress(data))
        got = _read_in_child(str(path), sizes, native_reader=runs % 2 == 1)
        want = sorted(e["name"] for e in json.loads(data)["traceEvents"] if isinstance(e["name"], str))
        if "error" in got:
            assert got["error"].startswith(str(path)), got
        else:
            assert got["names"] == want, sizes
        runs += 1


# ---------------------------------------------------------------- item 2: one document, one reading
REAL = _events(300, "real")
FAKE = _events(5, "fake")


def _docs() -> dict:
    real, fake = json.dumps(REAL), json.dumps(FAKE)
    return {
        "nested": f'{{"meta": {{"traceEvents": {fake}}}, "traceEvents": {real}, "x": 1}}',
        "nested_in_a_list": f'{{"m": [{{"traceEvents": {fake}}}], "traceEvents": {real}}}',
        "repeated": f'{{"traceEvents": {fake}, "schemaVersion": 1, "traceEvents": {real}}}',
        "escaped_key": f'{{"meta": {{"traceEvents": {fake}}}, "trace\\u0045vents": {real}}}',
    }


DOCS = _docs()


def _want(text: str) -> list:
    return sorted(e["name"] for e in json.loads(text)["traceEvents"])


@pytest.fixture(params=sorted(DOCS))
def doc(request, tmp_path):
    text = DOCS[request.param]
    path = tmp_path / "t.pt.trace.json.gz"
    path.write_bytes(gzip.compress(text.encode()))
    assert _want(text)[0].startswith("real")
    return str(path), text, request.param


def test_the_python_reader_streaming_reads_the_top_level_events(doc, monkeypatch):
    monkeypatch.setenv("GPUSCOPE_NATIVE_READER", "0")
    path, text, _ = doc
    assert _names(read_trace(path, processes=0)) == _want(text)


def test_the_streaming_strategy_alone_never_takes_nested_events(doc):
    path, text, _ = doc
    try:
        t = stream.stream_parse(path)
    except decode.NotStreamable:  # (a repeated key: the whole-file path reads the last)
        return
    assert _names(t) == _want(text)


def test_the_whole_file_strategy_reads_the_top_level_events(doc):
    path, text, _ = doc
    assert _names(parse_trace(text.encode(), path)) == _want(text)


def test_parser_processes_read_the_top_level_events(doc, monkeypatch):
    monkeypatch.setenv("GPUSCOPE_NATIVE_READER", "0")
    monkeypatch.setattr(stream, "BLOCK", 512)
    monkeypatch.setattr(stream, "IO_BLOCK", 2048)
    monkeypatch.setattr(stream, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(stream, "SpanProcess", _InlineSpan)
    path, text, _ = doc
    _InlineSpan.started = []
    assert _names(read_trace(path, processes=2)) == _want(text)
    assert _InlineSpan.started  # the ranges were tried


@pytest.mark.skipif(not native.available(), reason="the native reader is not built")
def test_the_native_reader_reads_the_top_level_events(doc, monkeypatch, caplog):
    monkeypatch.setenv("GPUSCOPE_NATIVE_READER", "1")
    path, text, name = doc
    caplog.set_level(logging.INFO, logger=reader.__name__)
    assert _names(read_trace(path, processes=0)) == _want(text)
    t = native.read_file(path)
    assert t is None or _names(t) == _want(text)
    if name != "repeated":  # (declined: the Python reader reads the last traceEvents)
        assert f"{path} read by the native reader" in caplog.text
    in_memory = parse_trace_native(text.encode(), path)
    assert in_memory is None or _names(in_memory) == _want(text)


def test_leading_whitespace_of_any_length_is_read_by_both_readers(tmp_path, monkeypatch):
    text = b" \n\t\r" * 40 + json.dumps({"traceEvents": REAL}).encode()
    want = sorted(e["name"] for e in REAL)
    assert _names(parse_trace(text)) == want
    assert _names(parse_trace(text.decode())) == want
    path = tmp_path / "ws.json"
    path.write_bytes(text)
    for on in ("0", "1"):
        monkeypatch.setenv("GPUSCOPE_NATIVE_READER", on)
        assert _names(read_trace(path, processes=0)) == want
    with pytest.raises(TraceReadError, match="empty file"):
        parse_trace(b" " * 100)


# ---------------------------------------------------------------- escaped keys in the native reader
@pytest.mark.skipif(not native.available(), reason="the native reader is not built")
@pytest.mark.parametrize(
    "args",
    [
        '{"\\u0049nput Dims": [[2, 3]], "External id": 7}',
        '{"Input \\"Dims\\"": [[1]], "Input Dims": [[4]]}',
        '{"Exte\\u0072nal id": 9, "gr\\u0069d": [1, 2, 3], "a\\\\b": 1, "\\u00e9": 2}',
    ],
)
def test_the_native_reader_reads_escaped_keys(args):
    ev = '{"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": 7, "ts": 5, "dur": 2, "args": ' + args + "}"
    data = ('{"traceEvents": [' + ev + ', {"\\u0070h": "X", "name": "b", "pid": 1, "tid": 1, "ts": 9}]}').encode()
    ref = parse_trace(data)
    nat = parse_trace_native(data)
    assert nat is not None, "declined"
    from .test_native_reader import _same

    _same(nat, ref)
