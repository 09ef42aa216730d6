"""One definition per analysis concept (issue 21): category names, the [start, end) boundary rule, interval
algebra and host/device self time. Every expected value is derived by hand in the comments, and every
consumer (Operators, Diff, Modules, key_averages(), the summaries, the capture-side link) is asked for it.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from profiler_core.analysis import events_from_trace, intervals
from profiler_core.analysis import synthetic as syn
from profiler_core.analysis.stages import registry
from profiler_core.analysis.stages.node_stats import node_stats
from profiler_core.analysis.tables import operators
from profiler_core.cuda.link import link_gpu_to_ops as capture_link
from profiler_core.trace.categories import normalise_category
from profiler_core.trace.read.reader import read_trace
from tb_plugin.summaries.summary import summarize
from tb_plugin.views import diff, memory, modules


def _read(tmp_path, trace: dict, name: str = "t.pt.trace.json"):
    p = tmp_path / name
    p.write_text(json.dumps(trace))
    return read_trace(str(p))


def _op_row(rows: list[dict], name: str) -> dict:
    return next(r for r in rows if r["name"] == name)


def _ka(trace: dict, name: str):
    return next(e for e in events_from_trace(copy.deepcopy(trace)).key_averages() if e.key == name)


# ------------------------------------------------------------------------------------------------ categories
def test_every_category_spelling_normalises_to_kinetos_name():
    # torch 1.8 wrote Operator/Runtime/Driver/Memcpy/Memset/Kernel/Python; torch 2 writes Kineto's names
    expected = {
        "Operator": "cpu_op",
        "cpu_op": "cpu_op",
        "user_annotation": "user_annotation",
        "Python": "python_function",
        "python_function": "python_function",
        "Kernel": "kernel",
        "Memcpy": "gpu_memcpy",
        "Memset": "gpu_memset",
        "Runtime": "cuda_runtime",
        "Driver": "cuda_driver",
        "cuda_driver": "cuda_driver",
        "gpu_user_annotation": "gpu_user_annotation",
        "cuda_sync": "cuda_sync",
        "Trace": "trace",
        "Weird": "weird",
    }
    assert {k: normalise_category(k) for k in expected} == expected


def test_reader_and_key_averages_read_an_old_driver_call_alike(tmp_path):
    # a torch-1.8 "Driver" call under an op: the reader and key_averages() both see a cuda_driver call,
    # which key_averages() takes out of the op's self time (10 - 4 = 6 us) and the reader categorises
    tr = syn.trace([syn.op("aten::mm", 0, 10, ext=1), syn.runtime("cuLaunchKernel", 2, 4, corr=5, ext=1, cat="Driver")])
    t = _read(tmp_path, tr)
    assert sorted(t.events["cat"].astype(str)) == ["cpu_op", "cuda_driver"]
    assert _ka(tr, "aten::mm").self_cpu_time_total == pytest.approx(6.0)
    assert _ka(tr, "cuLaunchKernel").cpu_time_total == pytest.approx(4.0)


def test_epoch_microsecond_floats_give_the_same_ns_to_the_reader_and_key_averages(tmp_path):
    # HTA's ns-resolution trace writes epoch µs (1.7e15) with 3 decimals; as floats they hold quarter µs. An op
    # at T = 1712195495519689.0 us for 1 us holds a child at T + 0.75 for 0.25 us: both end at T + 1, so the
    # child is inside and the op's self time is 1 - 0.25 = 0.75 us. (Multiplying T + 0.75 by 1000 in floats
    # lands 22 ns early and pushes the child's end 18 ns past the op's.)
    T = 1712195495519689.0
    tr = syn.trace([syn.op("outer", T, 1.0, ext=1), syn.op("inner", T + 0.75, 0.25, ext=2)])
    t = _read(tmp_path, tr)
    assert _op_row(operators.operators(t)["rows"], "outer")["host_self_us"] == 0.75
    assert _ka(tr, "outer").self_cpu_time_total == pytest.approx(0.75, abs=1e-9)


# ------------------------------------------------------------------------------------------- boundary rule
def test_holds_is_half_open():
    assert intervals.holds(10, 20, 10) and intervals.holds(10, 20, 19)
    assert not intervals.holds(10, 20, 20) and not intervals.holds(10, 10, 10)  # a zero-length range holds nothing
    got = intervals.holds(np.array([0, 0, 5]), np.array([5, 5, 5]), np.array([4, 5, 5]))
    assert got.tolist() == [True, False, False]


def _boundary_trace() -> dict:
    # outer [0, 100] holds inner [10, 30]; a 64-byte allocation at t = 30 (inner's end) and a launch call
    # at t = 30. By [start, end): both belong to outer, not inner.
    return syn.trace(
        [
            syn.op("outer", 0, 100, ext=1),
            syn.op("inner", 10, 20, ext=2),
            syn.memory(30, 64, addr=7),
            syn.memory(90, -64, addr=7),
        ]
    )


def test_memory_record_at_an_ops_end_goes_to_the_enclosing_op_everywhere(tmp_path):
    tr = _boundary_trace()
    # key_averages(): self CPU memory = own records - children's: outer 64 - 64 + (-64) ... by hand:
    # outer holds +64 (t=30) and -64 (t=90): 0 in total; inner holds nothing.
    assert _ka(tr, "inner").cpu_memory_usage == 0
    assert _ka(tr, "outer").self_cpu_memory_usage == 0
    # the Memory view names the op around the allocation: outer
    t = _read(tmp_path, tr)
    rows = memory.memory_events(t)["rows"]
    (dev,) = [d for d in rows if rows[d]]
    assert [r["op"] for r in rows[dev]] == ["outer"]


def test_memory_record_inside_an_op_goes_to_the_innermost(tmp_path):
    # the same, 1 ns earlier (t = 29.999 us): inside inner in every consumer
    tr = syn.trace(
        [
            syn.op("outer", 0, 100, ext=1),
            syn.op("inner", 10, 20, ext=2),
            syn.memory(29.999, 64, addr=7),
            syn.memory(90, -64, addr=7),
        ]
    )
    assert _ka(tr, "inner").cpu_memory_usage == 64
    t = _read(tmp_path, tr)
    rows = memory.memory_events(t)["rows"]
    (dev,) = [d for d in rows if rows[d]]
    assert [r["op"] for r in rows[dev]] == ["inner"]


def test_capture_side_links_a_call_at_an_ops_end_to_the_enclosing_op():
    def op(name, ext, ts, dur):
        return {
            "ph": "X",
            "cat": "cpu_op",
            "name": name,
            "pid": 1,
            "tid": 1,
            "ts": ts,
            "dur": dur,
            "args": {"External id": ext},
        }

    call = {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "pid": 1,
        "tid": 1,
        "ts": 30,
        "dur": 1,
        "args": {"correlation": 9},
    }
    capture_link([call], [op("outer", 1, 0, 100), op("inner", 2, 10, 20)])
    assert call["args"]["External id"] == 1  # inner ends at 30: outside it


def test_a_launch_at_a_collectives_end_is_not_inside_it():
    # record_param_comms allreduce #1 [60, 70] launches K1 at 61 and K2 at 70 (its end: outside it by the one
    # boundary rule); allreduce #2 [80, 90] has no launch in the trace. By hand: #1 owns K1; K2, launched
    # outside every call, goes by order to the first allreduce call owning no kernel: #2. One kernel each.
    from profiler_core.analysis.comm import collectives

    from .test_views_common_support import kernel, make_trace, op, runtime

    args = {"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 4, "Out msg nelems": 4}
    k = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    t = make_trace(
        [
            op("ProfilerStep#1", 0, 100, ext=1, cat="user_annotation"),
            op("record_param_comms", 60, 10, ext=3, **args),
            runtime("cudaLaunchKernelExC", 61, 2, corr=5, ext=3),
            runtime("cudaLaunchKernelExC", 70, 2, corr=6, ext=0),
            op("record_param_comms", 80, 10, ext=4, **args),
            kernel(k, 72, 5, corr=5),
            kernel(k, 92, 5, corr=6),
        ]
    )
    assert collectives.collectives(t)["kernels"].tolist() == [1, 1]


# ----------------------------------------------------------------------------------------------- intervals
def test_interval_algebra_by_hand():
    a = intervals.merge_ranges(np.array([0, 5, 20]), np.array([10, 12, 30]))  # [0,12) [20,30)
    b = intervals.merge_ranges(np.array([8, 25]), np.array([22, 40]))  # [8,22) [25,40)
    assert a.tolist() == [[0, 12], [20, 30]]
    both = intervals.intersect_ranges(a, b)  # [8,12) [20,22) [25,30)
    assert both.tolist() == [[8, 12], [20, 22], [25, 30]] and intervals.total_length(both) == 11
    assert intervals.union_length(np.array([0, 5, 20]), np.array([10, 12, 30])) == 22
    assert intervals.clip_ranges(a, 10, 25).tolist() == [[10, 12], [20, 25]]
    assert intervals.union_in(intervals.prepare(np.array([0, 5, 20]), np.array([10, 12, 30])), 10, 25) == 7
    assert intervals.subtract_ranges(a, b).tolist() == [[0, 8], [22, 25]]  # a minus [8,22) [25,40)
    assert intervals.subtract_ranges(b, a).tolist() == [[12, 20], [30, 40]]
    assert intervals.subtract_ranges(a, a[:0]).tolist() == a.tolist()


# ----------------------------------------------------------------------------------------------- self time
def _mm_trace() -> dict:
    # the example: aten::mm over [10, 60] us with a 30 us cudaLaunchKernel child launching a 5 us
    # kernel. Host self = 50 - 30 = 20 us; device self = device total = 5 us.
    return syn.trace(
        [
            syn.annotation("ProfilerStep#1", 0, 100, ext=1),
            syn.op("aten::mm", 10, 50, ext=2),
            syn.runtime("cudaLaunchKernel", 20, 30, corr=7, ext=2),
            syn.kernel("gemm_kernel", 55, 5, corr=7, ext=2),
        ],
        gpu=True,
    )


def test_mm_self_time_is_one_number_in_every_consumer(tmp_path):
    tr = _mm_trace()
    t = _read(tmp_path, tr)
    want = {"host_self_us": 20.0, "host_total_us": 50.0, "device_self_us": 5.0, "device_total_us": 5.0}
    got_ops = _op_row(operators.operators(t)["rows"], "aten::mm")
    got_diff = _op_row(diff.diff(t, t)["ops"], "aten::mm")["base"]
    got_summary = _op_row(summarize(t).top_operators, "aten::mm")
    for got in (got_ops, got_diff, got_summary):
        assert {k: got[k] for k in want} == want
    ka = _ka(tr, "aten::mm")
    assert (ka.self_cpu_time_total, ka.cpu_time_total) == pytest.approx((20.0, 50.0))


def _comms_trace() -> dict:
    # record_param_comms [0, 100] (External id 1) holds a 5 us call at 2 and the NCCL annotation [10, 70],
    # which holds a 20 us call at 20 that carries record_param_comms' External id (as real traces do).
    # Each call is subtracted once, from the node that holds it:
    #   record_param_comms: 100 - 60 - 5 = 35 us;  nccl:all_reduce: 60 - 20 = 40 us.
    return syn.trace(
        [
            syn.annotation("ProfilerStep#1", 0, 200, ext=9),
            syn.op("record_param_comms", 0, 100, ext=1),
            syn.runtime("cudaStreamIsCapturing", 2, 5, corr=3, ext=1),
            syn.annotation("nccl:all_reduce", 10, 60, ext=2),
            syn.runtime("cudaLaunchKernel", 20, 20, corr=4, ext=1),
            syn.kernel("ncclKernel_AllReduce", 45, 30, corr=4, ext=1),
        ],
        gpu=True,
    )


def test_runtime_calls_under_an_annotation_are_subtracted_once(tmp_path):
    tr = _comms_trace()
    t = _read(tmp_path, tr)
    ops = operators.operators(t)["rows"]
    d = diff.diff(t, t)["ops"]
    for name, host_self in (("record_param_comms", 35.0), ("nccl:all_reduce", 40.0)):
        assert _op_row(ops, name)["host_self_us"] == host_self
        assert _op_row(d, name)["base"]["host_self_us"] == host_self
        assert _ka(tr, name).self_cpu_time_total == pytest.approx(host_self)
    # the kernel's 30 us go to the op that launched it (External id 1), in Operators and key_averages alike
    assert _op_row(ops, "record_param_comms")["device_self_us"] == 30.0
    assert _ka(tr, "record_param_comms").self_device_time_total == pytest.approx(30.0)


def test_children_sticking_out_of_their_parent_never_make_self_negative(tmp_path):
    # outer [0, 40]; mid [4, 38]; leaf [5, 39] ends 1 us after mid (ns rounding in real traces), so the
    # tree hangs leaf under outer too. Time covered under outer: [4, 39] = 35 -> self 40 - 35 = 5 us
    # (the sum of durations would give 40 - 34 - 34 = -28). mid holds nothing: self 34.
    t = _read(
        tmp_path, syn.trace([syn.op("outer", 0, 40, ext=1), syn.op("mid", 4, 34, ext=2), syn.op("leaf", 5, 34, ext=3)])
    )
    st = node_stats(t)
    by_name = dict(zip(st["name"].astype(str), st["host_self"] / 1e3))
    assert by_name == pytest.approx({"outer": 5.0, "mid": 34.0, "leaf": 34.0})


def test_a_range_overlapping_an_earlier_one_still_holds_the_ranges_inside_it(tmp_path):
    # HTA's MTIA trace has this shape: hccl:all_to_all starts inside an earlier annotation and outlasts it, and
    # holds the step's forward. ProfilerStep#1 [0, 200]; aten::a [10, 40]; hccl:all_to_all [30, 150] (starts
    # inside aten::a, ends after it); "## forward ##" [50, 140] inside it, holding aten::mm [60, 70], which
    # launches a 5 us kernel. torch's tree (a stack per thread): aten::a is closed when all_to_all does not fit
    # in it, so all_to_all hangs under the step and holds forward, which holds aten::mm. By hand:
    #   self: all_to_all 120 - 90 = 30; forward 90 - 10 = 80; the step's children aten::a and all_to_all cover
    #   [10, 150]: step 200 - 140 = 60 (node_stats counts their 10 us overlap once; torch's sum gives 50)
    #   device total: aten::mm, forward, all_to_all and the step each 5
    tr = syn.trace(
        [
            syn.annotation("ProfilerStep#1", 0, 200, ext=1),
            syn.op("aten::a", 10, 30, ext=2),
            syn.annotation("hccl:all_to_all", 30, 120, ext=3),
            syn.annotation("## forward ##", 50, 90, ext=4),
            syn.op("aten::mm", 60, 10, ext=5),
            syn.runtime("cudaLaunchKernel", 62, 2, corr=9, ext=5),
            syn.kernel("gemm", 100, 5, corr=9),
        ],
        gpu=True,
    )
    t = _read(tmp_path, tr)
    want = {"hccl:all_to_all": 30.0, "## forward ##": 80.0, "aten::a": 30.0}
    ops = operators.operators(t)["rows"]
    d = diff.diff(t, t)["ops"]
    for name, host_self in want.items():
        assert _op_row(ops, name)["host_self_us"] == host_self, name
        assert _op_row(d, name)["base"]["host_self_us"] == host_self, name
        assert _ka(tr, name).self_cpu_time_total == pytest.approx(host_self), name
    st = node_stats(t)
    cols = zip(st["name"].astype(str), st["host_self"], st["device_total"])
    by_name = {n: (hs / 1e3, dt / 1e3) for n, hs, dt in cols}
    assert by_name["ProfilerStep#1"] == (60.0, 5.0)
    assert _ka(tr, "ProfilerStep*").self_cpu_time_total == pytest.approx(50.0)
    assert by_name["hccl:all_to_all"] == (30.0, 5.0) and by_name["## forward ##"] == (80.0, 5.0)


def test_module_self_time_is_relative_to_the_module_tree(tmp_path):
    # Intended difference: the Modules view's self time is the module's time outside its child modules
    # (ops inside count as the module's own), while an op's self time excludes every child node.
    # Module "Net" [0, 100] holds op aten::linear [10, 50] which holds module "Sub" [20, 40]:
    #   Modules: Net self = 100 - 20 (Sub) = 80; Operators: aten::linear self = 40 - 20 = 20.
    def module(name, ts, dur, pyid, parent=None):
        ev = syn.python_frame(name, ts, dur, pyid, parent)
        ev["args"]["Python module id"] = pyid
        return ev

    tr = syn.trace(
        [
            module("nn.Module: Net", 0, 100, 1),
            syn.op("aten::linear", 10, 40, ext=1),
            module("nn.Module: Sub", 20, 20, 2, parent=1),
        ]
    )
    t = _read(tmp_path, tr)
    (net,) = modules.modules(t)["tree"]
    assert (net["host_total_us"], net["host_self_us"]) == (100.0, 80.0)
    assert _op_row(operators.operators(t)["rows"], "aten::linear")["host_self_us"] == 20.0


def _module(name: str, ts: float, dur: float, pyid: int, parent: int | None = None) -> dict:
    ev = syn.python_frame(name, ts, dur, pyid, parent)
    ev["args"]["Python module id"] = pyid
    return ev


def test_module_device_time_is_the_launching_ops_device_time(tmp_path):
    # One GPU-to-op link (gpu_links) and one device self per node (node_stats); a module's device self is that
    # of the nodes whose nearest module it is. Module "Net" [0, 100] holds aten::linear [10, 50] (launches a
    # 10 us kernel) and aten::add [60, 70] (a 3 us memcpy); aten::linear holds module "Sub" [20, 40], which holds
    # aten::relu [22, 30] (a 4 us kernel).
    #   Modules: Net self = 10 + 3 = 13, Sub self = 4; Net total = 13 + 4 = 17, Sub total = 4; Net holds 3 ops.
    #   Operators: aten::linear device self 10, device total 10 + 4 = 14 (Sub's relu runs under it).
    tr = syn.trace(
        [
            _module("nn.Module: Net", 0, 100, 1),
            syn.op("aten::linear", 10, 40, ext=1),
            syn.runtime("cudaLaunchKernel", 12, 2, corr=11, ext=1),
            _module("nn.Module: Sub", 20, 20, 2, parent=1),
            syn.op("aten::relu", 22, 8, ext=2),
            syn.runtime("cudaLaunchKernel", 24, 2, corr=12, ext=2),
            syn.op("aten::add", 60, 10, ext=3),
            syn.runtime("cudaMemcpyAsync", 62, 2, corr=13, ext=3),
            syn.kernel("gemm", 50, 10, corr=11),
            syn.kernel("relu_kernel", 70, 4, corr=12),
            syn.memcpy(80, 3, corr=13),
        ],
        gpu=True,
    )
    t = _read(tmp_path, tr)
    (net,) = modules.modules(t)["tree"]
    (sub,) = net["children"]
    assert (net["device_self_us"], net["device_total_us"], net["operators"]) == (13.0, 17.0, 3)
    assert (sub["device_self_us"], sub["device_total_us"], sub["operators"]) == (4.0, 4.0, 1)
    linear = _op_row(operators.operators(t)["rows"], "aten::linear")
    assert (linear["device_self_us"], linear["device_total_us"]) == (10.0, 14.0)


# ---------------------------------------------------------------------------------------------- stage graph
def test_stage_declarations_match_the_written_graph():
    """Each analysis package writes its part of the stage graph; their union equals what the @stage
    declarations of every analysis module say (imported here: a stage is declared on import)."""
    import importlib
    import pkgutil

    import profiler_core.analysis as analysis
    from profiler_core.analysis import comm, gpu_idle, roofline, stages, tables, worker

    for m in pkgutil.walk_packages(analysis.__path__, analysis.__name__ + "."):
        importlib.import_module(m.name)
    parts = [stages.GRAPH, comm.GRAPH, gpu_idle.GRAPH, tables.GRAPH, worker.GRAPH, roofline.GRAPH]
    written: dict = {}
    for part in parts:
        assert not set(part) & set(written), "a stage is written in two packages"
        written.update(part)
    assert dict(registry.DEPENDENCIES) == written


def test_children_cover_holds_for_long_traces_too():
    # 2**20 nodes over a 2**45 ns span: (node, time) keys would overflow int64, so times are ranked first.
    # node 0: children [4,38) and [5,39) -> 35; the last node: [0,10) and [2**44, 2**45) (clipped) -> 10 + 2**44
    from profiler_core.analysis.stages.node_stats import _children_cover

    n = 2**20
    got = _children_cover(
        n,
        np.zeros(n, np.int64),
        np.full(n, 2**45, np.int64),
        np.array([0, 0, n - 1, n - 1]),
        np.array([4, 5, 0, 2**44]),
        np.array([38, 39, 10, 2**45 + 5]),
    )
    assert (got[0], got[n - 1]) == (35.0, 10.0 + 2**44)
