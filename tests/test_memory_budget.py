"""Issue 26, item 16: the memory budget GPUSCOPE_MAX_LOADED_BYTES bounds the reading process's peak,
also for gzip bombs of tiny events (whose JSON is within the budget but whose columns are not)."""

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from profiler_core.trace.read.reader import TraceReadError, read_trace

ROOT = Path(__file__).resolve().parent.parent
BUDGET = 64 << 20

MEASURE = r"""
import json, resource, sys
import pandas  # imported before the baseline: the views need it anyway
from profiler_core.trace.read.reader import read_trace
from tb_plugin.loader import Loader
from tb_plugin.runs import Scanner
if sys.argv[3] == "whole":  # as for a file the streaming reader cannot cut
    from profiler_core.trace.read import stream
    def not_streamable(*a, **k):
        raise stream.NotStreamable
    stream.stream_parse = not_streamable
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
out = {}
try:
    out["events"] = len(read_trace(sys.argv[1], processes=0).events)
except Exception as e:
    out["error"] = str(e)
f = [f for r in Scanner(sys.argv[2], stable_age_s=0).scan().values() for f in r.files()][0]
loader = Loader(processes=0)
try:
    loader.get(f)
except Exception as e:
    out["loader_error"] = str(e)
loader.flush()
out["growth"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
print(json.dumps(out))
"""


def _bomb(path: Path, events: int) -> Path:
    """A gzip file of `events` tiny complete events: 53 bytes of JSON each, 300:1 compressed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    block = b'{"ph":"X","ts":1,"dur":1,"pid":1,"tid":1,"name":"a"},' * 10_000
    with gzip.open(path, "wb", compresslevel=6) as f:
        f.write(b'{"schemaVersion": 1, "traceEvents": [')
        for _ in range(events // 10_000):
            f.write(block)
        f.write(b'{"ph":"X","ts":1,"dur":1,"pid":1,"tid":1,"name":"a"}]}')
    return path


def _measure(tmp_path: Path, trace: Path, path: str = "stream") -> dict:
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        GPUSCOPE_MAX_LOADED_BYTES=str(BUDGET),
        GPUSCOPE_CACHE_DIR=str(tmp_path / "cache"),
        GPUSCOPE_PARSE_PROCESSES="0",
    )
    env.pop("GPUSCOPE_MAX_TRACE_BYTES", None)
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, str(trace), str(trace.parent.parent), path],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("path", ["stream", "whole"])
def test_a_gzip_bomb_of_tiny_events_stays_within_the_budget(tmp_path, path):
    trace = _bomb(tmp_path / "logs" / "run" / "w.pt.trace.json.gz", 1_200_000)  # 63.6 MB of JSON
    assert trace.stat().st_size < 1 << 20
    got = _measure(tmp_path, trace, path)
    assert got["growth"] <= BUDGET, f"peak grew by {got['growth'] >> 20} MiB over a {BUDGET >> 20} MiB budget"
    assert "GPUSCOPE_MAX_LOADED_BYTES" in got["error"]
    assert "GPUSCOPE_MAX_LOADED_BYTES" in got["loader_error"]


def test_a_trace_within_the_budget_is_read(tmp_path):
    trace = _bomb(tmp_path / "logs" / "run" / "w.pt.trace.json.gz", 100_000)
    got = _measure(tmp_path, trace)
    assert got["events"] == 100_001 and "loader_error" not in got
    assert got["growth"] <= BUDGET


def test_the_event_limit_follows_the_budget(tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    path.write_text(
        json.dumps(
            {"traceEvents": [{"ph": "X", "ts": i, "dur": 1, "pid": 1, "tid": 1, "name": "a"} for i in range(30)]}
        )
    )
    from profiler_core.trace.read.budget import EVENT_PEAK_BYTES

    monkeypatch.setenv("GPUSCOPE_MAX_LOADED_BYTES", str(20 * EVENT_PEAK_BYTES))
    with pytest.raises(TraceReadError, match="more than 20 events"):
        read_trace(path, processes=0)
    monkeypatch.setenv("GPUSCOPE_MAX_LOADED_BYTES", str(40 * EVENT_PEAK_BYTES))
    assert len(read_trace(path, processes=0).events) == 30


def test_kept_traces_make_room_before_the_next_one_is_read(tmp_path, monkeypatch):
    """The loader's kept traces and the one being read share the budget: the oldest go first."""
    from tb_plugin import loader as loader_mod
    from tb_plugin.loader import Loader, trace_nbytes
    from tb_plugin.runs import Scanner

    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    ev = [{"ph": "X", "name": "a", "ts": i, "dur": 1, "pid": 1, "tid": 1} for i in range(2000)]
    for name in ("a", "b"):
        p = tmp_path / "logs" / "run" / f"{name}.pt.trace.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
        os.utime(p, (1, 1))
    files = sorted(
        (f for r in Scanner(str(tmp_path / "logs")).scan().values() for f in r.files()), key=lambda f: f.worker
    )
    size = files[1].size
    kept_during_read: list = []
    real = loader_mod.read_trace

    def spy(path, *a, **k):
        kept_during_read.append(list(loader.loaded_keys()))
        return real(path, *a, **k)

    monkeypatch.setattr(loader_mod, "read_trace", spy)
    first = read_trace(files[0].path)
    loader = Loader(processes=0, max_bytes=trace_nbytes(first) + size // 2, use_cache=False)
    loader.get(files[0])
    assert loader.loaded_keys() == [files[0].key]
    loader.get(files[1])
    assert kept_during_read == [[], []]  # "a" was let go before "b" was read
    assert loader.loaded_keys() == [files[1].key]
    loader.close()
