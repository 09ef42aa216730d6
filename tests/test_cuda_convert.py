"""The pure converter (records -> Kineto events) and the after-the-fact linking to CPU ops."""

import copy
import json

import pytest

from profiler_core.cuda.convert import convert_records
from profiler_core.cuda.link import link_gpu_to_ops, link_trace
from profiler_core.trace.write.schema import convert_collector_events

from .conftest import DATA

S = json.loads((DATA / "cupti" / "synthetic_session.json").read_text())
H, OFF = S["host_base_ns"], S["clock_offset_ns"]


def _convert(records=None):
    return convert_records(
        copy.deepcopy(records if records is not None else S["records"]),
        device_properties=S["device_properties"],
        clock_offset_ns=OFF,
        pid=S["pid"],
    )


def _by(events, cat):
    return [e for e in events if e.get("cat") == cat and e.get("ph") != "M"]


def _corr(events, cat, corr):
    [e] = [e for e in _by(events, cat) if e["args"].get("correlation") == corr]
    return e


def test_kernel_events_have_kineto_shape_and_calibrated_time():
    res = _convert()
    assert res.warnings == []
    k = _corr(res.events, "kernel", 11)
    assert k["name"] == "matmul(float const*, float const*, float*, int)"  # demangled
    assert (k["pid"], k["tid"], k["ts"], k["dur"]) == (0, 11 - 4, H + 3400, 1600)
    a = k["args"]
    assert list(a) == [
        "queued",
        "device",
        "context",
        "stream",
        "correlation",
        "registers per thread",
        "shared memory",
        "static shared memory",
        "dynamic shared memory",
        "blocks per SM",
        "warps per SM",
        "grid",
        "block",
        "est. achieved occupancy %",
    ]
    assert a["grid"] == [64, 64, 1] and a["block"] == [16, 16, 1] and a["shared memory"] == 2048
    assert a["blocks per SM"] == pytest.approx(4096 / 132, rel=1e-6)
    # dynamic shared memory counts in "shared memory" too
    assert _corr(res.events, "kernel", 12)["args"]["shared memory"] == 4096
    # 256 threads x 40 regs: register limit 6 blocks -> 6*256/2048 = 75 %
    assert a["est. achieved occupancy %"] == 75


def test_kernel_events_split_static_and_dynamic_shared_memory():
    """Besides Kineto's total, our converter writes the static/dynamic split it knows."""
    ev = _convert().events
    split = {
        c: (
            _corr(ev, "kernel", c)["args"]["static shared memory"],
            _corr(ev, "kernel", c)["args"]["dynamic shared memory"],
        )
        for c in (11, 12)
    }
    assert split == {11: (2048, 0), 12: (0, 4096)}


def test_memcpy_memset_carry_bytes_and_bandwidth():
    ev = _convert().events
    m = _corr(ev, "gpu_memcpy", 13)
    assert m["name"] == "Memcpy DtoH (Device -> Pageable)"
    assert m["args"]["bytes"] == 4096
    assert m["args"]["memory bandwidth (GB/s)"] == pytest.approx(4096 / 1100)
    s = _corr(ev, "gpu_memset", 14)
    assert s["name"] == "Memset (Device)" and s["args"]["bytes"] == 1024 and s["dur"] == 50


def test_api_events_flows_and_metadata():
    ev = _convert().events
    launch = _corr(ev, "cuda_driver", 10)
    assert (launch["name"], launch["pid"], launch["tid"], launch["ts"]) == ("cuLaunchKernel", 4242, 4243, H + 1600)
    assert _corr(ev, "cuda_runtime", 18)["name"] == "cudaStreamSynchronize_v3020"
    flows = [e for e in ev if e.get("cat") == "ac2g"]
    starts = {f["id"]: f for f in flows if f["ph"] == "s"}
    finishes = {f["id"]: f for f in flows if f["ph"] == "f"}
    assert set(starts) == set(finishes) == {10, 11, 12, 13, 14, 18}
    assert starts[10]["ts"] == H + 1600 and starts[10]["tid"] == 4243
    assert finishes[10] == {
        "ph": "f",
        "id": 10,
        "pid": 0,
        "tid": 7,
        "ts": H + 1800,
        "cat": "ac2g",
        "name": "ac2g",
        "bp": "e",
    }
    names = {(e["pid"], e["tid"], e["name"]): e["args"] for e in ev if e["ph"] == "M"}
    assert names[(0, 7, "thread_name")] == {"name": "stream 7 "}
    assert names[(0, 13, "thread_name")] == {"name": "stream 13 "}
    assert names[(0, 0, "process_labels")] == {"labels": "GPU 0"}
    sync = _by(ev, "cuda_sync")[0]
    assert (sync["name"], sync["pid"], sync["tid"]) == ("Stream Sync", 0, 7)
    assert _by(ev, "overhead")[0]["name"] == "Buffer Flush"


