"""Our CUPTI capture on real hardware: the files samples/gpu_check.py wrote on an NVIDIA H200 (2026-12-04,
driver 580.159.04, CUDA 13.0, cupti-python 13.0.1; tests/data/cupti/PROVENANCE.md), checked against the
project's code of today and against torch.profiler's own (Kineto) trace of the same run:

- the occupancy calculator reproduces Kineto's numbers on every kernel of torch's trace;
- our trace reads with both readers and is Kineto-shaped (args, links, streams, metadata);
- the converter + linker, rerun on the raw CUPTI records, rebuild the stored trace's GPU and API events exactly,
  and put every kernel, copy and memset under the op of the workload that launched it;
- a CUDA graph replayed twice: graph and node ids on the kernels, their time on the capturing op in the views.
"""

from __future__ import annotations

import copy
import gzip
import json
import logging
import math
from collections import defaultdict

import numpy as np
import pytest

from profiler_core.analysis import events_from_trace
from profiler_core.analysis.stages.graph_replay import NOT_MATCHED, graph_replay
from profiler_core.analysis.tables.kernels import kernels as kernels_view
from profiler_core.analysis.tables.operators import operators
from profiler_core.cuda.convert import convert_records
from profiler_core.cuda.device_props import kineto_view
from profiler_core.cuda.link import link_trace
from profiler_core.cuda.occupancy import kernel_occupancy
from profiler_core.trace.event_args import ARGS, column_kinds
from profiler_core.trace.read import native, reader
from profiler_core.trace.read.reader import read_trace
from profiler_core.trace.write.schema import convert_collector_events

from .conftest import DATA, missing

H200 = DATA / "cupti" / "h200"
OCCUPANCY_KEYS = ("blocks per SM", "warps per SM", "est. achieved occupancy %")
#: kernel args we write besides Kineto's: the static/dynamic split of its "shared memory", CUPTI's graph ids
OURS_ONLY = {"static shared memory", "dynamic shared memory", "graph id", "graph node id"}
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
API_CATS = ("cuda_runtime", "cuda_driver")
OP_CATS = ("cpu_op", "user_annotation")


def _load(name: str) -> dict:
    path = H200 / name
    if name.endswith(".gz"):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return json.load(f)
    return json.loads(path.read_text())


RAW = _load("raw_records.json.gz")
OURS = _load("gpuscope_trace.json.gz")
TORCH = _load("torch_trace.json.gz")
GRAPH = _load("graph_trace.json.gz")
CHECK = _load("gpu_check.json")


