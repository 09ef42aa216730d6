"""Memory view: curves keep their peak when downsampled, alloc/free pairing, per-op statistics,
and agreement with PyTorch's own key_averages memory columns on the torch_cpu_cnn traces."""

import json

import numpy as np
import pytest

from tb_plugin.views import memory as mv

from . import trace_builder as tb
from .trace_builder import read_events

DATA = __import__("pathlib").Path(__file__).parent / "data"


def mk(events, mem, props=()):
    """events: (cat, name, pid, tid, ts_ns, dur_ns); mem rows: (ts_ns, device_type, device_id, addr, bytes,
    total_allocated, total_reserved), as `[memory]` events of pid 1, tid 1."""
    return read_events(tb.rows(events, []) + [tb.memory_event(*m) for m in mem], device_properties=props)


def small():
    # op A [0,100us] contains B [10,50us]; allocations: 100B in B (addr 1),
    # alloc of 50B in A after B at 55us, free of addr 1 in A at 60us; GPU 0 alloc 1000B at 20us never
    # freed; a free at 5us of an address allocated before the trace (addr 9)
    us = 1000
    ev = [("cpu_op", "A", 1, 1, 0, 100 * us), ("cpu_op", "B", 1, 1, 10 * us, 40 * us)]
    mem = [
        (5 * us, 0, -1, 9, -8, 0, 0),
        (20 * us, 0, -1, 1, 100, 100, 0),
        (20 * us + 1, 1, 0, 7, 1000, 1000, 2048),
        (55 * us, 0, -1, 2, 50, 150, 0),
        (60 * us, 0, -1, 1, -100, 50, 0),
    ]
    return mk(ev, mem, [{"id": 0, "totalGlobalMem": 16 * 2**30}])


def test_curve_devices_and_peaks():
    out = mv.memory_curve(small())
    json.dumps(out)
    assert out["devices"] == ["CPU", "GPU0"] and out["default_device"] == "GPU0"
    assert out["curves"]["CPU"]["allocated_bytes"] == [0, 100, 150, 50]
    assert out["curves"]["CPU"]["ts_us"] == [5.0, 20.0, 55.0, 60.0]
    assert out["peaks"]["CPU"] == {
        "allocated_bytes": 150,
        "allocated_ts_us": 55.0,
        "reserved_bytes": 0,
        "reserved_ts_us": 5.0,
    }
    assert out["peaks"]["GPU0"]["reserved_bytes"] == 2048
    assert out["total_bytes"]["GPU0"] == 16 * 2**30


def test_curve_window_starts_at_held_level():
    out = mv.memory_curve(small(), start_us=25, end_us=58)
    c = out["curves"]["CPU"]
    assert c["ts_us"] == [25.0, 55.0] and c["allocated_bytes"] == [100, 150]


def test_downsampling_keeps_peak_and_valley():
    rng = np.random.default_rng(0)
    n = 50_000
    sizes = rng.integers(1, 1000, n)
    sign = np.where(rng.random(n) < 0.5, 1, -1)
    total = np.cumsum(sizes * sign) + 10**9
    total[31_337] = 5 * 10**9  # a one-sample spike
    total[40_000] = 1  # and a one-sample dip
    mem = [(i * 1000, 1, 0, i, int(sizes[i] * sign[i]), int(total[i]), int(total[i]) + 5) for i in range(n)]
    out = mv.memory_curve(mk([], mem), max_points=300)
    c = out["curves"]["GPU0"]
    assert len(c["ts_us"]) <= 300
    assert max(c["allocated_bytes"]) == 5 * 10**9 and min(c["allocated_bytes"]) == 1
    assert out["peaks"]["GPU0"]["allocated_bytes"] == 5 * 10**9
    assert out["peaks"]["GPU0"]["allocated_ts_us"] == 31_337.0
    assert c["ts_us"] == sorted(c["ts_us"]) and out["points"]["GPU0"] == n


def test_missing_totals_use_running_sum():
    mem = [(0, 0, -1, 1, 10, -1, -1), (1000, 0, -1, 2, 5, -1, -1), (2000, 0, -1, 1, -10, -1, -1)]
    out = mv.memory_curve(mk([], mem))
    assert out["curves"]["CPU"]["allocated_bytes"] == [10, 15, 5]


def test_events_pairing():
    out = mv.memory_events(small())
    cpu = out["rows"]["CPU"]
    assert [(r["addr"], r["size_bytes"], r["alloc_us"], r["free_us"], r["duration_us"], r["op"]) for r in cpu] == [
        (9, 8, None, 5.0, None, "A"),
        (1, 100, 20.0, 60.0, 40.0, "B"),
        (2, 50, 55.0, None, None, "A"),
    ]
    assert out["rows"]["GPU0"][0]["op"] == "B" and out["rows"]["GPU0"][0]["free_us"] is None


def test_events_window_overlap():
    out = mv.memory_events(small(), start_us=65, end_us=90)
    assert [r["addr"] for r in out["rows"]["CPU"]] == [2]  # only addr 2 is alive then
    out = mv.memory_events(small(), start_us=0, end_us=4)
    assert [r["addr"] for r in out["rows"]["CPU"]] == [9]