def test_device_memory_events_with_running_totals():
    mem = [e for e in _convert().events if e.get("name") == "[memory]"]
    assert [e["args"]["Bytes"] for e in mem] == [4096, -8192, -4096]
    # 8 KiB existed before the window (freed without being allocated): totals never go negative.
    assert [e["args"]["Total Allocated"] for e in mem] == [12288, 4096, 0]
    assert all(e["args"]["Device Type"] == 1 and e["args"]["Device Id"] == 0 for e in mem)
    assert mem[0]["args"]["Addr"] == 139637976727552
    # attributed to the thread of the API call that allocated, inside that call
    assert (mem[0]["pid"], mem[0]["tid"]) == (4242, 4243) and H + 1100 <= mem[0]["ts"] <= H + 1150
    assert mem[0]["ph"] == "i" and mem[0]["s"] == "t"


def test_linking_innermost_op_and_external_correlation_wins():
    ev = _convert().events
    ann = link_gpu_to_ops(ev, copy.deepcopy(S["cpu_ops"]))
    ext = {
        (e["cat"], e["args"]["correlation"]): e["args"].get("External id")
        for e in ev
        if e.get("ph") == "X" and "correlation" in e.get("args", {})
    }
    assert ext[("cuda_driver", 10)] == ext[("kernel", 10)] == 2  # gpuarray.__add__
    assert ext[("cuda_driver", 11)] == ext[("kernel", 11)] == 4  # innermost op inside annotation
    assert ext[("cuda_driver", 12)] == ext[("kernel", 12)] == 77  # external correlation record wins
    assert ext[("cuda_driver", 14)] == ext[("gpu_memset", 14)] == 1  # only ProfilerStep encloses it
    assert ext[("cuda_driver", 13)] == ext[("gpu_memcpy", 13)] == 5
    assert ext[("cuda_driver", 19)] is None  # outside every op: no key
    assert "External id" not in _corr(ev, "cuda_driver", 19)["args"]
    assert list(_corr(ev, "kernel", 10)["args"])[0] == "External id"
    spans = {(a["name"], a["tid"]): a for a in ann}
    my7, my13 = spans[("my_annotation", 7)], spans[("my_annotation", 13)]
    assert (my7["ts"], my7["dur"], my7["args"]) == (H + 3399, 1602, {"External id": 3})
    assert (my13["ts"], my13["dur"]) == (H + 3499, 502)
    step = spans[("ProfilerStep#1", 7)]
    assert step["ts"] == H + 1350 - 1 and step["ts"] + step["dur"] == H + 7800 + 1
    assert all(a["cat"] == "gpu_user_annotation" and a["pid"] == 0 for a in ann)


def test_link_trace_on_a_trace_dict_in_microseconds_is_idempotent():
    base = H - 10_000
    events = convert_collector_events(_convert().events + copy.deepcopy(S["cpu_ops"]), base)
    k = _corr(events, "kernel", 11)
    assert k["ts"] == pytest.approx(13.4) and k["dur"] == pytest.approx(1.6)
    trace = {"traceEvents": events}
    link_trace(trace)
    n = len(trace["traceEvents"])
    link_trace(trace)
    assert len(trace["traceEvents"]) == n
    assert _corr(trace["traceEvents"], "kernel", 11)["args"]["External id"] == 4
    [a] = [e for e in trace["traceEvents"] if e.get("cat") == "gpu_user_annotation" and e["tid"] == 13]
    assert a["ts"] == pytest.approx(13.499) and a["dur"] == pytest.approx(0.502)