def _x(trace: dict, cats: tuple[str, ...]) -> list[dict]:
    return [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") in cats]


# What samples/gpu_check.py's workload launched under each op (its _pycuda_workload / _cupy_workload): kernel
# names, and the byte counts of the copies and memsets (n = 65536 floats; 2D memsets are 64 rows).
N = 1 << 16
EXPECTED_KERNELS = {
    "check::pycuda_call": ["scale"],
    "check::pycuda_prepared_call": ["scale"],
    "check::pycuda_prepared_async_call": ["scale"],
    "check::pycuda_prepared_timed_call": ["scale"],
    "check::pycuda_smem_kernel": ["smem_heavy"],
    "check::elementwise": ["check_linear"],
    "check::reduction": ["check_dot_stage1", "check_dot_stage2"],
    "check::gpuarray_add": ["axpbyz"],
    "check::cupy_raw_kernel": ["scale"],
}
EXPECTED_TRANSFERS = {
    "check::reduction": [("gpu_memcpy", 4)],  # the float32 result's .get()
    "check::memcpy_htod": [("gpu_memcpy", 4 * N)],
    "check::memcpy_dtoh": [("gpu_memcpy", 4 * N)],
    "check::memcpy_htod_async": [("gpu_memcpy", 4 * N)],
    "check::memset": [("gpu_memset", 4 * N)],
    "check::memset_d16_async": [("gpu_memset", 2 * N)],
    "check::memset_d2d8": [("gpu_memset", 1024 * 64)],
    "check::memset_d2d32_async": [("gpu_memset", 256 * 64 * 4)],
    "check::memcpy_dtod_async": [("gpu_memcpy", 4096)],
    "check::cupy_htod": [("gpu_memcpy", 4 * N)],
    "check::cupy_dtoh": [("gpu_memcpy", 4 * N)],
}


@pytest.fixture(params=["python", "native"])
def which_reader(request, monkeypatch, caplog):
    """Reads with the Python reader or the native one (GPUSCOPE_NATIVE_READER, as test_native_reader.py
    switches it) and checks from read_trace's log line that that reader did read the file."""
    if request.param == "native" and not native.available():
        missing("the native reader is not built (pip install -e . or .ci/build_native.sh .)")
    monkeypatch.setenv("GPUSCOPE_NATIVE_READER", "1" if request.param == "native" else "0")
    caplog.set_level(logging.INFO, logger=reader.__name__)
    name = native.NATIVE_READER if request.param == "native" else native.PYTHON_READER

    def read(path):
        caplog.clear()
        t = read_trace(str(path), processes=0)
        assert f"{path} read by the {name}" in caplog.text, caplog.text
        return t

    return read


def test_the_fixtures_are_one_passing_h200_run():
    """The files belong together: gpu_check's 25 checks passed, and the raw records, our trace and torch's
    trace name the same device, driver and CUPTI."""
    assert CHECK["summary"] == {"passed": 25, "failed": [], "skipped": [], "errors": []}
    prov = RAW["provenance"]
    assert prov["versions"]["cupti-python"] == OURS["cupti_python_version"] == "13.0.1"
    assert prov["device_properties"][0]["name"] == "NVIDIA H200"
    assert RAW["source"] == OURS["trace_source"] == "cupti"
    assert OURS["cupti_version"] == TORCH["cupti_version"] == 130001
    assert OURS["cuda_driver_version"] == TORCH["cuda_driver_version"] == prov["cuda_driver_version"] == 13000


def test_device_properties_read_through_the_driver_are_kinetos():
    """device_props' query (ctypes on libcuda) gives, on Kineto's keys, what torch's trace of the same device
    says, and our trace writes exactly those keys."""
    ours = kineto_view(RAW["device_properties"])
    assert ours == TORCH["deviceProperties"]
    assert OURS["deviceProperties"] == ours == GRAPH["deviceProperties"]
    # the driver-only extra the occupancy calculator uses (1 KiB on cc >= 8)
    assert RAW["device_properties"][0]["reservedSharedMemPerBlock"] == 1024


def _to_string(value: float) -> float:
    """A float32 value as C++'s std::to_string prints it (%f: 6 decimals), read back."""
    return float(f"{float(np.float32(value)):.6f}")


def test_occupancy_matches_kineto_on_every_torch_kernel():
    """Our calculator on the launch configurations of torch's kernels (cutlass/cuBLAS GEMM, cuDNN conv,
    reductions, softmax, layer norm, scan: 11 distinct) equals Kineto's blocks/warps per SM and estimated
    occupancy, with the trace's deviceProperties plus reservedSharedMemPerBlock from our driver query, as
    gpu_check.py's occupancy section builds them.

    torch 2.11's Kineto prints blocks/warps per SM as std::to_string does (6 decimals: 0.030303, 190.060608),
    not in the shortest float32 form that torch 1.9's Kineto wrote and `kernel_occupancy` returns (0.030303031,
    190.06061; tests/test_occupancy.py checks that form on the V100 traces). The float32 values are compared
    here as to_string prints them; 3 of the 11 configurations differ in the shortest form."""
    reserved = {p["id"]: p["reservedSharedMemPerBlock"] for p in RAW["device_properties"]}
    props = {p["id"]: {**p, "reservedSharedMemPerBlock": reserved[p["id"]]} for p in TORCH["deviceProperties"]}
    torch_kernels = _x(TORCH, ("kernel",))
    mismatches, configs = [], set()
    for e in torch_kernels:
        a = e["args"]
        occ = kernel_occupancy(props[a["device"]], a["grid"], a["block"], a["registers per thread"], a["shared memory"])
        ours = {k: _to_string(occ[k]) if k.endswith("per SM") else occ[k] for k in OCCUPANCY_KEYS}
        theirs = {k: a[k] for k in OCCUPANCY_KEYS}
        configs.add((tuple(a["grid"]), tuple(a["block"]), a["registers per thread"], a["shared memory"]))
        if ours != theirs:
            mismatches.append((e["name"][:60], a["grid"], a["block"], a["registers per thread"], ours, theirs))
    assert len(torch_kernels) == CHECK["info"]["torch_kernels_compared"] == 22
    assert len(configs) == 11
    assert not mismatches, mismatches


def test_our_kernel_args_are_kinetos_and_split_shared_memory():
    """Every kernel event of ours has every arg key Kineto's kernels have (torch's trace of the same run), and
    beyond them only our OURS_ONLY; our static + dynamic shared memory is Kineto's total, with the static size
    smem_heavy declares (`__shared__ float buf[8192]`: 32 KiB) and pycuda's reduction's dynamic buffer."""
    kineto_keys = {frozenset(e["args"]) for e in _x(TORCH, ("kernel",))}
    assert len(kineto_keys) == 1  # torch writes one set of keys on every kernel
    [kineto] = kineto_keys
    ours = _x(OURS, ("kernel",)) + _x(GRAPH, ("kernel",))
    assert len(ours) == 16
    for e in ours:
        keys = set(e["args"])
        assert kineto <= keys, (e["name"], kineto - keys)
        assert keys - kineto <= OURS_ONLY, (e["name"], keys - kineto)
        a = e["args"]
        assert a["static shared memory"] + a["dynamic shared memory"] == a["shared memory"], e["name"]
    smem = {e["name"]: (e["args"]["static shared memory"], e["args"]["dynamic shared memory"]) for e in ours}
    assert smem["smem_heavy"] == (8192 * 4, 0)
    assert smem["check_dot_stage1"][0] == 0 and smem["check_dot_stage1"][1] > 0


def test_our_trace_reads_linked_and_stream_ordered(which_reader):
    """Read by the reader under test: the metadata names cupti-python 13.0.1; every kernel, copy and memset has
    the External id of a CPU op in the trace; kernels on each (device, stream) follow one another without
    overlap (ns as CUPTI timed them); and each kernel column Kineto's kernels fill (read from torch's trace by
    the same reader) is filled on ours."""
    t = which_reader(H200 / "gpuscope_trace.json.gz")
    assert t.metadata["cupti_python_version"] == "13.0.1"
    assert t.metadata["trace_source"] == "cupti" and t.metadata["cupti_version"] == 130001
    ev = t.events
    cat = ev["cat"].astype(str).to_numpy()
    ops = set(ev["external_id"].to_numpy()[(cat == "cpu_op") | (cat == "user_annotation")].tolist())
    gpu = (cat == "kernel") | (cat == "gpu_memcpy") | (cat == "gpu_memset")
    assert gpu.sum() == 21
    linked = ev["external_id"].to_numpy()[gpu]
    assert all(x in ops for x in linked.tolist()), sorted(set(linked.tolist()) - ops)

    k = ev[cat == "kernel"]
    assert len(k) == 10
    by_stream = defaultdict(list)
    for pid, stream, ts, dur, name in zip(k["pid"], k["stream"], k["ts"], k["dur"], k["name"].astype(str)):
        by_stream[(int(pid), int(stream))].append((int(ts), int(dur), name))
    # the legacy default stream (7: pycuda's and cupy's launches) and pycuda's Stream() (13)
    assert sorted(by_stream) == [(0, 7), (0, 13)]
    for key, ks in by_stream.items():
        ks.sort()
        for (ts0, dur0, a), (ts1, _, b) in zip(ks, ks[1:]):
            assert ts1 >= ts0 + dur0, (key, a, b, ts0 + dur0 - ts1)

    kinds = column_kinds()
    kineto_keys = set(_x(TORCH, ("kernel",))[0]["args"])
    cols = sorted({c for a in ARGS if "kernel" in a.on and a.keys[0] in kineto_keys for c in a.columns})
    assert {"registers", "shared_memory", "blocks_per_sm", "occupancy", "grid_x", "block_z"} <= set(cols)
    ref = which_reader(H200 / "torch_trace.json.gz")
    ref_kernels = (ref.events["cat"].astype(str) == "kernel").to_numpy()
    our_kernels = cat == "kernel"

    def filled(trace, rows, column):
        missing = kinds[column][1]
        values = trace.arg(column, rows)
        if isinstance(missing, float) and math.isnan(missing):
            return [not math.isnan(v) for v in values]
        return [v != missing for v in values]

    for c in cols:
        assert all(filled(ref, ref_kernels, c)), f"Kineto leaves {c} empty"
        assert all(filled(t, our_kernels, c)), c


def _regenerated() -> dict:
    """The stored trace's GPU and API events made again from the raw CUPTI records by today's converter
    (`convert_records`, with the capture's clock offset and device properties), put on the trace's time base
    (`convert_collector_events`) and linked (`link_trace`) to the CPU ops of the stored trace: the raw file has
    no CPU ops of its own, so those are taken from the trace."""
    api_pids = {r["process_id"] for r in RAW["records"] if r["kind"] in ("RUNTIME", "DRIVER")}
    assert len(api_pids) == 1
    res = convert_records(
        copy.deepcopy(RAW["records"]),
        device_properties=RAW["device_properties"],
        clock_offset_ns=RAW["clock_offset_ns"],
        pid=api_pids.pop(),
    )
    assert res.warnings == []
    events = convert_collector_events(res.events, OURS["baseTimeNanoseconds"])
    doc = {"traceEvents": events + copy.deepcopy(_x(OURS, OP_CATS))}
    link_trace(doc)
    return doc


def _comparable(e: dict) -> tuple:
    return (e["cat"], e["name"], e["pid"], e["tid"], e["ts"], e.get("dur"), json.dumps(e["args"], sort_keys=True))


def test_raw_records_convert_to_the_stored_trace():
    """Kernels, copies, memsets, syncs, overhead, runtime/driver calls and [memory] events made again from the
    148 raw records equal the stored trace's: same count, names, streams, times, durations and args (External
    ids included, from linking to the trace's CPU ops). The records' clock is CUPTI's; the trace's is the
    recording clock, `clock_offset_ns` (-1414 ns here) apart."""
    assert RAW["clock_offset_ns"] == -1414 and len(RAW["records"]) == 148
    doc = _regenerated()
    cats = (*GPU_CATS, *API_CATS, "cuda_sync", "overhead")
    for c in cats:
        got = sorted(_comparable(e) for e in _x(doc, (c,)))
        want = sorted(_comparable(e) for e in _x(OURS, (c,)))
        assert len(got) == len(want) > 0, c
        assert got == want, c
    counts = {c: len(_x(doc, (c,))) for c in GPU_CATS}
    assert counts == {"kernel": 10, "gpu_memcpy": 7, "gpu_memset": 4}

    def memory(trace):
        return sorted(_comparable(e) for e in trace["traceEvents"] if e.get("name") == "[memory]" and "ts" in e)

    ours_device = [m for m in memory(OURS) if json.loads(m[-1])["Device Type"] == 1]
    assert memory(doc) == ours_device and len(ours_device) == 9


def test_regenerated_events_sit_under_the_workload_ops_in_causal_order():
    """On the events made again from the raw records: each op of gpu_check's workload holds (through the
    External ids of its subtree) exactly the kernels it launched and the copies/memsets of the byte counts it
    moved; every API call lies inside its op; GPU work starts after the call that launched it (the CUPTI clock
    calibrated onto the recording clock)."""
    doc = _regenerated()
    ops = _x(doc, OP_CATS)
    gpu = _x(doc, GPU_CATS)
    roots = {o["name"]: o for o in ops if o["name"].startswith("check::")}
    assert set(EXPECTED_KERNELS) | set(EXPECTED_TRANSFERS) <= set(roots)
    for name, root in roots.items():
        end = root["ts"] + root["dur"]
        ids = {o["args"]["External id"] for o in ops if o["tid"] == root["tid"] and root["ts"] <= o["ts"] <= end}
        mine = [g for g in gpu if g["args"].get("External id") in ids]
        got_kernels = sorted(g["name"] for g in mine if g["cat"] == "kernel")
        got_bytes = sorted((g["cat"], g["args"]["bytes"]) for g in mine if g["cat"] != "kernel")
        assert got_kernels == sorted(EXPECTED_KERNELS.get(name, [])), name
        assert got_bytes == sorted(EXPECTED_TRANSFERS.get(name, [])), name
    assert all("External id" in g["args"] for g in gpu)

    by_ext = {o["args"]["External id"]: o for o in ops}
    api = _x(doc, API_CATS)
    inside = [a for a in api if "External id" in a["args"]]
    assert len(inside) >= 80
    for a in inside:
        op = by_ext[a["args"]["External id"]]
        assert op["ts"] <= a["ts"] and a["ts"] + a["dur"] <= op["ts"] + op["dur"], (a["name"], op["name"])
    call = {a["args"]["correlation"]: a for a in api}
    for g in gpu:
        launch = call[g["args"]["correlation"]]
        assert g["ts"] >= launch["ts"], (g["name"], launch["name"], launch["ts"] - g["ts"])


def test_graph_replays_carry_cuptis_graph_and_node_ids():
    """3 kernels captured into a cupy graph, replayed twice: 6 kernel events, each with CUPTI's graph id (one
    graph) and graph node id; each replay runs the same 3 nodes, in node order, linked to the op launching it."""
    kernels = sorted(_x(GRAPH, ("kernel",)), key=lambda e: e["ts"])
    assert [e["name"] for e in kernels] == ["scale"] * 6
    assert {e["args"]["graph id"] for e in kernels} == {2}
    replay_ops = [o for o in _x(GRAPH, OP_CATS) if o["name"] == "check::graph_replay"]
    assert len(replay_ops) == 2
    nodes_per_replay = []
    for op in replay_ops:
        mine = [e for e in kernels if e["args"]["External id"] == op["args"]["External id"]]
        nodes_per_replay.append([e["args"]["graph node id"] for e in mine])
    assert nodes_per_replay[0] == nodes_per_replay[1] == sorted(set(nodes_per_replay[0]))
    assert len(nodes_per_replay[0]) == 3


def test_replayed_kernel_time_goes_to_the_capturing_op_in_the_views(which_reader):
    """As gpu_check's graphs section asserts on the live run: Operators gives the 6 replayed kernels' time to
    the op that captured them and none to the op that launched the graph; each kernel is matched to the capture
    call of its node (node ids in capture order). key_averages() keeps torch's profiler's attribution: the
    time on the launching op (the named difference, tests/test_graph_replay.py)."""
    kernels = _x(GRAPH, ("kernel",))
    total = sum(e["dur"] for e in kernels)
    t = which_reader(H200 / "graph_trace.json.gz")
    rows = {r["name"]: r for r in operators(t)["rows"]}
    assert rows["check::graph_capture"]["device_self_us"] == pytest.approx(total, abs=0.001)
    assert rows["check::graph_replay"]["device_self_us"] == 0
    [krow] = kernels_view(t, "name_op")["rows"]
    assert (krow["name"], krow["op"], krow["calls"]) == ("scale", "check::graph_capture", 6)

    matched = graph_replay(t)
    assert len(matched) == 6 and (matched["how"] != NOT_MATCHED).all()
    ev = t.events
    names = ev["name"].astype(str).to_numpy()
    assert set(names[matched["call"].to_numpy()]) == {"cuLaunchKernel"}
    node = t.arg("graph_node_id", matched["row"].to_numpy())
    call_of_node = defaultdict(set)
    for n, c in zip(node.tolist(), matched["call"].tolist()):
        call_of_node[n].add(c)
    assert all(len(c) == 1 for c in call_of_node.values())  # a node is the same captured call in each replay
    order = [next(iter(call_of_node[n])) for n in sorted(call_of_node)]
    assert order == sorted(order) and len(order) == 3

    ka = {e.key: e.self_device_time_total for e in events_from_trace(GRAPH).key_averages()}
    assert ka["check::graph_replay"] == pytest.approx(total, abs=0.001)
    assert ka["check::graph_capture"] == 0
