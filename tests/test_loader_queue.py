"""Loader queue: a requested file that is still queued is read at once, ahead of the queue, and
no other queued file starts until it is ready; file_status says how far one file is."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from tb_plugin.loader import Loader
from tb_plugin.runs import Scanner

OLD = time.time() - 3600


def _trace(path, n: int) -> None:
    ev = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"aten::op{i % 50}",
            "pid": 1,
            "tid": 1,
            "ts": i * 10.0,
            "dur": 5.0,
            "args": {"External id": i},
        }
        for i in range(n)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"traceEvents": ev}))
    os.utime(path, (OLD, OLD))


def test_requested_file_jumps_the_queue_and_the_rest_waits(tmp_path):
    for i in range(8):
        _trace(tmp_path / f"run{i}" / "w.1.pt.trace.json", 3000)
    _trace(tmp_path / "z_big" / "w.1.pt.trace.json", 120_000)
    runs = Scanner(str(tmp_path)).scan()
    files = [f for r in runs.values() for f in r.files()]
    big = runs["z_big"].files()[0]
    assert files[-1] == big  # last in the queue
    loader = Loader(workers=1, processes=0, use_cache=False)
    try:
        loader.prepare(files)
        before = loader.file_status(big)
        assert before["state"] == "queued" and before["position"] >= 6 and before["bytes_total"] == big.size
        seen: list[dict] = []
        stop = threading.Event()

        def watch():
            while not stop.is_set():
                seen.append(loader.file_status(big))
                time.sleep(0.01)

        th = threading.Thread(target=watch)
        th.start()
        asked = time.monotonic()  # small files read in ~6 ms: some may have finished since prepare()
        t = loader.get(big)
        stop.set()
        th.join()
        assert len(t.events) == 120_000
        entries = {e.file.key: e for e in loader._entries.values()}
        b = entries[big.key]
        big_end = b.started + b.seconds
        started_meanwhile = [
            e for e in entries.values() if e is not b and e.started is not None and asked <= e.started <= b.started
        ]
        # only what the one pool slot held when the request arrived (it may have freed just before get's lock)
        assert len(started_meanwhile) <= 1, [(e.file.relpath, e.started - asked) for e in started_meanwhile]
        for e in entries.values():
            if e is not b and e.started is not None and e.started > b.started:
                assert e.started >= big_end - 1e-6, "a queued file started while the requested one was read"
        reading = [s for s in seen if s["state"] == "reading"]
        assert reading and all(
            0 <= s["bytes_done_est"] < big.size and s["rate_bps"] > 0 and s["eta_s"] >= 0 for s in reading
        )
        assert loader.file_status(big)["state"] == "done"
        deadline = time.time() + 120
        while loader.progress()["files_done"] < 9 and time.time() < deadline:
            time.sleep(0.05)
        assert loader.progress()["files_done"] == 9  # the queue resumed afterwards
    finally:
        loader.close()


def test_close_with_loads_pending_in_the_pool_and_files_queued_returns(tmp_path, monkeypatch):
    """close() cancels a load waiting in the pool; its callback must not hand the next queued file to
    the pool while it shuts down (that deadlocked: test_plugin hung in Loader.close)."""
    for i in range(3):
        _trace(tmp_path / f"run{i}" / "w.1.pt.trace.json", 10)
    files = [f for r in Scanner(str(tmp_path)).scan().values() for f in r.files()]
    release = threading.Event()
    monkeypatch.setattr(Loader, "_load_here", lambda self, f: release.wait(30))
    loader = Loader(workers=1, processes=0, use_cache=False)
    loader._slots = 2  # one load runs in the pool's only thread, one waits in the pool, one is queued
    loader.prepare(files)
    closer = threading.Thread(target=loader.close, daemon=True)
    closer.start()
    closer.join(10)
    release.set()
    assert not closer.is_alive(), "Loader.close() deadlocked"


def test_wait_loaded_returns_when_the_reads_end_or_the_loader_closes(tmp_path, monkeypatch):
    """`wait_loaded` (the /runs long poll) times out while a read runs, returns True once the reads end, and a
    wait under way returns as soon as the loader is closed (not at its timeout)."""
    _trace(tmp_path / "run0" / "w.1.pt.trace.json", 10)
    files = [f for r in Scanner(str(tmp_path)).scan().values() for f in r.files()]
    release = threading.Event()
    real = Loader._load_here
    monkeypatch.setattr(Loader, "_load_here", lambda self, f: release.wait(30) and real(self, f))
    loader = Loader(workers=1, processes=0, use_cache=False)
    loader.prepare(files)
    assert loader.wait_loaded(0.1) is False
    threading.Timer(0.2, release.set).start()
    assert loader.wait_loaded(30) is True and loader.progress()["files_done"] == 1
    loader.close()

    _trace(tmp_path / "run1" / "w.1.pt.trace.json", 10)
    files = [f for r in Scanner(str(tmp_path)).scan().values() for f in r.files()]
    release.clear()
    loader = Loader(workers=1, processes=0, use_cache=False)
    loader.prepare(files)
    threading.Timer(0.2, loader.close).start()
    t0 = time.monotonic()
    loader.wait_loaded(30)
    assert time.monotonic() - t0 < 10  # woken by close()
    release.set()


@pytest.mark.parametrize("native_reader", ["0", "1"])
def test_background_reads_in_process_run_one_or_two_at_a_time(tmp_path, monkeypatch, native_reader):
    """The Python reader holds the GIL: without the native reader the loader reads one file at a time, never two
    that slow each other down. The native reader's scan lets go of it, so with it (and 2 cores) two files are
    read at once (the V100 run's load: 0.20 -> 0.15 s), never more."""
    import tb_plugin.loader as loader_mod
    from profiler_core.trace.read import native

    monkeypatch.setenv("GPUSCOPE_NATIVE_READER", native_reader)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    if native_reader == "1" and not native.available():
        pytest.skip("the native reader is not built here")

    for i in range(4):
        _trace(tmp_path / f"run{i}" / "w.1.pt.trace.json", 2000)
    runs = Scanner(str(tmp_path)).scan()
    files = [f for r in runs.values() for f in r.files()]
    lock = threading.Lock()
    active, most = [0], [0]
    real = loader_mod.read_trace

    def counting(path, **kw):
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
        try:
            return real(path, **kw)
        finally:
            with lock:
                active[0] -= 1

    monkeypatch.setattr(loader_mod, "read_trace", counting)
    loader = Loader(processes=0, use_cache=False)
    try:
        loader.prepare(files)
        deadline = time.time() + 120
        while loader.progress()["loading"] and time.time() < deadline:
            time.sleep(0.02)
        assert loader.progress()["files_done"] == 4 and not loader.errors()
        assert loader._slots == (2 if native_reader == "1" else 1)
        assert 1 <= most[0] <= loader._slots
    finally:
        loader.close()


def test_trace_is_served_while_its_cache_entry_is_written(tmp_path, monkeypatch):
    """The disk-cache write runs after the read, on a thread of its own: the parsed trace is served
    at once, and the entry is there once the write is done."""
    import tb_plugin.loader as loader_mod
    from profiler_core.trace.read import cache

    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    _trace(tmp_path / "logs" / "run0" / "w.1.pt.trace.json", 2000)
    f = Scanner(str(tmp_path / "logs")).scan()["run0"].files()[0]
    release, writing = threading.Event(), threading.Event()
    real = cache.store

    def slow_store(path, t):
        writing.set()
        assert release.wait(60)
        return real(path, t)

    monkeypatch.setattr(loader_mod.cache, "store", slow_store)
    loader = Loader(processes=0)
    try:
        t = loader.get(f)  # returns while the write waits
        assert len(t.events) == 2000 and writing.wait(60)
        assert cache.load(f.path) is None
        release.set()
        loader.flush(timeout=60)
        assert cache.load(f.path) is not None
    finally:
        release.set()
        loader.close()


_EXIT_WHILE_LOADING = """
import argparse, sys
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client
from tb_plugin import plugin
flags = argparse.Namespace(gpuscope_dask_scheduler=None)
p = plugin.GpuscopePlugin(base_plugin.TBContext(logdir=sys.argv[1], flags=flags))
r = Client(application.TensorBoardWSGI([p])).get("/data/plugin/gpuscope/runs")
print("runs", r.status_code)
"""


@pytest.mark.slow
def test_exit_while_files_load_prints_no_traceback(tmp_path):
    """A script that starts the plugin and exits while the loader still reads and queues files: the
    pools refuse new work at interpreter exit, and that must end quietly, not in tracebacks."""
    import subprocess
    import sys

    for i in range(6):
        _trace(tmp_path / "logs" / f"run{i}" / "w.1.pt.trace.json", 4000)
    env = {**os.environ, "GPUSCOPE_CACHE_DIR": str(tmp_path / "cache")}
    for _ in range(3):
        out = subprocess.run(
            [sys.executable, "-c", _EXIT_WHILE_LOADING, str(tmp_path / "logs")],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert out.returncode == 0 and "runs 200" in out.stdout, out.stderr[-2000:]
        assert "Traceback" not in out.stderr, out.stderr[-3000:]


def test_loaded_files_are_warmed_and_requests_wait_for_their_warming(tmp_path):
    """Each file read in the background is handed to `warm` (on a thread of its own, while the next
    file is read); a request for a file whose warming is under way waits for it, not computing twice."""
    for i in range(2):
        _trace(tmp_path / f"run{i}" / "w.1.pt.trace.json", 2000)
    files = [f for r in Scanner(str(tmp_path)).scan().values() for f in r.files()]
    started, release = threading.Event(), threading.Event()
    warmed: list = []

    def warm(t):
        warmed.append(t)
        if len(warmed) == 1:
            started.set()
            assert release.wait(60)
        return t

    loader = Loader(workers=1, processes=0, use_cache=False, warm=warm)  # one at a time: files[0] is warmed first
    try:
        loader.prepare(files)
        assert started.wait(60)
        got: list = []
        request = threading.Thread(target=lambda: got.append(loader.get(files[0])))
        request.start()
        request.join(0.3)
        assert request.is_alive() and not got  # its warming is under way: the request waits for it
        release.set()
        request.join(60)
        assert got and got[0] is warmed[0]
        t1 = loader.get(files[1])
        deadline = time.time() + 60
        while len(warmed) < 2 and time.time() < deadline:
            time.sleep(0.01)
        assert len(t1.events) == 2000 and warmed[1] is t1  # every file is warmed, once
        assert len(warmed) == 2
    finally:
        release.set()
        loader.close()


def _load_all(tmp_path, runs: int, events: int) -> tuple[dict, list]:
    """Reads `runs` one-file runs of `events` events in the background, warming each into a list;
    the progress and the warmed traces once the loader is idle."""
    for i in range(runs):
        _trace(tmp_path / f"run{i}" / "w.1.pt.trace.json", events)
    files = [f for r in Scanner(str(tmp_path)).scan().values() for f in r.files()]
    warmed: list = []
    loader = Loader(processes=0, use_cache=False, warm=warmed.append)
    try:
        loader.prepare(files)
        deadline = time.time() + 60
        while (loader.busy() or loader.progress()["loading"]) and time.time() < deadline:
            time.sleep(0.02)
        return loader.progress(), warmed
    finally:
        loader.close()


def test_no_warming_for_logdirs_of_many_files(tmp_path, monkeypatch):
    """A logdir of more files than WARM_MAX_FILES is not computed ahead: views nobody may ask for."""
    import tb_plugin.loader as loader_mod

    monkeypatch.setattr(loader_mod, "WARM_MAX_FILES", 2)
    progress, warmed = _load_all(tmp_path, runs=3, events=500)
    assert progress["files_done"] == 3 and not warmed


def test_cache_write_waits_for_the_warming(tmp_path, monkeypatch):
    """The disk-cache write of a file read in the background waits while a trace is warmed (it would
    slow the first views down on a few cores), then happens."""
    from profiler_core.trace.read import cache

    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    _trace(tmp_path / "logs" / "run0" / "w.1.pt.trace.json", 2000)
    f = Scanner(str(tmp_path / "logs")).scan()["run0"].files()[0]
    started, release = threading.Event(), threading.Event()

    def warm(t):
        started.set()
        assert release.wait(60)

    loader = Loader(processes=0, warm=warm)
    try:
        loader.prepare([f])
        assert started.wait(60)
        time.sleep(0.3)
        assert cache.load(f.path) is None  # waiting for the warming
        release.set()
        loader.flush(timeout=60)
        assert cache.load(f.path) is not None
    finally:
        release.set()
        loader.close()


def test_warmings_are_skipped_once_the_interpreter_exits(tmp_path, monkeypatch):
    """The interpreter's exit waits for the warming thread: the warmings still queued then are skipped."""
    import tb_plugin.loader as loader_mod

    _trace(tmp_path / "run0" / "w.1.pt.trace.json", 500)
    files = [f for r in Scanner(str(tmp_path)).scan().values() for f in r.files()]
    warmed: list = []
    monkeypatch.setattr(loader_mod, "_exiting", lambda: True)
    loader = Loader(processes=0, use_cache=False, warm=warmed.append)
    try:
        loader.prepare(files)
        t = loader.get(files[0])
        deadline = time.time() + 60
        while loader.busy() and time.time() < deadline:  # its warming (if the pool read it) has run
            time.sleep(0.01)
        assert len(t.events) == 500 and not warmed
    finally:
        loader.close()


def test_no_warming_once_the_traces_in_memory_hold_many_events(tmp_path, monkeypatch):
    """What warming keeps stays small beside the memory budget: no warming once the other traces in memory
    hold more than WARM_MAX_EVENTS events together; the first file is warmed however big it is."""
    import tb_plugin.loader as loader_mod

    monkeypatch.setattr(loader_mod, "WARM_MAX_EVENTS", 400)
    progress, warmed = _load_all(tmp_path, runs=2, events=500)
    assert progress["files_done"] == 2 and len(warmed) == 1  # the first only: 500 beyond 400, but none before it
    monkeypatch.setattr(loader_mod, "WARM_MAX_EVENTS", 700)
    progress, warmed = _load_all(tmp_path / "again", runs=2, events=500)
    assert progress["files_done"] == 2 and len(warmed) == 2  # 500 others held before the second: within 700


def test_load_threads_setting_sets_the_slots(monkeypatch):
    """GPUSCOPE_LOAD_THREADS overrides the default; a value under 1 is refused with a warning and the default used."""

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setenv("GPUSCOPE_NATIVE_READER", "0")
    for value, slots in (("3", 3), ("1", 1), ("0", 1)):  # "0": below the minimum, the default (1 here)
        monkeypatch.setenv("GPUSCOPE_LOAD_THREADS", value)
        loader = Loader(processes=0, use_cache=False)
        try:
            assert loader._slots == slots, (value, loader._slots)
        finally:
            loader.close()
