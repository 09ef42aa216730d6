"""record_function, threads, External ids and the cheap recording checks."""

import threading

from profiler_core import ProfilerActivity, profile, record_function, recording

CPU = [ProfilerActivity.CPU]


def _x(trace, name):
    return [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["name"] == name]


def test_nesting_times_and_category():
    with profile(activities=CPU) as p:
        with record_function("outer"):
            with record_function("inner"):
                pass
    (o,), (i,) = _x(p.trace, "outer"), _x(p.trace, "inner")
    assert o["cat"] == i["cat"] == "user_annotation"
    assert o["ts"] <= i["ts"] and i["ts"] + i["dur"] <= o["ts"] + o["dur"]
    assert o["args"]["External id"] < i["args"]["External id"]
    assert list(o["args"])[-1] == "Ev Idx"


def test_decorator_records_each_call_and_keeps_metadata():
    @record_function("decorated")
    def f(x):
        """doc"""
        return x * 2

    assert f(1) == 2 and f.__name__ == "f" and f.__doc__ == "doc"
    with profile(activities=CPU) as p:
        assert f(3) == 6
        f(4)
    assert len(_x(p.trace, "decorated")) == 2


def test_nothing_recorded_outside_a_profile():
    with record_function("before"):
        pass
    with profile(activities=CPU) as p:
        pass
    with record_function("after"):
        pass
    assert not _x(p.trace, "before") and not _x(p.trace, "after")


def test_threads_started_before_and_after_each_get_their_tid():
    go, done = threading.Event(), threading.Event()
    tids = {}

    def early():
        tids["early"] = threading.get_native_id()
        go.wait(5)
        with record_function("in early thread"):
            pass
        done.set()

    def late():
        tids["late"] = threading.get_native_id()
        with record_function("in late thread"):
            pass

    t1 = threading.Thread(target=early, name="early-worker")
    t1.start()
    with profile(activities=CPU) as p:
        go.set()
        done.wait(5)
        t2 = threading.Thread(target=late, name="late-worker")
        t2.start()
        t2.join()
        with record_function("in main"):
            pass
    t1.join()
    (e,), (la,), (m,) = _x(p.trace, "in early thread"), _x(p.trace, "in late thread"), _x(p.trace, "in main")
    assert e["tid"] == tids["early"] and la["tid"] == tids["late"] and m["tid"] == threading.get_native_id()
    assert len({e["tid"], la["tid"], m["tid"]}) == 3
    names = {
        ev["tid"]: ev["args"]["name"]
        for ev in p.trace["traceEvents"]
        if ev.get("ph") == "M" and ev["name"] == "thread_name"
    }
    assert names[e["tid"]] == f"thread {e['tid']} (early-worker)"
    assert names[la["tid"]] == f"thread {la['tid']} (late-worker)"
    ids = [ev["args"]["External id"] for ev in (e, la, m)]
    assert len(set(ids)) == 3


def test_is_recording_and_current_external_id():
    assert not recording.is_recording() and recording.current_external_id() is None
    seen = {}
    with profile(activities=CPU) as p:
        assert recording.is_recording()
        with record_function("a"):
            seen["a"] = recording.current_external_id()
            with record_function("b"):
                seen["b"] = recording.current_external_id()
            seen["a2"] = recording.current_external_id()
        seen["none"] = recording.current_external_id()
    assert seen["a"] == _x(p.trace, "a")[0]["args"]["External id"]
    assert seen["b"] == _x(p.trace, "b")[0]["args"]["External id"]
    assert seen["a2"] == seen["a"] and seen["none"] is None
    assert not recording.is_recording()


def test_external_ids_restart_per_cycle_and_are_unique():
    with profile(activities=CPU) as p:
        for _ in range(50):
            with record_function("x"):
                pass
    ids = [e["args"]["External id"] for e in _x(p.trace, "x")]
    assert sorted(ids) == list(range(1, 51))


def test_record_function_args_string_with_record_shapes():
    with profile(activities=CPU, record_shapes=True) as p:
        with record_function("labelled", "some args"):
            pass
    (e,) = _x(p.trace, "labelled")
    assert e["args"]["Input Dims"] == [[]] and e["args"]["Input type"] == [""]


def test_clock_is_epoch_based():
    import time

    with profile(activities=CPU) as p:
        before = time.time_ns()
        with record_function("now"):
            pass
        after = time.time_ns()
    (e,) = _x(p.trace, "now")
    abs_ns = p.trace["baseTimeNanoseconds"] + round(e["ts"] * 1000)
    assert before - 2_000_000 <= abs_ns <= after + 2_000_000


def test_event_buffers_hold_tuples_not_dicts():
    with profile(activities=CPU):
        with record_function("t"):
            pass
        buf = recording.current_buffer()
        assert all(type(ev) is tuple for ev in buf.events)


def test_record_spanning_the_window_end_is_dropped():
    from profiler_core import schedule

    p = profile(activities=CPU, schedule=schedule(wait=0, warmup=1, active=1, repeat=1))
    p.start()
    p.step()  # recording
    span = record_function("spans the end")
    span.__enter__()
    with record_function("inside"):
        pass
    p.step()  # window ends here
    span.__exit__(None, None, None)
    p.stop()
    names = [e["name"] for e in p.trace["traceEvents"] if e.get("ph") == "X"]
    assert "inside" in names and "spans the end" not in names


def test_timestamps_exact_to_the_nanosecond():
    from profiler_core.trace.write.schema import ThreadData, build_trace

    base = 1790857026000000000
    t = ThreadData(1, "main", [(123_456_789_012_345, 123_456_789_012_345 + 80, "a", 1, 0, None, None)], [], [])
    trace = build_trace(
        pid=1,
        threads=[t],
        offset_ns=base + 7_000_000_000_000_000 - 123_456_789_000_000,
        start_ns=base + 7_000_000_000_000_000,
        stop_ns=base + 7_000_000_100_000_000,
        flags={},
    )
    ev = [e for e in trace["traceEvents"] if e.get("name") == "a"][0]
    assert f"{ev['ts']:.3f}" == "7000000000012.345" and f"{ev['dur']:.3f}" == "0.080"


def test_forked_child_stops_recording():
    import os

    import pytest

    if not hasattr(os, "fork"):
        pytest.skip("no fork")
    with profile(activities=CPU, profile_memory=True) as p:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: must not record, must not crash
            try:
                with record_function("in child"):
                    pass
                os.write(w, b"1" if not recording.is_recording() else b"0")
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        assert os.read(r, 1) == b"1"
        with record_function("in parent"):
            pass
    assert _x(p.trace, "in parent") and not _x(p.trace, "in child")
