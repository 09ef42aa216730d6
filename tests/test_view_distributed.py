"""Distributed view: torch-tb-profiler agreement on torch_cpu_cnn/ddp_gloo, MPI and NCCL
recognition, wait vs transfer alignment, and clear notes for mismatched workers."""

import json

import numpy as np
import pytest

from profiler_core.analysis import intervals
from tb_plugin.views import distributed as dv

from . import trace_builder as tb
from .trace_builder import read_events

COLS = [
    "cat",
    "name",
    "pid",
    "tid",
    "ts",
    "dur",
    "external_id",
    "correlation",
    "bytes",
    "in_nelems",
    "dtype",
    "coll_name",
]


def mk(rows, info=None):
    """A worker's trace of rows (cat, name, pid, tid, ts_ns, dur_ns, *COLS[6:]) with its distributedInfo."""
    return read_events(tb.rows(rows, COLS), metadata={"distributedInfo": info or {}})


US = 1000


def mpi_worker(rank, wait_us):
    # two steps of 100us; in each, compute [0,60), then mpi::Allreduce of (20 + wait) us
    rows = []
    for s in range(2):
        base = s * 100 * US
        rows.append(("user_annotation", f"ProfilerStep#{s + 1}", 1, 1, base, 100 * US))
        rows.append(("cpu_op", "aten::mm", 1, 1, base, 60 * US))
        rows.append(
            ("cpu_op", "mpi::Allreduce", 1, 1, base + 60 * US, (20 + wait_us) * US, -1, -1, 4096, 1024, "float")
        )
    return mk(rows, {"rank": rank, "world_size": 2, "backend": "mpi"})


def test_mpi_wait_transfer_and_parts():
    out = dv.distributed({"w0": mpi_worker(0, 0), "w1": mpi_worker(1, 15)})
    json.dumps(out)
    assert out["notes"] == []
    assert out["steps"]["1"]["w0"] == {
        "computation_us": 60.0,
        "overlap_us": 0.0,
        "communication_us": 20.0,
        "other_us": 20.0,
        "transfer_us": 20.0,
        "wait_us": 0.0,
    }
    assert out["steps"]["2"]["w1"]["communication_us"] == 35.0 and out["steps"]["2"]["w1"]["wait_us"] == 15.0
    assert out["workers"]["w1"]["transfer_us"] == 20.0 and out["workers"]["w1"]["other_us"] == 5.0
    row = out["comm_ops"]["w1"][0]
    assert (row["name"], row["calls"], row["total_bytes"], row["total_latency_us"], row["transfer_us"]) == (
        "mpi::Allreduce",
        2,
        8192,
        70.0,
        40.0,
    )
    assert out["devices"]["w1"]["backend"] == "mpi" and out["devices"]["w1"]["rank"] == 1


def test_bytes_from_nelems_and_dtype():
    t = mk([("cpu_op", "record_param_comms", 1, 1, 0, 10 * US, -1, -1, -1, 100, "double", "allreduce")])
    out = dv.distributed({"a": t})
    assert out["comm_ops"]["a"][0]["total_bytes"] == 800
    assert out["comm_ops"]["a"][0]["name"] == "c10d:all_reduce"  # no backend known: c10d
    assert any("only one worker" in n for n in out["notes"])


def test_wrapper_tier_not_counted_when_backend_ops_exist():
    # c10d::allreduce_ (enqueue on the main thread) + gloo:all_reduce on the gloo thread
    t = mk(
        [("cpu_op", "c10d::allreduce_", 1, 1, 0, 5 * US), ("user_annotation", "gloo:all_reduce", 1, 2, 6 * US, 30 * US)]
    )
    out = dv.distributed({"a": t})
    assert [r["name"] for r in out["comm_ops"]["a"]] == ["gloo:all_reduce"]
    assert out["workers"]["a"]["computation_us"] == 5.0  # the wrapper is CPU work
    assert out["workers"]["a"]["communication_us"] == 30.0


