"""Operators view: host/device self and total times, grouping, exclusions, sorting, call stacks, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tb_plugin.errors import BadRequest
from tb_plugin.views import operators

from .test_views_common_support import kernel, make_trace, op, runtime


def gpu_trace():
    return make_trace(
        [
            op("ProfilerStep#1", 0, 200, ext=1),
            op("aten::linear", 10, 90, ext=2, **{"Input Dims": [[4, 16], [8, 16], [8]]}),
            op("aten::t", 12, 5, ext=3, **{"Call stack": "model.py(10): forward;train.py(3): <module>"}),
            op("aten::addmm", 20, 60, ext=4),
            runtime("cudaLaunchKernel", 30, 5, corr=1, ext=4),
            kernel("volta_sgemm_64x64_nn", 40, 50, corr=1),
            op("aten::relu", 110, 20, ext=5, **{"Input Dims": [[4, 8]]}),
            runtime("cudaLaunchKernel", 112, 3, corr=2, ext=5),
            kernel("relu_kernel", 120, 10, corr=2),
            op("aten::relu", 140, 20, ext=6, **{"Input Dims": [[8, 8]]}),
            op("my_region", 162, 4, ext=8, cat="user_annotation"),
            op("Optimizer.step#SGD.step", 170, 10, ext=7, cat="user_annotation"),
            op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 185, 10, ext=9),
        ]
    )


def test_group_by_name_times_and_order():
    res = operators.operators(gpu_trace(), "name")
    assert res["device"] is True
    rows = {r["name"]: r for r in res["rows"]}
    assert [r["name"] for r in res["rows"]] == ["aten::addmm", "aten::relu", "aten::linear", "aten::t", "my_region"]
    assert rows["aten::linear"] == {
        "name": "aten::linear",
        "calls": 1,
        "host_self_us": 25.0,
        "host_total_us": 90.0,
        "device_self_us": 0.0,
        "device_total_us": 50.0,
        "tc_eligible": True,
        "has_call_stack": False,
    }
    assert rows["aten::addmm"]["host_self_us"] == 55.0  # 60 minus its 5 µs launch call
    assert rows["aten::addmm"]["device_self_us"] == 50.0 and rows["aten::addmm"]["tc_eligible"]
    assert rows["aten::relu"] == {
        "name": "aten::relu",
        "calls": 2,
        "host_self_us": 37.0,
        "host_total_us": 40.0,
        "device_self_us": 10.0,
        "device_total_us": 10.0,
        "tc_eligible": False,
        "has_call_stack": False,
    }
    assert rows["aten::t"]["has_call_stack"] is True
    json.dumps(res)


def test_group_by_name_and_shape():
    rows = operators.operators(gpu_trace(), "name_shape")["rows"]
    relu = [(r["input_shape"], r["calls"], r["device_self_us"]) for r in rows if r["name"] == "aten::relu"]
    assert relu == [("[[4, 8]]", 1, 10.0), ("[[8, 8]]", 1, 0.0)]
    assert {r["name"]: r["input_shape"] for r in rows}["aten::linear"] == "[[4, 16], [8, 16], [8]]"
    assert {r["name"]: r["input_shape"] for r in rows}["my_region"] == "[]"


def test_eligibility_is_inherited_from_children():
    t = make_trace([op("MyConvBlock", 0, 50, ext=1), op("aten::conv2d", 5, 40, ext=2), op("aten::add", 60, 5, ext=3)])
    rows = {r["name"]: r["tc_eligible"] for r in operators.operators(t)["rows"]}
    assert rows == {"MyConvBlock": True, "aten::conv2d": True, "aten::add": False}


def test_cpu_only_sorted_by_host_self_time():
    t = make_trace(
        [
            op("ProfilerStep#1", 0, 100, ext=1),
            op("aten::b", 0, 10, ext=2),
            op("aten::a", 20, 10, ext=3),
            op("aten::c", 40, 30, ext=4),
        ]
    )
    res = operators.operators(t)
    assert res["device"] is False and res["sort"] == "host_self_us"
    assert [r["name"] for r in res["rows"]] == ["aten::c", "aten::a", "aten::b"]  # ties broken by name


def test_operator_stacks():
    res = operators.operator_stacks(gpu_trace(), "aten::t")
    assert res["rows"][0]["call_stack"] == ["model.py(10): forward", "train.py(3): <module>"]
    assert res["rows"][0]["calls"] == 1 and res["rows"][0]["host_self_us"] == 5.0
    assert operators.operator_stacks(gpu_trace(), "aten::relu", "[[8, 8]]")["rows"] == []  # no stack recorded
    assert operators.operator_stacks(gpu_trace(), "no_such_op")["rows"] == []


def py(name, ts, dur, pyid, parent=None, tid=1, **extra):
    return {
        "ph": "X",
        "cat": "python_function",
        "name": name,
        "pid": 1,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": {"Python id": pyid, "Python parent id": parent, **extra},
    }


def test_call_stacks_from_python_function_events():
    """torch >= 1.11 with_stack: frames are python_function events; the op's stack is the frames running then."""
    t = make_trace(
        [
            py("train.py(3): <module>", 0, 100, 1),
            py("model.py(10): forward", 5, 40, 2, parent=1),
            py("nn.Module: Linear_0", 6, 30, 3, parent=2, **{"Python module id": 0}),
            py("torch/nn/modules/linear.py(124): forward", 7, 20, 4, parent=3),
            op("aten::linear", 8, 10, ext=1),
            py("model.py(20): helper", 50, 10, 5, parent=1),
            op("aten::linear", 52, 5, ext=2),
            op("aten::add", 70, 5, ext=3),
            op("aten::add", 120, 5, ext=4),  # after every frame ended: no stack
            op("aten::mul", 10, 5, ext=5, tid=2),  # another thread: no frames there
        ]
    )
    rows = {r["name"]: r for r in operators.operators(t)["rows"]}
    assert rows["aten::linear"]["has_call_stack"] and rows["aten::add"]["has_call_stack"]
    assert not rows["aten::mul"]["has_call_stack"]
    stacks = {tuple(r["call_stack"]): r["calls"] for r in operators.operator_stacks(t, "aten::linear")["rows"]}
    assert stacks == {
        (
            "torch/nn/modules/linear.py(124): forward",
            "nn.Module: Linear_0",
            "model.py(10): forward",
            "train.py(3): <module>",
        ): 1,
        ("model.py(20): helper", "train.py(3): <module>"): 1,
    }
    add = operators.operator_stacks(t, "aten::add")["rows"]
    assert [(r["call_stack"], r["calls"]) for r in add] == [(["train.py(3): <module>"], 1)]


