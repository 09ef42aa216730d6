"""Module view: nn.Module hierarchy from python_function module events, annotation fallback,
host/device self/total, merged occurrences."""

import json

from tb_plugin.views.modules import modules

from . import trace_builder as tb
from .trace_builder import read_events

COLS = ["cat", "name", "pid", "tid", "ts", "dur", "python_module_id", "external_id", "correlation"]
US = 1000


def mk(rows):
    """A trace of rows (cat, name, pid, tid, ts_ns, dur_ns, python_module_id, external_id, correlation)."""
    return read_events(tb.rows(rows, COLS))


def model_trace():
    # Net [0,100] > Linear_0 [10,40] (op aten::linear [12,38] launching kernel k1 of 5us),
    #             > ReLU_0 [50,60] (op aten::relu [51,59]); called twice (second copy at +200us)
    rows = []
    for base in (0, 200 * US):
        rows += [
            ("python_function", "nn.Module: Net_0", 1, 1, base, 100 * US, 0),
            ("python_function", "nn.Module: Linear_0", 1, 1, base + 10 * US, 30 * US, 0),
            ("cpu_op", "aten::linear", 1, 1, base + 12 * US, 26 * US, -1, base + 1),
            ("cuda_runtime", "cudaLaunchKernel", 1, 1, base + 13 * US, 2 * US, -1, base + 1, base + 7),
            ("kernel", "k1", 0, 7, base + 20 * US, 5 * US, -1, base + 1, base + 7),
            ("python_function", "nn.Module: ReLU_0", 1, 1, base + 50 * US, 10 * US, 0),
            ("cpu_op", "aten::relu", 1, 1, base + 51 * US, 8 * US),
        ]
    return mk(rows)


def test_module_tree():
    out = modules(model_trace())
    json.dumps(out)
    assert out["source"] == "modules"
    (net,) = out["tree"]
    assert (net["name"], net["occurrences"], net["host_total_us"], net["host_self_us"]) == (
        "nn.Module: Net_0",
        2,
        200.0,
        120.0,
    )
    assert net["device_total_us"] == 10.0 and net["device_self_us"] == 0.0 and net["operators"] == 4
    lin, relu = net["children"]
    assert (lin["name"], lin["host_total_us"], lin["device_self_us"], lin["avg_host_us"]) == (
        "nn.Module: Linear_0",
        60.0,
        10.0,
        30.0,
    )
    assert relu["name"] == "nn.Module: ReLU_0" and relu["operators"] == 2 and relu["device_total_us"] == 0.0
    assert lin["path"] == "nn.Module: Net_0/nn.Module: Linear_0"


def test_annotation_fallback():
    t = mk(
        [
            ("user_annotation", "ProfilerStep#1", 1, 1, 0, 100 * US),
            ("user_annotation", "forward", 1, 1, 0, 60 * US),
            ("user_annotation", "block", 1, 1, 10 * US, 20 * US),
            ("cpu_op", "aten::mm", 1, 1, 12 * US, 5 * US),
            ("user_annotation", "backward", 1, 1, 60 * US, 30 * US),
        ]
    )
    out = modules(t)
    assert out["source"] == "annotations"
    assert [n["name"] for n in out["tree"]] == ["forward", "backward"]  # execution order
    fwd = out["tree"][0]
    assert fwd["host_self_us"] == 40.0 and fwd["children"][0]["name"] == "block"
    assert fwd["children"][0]["operators"] == 1


def test_no_hierarchy():
    out = modules(mk([("cpu_op", "aten::mm", 1, 1, 0, 10)]))
    assert out == {"source": None, "tree": []}
    assert modules(mk([]))["tree"] == []


def test_real_trace_modules(shared_traces):
    from profiler_core.trace.read.reader import read_trace

    p = next((shared_traces / "torch_cpu_cnn" / "single").glob("*.gz"))
    out = modules(read_trace(p))
    assert out["source"] == "modules"
    (net,) = out["tree"]
    assert net["name"] == "nn.Module: Net_0" and net["occurrences"] == 4

    def walk(n):
        assert n["host_self_us"] <= n["host_total_us"] + 1e-6
        assert abs(sum(c["host_total_us"] for c in n["children"]) + n["host_self_us"] - n["host_total_us"]) < 0.01
        for c in n["children"]:
            walk(c)

    walk(net)