def test_stats_self_and_total():
    rows = {r["name"]: r for r in mv.memory_stats(small())["rows"]["CPU"]}
    a, b = rows["A"], rows["B"]
    assert (b["calls"], b["size_increase_bytes"], b["self_size_increase_bytes"]) == (1, 100, 100)
    assert (b["alloc_count"], b["alloc_size_bytes"]) == (1, 100)
    assert (a["size_increase_bytes"], a["self_size_increase_bytes"]) == (100 - 8 + 50 - 100, -8 + 50 - 100)
    assert (a["alloc_count"], a["self_alloc_count"], a["alloc_size_bytes"], a["self_alloc_size_bytes"]) == (
        2,
        1,
        150,
        50,
    )
    # window [25, 100]: only the 50B alloc and the free remain
    rows = {r["name"]: r for r in mv.memory_stats(small(), 25, 100)["rows"]["CPU"]}
    assert set(rows) == {"A"} and rows["A"]["size_increase_bytes"] == -50


def test_stats_calls_count_every_call_of_the_op():
    """An op called three times, once allocating: its row says 3 calls (torch's key_averages and torch-tb-profiler
    count all calls: `aten::empty` 40, not the 28 that allocated)."""
    us = 1000
    ev = [
        ("cpu_op", "E", 1, 1, 0, 10 * us),
        ("cpu_op", "E", 1, 1, 20 * us, 10 * us),
        ("cpu_op", "E", 1, 1, 40 * us, us),
    ]
    ev.append(("cpu_op", "F", 1, 1, 60 * us, us))
    t = mk(ev, [(5 * us, 0, -1, 1, 64, 64, 0)])
    rows = {r["name"]: r for r in mv.memory_stats(t)["rows"]["CPU"]}
    assert set(rows) == {"E"}  # an op without memory records has no row
    assert (rows["E"]["calls"], rows["E"]["alloc_count"]) == (3, 1)
    rows = {r["name"]: r for r in mv.memory_stats(t, 0, 25)["rows"]["CPU"]}
    assert rows["E"]["calls"] == 2  # the calls in the window


@pytest.mark.parametrize(
    "fn,args",
    [
        (mv.memory_curve, dict(max_points=1)),
        (mv.memory_curve, dict(start_us="x")),
        (mv.memory_events, dict(start_us=5, end_us=1)),
        (mv.memory_stats, dict(end_us="nan")),
    ],
)
def test_bad_parameters(fn, args):
    with pytest.raises(mv.BadRequest):
        fn(small(), **args)


def test_no_memory_records():
    t = mk([("cpu_op", "A", 1, 1, 0, 10)], [])
    assert mv.memory_curve(t)["devices"] == [] and mv.memory_stats(t)["rows"] == {}
    assert mv.memory_events(t)["rows"] == {}


def test_agrees_with_torch_key_averages(shared_traces):
    """ "CPU Mem" (total) for every cpu_op and user_annotation, and "Self CPU Mem" for every cpu_op, equal
    torch's own key_averages (tests/data/make_torch_memory_reference.py ran torch 2.13's EventList on these
    traces). Intentional difference: torch's tree includes python_function frames (with_stack), so memory
    freed directly inside a Python frame under a user_annotation is not "self" of the annotation there;
    like torch-tb-profiler we attribute each record to the innermost op, so only those annotations differ."""
    from profiler_core.trace.read.reader import read_trace

    ref = json.loads((DATA / "torch_cnn_memory_key_averages.json").read_text())
    compared = 0
    for rel, torch_rows in ref.items():
        t = read_trace(shared_traces / "torch_cpu_cnn" / rel)
        cat_of = dict(zip(t.events["name"].astype(str), t.events["cat"].astype(str)))
        ours = {r["name"]: r for r in mv.memory_stats(t)["rows"].get("CPU", [])}
        for name, r in torch_rows.items():
            cat = cat_of.get(name)
            if cat not in ("cpu_op", "user_annotation"):
                continue
            o = ours.get(name, {"size_increase_bytes": 0, "self_size_increase_bytes": 0})
            assert o["size_increase_bytes"] == r["cpu_memory_usage"], (rel, name)
            if cat == "cpu_op" and name in ours:
                assert o["calls"] == r["calls"], (rel, name)
            if cat == "cpu_op":
                assert o["self_size_increase_bytes"] == r["self_cpu_memory_usage"], (rel, name)
            compared += 1
        assert any(r["cpu_memory_usage"] != 0 for r in torch_rows.values())
    assert compared > 200


def test_real_trace_curve_and_pairs(shared_traces):
    from profiler_core.trace.read.reader import read_trace

    t = read_trace(next((shared_traces / "torch_cpu_cnn" / "single").glob("*.gz")))
    m = t.memory
    curve = mv.memory_curve(t, max_points=60)
    assert curve["devices"] == ["CPU"] and len(curve["curves"]["CPU"]["ts_us"]) <= 60
    assert curve["peaks"]["CPU"]["allocated_bytes"] == int(m["total_allocated"].max())
    assert max(curve["curves"]["CPU"]["allocated_bytes"]) == int(m["total_allocated"].max())
    rows = mv.memory_events(t)["rows"]["CPU"]
    allocs = int((m["bytes"] > 0).sum())
    assert sum(r["alloc_us"] is not None for r in rows) == allocs
    paired = [r for r in rows if r["alloc_us"] is not None and r["free_us"] is not None]
    lone_frees = [r for r in rows if r["alloc_us"] is None]
    assert len(paired) + len(lone_frees) == int((m["bytes"] < 0).sum())
    assert all(r["duration_us"] >= 0 and r["op"] for r in paired)
