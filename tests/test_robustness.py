"""The profiler never takes the user's program down, and never leaves a half-written file.

Regression guards from the QA sweep: raising callbacks, interrupts, threads and forks around a
recording window, and an interrupted export.
"""

import gzip
import json
import os
import signal
import sys
import threading

import pytest

from profiler_core import ProfilerActivity, profile, record_function, recording, schedule

CPU = [ProfilerActivity.CPU]


@pytest.fixture(autouse=True)
def _never_left_recording():
    yield
    assert not recording.is_recording(), "a test left a profiler recording"


def _annotations(trace):
    return [e["name"] for e in trace["traceEvents"] if e.get("cat") == "user_annotation"]


@pytest.mark.filterwarnings("ignore:Profiler clears events")
def test_a_raising_on_trace_ready_is_a_warning_and_profiling_continues():
    seen = []

    def handler(prof):
        seen.append(_annotations(prof.trace))
        raise ValueError("handler bug")

    p = profile(activities=CPU, schedule=schedule(wait=0, warmup=1, active=1), on_trace_ready=handler)
    with pytest.warns(RuntimeWarning, match="raised ValueError: handler bug; profiling continues"):
        with p:
            for _ in range(4):
                with record_function("work"):
                    pass
                p.step()
    assert len(seen) == 2 and all("work" in names for names in seen)  # both cycles delivered
    assert not recording.is_recording()


def test_keyboard_interrupt_in_the_block_stops_recording_and_keeps_the_trace():
    sys_profile = sys.getprofile()
    with pytest.raises(KeyboardInterrupt):
        with profile(activities=CPU, with_stack=True, profile_memory=True) as p:
            with record_function("interrupted"):
                raise KeyboardInterrupt
    assert "interrupted" in _annotations(p.trace)
    assert sys.getprofile() is sys_profile  # the stack tracer is uninstalled


def test_keyboard_interrupt_in_on_trace_ready_propagates_after_stopping():
    def handler(prof):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        with profile(activities=CPU, on_trace_ready=handler):
            pass


def test_a_thread_still_inside_record_function_at_stop_is_dropped_cleanly(tmp_path):
    entered, release = threading.Event(), threading.Event()

    def worker():
        with record_function("spans the stop"):
            entered.set()
            release.wait(5)

    t = threading.Thread(target=worker)
    with profile(activities=CPU) as p:
        t.start()
        entered.wait(5)
        with record_function("main"):
            pass
    release.set()
    t.join()
    assert _annotations(p.trace) == ["main"]
    p.export_chrome_trace(tmp_path / "t.json")
    json.loads((tmp_path / "t.json").read_text())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_record_into_the_parents_session():
    with profile(activities=CPU, with_stack=True) as p:
        with record_function("parent"):
            pid = os.fork()
            if pid == 0:  # child
                ok = not recording.is_recording() and sys.getprofile() is None
                with record_function("child"):
                    pass
                os._exit(0 if ok else 3)
            _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert "child" not in _annotations(p.trace) and "parent" in _annotations(p.trace)


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs setitimer")
def test_an_interrupted_export_leaves_no_file(tmp_path):
    with profile(activities=CPU) as p:
        for _ in range(20000):
            with record_function("x"):
                pass

    def interrupt(*_):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    out = tmp_path / "t.json.gz"
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.005)
        with pytest.raises(KeyboardInterrupt):
            for _ in range(1000):
                p.export_chrome_trace(out)
                out.unlink()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    for name in os.listdir(tmp_path):  # a complete file, or nothing: no half trace
        assert name == "t.json.gz"
        json.loads(gzip.decompress(out.read_bytes()))


def test_stop_inside_the_block_then_exit_delivers_once():
    calls = []
    with profile(activities=CPU, on_trace_ready=lambda prof: calls.append(1)) as p:
        p.stop()
    assert calls == [1]