def test_nccl_kernels_are_communication_on_gpu():
    t = mk(
        [
            ("cpu_op", "nccl:all_reduce", 1, 1, 0, 10 * US, 7),
            ("cuda_runtime", "cudaLaunchKernel", 1, 1, 1 * US, 2 * US, 7, 99),
            ("kernel", "ncclKernel_AllReduce_RING_LL_Sum_float", 0, 7, 20 * US, 50 * US, 7, 99),
            ("kernel", "volta_sgemm", 0, 7, 40 * US, 60 * US, -1, 100),
        ]
    )
    out = dv.distributed({"a": t})
    p = out["workers"]["a"]
    # kernels: compute [40,100), comm [20,70) -> overlap [40,70) = 30. Without ProfilerStep, step "0" is the
    # whole trace window [0,100). In it: computation alone [70,100) = 30, both 30, communication alone
    # [20,40) = 20, neither [0,20) = 20.
    row = out["comm_ops"]["a"][0]
    assert row["name"] == "nccl:all_reduce" and row["total_latency_us"] == 50.0
    want = {"computation_us": 30.0, "overlap_us": 30.0, "communication_us": 20.0, "other_us": 20.0}
    assert {k: p[k] for k in want} == want
    assert {k: out["steps"]["0"]["a"][k] for k in want} == want


def test_mismatched_workers_get_notes():
    w0 = mpi_worker(0, 0)
    w1 = mk([("user_annotation", "ProfilerStep#7", 1, 1, 0, 100 * US), ("cpu_op", "aten::mm", 1, 1, 0, 50 * US)])
    out = dv.distributed({"w0": w0, "w1": w1})
    text = " ".join(out["notes"])
    assert "w1 has no communication ops" in text
    assert "different steps" in text
    assert "different number of times" in text
    assert set(out["steps"]) == {"1", "2", "7"} and out["workers"]["w1"]["computation_us"] == 50.0
    assert out["steps"]["1"]["w0"]["wait_us"] == 0.0  # no partner: transfer only


def test_interval_algebra():
    a = intervals.merge_ranges(np.array([0, 5, 20]), np.array([10, 12, 30]))
    assert a.tolist() == [[0, 12], [20, 30]]
    b = intervals.merge_ranges(np.array([8, 25]), np.array([22, 40]))
    assert intervals.intersect_ranges(a, b).tolist() == [[8, 12], [20, 22], [25, 30]]
    assert intervals.total_length(intervals.intersect_ranges(a, b)) == 11


def test_bad_input():
    with pytest.raises(dv.BadRequest):
        dv.distributed({})


def test_matches_torch_tb_profiler_on_ddp_gloo(shared_traces):
    from profiler_core.trace.read.reader import read_trace

    ref_all = json.loads((shared_traces / "reference" / "torch_cpu_cnn.torch-tb-profiler-0.4.3.json").read_text())
    ref = ref_all["ddp_gloo"]["workers"]["worker0"]["1"]
    traces = {
        p.name.split(".")[0]: read_trace(p) for p in sorted((shared_traces / "torch_cpu_cnn" / "ddp_gloo").glob("*.gz"))
    }
    out = dv.distributed(traces)

    def close(ours, theirs):
        assert abs(ours - theirs) <= max(1.0, 0.01 * abs(theirs)), (ours, theirs)

    checked = 0
    for step, per_worker in ref["distributed_overlap"]["data"].items():
        for w, vals in per_worker.items():
            mine = out["workers"][w] if step == "all" else out["steps"][step][w]
            for k, v in zip(("computation_us", "overlap_us", "communication_us", "other_us"), vals):
                close(mine[k], v)
                checked += 1
    for step, per_worker in ref["distributed_waittime"]["data"].items():
        for w, vals in per_worker.items():
            mine = out["workers"][w] if step == "all" else out["steps"][step][w]
            close(mine["transfer_us"], vals[0])
            close(mine["wait_us"], vals[1])
            checked += 2
    for w, table in ref["distributed_commops"]["data"].items():
        for r in table["rows"]:
            mine = {x["name"]: x for x in out["comm_ops"][w]}[r[0]]
            assert mine["calls"] == r[1]
            for k, v in zip(
                ("total_bytes", "avg_bytes", "total_latency_us", "avg_latency_us", "transfer_us", "avg_transfer_us"),
                r[2:],
            ):
                close(mine[k], v)
                checked += 1
    assert checked == 40 + 20 + 12
    assert out["notes"] == []


def test_clip_ranges_matches_intersection():
    rng = np.random.default_rng(3)
    s = np.sort(rng.integers(0, 10_000, 300))
    r = intervals.merge_ranges(s, s + rng.integers(1, 100, 300))
    for a, b in [(0, 10_000), (55, 56), (1234, 5678), (-5, 3), (9_990, 20_000), (400, 400)]:
        expect = intervals.intersect_ranges(r, np.array([[a, b]]))
        assert intervals.clip_ranges(r, a, b).tolist() == expect.tolist()
