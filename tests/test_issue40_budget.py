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
        r = stream._stream_parse(path)
    elif how == "processes":
        r = stream._parallel_parse(path, 1)
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
