"""Bounded memory and time on hostile inputs: gzip bombs, the size cap, fallback reads, cut costs."""

import gzip
import json
import os
import subprocess
import sys
import textwrap
import tracemalloc
import zlib

import pytest

from profiler_core.trace.read import decode, gunzip, reader, stream
from profiler_core.trace.read.reader import TraceReadError, read_bytes, read_trace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _events(n: int, name: str = "op") -> list:
    return [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"{name}{i % 7}",
            "pid": 1,
            "tid": 1,
            "ts": 10 * i,
            "dur": 5,
            "args": {"External id": i},
        }
        for i in range(n)
    ]


def _gzip_stream(parts, level: int = 6) -> bytes:
    """gzip of the concatenated byte strings yielded by `parts`, made without holding them all."""
    c = zlib.compressobj(level, zlib.DEFLATED, 31)
    return b"".join([c.compress(p) for p in parts] + [c.flush()])


def test_the_cap_follows_the_memory_budget(monkeypatch):
    monkeypatch.delenv("GPUSCOPE_MAX_TRACE_BYTES", raising=False)
    monkeypatch.setenv("GPUSCOPE_MAX_LOADED_BYTES", str(3 << 20))
    assert decode.max_trace_bytes() == decode.JSON_PER_LOADED_BYTE * (3 << 20)
    monkeypatch.delenv("GPUSCOPE_MAX_LOADED_BYTES")
    assert decode.max_trace_bytes() == decode.JSON_PER_LOADED_BYTE * (4 << 30)  # not 16 GiB
    monkeypatch.setenv("GPUSCOPE_MAX_TRACE_BYTES", "12345")  # the explicit setting wins
    assert decode.max_trace_bytes() == 12345


def test_a_bomb_is_refused_from_its_trailer_before_inflating(tmp_path, monkeypatch):
    """64 MiB of spaces in 64 KB of gzip, over the JSON cap of a 4 MiB budget: refused, nothing inflated."""
    monkeypatch.delenv("GPUSCOPE_MAX_TRACE_BYTES", raising=False)
    monkeypatch.setenv("GPUSCOPE_MAX_LOADED_BYTES", str(4 << 20))
    path = tmp_path / "bomb.pt.trace.json.gz"
    path.write_bytes(_gzip_stream([b" " * (1 << 20)] * 64 + [b'{"traceEvents": []}'], 9))
    assert path.stat().st_size < 1 << 20

    def no_inflate(*a, **k):
        raise AssertionError("inflated a file its trailer already rules out")

    monkeypatch.setattr(stream, "gunzip_blocks", no_inflate)
    monkeypatch.setattr(reader, "gunzip_blocks", no_inflate)
    for read in (lambda: read_trace(path, processes=0), lambda: read_bytes(path)):
        with pytest.raises(TraceReadError, match="GPUSCOPE_MAX_LOADED_BYTES") as e:
            read()
        assert f"larger than {decode.JSON_PER_LOADED_BYTE * (4 << 20)} bytes" in str(e.value)


def test_a_bomb_whose_trailer_wraps_is_stopped_at_the_cap(tmp_path, monkeypatch):
    """A second member with a small ISIZE hides the first one's size: counted while inflating."""
    monkeypatch.delenv("GPUSCOPE_MAX_TRACE_BYTES", raising=False)
    monkeypatch.setenv("GPUSCOPE_MAX_LOADED_BYTES", str(2 << 20))
    path = tmp_path / "multi.pt.trace.json.gz"
    path.write_bytes(_gzip_stream([b" " * (1 << 20)] * 16, 9) + gzip.compress(b"{}"))
    for read in (lambda: read_trace(path, processes=0), lambda: read_bytes(path)):
        cap = decode.JSON_PER_LOADED_BYTE * (2 << 20)  # (16 MiB of spaces: over it)
        with pytest.raises(TraceReadError, match=f"larger than {cap} bytes.*GPUSCOPE_MAX_LOADED"):
            read()


