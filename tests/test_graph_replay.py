"""Kernels replayed by CUDA graphs land on the ops, modules and shapes that captured them (graph_replay stage).

The job comes from benchmarks/gen_graph_job.py: `layers` layers of the four ops OPS, op j = 4 * layer + m
launching kernel j of the graph, which runs for 10 + j µs in each of `replays` replays. Expected device times
below are sums of that formula, worked out by hand.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from profiler_core.analysis.stages.graph_replay import BY_NODE_ID, BY_SEQUENCE, NOT_MATCHED, graph_replay
from profiler_core.analysis.tables.kernels import kernels
from profiler_core.analysis.tables.operators import operators
from profiler_core.trace.read.reader import read_trace
from tb_plugin.views.modules import modules

from .conftest import SHARED, missing

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from gen_graph_job import KERNELS, OPS, graph_trace  # noqa: E402

LAYERS, REPLAYS = 3, 4


def _read(tmp_path: Path, doc: dict):
    p = tmp_path / "w.pt.trace.json"
    p.write_text(json.dumps(doc))
    return read_trace(str(p), processes=0)


@pytest.mark.parametrize("ids", [False, True], ids=["sequence", "node-ids"])
def test_graph_kernels_land_on_their_capture_ops(tmp_path, ids):
    """With ids the kernels of each pair run on two streams, the second starting first: time order is not
    capture order, and only the node ids put them back in it."""
    t = _read(tmp_path, graph_trace(layers=LAYERS, replays=REPLAYS, ids=ids))
    rows = {r["name"]: r for r in operators(t)["rows"]}
    # 3 layers x 4 replays: aten::mm (10+14+18) x 4 = 168 µs, aten::gelu (11+15+19) x 4 = 180, 192, 204
    expected = {0: 168, 1: 180, 2: 192, 3: 204}
    assert {m: rows[OPS[m]]["device_self_us"] for m in range(4)} == expected
    assert rows["CompiledFunction"]["device_self_us"] == 0
    by_kernel = {(r["name"], r["op"]): r["total_us"] for r in kernels(t, "name_op")["rows"]}
    assert by_kernel == {(KERNELS[m], OPS[m]): expected[m] for m in range(4)}
    shapes = {(r["name"], r["input_shape"]) for r in operators(t, "name_shape")["rows"] if r["device_self_us"]}
    assert ("aten::mm", "[[64, 1024], [1024, 1024]]") in shapes
    tree = modules(t)
    layers = {n["name"]: n["device_total_us"] for n in tree["tree"]}
    # layer_0: (10+11+12+13) x 4 = 184 µs, layer_1: (14+...+17) x 4 = 248, layer_2: (18+...+21) x 4 = 312
    assert layers == {"layer_0": 184, "layer_1": 248, "layer_2": 312}
    assert any("count as device time of the ops that captured them" in n for n in tree["notes"])


def test_sequence_fallback_and_node_id_order(tmp_path):
    plain = _read(tmp_path, graph_trace(layers=1, replays=2))
    r = graph_replay(plain)
    assert len(r) == 8 and (r["how"] == BY_SEQUENCE).all()
    ev = plain.events
    # replay kernel k (time order) -> captured call k (time order in the capture)
    calls = np.flatnonzero((ev["name"] == "cudaLaunchKernel").to_numpy())
    first = r[r["launch"] == r["launch"].min()]
    assert first["call"].tolist() == calls.tolist()
    # with ids, the kernel that starts first is node 102 (op 1), matched to the second captured call
    ided = _read(tmp_path, graph_trace(layers=1, replays=1, ids=True))
    r = graph_replay(ided).sort_values("row")
    ev = ided.events
    calls = np.flatnonzero((ev["name"] == "cudaLaunchKernel").to_numpy())
    node = ided.arg("graph_node_id", r["row"].to_numpy())
    assert node.tolist() == [102, 101, 104, 103]
    assert r["call"].tolist() == [calls[1], calls[0], calls[3], calls[2]]


def test_captured_calls_with_node_ids_match_exactly(tmp_path):
    """A capture tool that writes each captured call's node id: kernel with node id 101 + j matches the call
    carrying it, whatever the order; here call i carries id 101 + (3 - i), so op 3 - j gets kernel j."""
    doc = graph_trace(layers=1, replays=2, ids=True)
    calls = [e for e in doc["traceEvents"] if e.get("name") == "cudaLaunchKernel"]
    for i, e in enumerate(calls):
        e["args"]["graph node id"] = 101 + (3 - i)
    t = _read(tmp_path, doc)
    r = graph_replay(t)
    assert (r["how"] == BY_NODE_ID).all()
    rows = {x["name"]: x["device_self_us"] for x in operators(t)["rows"]}
    # op 3 - j gets kernel j (10 + j µs) in each of the 2 replays
    assert rows == {OPS[3 - j]: 2 * (10 + j) for j in range(4)} | {"CompiledFunction": 0, "layer_0": 0}


def test_no_capture_in_the_trace_leaves_the_time_on_the_launch_row_with_a_notice(tmp_path):
    t = _read(tmp_path, graph_trace(layers=LAYERS, replays=REPLAYS, capture=False))
    assert (graph_replay(t)["how"] == NOT_MATCHED).all()
    res = operators(t)
    assert {r["name"]: r["device_self_us"] for r in res["rows"]} == {"CompiledFunction": 184 + 248 + 312}
    for view in (res, kernels(t), modules(t)):
        [note] = view["notes"]
        assert note.startswith("One row, 'CompiledFunction', holds most of the GPU time (100.0 %).")
        assert "the capture is not in this trace" in note and "12 CUDA-graph launches" not in note
        assert f"{REPLAYS} CUDA-graph launches" in note


def test_a_capture_with_another_kernel_count_is_not_used(tmp_path):
    doc = graph_trace(layers=1, replays=1)
    # one more kernel in the replay than launch calls in the capture
    extra = dict(next(e for e in doc["traceEvents"] if e.get("cat") == "kernel"))
    extra["ts"] += 500
    doc["traceEvents"].append(extra)
    t = _read(tmp_path, doc)
    assert (graph_replay(t)["how"] == NOT_MATCHED).all()
    [note] = operators(t)["notes"]
    assert "no capture in this trace before them launches as many kernels" in note


def test_traces_without_graphs_have_no_notes(tmp_path):
    doc = graph_trace(layers=1, replays=1)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("name") != "cudaGraphLaunch"]
    t = _read(tmp_path, doc)
    assert len(graph_replay(t)) == 0
    assert "notes" not in operators(t) and "notes" not in kernels(t) and "notes" not in modules(t)


def _expected_share(path: Path) -> tuple[float, str, float]:
    """From the raw JSON: GPU time run by cudaGraphLaunch calls over all kernel/copy/memset time, and the op
    launching most of it (by External id, else the innermost cpu_op around the call on its thread) with its
    share."""
    with gzip.open(path) as f:
        ev = json.load(f)["traceEvents"]
    gpu = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    ops = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")]
    by_ext = {e["args"]["External id"]: e["name"] for e in ops if "External id" in e.get("args", {})}

    def launching_op(call: dict) -> str:
        name = by_ext.get(call["args"].get("External id"))
        if name is None:
            around = [
                o
                for o in ops
                if (o["pid"], o["tid"]) == (call["pid"], call["tid"]) and o["ts"] <= call["ts"] < o["ts"] + o["dur"]
            ]
            name = max(around, key=lambda o: (o["ts"], -o["dur"]))["name"]
        return name

    op_of = {
        e["args"]["correlation"]: launching_op(e)
        for e in ev
        if e.get("cat") == "cuda_runtime" and e.get("name") == "cudaGraphLaunch"
    }
    total = sum(e["dur"] for e in gpu)
    per_op: dict[str, float] = {}
    for e in gpu:
        c = e.get("args", {}).get("correlation")
        if c in op_of:
            per_op[op_of[c]] = per_op.get(op_of[c], 0) + e["dur"]
    top = max(per_op, key=per_op.get)
    return sum(per_op.values()) / total, top, per_op[top] / total


@pytest.mark.parametrize("run", ["hta_diff_test", "hta_neg_queue"])
def test_notice_on_real_traces_with_graph_launches_and_no_capture(run):
    folder = SHARED / "traces" / "public" / run
    files = sorted(folder.glob("*.json.gz")) if folder.is_dir() else []
    if not files:
        missing(f"{folder} is not there (the shared public traces)")
    share, top, top_share = _expected_share(files[0])
    t = read_trace(str(files[0]), processes=0)
    assert (graph_replay(t)["how"] == NOT_MATCHED).all()
    for view in (operators(t), kernels(t), modules(t)):
        [note] = view["notes"]
        assert note.startswith(f"{100 * share:.1f} % of the GPU time was replayed by"), note
        assert f"('{top}': {100 * top_share:.1f} %, the most)" in note
        assert "the capture is not in this trace" in note


def test_capture_frames_stand_in_for_missing_capture_calls(tmp_path):
    """Without cudaStreamBeginCapture/EndCapture in the trace, torch's capture_begin / capture_end frames (with
    with_stack) bound the capture."""
    doc = graph_trace(layers=1, replays=2)
    ev = [e for e in doc["traceEvents"] if "Capture" not in str(e.get("name"))]
    frame = {"ph": "X", "cat": "python_function", "pid": 2000, "tid": 2000, "dur": 4, "args": {}}
    ev.append({**frame, "name": "torch/cuda/graphs.py(98): capture_begin", "ts": 5})
    ev.append({**frame, "name": "torch/cuda/graphs.py(119): capture_end", "ts": 102})
    doc["traceEvents"] = sorted(ev, key=lambda e: e.get("ts", -1))
    t = _read(tmp_path, doc)
    assert (graph_replay(t)["how"] == BY_SEQUENCE).all()
    rows = {x["name"]: x["device_self_us"] for x in operators(t)["rows"]}
    # op j gets kernel j (10 + j µs) in each of the 2 replays
    assert rows == {OPS[j]: 2 * (10 + j) for j in range(4)} | {"CompiledFunction": 0, "layer_0": 0}


def test_distributed_generator_flag_writes_the_graph_job(tmp_path):
    from gen_distributed import generate

    paths = generate(str(tmp_path / "job"), 2, steps=3, gz=False, cuda_graph={"capture": True, "layers": 1})
    assert len(paths) == 2
    for p in paths:
        t = read_trace(p, processes=0)
        rows = {x["name"]: x["device_self_us"] for x in operators(t)["rows"]}
        # steps=3: one capture step and 2 replays; op j gets kernel j (10 + j µs) per replay
        assert rows == {OPS[j]: 2 * (10 + j) for j in range(4)} | {"CompiledFunction": 0, "layer_0": 0}


def test_a_collective_the_graph_captured_counts_as_communication_in_the_ledger(tmp_path):
    """The ledger sees the capture ops too: when the capture's first op is a collective, its replayed kernel (an
    ordinary kernel name, launched by `cudaGraphLaunch` under `CompiledFunction`) is exposed communication, not
    compute. One layer, kernels 0-3 of 10, 11, 12 and 13 µs one after another: per replay step 10 µs of
    communication and 36 µs of compute; with the plain capture all 46 µs are compute."""
    from profiler_core.analysis.worker.buckets import COMPUTE, EXPOSED_COMM
    from profiler_core.analysis.worker.ledger import worker_ledger

    plain = graph_trace(layers=1, replays=2)
    comm = json.loads(json.dumps(plain))
    for e in comm["traceEvents"]:
        if e.get("name") == OPS[0]:
            e["name"] = "c10d::allreduce_"
    for doc, want_comm, want_compute in ((plain, None, 46_000), (comm, 10_000, 36_000)):
        led = worker_ledger(_read(tmp_path, doc))
        assert led["steps"] == ["1", "2", "3"]
        # the capture step runs no kernel; each replay step runs the graph once
        got = led["buckets"][EXPOSED_COMM]
        if want_comm is None:  # no communication in the trace: the bucket says so instead of a number
            assert got["ns"] is None and got["reason"]
        else:
            # in the capture step the collective op (15 µs on the CPU, no kernel runs) only enqueues: its
            # collective runs as a kernel (the replays'), so that CPU time is host time, not communication
            assert got["ns"] == [0, want_comm, want_comm]
        assert led["buckets"][COMPUTE]["ns"] == [0, want_compute, want_compute]


def test_graph_replays_are_the_named_difference_of_gpu_links(tmp_path):
    """GPU links in key_averages() and the views differ on purpose in one way: one layer replayed twice, kernels
    j = 0..3 of 10 + j µs. The views give each capture op its kernel (2 x (10 + j) µs) and the graph's launcher
    none; key_averages() gives the launcher all 2 x 46 = 92 µs and the capture ops none, as torch's profiler does."""
    from profiler_core.analysis import events_from_trace

    doc = graph_trace(layers=1, replays=2)
    views = {r["name"]: r["device_self_us"] for r in operators(_read(tmp_path, doc))["rows"]}
    ka = {e.key: e.self_device_time_total for e in events_from_trace(doc).key_averages()}
    assert {OPS[j]: views[OPS[j]] for j in range(4)} == {OPS[j]: 2 * (10 + j) for j in range(4)}
    assert views["CompiledFunction"] == 0 and ka["CompiledFunction"] == 92
    assert all(ka[OPS[j]] == 0 for j in range(4))