@pytest.mark.parametrize("group_by", ["", "Operation", "name_op", None])
def test_bad_group_by(group_by):
    with pytest.raises(BadRequest, match="group_by"):
        operators.operators(gpu_trace(), group_by)


def test_bad_request_is_a_value_error_and_stacks_need_a_name():
    assert issubclass(BadRequest, ValueError)
    with pytest.raises(BadRequest):
        operators.operator_stacks(gpu_trace(), "")


def test_empty_trace():
    assert operators.operators(make_trace([]))["rows"] == []


def test_invariants_on_a_synthetic_gpu_trace():
    """Every kernel is launched inside an op: device self times add up to the kernel time, totals to self."""
    from profiler_core.analysis.tables import kernels

    from .test_views_common_support import synthetic_gpu_trace

    t = synthetic_gpu_trace(n_ops=3000, ops_per_step=500)
    rows = operators.operators(t)["rows"]
    kernel_us = sum(r["total_us"] for r in kernels.kernels(t)["rows"])
    assert sum(r["device_self_us"] for r in rows) == pytest.approx(kernel_us)
    by = {r["name"]: r for r in rows}
    assert by["aten::empty"]["calls"] == 3000 and by["aten::empty"]["device_self_us"] == pytest.approx(kernel_us)
    assert by["aten::empty"]["host_self_us"] == pytest.approx(3000 * 7.0)  # 10 µs minus the 3 µs launch
    assert sum(by[f"aten::op{k}"]["calls"] for k in range(50)) == 3000
    assert all(by[f"aten::op{k}"]["host_self_us"] == pytest.approx(60 * 5.0) for k in range(50))


@pytest.mark.parametrize("seed", range(6))
def test_eligible_walk_up_matches_the_level_sweep(seed):
    # op_stats' walk up from the eligible nodes gives what a sweep over every level (deepest first) gives
    from profiler_core.analysis.tables.operators import _eligible_up

    rng = np.random.default_rng(seed)
    n = 300
    parent = np.full(n, -1, np.int64)
    depth = np.zeros(n, np.int64)
    for i in range(1, n):
        if rng.random() < 0.9:
            parent[i] = int(rng.integers(0, i))
            depth[i] = depth[parent[i]] + int(rng.integers(1, 3))  # (merged nodes: a parent two levels up)
    is_op = rng.random(n) < 0.7
    start = rng.random(n) < 0.05
    want_e, want_b = start.copy(), np.zeros(n, dtype=bool)
    for d in range(int(depth.max()), 0, -1):
        sel = np.flatnonzero((depth == d) & (parent >= 0))
        p = parent[sel]
        want_b[p[want_e[sel] | want_b[sel]]] = True
        inherit = np.zeros(n, dtype=bool)
        inherit[p[want_e[sel]]] = True
        want_e |= inherit & is_op
    got_e, got_b = start.copy(), np.zeros(n, dtype=bool)
    _eligible_up(parent, is_op, got_e, got_b)
    assert np.array_equal(got_e, want_e) and np.array_equal(got_b, want_b)
