"""The flight recorder's telemetry (docs/flight-recorder.md): one record per step with the times the loop marked,
GPU times from device events read only once complete (never waiting), time in mpi4py collectives through the
integration's wrappers, a file that a killed job leaves whole, and the remote (fsspec) sink."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from importlib.util import find_spec
from pathlib import Path

import pytest

from profiler_core import storage
from profiler_core.flight import Recorder, device, format

from .conftest import requires

ROOT = Path(__file__).resolve().parent.parent
needs_mpi4py = requires("mpi4py not installed (pip install mpi4py mpich)" if find_spec("mpi4py") is None else None)


def _read(path) -> format.RankTelemetry:
    return format.decode(str(path), Path(path).read_bytes())


class _StepClock:
    """The recorder's monotonic clock, moved by the test alone (no sleep, no load-dependent time): the marked
    times are then exact."""

    def __init__(self) -> None:
        self.ns = 10**12

    def perf_counter_ns(self) -> int:
        return self.ns

    def __getattr__(self, name: str):  # time(), process_time_ns(), ...: the real ones
        return getattr(time, name)


def test_one_record_per_step_with_the_marked_times(tmp_path, monkeypatch):
    import profiler_core.flight.recorder as recorder_mod

    clock = _StepClock()
    monkeypatch.setattr(recorder_mod, "time", clock)
    with Recorder(tmp_path, rules=None, worker="w0") as rec:
        for i in range(6):
            with rec.data():
                clock.ns += 50_000_000 if i == 3 else 0
            with rec.optimizer():
                clock.ns += 2_000_000
            clock.ns += 1_000_000  # the rest of the step
            rec.step()
    t = _read(tmp_path / "w0.telemetry.jsonl")
    assert t.header["k"] == "start" and t.header["v"] == format.VERSION and t.header["worker"] == "w0"
    assert t.header["device"] == "auto" and t.header["comm"] == "none" and t.ended and t.end["device"] == "none"
    assert t.steps.tolist() == list(range(6)) and t.bad_lines == 0
    data, opt, wall = t.columns["data_ms"], t.columns["optimizer_ms"], t.columns["wall_ms"]
    assert data.tolist() == [0.0, 0.0, 0.0, 50.0, 0.0, 0.0]  # each step its own marked time, exactly
    assert (opt == 2.0).all() and (wall == data + opt + 1.0).all()
    assert (t.columns["rss_mib"] > 1).all() and (t.columns["host_ms"] >= 0).all()
    assert all(v != v for v in t.columns["comm_ms"]) and all(v != v for v in t.gpu_ms)  # NaN: not measured
    lines = (tmp_path / "w0.telemetry.jsonl").read_bytes().splitlines()
    assert max(len(ln) for ln in lines[1:-1]) < 200, lines[1]


class FakeEvents:
    """Device events whose completion the test decides: event i completes once `done_up_to` >= i. Nothing here
    may wait for the device: there is no synchronize, and elapsed_ms of an incomplete event fails the test."""

    name = "fake"

    def __init__(self) -> None:
        self.made = 0
        self.done_up_to = -1
        self.recorded: list = []

    def new(self):
        self.made += 1
        return {"id": self.made}

    def record(self, ev):
        ev["seq"] = len(self.recorded)
        ev["at"] = len(self.recorded) * 10.0  # the device's clock: 10 ms per step
        self.recorded.append(ev)

    def done(self, ev):
        return ev["seq"] <= self.done_up_to

    def elapsed_ms(self, a, b):
        assert self.done(a) and self.done(b), "read an event the device has not reached"
        return b["at"] - a["at"]

    def peak_mib(self):
        return 42.0


def test_gpu_times_come_later_and_never_wait(tmp_path):
    ev = FakeEvents()
    with Recorder(tmp_path, rules=None, device=ev, worker="w0") as rec:
        for i in range(8):
            ev.done_up_to = i - 3  # the device runs three steps behind the host
            rec.step()
    t = _read(tmp_path / "w0.telemetry.jsonl")
    # step 0 opens the first event; steps 1..7 have pairs; the last ones were still running at the end
    got = {int(s): g for s, g in zip(t.steps, t.gpu_ms) if g == g}
    assert got and set(got) <= set(range(1, 8)) and all(g == 10.0 for g in got.values()), got
    assert max(got) < 7  # the device had not finished the last steps: their GPU time is unknown, not waited for
    assert (t.device_mib == 42.0).all() and t.end["device"] == "fake"
    assert ev.made < 8  # events are reused once read


def test_pending_pairs_are_bounded(tmp_path):
    ev = FakeEvents()  # a device that never completes anything
    timer = device.StepTimer(ev)
    timer.start()
    for s in range(device.MAX_PENDING + 10):
        timer.boundary(s)
        assert timer.ready() == []
    assert len(timer.pending) == device.MAX_PENDING and timer.dropped == 10


def test_a_killed_job_keeps_its_last_steps(tmp_path):
    """SIGKILL-like exit (os._exit, no close, no flush) after step 49: all 50 steps are in the file."""
    code = f"""
        import os, sys
        sys.path.insert(0, {str(ROOT)!r})
        from profiler_core.flight import Recorder
        rec = Recorder({str(tmp_path)!r}, rules=None, worker="w0")
        for i in range(50):
            rec.step()
        os._exit(9)
    """
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 9, out.stderr
    t = _read(tmp_path / "w0.telemetry.jsonl")
    assert t.steps.tolist() == list(range(50)) and not t.ended


def test_an_incomplete_last_line_is_left_out(tmp_path):
    p = tmp_path / "w.telemetry.jsonl"
    good = format.encode_step(0, 1.0, 10.0, 1.0, 9.0, 100.0) + format.encode_step(1, 1.01, 11.0, 1.0, 9.0, 100.0)
    p.write_bytes(good + b'{"s":2,"t":1.02,"w":1')
    t = _read(p)
    assert t.steps.tolist() == [0, 1] and t.columns["wall_ms"].tolist() == [10.0, 11.0]
    p.write_bytes(good + b'{"s":2, broken}\n' + format.encode_step(3, 1.03, 12.0, 1.0, 9.0, 100.0))
    t = _read(p)
    assert t.steps.tolist() == [0, 1, 3] and t.bad_lines == 1


def test_remote_telemetry_is_published_whole(monkeypatch):
    pytest.importorskip("fsspec")
    root = f"memory://gpuscope-flight-{os.getpid()}-{time.time_ns()}"
    with Recorder(root, rules=None, worker="w0") as rec:
        for _ in range(5):
            rec.step()
        assert "every 30 s" in rec._sink.flush
    with storage.open_read(root + "/w0.telemetry.jsonl") as f:
        t = format.decode("x", f.read())
    assert t.steps.tolist() == list(range(5)) and t.ended


def _run(code: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "MPI_LOCAL"))}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, env=env
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@needs_mpi4py
def test_time_in_mpi_collectives_and_the_wrappers_restored(tmp_path):
    """A singleton MPI process (in a child: an initialised MPI would make this process a rank): the time inside
    Allreduce / Barrier is counted while the recorder runs, a profile's start and stop leave the wrappers in
    place, and closing the recorder puts mpi4py's own method objects back."""
    out = _run(f"""
        import json, time
        import numpy as np
        from mpi4py import MPI
        from profiler_core import profile
        from profiler_core.flight import Recorder, format
        from profiler_core.integrations import mpi as m
        before = MPI.Comm.__dict__["Allreduce"]
        comm, buf = MPI.COMM_WORLD, np.ones(1 << 20)
        rec = Recorder({str(tmp_path)!r}, worker="w0")
        wrapped = MPI.Comm.__dict__["Allreduce"] is not before
        for i in range(4):
            t0 = time.perf_counter()
            comm.Allreduce(MPI.IN_PLACE, buf)
            comm.Barrier()
            spent = time.perf_counter() - t0
            if i == 1:
                with profile():
                    pass  # the profiler's integrations activate and deactivate
            rec.step()
        still = MPI.Comm.__dict__["Allreduce"] is not before
        rec.close()
        t = format.decode("x", open(rec.path, "rb").read())
        print(json.dumps({{"wrapped": wrapped, "still": still, "restored": MPI.Comm.__dict__["Allreduce"] is before,
                          "comm": t.header["comm"], "c": t.columns["comm_ms"].tolist(),
                          "w": t.columns["wall_ms"].tolist(), "rule": t.header["slow_rank_rule"]}}))
    """)
    import json

    r = json.loads(out.strip().splitlines()[-1])
    assert r["wrapped"] and r["still"] and r["restored"], r
    assert r["comm"] == "mpi4py" and r["rule"].startswith("skipped: a single rank")
    assert all(0 < c <= w for c, w in zip(r["c"], r["w"])), r
