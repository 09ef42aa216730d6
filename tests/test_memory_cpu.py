"""profile_memory on the host: tracemalloc deltas as [memory] events attributed to the innermost op."""

import json
import tracemalloc

import numpy as np

from profiler_core import ProfilerActivity, profile, record_function, record_op

CPU = [ProfilerActivity.CPU]


def _mem(trace):
    return [e for e in trace["traceEvents"] if e.get("name") == "[memory]"]


def _inside(ev, op):
    return op["tid"] == ev["tid"] and op["ts"] <= ev["ts"] <= op["ts"] + op["dur"]


def test_allocation_attributed_to_innermost_op():
    keep = []
    with profile(activities=CPU, profile_memory=True) as p:
        with record_function("outer"):
            with record_op("alloc_op"):
                keep.append(np.ones(1_000_000, dtype=np.float64))  # 8 MB
            with record_op("free_op"):
                keep.clear()
    assert not tracemalloc.is_tracing()  # we stop what we started
    ops = {e["name"]: e for e in p.trace["traceEvents"] if e.get("ph") == "X"}
    mem = _mem(p.trace)
    assert all(m["cat"] == "cpu_instant_event" and m["ph"] == "i" and m["s"] == "t" for m in mem)
    a = m_alloc = max(mem, key=lambda m: m["args"]["Bytes"])
    assert a["args"]["Bytes"] >= 8_000_000 and _inside(a, ops["alloc_op"])
    f = min(mem, key=lambda m: m["args"]["Bytes"])
    assert f["args"]["Bytes"] <= -8_000_000 and _inside(f, ops["free_op"])
    assert m_alloc["args"]["Device Type"] == 0 and m_alloc["args"]["Device Id"] == -1
    assert set(m_alloc["args"]) >= {"Bytes", "Total Allocated", "Total Reserved", "Addr"}
    assert f["args"]["Total Allocated"] < a["args"]["Total Allocated"]
    assert p.trace["profile_memory"] == 1


def test_short_lived_host_allocation_reaches_the_peak(tmp_path):
    """A 16 MB buffer allocated and freed inside one op leaves no net change, yet it is the run's memory peak: the
    op's events allocate it and free it again, and the Memory view's peak holds it."""
    from profiler_core.trace.read.reader import read_trace
    from tb_plugin.views import memory as mv

    with profile(activities=CPU, profile_memory=True) as p:
        with record_op("scratch_op"):
            float(np.ones(2_000_000, dtype=np.float64).sum())  # 16 MB, gone when the op ends
    ops = {e["name"]: e for e in p.trace["traceEvents"] if e.get("ph") == "X"}
    mem = [m for m in _mem(p.trace) if _inside(m, ops["scratch_op"])]
    assert max(m["args"]["Bytes"] for m in mem) >= 16_000_000
    assert min(m["args"]["Bytes"] for m in mem) <= -16_000_000
    assert max(m["args"]["Total Allocated"] for m in mem) >= 16_000_000
    path = tmp_path / "w0.1.pt.trace.json"
    path.write_text(json.dumps(p.trace))
    t = read_trace(str(path))
    assert mv.memory_curve(t)["peaks"]["CPU"]["allocated_bytes"] >= 16_000_000


def test_memory_columns_in_key_averages():
    with profile(activities=CPU, profile_memory=True) as p:
        with record_op("alloc_op"):
            x = np.ones(500_000)
    avg = {e.key: e for e in p.key_averages()}
    assert avg["alloc_op"].self_cpu_memory_usage >= 4_000_000
    assert "CPU Mem" in p.key_averages().table()
    del x


def test_no_memory_events_without_profile_memory():
    with profile(activities=CPU) as p:
        with record_op("alloc_op"):
            np.ones(100_000)
    assert _mem(p.trace) == []
    assert not tracemalloc.is_tracing()


def test_existing_tracemalloc_left_running():
    tracemalloc.start()
    try:
        with profile(activities=CPU, profile_memory=True):
            with record_op("x"):
                np.ones(1000)
        assert tracemalloc.is_tracing()
    finally:
        tracemalloc.stop()
