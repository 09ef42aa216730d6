"""Issue 40, item 5: memory and the budget.

A file whose bytes after the header cannot be JSON (a sparse file of `{"traceEvents": [` and NULs) is refused at
the first such byte by every strategy, holding little memory; the budget is the measured cost of what a read keeps
(per event, per arg) against GPUSCOPE_MAX_LOADED_BYTES, decided before the body is read."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from profiler_core.trace.read import native

ROOT = Path(__file__).resolve().parent.parent

MEASURE = r"""
import json, resource, sys
import pandas  # imported before the baseline: the views need it anyway
from profiler_core.trace.read import native, reader, stream
path, how = sys.argv[1], sys.argv[2]
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
out = {}
try:
    if how == "native":
        r = native.read_file(path)
    elif how == "stream":
        r = stream.stream_parse(path)
    elif how == "processes":
        r = stream.parallel_parse(path, 1)
    elif how == "whole":
        r = reader._parse_by(reader.WHOLE_FILE, path, 0)
    else:
        r = reader.read_trace(path)
    out["result"] = repr(type(r))
except Exception as e:
    out["error"] = f"{type(e).__name__}: {e}"
out["growth"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
print(json.dumps(out))
"""


def _measure(tmp_path: Path, path: Path, how: str, **env_extra: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), GPUSCOPE_CACHE_DIR=str(tmp_path / "cache"), **env_extra)
    for key in ("GPUSCOPE_MAX_TRACE_BYTES", "GPUSCOPE_MAX_LOADED_BYTES", "GPUSCOPE_PARSE_PROCESSES"):
        if key not in env_extra:
            env.pop(key, None)
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, str(path), how], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _sparse(path: Path, size: int) -> Path:
    """`{"traceEvents": [` then NULs up to `size` bytes: a sparse file, nothing of it on disk."""
    with open(path, "wb") as f:
        f.write(b'{"traceEvents": [')
        f.truncate(size)
    return path


STRATEGIES = ["read_trace", "stream", "processes", "whole"] + (["native"] if native.available() else [])


@pytest.mark.parametrize("how", STRATEGIES)
def test_a_file_of_nuls_is_refused_at_the_first_one_with_little_memory(tmp_path, how):
    path = _sparse(tmp_path / "w.pt.trace.json", 384 << 20)
    got = _measure(tmp_path, path, how)
    assert "result" not in got, got
    assert got["error"].startswith("TraceReadError") and "NUL byte at offset 17" in got["error"], got
    assert got["growth"] < 300 << 20, f"peak grew by {got['growth'] >> 20} MiB"


def test_a_nul_in_memory_is_refused_too():
    from profiler_core.trace.read.reader import TraceReadError, parse_trace

    good = json.dumps({"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1}]})
    assert len(parse_trace(good.encode()).events) == 1
    with pytest.raises(TraceReadError, match="NUL byte at offset 20"):
        parse_trace(good[:20].encode() + b"\0" + good[21:].encode())


def _events(n: int, pad: int = 0) -> list:
    """`n` complete events; `pad` bytes of an arg the reader does not keep on each (JSON it does not hold)."""
    extra = {"args": {"unkept note": "x" * pad}} if pad else {}
    return [{"ph": "X", "name": "a", "ts": i, "dur": 1, "pid": 1, "tid": 1, **extra} for i in range(n)]


def test_a_trace_whose_json_is_over_the_budget_but_whose_columns_fit_is_read(tmp_path, monkeypatch):
    """The budget counts what a read keeps, not JSON bytes: 12 MB of JSON, 6000 events, an 8 MiB budget."""
    monkeypatch.delenv("GPUSCOPE_MAX_TRACE_BYTES", raising=False)
    monkeypatch.setenv("GPUSCOPE_MAX_LOADED_BYTES", str(8 << 20))
    path = tmp_path / "fat.pt.trace.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": _events(6000, 2000)}))
    assert path.stat().st_size > 8 << 20
    for native_reader in ("0", "1"):
        monkeypatch.setenv("GPUSCOPE_NATIVE_READER", native_reader)
        from profiler_core.trace.read.reader import read_trace

        assert len(read_trace(path, processes=0).events) == 6000


def test_a_trace_over_the_budget_is_refused_before_its_body_is_read(tmp_path, monkeypatch):
    """100k events (5 MB of JSON) cost about 22 MB to read: over an 8 MiB budget, refused from the estimate."""
    from profiler_core.trace.read import reader, stream
    from profiler_core.trace.read.reader import TraceReadError, read_trace

    monkeypatch.delenv("GPUSCOPE_MAX_TRACE_BYTES", raising=False)
    monkeypatch.setenv("GPUSCOPE_MAX_LOADED_BYTES", str(8 << 20))
    path = tmp_path / "many.pt.trace.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": _events(100_000)}))
    assert path.stat().st_size < 8 << 20

    def no_body(*a, **k):
        raise AssertionError("read the body of a trace the estimate rules out")

    monkeypatch.setattr(reader, "_read_once", no_body)
    monkeypatch.setattr(stream, "read_blocks", no_body)
    with pytest.raises(TraceReadError, match=r"about \d+ events .* more than the memory budget.*MAX_LOADED_BYTES"):
        read_trace(path, processes=0)


def test_the_default_budget_is_bounded_by_the_machine_s_memory(monkeypatch):
    from profiler_core.trace.read import budget, decode

    monkeypatch.delenv("GPUSCOPE_MAX_LOADED_BYTES", raising=False)
    monkeypatch.setattr(budget, "machine_memory", lambda: 2 << 30)
    assert budget.memory_budget() == 1 << 30
    assert decode.max_trace_events() == (1 << 30) // budget.EVENT_PEAK_BYTES
    monkeypatch.setattr(budget, "machine_memory", lambda: 64 << 30)
    assert budget.memory_budget() == 4 << 30
    monkeypatch.setenv("GPUSCOPE_MAX_LOADED_BYTES", str(123 << 20))  # the setting wins
    assert budget.memory_budget() == 123 << 20


def test_the_estimate_counts_events_and_sparse_args(tmp_path):
    from profiler_core.trace.read import budget

    kernel = {
        "ph": "X",
        "cat": "kernel",
        "name": "k",
        "ts": 1,
        "dur": 1,
        "pid": 0,
        "tid": 7,
        "args": {"grid": [1, 1, 1]},
    }
    path = tmp_path / "k.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": [e for pair in zip(_events(20_000), [kernel] * 20_000) for e in pair]}))
    plain = tmp_path / "p.pt.trace.json"
    plain.write_text(json.dumps({"traceEvents": _events(40_000)}))
    (n_plain, cost_plain), (n_k, cost_k) = budget.estimate(str(plain)), budget.estimate(str(path))
    assert 30_000 < n_plain < 50_000 and abs(cost_plain - budget.cost(n_plain)) < budget.EVENT_PEAK_BYTES
    assert 30_000 < n_k < 50_000 and cost_k > budget.cost(n_k) + 0.4 * n_k * budget.SPARSE_ROW_PEAK_BYTES
