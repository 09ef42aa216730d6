"""Issue 23, item 7 (first half): pre-Kineto exports (torch.autograd.profiler's export_chrome_trace: complete
events without `cat`) are read as CPU ops (and their "CUDA functions" events as kernels), not as an empty
operator table. Expected values come from the raw JSON."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from profiler_core.analysis.stages.columns import category_mask
from profiler_core.analysis.tables import kernels, operators
from profiler_core.trace.read.reader import read_trace

LEGACY = Path(__file__).parent / "data" / "issue23" / "legacy_export.json"


def test_legacy_export_operators_are_the_named_events():
    raw = json.loads(LEGACY.read_text())
    assert isinstance(raw, list) and all("cat" not in e for e in raw)
    calls = Counter(e["name"] for e in raw if e["ph"] == "X")
    t = read_trace(LEGACY, processes=0)
    assert set(t.events["cat"].astype(str)) == {"cpu_op"}
    rows = operators.operators(t)["rows"]
    got = {r["name"]: r["calls"] for r in rows}
    # every named event is an operator call (torch's same-name single-child merge can fold nested calls)
    assert set(got) == set(calls)
    assert all(1 <= got[n] <= calls[n] for n in calls)
    addmm = [e for e in raw if e["name"] == "aten::addmm"]
    assert got["aten::addmm"] == len(addmm) == 6
    total = next(r for r in rows if r["name"] == "train_step")["host_total_us"]
    assert total == pytest.approx(sum(e["dur"] for e in raw if e["name"] == "train_step"), abs=0.01)
    assert any("pre-Kineto" in w for w in t.warnings)


def test_legacy_export_cuda_functions_are_kernels(tmp_path):
    # the shape torch <= 1.7 wrote with use_cuda=True: the op, a cpu_to_cuda flow, the kernel on pid
    # "CUDA functions" with the device index as tid
    events = [
        {"name": "aten::mm", "ph": "X", "ts": 100.0, "dur": 20.0, "tid": 7, "pid": "CPU functions", "args": {}},
        {
            "name": "aten::mm",
            "ph": "s",
            "ts": 100.0,
            "tid": 7,
            "pid": "CPU functions",
            "id": 1,
            "cat": "cpu_to_cuda",
            "args": {},
        },
        {
            "name": "volta_sgemm_128x64_nn",
            "ph": "f",
            "ts": 110.0,
            "tid": 1,
            "pid": "CUDA functions",
            "id": 1,
            "cat": "cpu_to_cuda",
            "args": {},
        },
        {
            "name": "volta_sgemm_128x64_nn",
            "ph": "X",
            "ts": 110.0,
            "dur": 50.0,
            "tid": 1,
            "pid": "CUDA functions",
            "args": {},
        },
    ]
    path = tmp_path / "legacy_gpu.json"
    path.write_text(json.dumps(events))
    t = read_trace(path, processes=0)
    ev = t.events
    k = ev[ev["cat"].astype(str) == "kernel"]
    assert k["name"].astype(str).tolist() == ["volta_sgemm_128x64_nn"] and k["device"].tolist() == [1]
    assert ev[ev["cat"].astype(str) == "cpu_op"]["name"].astype(str).tolist() == ["aten::mm"]
    rows = kernels.kernels(t)["rows"]
    assert [(r["name"], r["calls"], r["total_us"]) for r in rows] == [("volta_sgemm_128x64_nn", 1, 50.0)]
    assert category_mask(ev, ("cpu_op",)).sum() == 1


def test_events_with_categories_are_left_alone(tmp_path):
    events = [
        {"name": "aten::mm", "ph": "X", "ts": 100.0, "dur": 20.0, "tid": 7, "pid": 1, "cat": "cpu_op"},
        {"name": "free text", "ph": "X", "ts": 130.0, "dur": 5.0, "tid": 7, "pid": 1},
    ]
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps({"traceEvents": events}))
    t = read_trace(path, processes=0)
    assert sorted(t.events["cat"].astype(str)) == ["", "cpu_op"]


# issue 37 item 7: chrome traces of other tools without `cat` whose events are GPU work are never a CPU run
def _other_tool(tmp_path, events, name="gpu_tool.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"traceEvents": events}))
    return read_trace(path, processes=0)


def test_a_gpu_only_trace_of_another_tool_reads_as_kernels(tmp_path):
    # a GPU timeline tool's export: kernels on "stream N" threads, launch args, no categories, no CPU process
    events = [
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
        {
            "ph": "X",
            "name": "void gemm_kernel<float>(...)",
            "pid": 0,
            "tid": "stream 7",
            "ts": 10.0,
            "dur": 5.0,
            "args": {"grid": [64, 1, 1], "block": [128, 1, 1]},
        },
        {"ph": "X", "name": "Memcpy HtoD", "pid": 0, "tid": "stream 7", "ts": 16.0, "dur": 2.0},
        {"ph": "X", "name": "elementwise_add", "pid": 0, "tid": "stream 9", "ts": 20.0, "dur": 3.0},
    ]
    t = _other_tool(tmp_path, events)
    ev = t.events
    assert set(ev["cat"].astype(str)) == {"kernel"}
    assert ev["stream"].tolist() == [7, 7, 9] and ev["device"].tolist() == [0, 0, 0]
    assert any("read as kernels" in w for w in t.warnings)
    rows = kernels.kernels(t)["rows"]
    assert {r["name"] for r in rows} == {e["name"] for e in events if e["ph"] == "X"}
    assert operators.operators(t)["rows"] == []  # no CPU run


def test_gpu_args_mark_the_tracks_of_another_tool_as_gpu_work(tmp_path):
    # numeric tids: the device / stream args say which track is the GPU's; the other track stays CPU ops
    events = [
        {
            "ph": "X",
            "name": "fused_op_12",
            "pid": 3,
            "tid": 2,
            "ts": 1.0,
            "dur": 4.0,
            "args": {"device": 3, "stream": 2},
        },
        {"ph": "X", "name": "fused_op_13", "pid": 3, "tid": 2, "ts": 6.0, "dur": 4.0},
        {"ph": "X", "name": "host_loop", "pid": 900, "tid": 900, "ts": 0.0, "dur": 20.0},
    ]
    t = _other_tool(tmp_path, events)
    cats = dict(zip(t.events["name"].astype(str), t.events["cat"].astype(str)))
    assert cats == {"fused_op_12": "kernel", "fused_op_13": "kernel", "host_loop": "cpu_op"}
    assert t.events.set_index(t.events["name"].astype(str)).loc["fused_op_13", "device"] == 3


def test_a_real_legacy_export_is_still_cpu_ops_whatever_its_names(tmp_path):
    raw = json.loads(LEGACY.read_text())
    raw[0] = {**raw[0], "name": "cudnn_setup_kernel"}  # a kernel-like name on "CPU functions": still a CPU op
    path = tmp_path / "legacy.json"
    path.write_text(json.dumps(raw))
    assert set(read_trace(path, processes=0).events["cat"].astype(str)) == {"cpu_op"}