@pytest.mark.parametrize("native_reader", ["0", "1"])
def test_leading_whitespace_is_not_kept(tmp_path, monkeypatch, native_reader):
    """32 MiB of whitespace before a valid trace: read, holding at most a few blocks of it (by the streaming
    reader, and by the native one where it is built: it scans the inflated file in pieces)."""
    monkeypatch.delenv("GPUSCOPE_MAX_TRACE_BYTES", raising=False)
    monkeypatch.delenv("GPUSCOPE_MAX_LOADED_BYTES", raising=False)
    monkeypatch.setenv("GPUSCOPE_NATIVE_READER", native_reader)
    doc = json.dumps({"traceEvents": _events(50)}).encode()
    path = tmp_path / "ws.pt.trace.json.gz"
    path.write_bytes(_gzip_stream([b" \n\t" * (1 << 20)] * 11 + [doc], 9))
    small = tmp_path / "small.pt.trace.json"
    small.write_bytes(doc)
    read_trace(small, processes=0)  # imports (pandas ...) done before counting
    tracemalloc.start()
    try:
        t = read_trace(path, processes=0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(t.events) == 50
    assert peak < 4 * gunzip.MAX_BLOCK_OUT + (4 << 20), peak  # not the 33 MB of whitespace


def test_read_bytes_reads_incrementally_under_an_address_space_limit(tmp_path):
    """Under `ulimit -v` a fallback read of a small file works (it allocated the 16 GiB cap)."""
    plain = tmp_path / "t.json"
    plain.write_bytes(json.dumps({"traceEvents": _events(10)}).encode())
    code = textwrap.dedent(f"""
        import resource, sys
        sys.path.insert(0, {ROOT!r})
        from profiler_core.trace.read.reader import read_bytes, parse_trace
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
        data = read_bytes({str(plain)!r})
        print(len(parse_trace(data).events))
    """)
    env = dict(os.environ, GPUSCOPE_MAX_TRACE_BYTES=str(16 << 30), OPENBLAS_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["10"]


class _Counting:
    """A decoder that adds the bytes it is given to a shared tally."""

    def __init__(self, inner, tally: list) -> None:
        self.inner, self.tally = inner, tally

    def decode(self, data):
        self.tally[0] += len(data)
        return self.inner.decode(data)


def _count_work(monkeypatch) -> list:
    """Bytes handed to every JSON decoder and to repair_json from now on (one tally)."""
    tally = [0]
    names = ("_CHUNK_DECODER", "RAW_LIST_DECODER", "_EVENT_DECODER", "_LOOSE_DECODER", "TOP_DECODER", "ANY_DECODER")
    for name in names:
        wrapped = _Counting(getattr(decode, name), tally)
        for mod in (decode, stream, reader):
            if hasattr(mod, name):
                monkeypatch.setattr(mod, name, wrapped)
    repair = decode.repair_json

    def counted_repair(data):
        tally[0] += len(data)
        return repair(data)

    for mod in (decode, reader):
        monkeypatch.setattr(mod, "repair_json", counted_repair)
    return tally


def _adversarial(kind: str, n: int = 20000) -> bytes:
    name = {"clean": "op", "separator names": "a}, {b", "many separators": "}, {" * 40}.get(kind, "op")
    evs = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"{name}{i % 50}",
            "pid": 1,
            "tid": 1,
            "ts": 10 * i,
            "dur": 5,
            "args": {"External id": i, "Input Dims": [[8, 8]]},
        }
        for i in range(n)
    ]
    data = json.dumps({"traceEvents": evs}).encode()
    if kind == "one bad byte":
        k = data.index(b'"ph"', len(data) // 3)
        data = data[:k] + b"x" + data[k + 1 :]
    return data


@pytest.mark.parametrize("kind", ["clean", "separator names", "many separators", "one bad byte"])
def test_any_input_costs_a_few_decodes_of_its_size(tmp_path, monkeypatch, kind):
    """Work (bytes decoded or repaired) stays a small multiple of the file: a bad byte cost 76x,
    names full of `}, {` 33x (retries over doubling windows, repairs after each failed cut)."""
    data = _adversarial(kind)
    path = tmp_path / "t.pt.trace.json"
    path.write_bytes(data)
    tally = _count_work(monkeypatch)
    if kind == "one bad byte":
        with pytest.raises(TraceReadError, match="invalid or truncated JSON"):
            read_trace(path, processes=0)
    else:
        assert len(read_trace(path, processes=0).events) == 20000
    assert tally[0] <= 6 * len(data), tally[0] / len(data)
