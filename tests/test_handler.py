"""tensorboard_trace_handler: torch's file names, directory creation, errors as warnings."""

import gzip
import json
import os
import re
import socket

import pytest

from profiler_core import ProfilerActivity, handlers, profile, record_function, schedule, tensorboard_trace_handler

CPU = [ProfilerActivity.CPU]


def _run(handler, cycles=1):
    with profile(
        activities=CPU, schedule=schedule(wait=0, warmup=1, active=1, repeat=cycles), on_trace_ready=handler
    ) as p:
        for _ in range(2 * cycles):
            with record_function("w"):
                pass
            p.step()


def test_names_and_nested_directory_creation(tmp_path):
    logdir = tmp_path / "a" / "b"
    _run(tensorboard_trace_handler(str(logdir), worker_name="worker0"))
    (name,) = os.listdir(logdir)
    assert re.fullmatch(r"worker0\.\d{19}\.pt\.trace\.json", name)
    d = json.loads((logdir / name).read_text())
    assert d["traceName"] == str(logdir / name)


@pytest.mark.filterwarnings("ignore:Profiler clears events")
def test_gzip_and_one_file_per_cycle(tmp_path):
    _run(tensorboard_trace_handler(tmp_path, worker_name="w", use_gzip=True), cycles=2)
    names = sorted(os.listdir(tmp_path))
    assert len(names) == 2 and all(n.endswith(".pt.trace.json.gz") for n in names)
    for n in names:
        with gzip.open(tmp_path / n, "rt") as f:
            assert any(e.get("name") == "w" for e in json.load(f)["traceEvents"])


def test_default_worker_name(monkeypatch, tmp_path):
    from profiler_core import distinfo

    monkeypatch.setattr(distinfo, "default_worker_name", lambda: "")  # no name from the setup
    assert handlers.default_worker_name() == f"{socket.gethostname()}_{os.getpid()}"

    _run(tensorboard_trace_handler(tmp_path))
    (name,) = os.listdir(tmp_path)
    assert name.startswith(f"{socket.gethostname()}_{os.getpid()}.")

    def broken():
        raise RuntimeError("odd MPI")

    monkeypatch.setattr(distinfo, "default_worker_name", broken)  # said, not silent
    with pytest.warns(RuntimeWarning, match="odd MPI"):
        assert handlers.default_worker_name() == f"{socket.gethostname()}_{os.getpid()}"


def test_uncreatable_directory_becomes_a_warning(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.warns(RuntimeWarning, match="Can't create directory"):
        _run(tensorboard_trace_handler(str(blocker / "sub")))


def test_full_disk_becomes_a_warning_and_no_file(tmp_path, monkeypatch):
    import errno

    from profiler_core.trace.write import writer

    def boom(trace, name):
        yield b"{"
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writer, "iter_json", boom)
    with pytest.warns(RuntimeWarning, match="No space left on device"):
        _run(tensorboard_trace_handler(str(tmp_path), worker_name="w"))
    assert os.listdir(tmp_path) == []


def test_bad_arguments():
    with pytest.raises(ValueError, match="dir_name"):
        tensorboard_trace_handler("")
    with pytest.raises(ValueError, match="worker_name"):
        tensorboard_trace_handler("x", worker_name="a/b")
