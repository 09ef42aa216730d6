"""Diff view: steps aligned in order, phases aligned by name, operator deltas with device time."""

import json

from tb_plugin.views.diff import diff

from . import trace_builder as tb
from .trace_builder import read_events

COLS = ["cat", "name", "pid", "tid", "ts", "dur", "external_id", "correlation"]
US = 1000


def mk(rows):
    """A trace of rows (cat, name, pid, tid, ts_ns, dur_ns, external_id, correlation) through the reader."""
    return read_events(tb.rows(rows, COLS))


def training(n_steps, first_step, mm_us, with_opt=True):
    """Steps of 100us: dataloader [0,10], forward annotation [10,50] with aten::mm (launching a
    kernel of mm_us/2), backward node [50,80] with aten::mm_backward, optimizer [85,95]."""
    rows = []
    for i in range(n_steps):
        b = i * 100 * US
        c = 1000 * (i + 1)
        rows += [
            ("user_annotation", f"ProfilerStep#{first_step + i}", 1, 1, b, 100 * US),
            ("user_annotation", "enumerate(DataLoader)#_Iter.__next__", 1, 1, b, 10 * US),
            ("user_annotation", "fwd", 1, 1, b + 10 * US, 40 * US),
            ("cpu_op", "aten::mm", 1, 1, b + 11 * US, mm_us * US, 10 + i),
            ("cuda_runtime", "cudaLaunchKernel", 1, 1, b + 12 * US, 1 * US, 10 + i, c),
            ("kernel", "gemm", 0, 7, b + 20 * US, mm_us * US // 2, 10 + i, c),
            ("cpu_op", "autograd::engine::evaluate_function: MmBackward0", 1, 1, b + 50 * US, 30 * US),
            ("cpu_op", "aten::mm_backward", 1, 1, b + 51 * US, 20 * US),
        ]
        if with_opt:
            rows.append(("user_annotation", "Optimizer.step#SGD.step", 1, 1, b + 85 * US, 10 * US))
    return mk(rows)


def test_step_and_phase_alignment():
    out = diff(training(2, 3, 10), training(3, 8, 30, with_opt=False))
    json.dumps(out)
    assert "base has 2 steps and exp has 3" in out["notes"][0]
    assert [(s["base_step"], s["exp_step"]) for s in out["steps"]] == [("3", "8"), ("4", "9")]
    s = out["steps"][0]
    assert s["base"]["host_us"] == 100.0 and s["delta"]["device_us"] == 10.0  # kernels 5us -> 15us
    phases = [(p["phase"], p["base"] is not None, p["exp"] is not None) for p in s["phases"]]
    assert phases == [
        ("data loading", True, True),
        ("fwd", True, True),
        ("backward", True, True),
        ("optimizer", True, False),
    ]
    fwd = s["phases"][1]
    assert fwd["base"]["host_us"] == 40.0 and fwd["delta"]["calls"] == 0
    mm = {o["name"]: o for o in fwd["ops"]}["aten::mm"]
    assert (mm["base"]["host_total_us"], mm["exp"]["host_total_us"], mm["delta"]["host_total_us"]) == (10.0, 30.0, 20.0)
    assert mm["delta"]["device_self_us"] == 10.0


def test_op_table_totals_and_order():
    out = diff(training(2, 1, 10), training(2, 1, 30, with_opt=False))
    ops = out["ops"]
    names = [o["name"] for o in ops]
    assert names[0] == "aten::mm"  # largest |delta host_total|
    fwd = {o["name"]: o for o in ops}["fwd"]
    assert (
        fwd["base"]["calls"] == 2 and fwd["base"]["device_total_us"] == 10.0 and fwd["exp"]["device_total_us"] == 30.0
    )
    assert fwd["base"]["host_self_us"] == 60.0  # 2 x (40 - 10)
    opt = {o["name"]: o for o in ops}["Optimizer.step#SGD.step"]
    assert opt["exp"]["calls"] == 0 and opt["delta"]["calls"] == -2
    assert out["base"]["calls"] == out["exp"]["calls"] + 2
    assert [p["phase"] for p in out["phases"]] == ["data loading", "fwd", "backward", "optimizer"]


def test_identical_profiles_have_zero_deltas():
    t = training(2, 1, 10)
    out = diff(t, t)
    assert all(v == 0 for o in out["ops"] for v in o["delta"].values())
    assert out["notes"] == []


def test_real_traces(shared_traces):
    from profiler_core.trace.read.reader import read_trace

    a = read_trace(next((shared_traces / "torch_cpu_cnn" / "single").glob("*.gz")))
    b = read_trace(sorted((shared_traces / "torch_cpu_cnn" / "ddp_gloo").glob("*.gz"))[0])
    out = diff(a, b)
    phases = [p["phase"] for p in out["phases"]]
    assert {"data loading", "forward_pass", "backward", "optimizer"} <= set(phases)
    assert any(p["phase"] == "gloo:all_reduce" and p["base"] is None for p in out["phases"])
    assert len(out["steps"]) == 4


def _loader_last(n_steps):
    """Like training(n, 1, 10) but each step loads its data at the end (prefetch) instead of first."""
    rows = []
    for i in range(n_steps):
        b = i * 100 * US
        rows += [
            ("user_annotation", f"ProfilerStep#{1 + i}", 1, 1, b, 100 * US),
            ("user_annotation", "fwd", 1, 1, b + 1 * US, 40 * US),
            ("cpu_op", "autograd::engine::evaluate_function: MmBackward0", 1, 1, b + 50 * US, 30 * US),
            ("user_annotation", "enumerate(DataLoader)#_Iter.__next__", 1, 1, b + 85 * US, 12 * US),
        ]
    return mk(rows)


def test_phases_in_another_order_are_aligned_by_name():
    """Issue 23 item 14: data loading first in one run and last in the other is one row per step."""
    out = diff(training(2, 1, 10, with_opt=False), _loader_last(2))
    for s in out["steps"] + [{"phases": out["phases"]}]:
        names = [p["phase"] for p in s["phases"]]
        assert names == ["data loading", "fwd", "backward"], names
        dl = s["phases"][0]
        assert dl["base"] is not None and dl["exp"] is not None
    dl = out["steps"][0]["phases"][0]
    assert (dl["base"]["host_us"], dl["exp"]["host_us"], dl["delta"]["host_us"]) == (10.0, 12.0, 2.0)


def test_align_by_name_places_one_sided_names_after_their_predecessor():
    from tb_plugin.views.diff import align_by_name

    assert align_by_name(["a", "b", "c"], ["c", "a", "x", "b", "y"]) == [
        ("a", "a"),
        (None, "x"),
        ("b", "b"),
        (None, "y"),
        ("c", "c"),
    ]
    assert align_by_name(["a", "b"], ["z", "b"]) == [(None, "z"), ("a", None), ("b", "b")]
    assert align_by_name([], ["p"]) == [(None, "p")]
