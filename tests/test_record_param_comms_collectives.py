"""Issue 11, item 4: collectives behind record_param_comms (torch >= 2.1) named by their `Collective name`.

Fixture: tests/data/issue11/nccl_rpc_rank{0,1}.pt.trace.json.gz (hand-made after 2-rank torch 2.x NCCL
traces, see PROVENANCE.md): per step 5 all_reduce + 2 broadcast record_param_comms calls, each launching one
NCCL kernel (the launches of step 3's broadcasts are missing), and a `wait` call after each.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from profiler_core.analysis.comm import collectives
from profiler_core.trace.read.reader import read_trace
from tb_plugin.views import distributed

DATA = Path(__file__).parent / "data" / "issue11"


@pytest.fixture(scope="module")
def ranks():
    return {f"rank{r}": read_trace(DATA / f"nccl_rpc_rank{r}.pt.trace.json.gz", processes=0) for r in (0, 1)}


def test_reader_keeps_the_process_group_name(ranks):
    ev = ranks["rank0"].dense_events()
    rpc = ev[ev["name"].astype(str) == "record_param_comms"]
    assert set(rpc["pg_name"].astype(str)) == {"0"} and set(rpc["group_size"]) == {2}


def test_comm_ops_rows_are_named_by_collective(ranks):
    out = distributed.distributed(ranks)
    rows = {r["name"]: r for r in out["comm_ops"]["rank0"]}
    assert set(rows) == {"nccl:all_reduce", "nccl:broadcast", "nccl:wait"}  # no record_param_comms/ncclDevKernel row
    ar, bc, wt = rows["nccl:all_reduce"], rows["nccl:broadcast"], rows["nccl:wait"]
    assert (ar["calls"], bc["calls"], wt["calls"]) == (15, 6, 21)
    # bytes: In/Out msg nelems x dtype (Float: 4 bytes)
    assert ar["total_bytes"] == 15 * 262_144 * 4 and bc["total_bytes"] == 6 * 1024 * 4
    assert wt["total_bytes"] is None
    assert ar["group_size"] == 2 and ar["process_group"] == "0"
    # the NCCL kernels are the collective's GPU time: rank 0 takes 300 µs per all_reduce, rank 1 200 µs
    assert ar["total_latency_us"] == pytest.approx(15 * 300) and ar["transfer_us"] == pytest.approx(15 * 200)
    # every broadcast kernel belongs to its collective, also the 2 whose launch is not in the trace
    assert bc["total_latency_us"] == pytest.approx(6 * 150) and bc["transfer_us"] == pytest.approx(6 * 100)
    # waits are waiting, not transfer
    assert wt["transfer_us"] == 0.0 and wt["total_latency_us"] == pytest.approx(21 * 30)


def test_wait_collectives_count_as_waiting(ranks):
    out = distributed.distributed(ranks)
    w0, w1 = out["workers"]["rank0"], out["workers"]["rank1"]
    # per step on rank 0: kernels wait 5 x 100 + 2 x 50 µs for rank 1, plus 7 wait calls of 30 µs
    assert w0["wait_us"] == pytest.approx(5 * 100 + 2 * 50 + 7 * 30)
    assert w1["wait_us"] == pytest.approx(7 * 10)
    assert w0["transfer_us"] == w1["transfer_us"] == pytest.approx(5 * 200 + 2 * 100)
    assert not out["notes"]


def test_kernels_belong_to_their_collective(ranks):
    t = ranks["rank0"]
    rows, owners = collectives.kernel_owners(t)
    ev = t.events
    assert len(rows) == 21 and len(set(owners.tolist())) == 21
    colls = t.arg("coll_name", owners)
    kernels = ev["name"].astype(str).to_numpy()[rows]
    for c, k in zip(colls, kernels):
        assert collectives.kernel_kind(k) == {"allreduce": "allreduce", "broadcast": "broadcast"}[c]


def test_collective_names_follow_older_traces():
    assert collectives.collective_name("allreduce", "nccl") == "nccl:all_reduce"
    assert collectives.collective_name("_allgather_base", "nccl") == "nccl:_all_gather_base"
    assert collectives.collective_name("reduce_scatter", "gloo") == "gloo:reduce_scatter"
    assert collectives.collective_name("alltoall_base", "nccl") == "nccl:all_to_all"
    assert collectives.kernel_kind("ncclKernel_AllReduce_RING_LL_Sum_float") == "allreduce"
    assert collectives.kernel_kind("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)") == "sendrecv"
    assert collectives.kernel_kind("volta_sgemm") is None
    assert collectives.dtype_bytes("BFloat16") == 2 and collectives.dtype_bytes("c10::Half") == 2
    assert collectives.dtype_bytes("Long") == 8 and collectives.dtype_bytes("mystery") is None


def test_ddp_on_nccl_via_record_param_comms_gets_no_use_nccl_advice():
    from profiler_core.analysis import step_breakdown as overview

    from .test_views_common_support import kernel, make_trace, op, runtime

    gpu = {"id": 0, "name": "NVIDIA H100", "computeMajor": 9, "computeMinor": 0, "numSms": 132}
    ev = [
        op("ProfilerStep#1", 0, 100, ext=1, cat="user_annotation"),
        op("DistributedDataParallel.forward", 1, 50, ext=2, cat="user_annotation"),
        op(
            "record_param_comms",
            60,
            10,
            ext=3,
            **{
                "Collective name": "allreduce",
                "dtype": "Float",
                "In msg nelems": 4,
                "Out msg nelems": 4,
                "Group size": 2,
            },
        ),
        runtime("cudaLaunchKernelExC", 61, 2, corr=5, ext=3),
        kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 70, 20, corr=5),
    ]
    recs = overview.overview(make_trace(ev, {"deviceProperties": [gpu]}))["recommendations"]
    assert not any("without the NCCL backend" in r for r in recs)
    gloo = make_trace(ev[:3], {"deviceProperties": [gpu], "distributedInfo": {"backend": "gloo"}})
    assert any("without the NCCL backend" in r for r in overview.overview(gloo)["recommendations"])