def test_bad_records_become_warnings_not_exceptions():
    recs = copy.deepcopy(S["records"]) + [
        {"kind": "CONCURRENT_KERNEL", "end": 5, "device_id": 0, "stream_id": 7, "correlation_id": 99},
        {"kind": "MEMCPY", "start": "soon", "end": 1, "bytes": 1, "device_id": 0, "stream_id": 7, "correlation_id": 98},
        {"kind": "PC_SAMPLING"},
        "not a record",
        {"no": "kind"},
    ]
    res = _convert(recs)
    assert len(_by(res.events, "kernel")) == 3 and len(_by(res.events, "gpu_memcpy")) == 1
    text = "\n".join(res.warnings)
    assert "CONCURRENT_KERNEL record missing start" in text
    assert "MEMCPY record with bad values" in text
    assert "unsupported kind 'PC_SAMPLING'" in text
    assert "2 record without a 'kind' name" in text


def test_unknown_device_properties_still_give_kernels():
    res = convert_records(copy.deepcopy(S["records"]), device_properties=None, clock_offset_ns=OFF)
    k = _corr(res.events, "kernel", 10)
    assert k["args"]["blocks per SM"] == "inf" and "est. achieved occupancy %" not in k["args"]


def test_linking_is_per_thread_and_nested_ops_resolve_to_the_innermost():
    def op(name, ext, tid, ts, dur, cat="cpu_op"):
        return {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": 1,
            "tid": tid,
            "ts": ts,
            "dur": dur,
            "args": {"External id": ext},
        }

    def call(corr, tid, ts):
        return {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": tid,
            "ts": ts,
            "dur": 1,
            "args": {"cbid": 211, "correlation": corr},
        }

    cpu = [
        op("outer", 1, 10, 0, 100),
        op("inner", 2, 10, 10, 20),
        op("later", 3, 10, 50, 10),
        op("other_thread", 4, 11, 0, 100),
    ]
    events = [
        call(1, 10, 15),
        call(2, 10, 40),
        call(3, 10, 55),
        call(4, 11, 15),
        call(5, 12, 15),
        call(6, 10, 30),
    ]  # 30 is the inner op's end: outside it ([start, end), torch's op-tree rule)
    link_gpu_to_ops(events, cpu)
    got = {e["args"]["correlation"]: e["args"].get("External id") for e in events}
    assert got == {1: 2, 2: 1, 3: 3, 4: 4, 5: None, 6: 1}


@pytest.mark.parametrize("kind, linked", [(1, True), (3, True), (4, False), (5, True)])
def test_external_correlation_kinds_use_cuptis_enum_values(kind, linked):
    # CUpti_ExternalCorrelationKind: UNKNOWN=1, OPENACC=2, CUSTOM0=3 (ops), CUSTOM1=4 (annotations), CUSTOM2=5.
    # Only annotation (CUSTOM1) records are left out of the op link; before, CUSTOM0=4/CUSTOM1=5 was
    # assumed, so annotation records were used and CUSTOM2 records dropped.
    recs = [dict(r, external_kind=kind) if r["kind"] == "EXTERNAL_CORRELATION" else r for r in S["records"]]
    ev = _convert(recs).events
    link_gpu_to_ops(ev, copy.deepcopy(S["cpu_ops"]))
    got = _corr(ev, "kernel", 12)["args"].get("External id")
    assert (got == 77) is linked, got


def test_record_constants_are_cuptis():
    from profiler_core.cuda import records

    assert (records.EXTERNAL_KIND_CUSTOM0, records.EXTERNAL_KIND_CUSTOM1, records.EXTERNAL_KIND_CUSTOM2) == (3, 4, 5)


def test_graph_and_node_ids_of_graph_work_become_args():
    """A kernel or copy a CUDA graph ran carries CUPTI's graphId/graphNodeId (cupti-python: `graph_id`,
    `graph_node_id`) as `graph id` / `graph node id`; 0 (not run by a graph) writes neither."""
    records = copy.deepcopy(S["records"])
    ids = {11: (5, 77), 13: (5, 78)}
    for r in records:
        if r.get("correlation_id") in ids and r["kind"] in ("CONCURRENT_KERNEL", "MEMCPY"):
            r["graph_id"], r["graph_node_id"] = ids[r["correlation_id"]]
        elif r.get("correlation_id") == 12:
            r["graph_id"], r["graph_node_id"] = 0, 0
    ev = _convert(records).events
    got = {
        c: (_corr(ev, cat, c)["args"].get("graph id"), _corr(ev, cat, c)["args"].get("graph node id"))
        for c, cat in ((11, "kernel"), (13, "gpu_memcpy"), (12, "kernel"), (14, "gpu_memset"))
    }
    assert got == {11: (5, 77), 13: (5, 78), 12: (None, None), 14: (None, None)}
