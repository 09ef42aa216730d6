"""Span workers never import modules from the working directory (a downloaded logdir)."""

import json
import sys

import pandas as pd
import pytest

import profiler_core.trace.read.stream as stream
from profiler_core.trace.read.reader import read_trace


@pytest.mark.parametrize("safe_path_flag", [True, False], ids=["-P", "without -P (3.10)"])
def test_a_module_in_the_working_directory_is_never_run_by_a_worker(tmp_path, monkeypatch, safe_path_flag):
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"op{i % 7}",
            "pid": 1,
            "tid": 1,
            "ts": i * 10,
            "dur": 5,
            "args": {"External id": i},
        }
        for i in range(10000)
    ]
    path = tmp_path / "w.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}, indent=1))
    cwd = tmp_path / "downloaded"
    cwd.mkdir()
    marker = tmp_path / "pwned"
    for name in ("msgspec", "numpy", "profiler_core"):  # modules the worker imports
        (cwd / f"{name}.py").write_text(f"open({str(marker)!r}, 'a').write({name!r})\n")
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("GPUSCOPE_PARSE_PROCESSES", raising=False)
    # the Python reader's worker processes (the native one starts none)
    monkeypatch.setenv("GPUSCOPE_NATIVE_READER", "0")
    monkeypatch.setattr(stream, "PARALLEL_MIN_BYTES", 0)
    started = []
    real = stream.SpanProcess

    def spy(*args):
        started.append(args)
        return real(*args)

    monkeypatch.setattr(stream, "SpanProcess", spy)
    if not safe_path_flag:  # what Python 3.10 gets: no -P, only the worker's own directory
        monkeypatch.setattr(stream.sys, "version_info", (3, 10, 13))
    relative = "../w.pt.trace.json"  # a path relative to the working directory still works
    t = read_trace(relative, processes=2)
    assert started, "no worker process was started"
    assert not marker.exists(), f"a worker imported {marker.read_text()} from the working directory"
    whole = read_trace(path, processes=0)
    pd.testing.assert_frame_equal(t.events, whole.events, check_categorical=False)
    assert sys.modules["msgspec"].__file__ != str(cwd / "msgspec.py")
