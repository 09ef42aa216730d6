"""Collectives read from evidence (issue 37 items 1-3), on hand-made traces whose answers are derived in the
comments: gloo's backend ranges become calls from when the program called them; a sync blocked on a collective is
waiting, not host sync; members wait from their arrival (the call's start) until the last arrival, never by their
durations; point-to-point calls pair by time; entry stagger is told from imbalance."""

from __future__ import annotations

import numpy as np

from profiler_core.analysis.comm import collectives as C
from profiler_core.analysis.worker.worker_facts import worker_facts
from tb_plugin.run_level import critical_path as cp
from tb_plugin.run_level import run_ledger
from tb_plugin.summaries import summary as S

from .test_views_common_support import kernel, make_trace, op, runtime

US = 1000


def _info(rank: int, world: int) -> dict:
    pg = {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cpu:gloo", "pg_size": world}
    return {
        "distributedInfo": {
            "backend": "gloo",
            "rank": rank,
            "world_size": world,
            "pg_config": [{**pg, "ranks": list(range(world))}],
        }
    }


def gloo_rank(rank: int, world: int, work: float, op_name: str = "all_reduce", shift: float = 0.0):
    """One ProfilerStep [shift, shift + 200) of a gloo rank: `work` µs of aten::mm from the step's start, then
    c10d::<op>_ at the end of it (5 µs, main thread) and the gloo:<op> range on a gloo thread from 3 µs after
    that call to 150 µs into the step (everyone leaves the collective together)."""
    c10d = {"all_reduce": "c10d::allreduce_", "broadcast": "c10d::broadcast_"}[op_name]
    t0 = shift
    events = [
        op("ProfilerStep#0", t0, 200, cat="user_annotation"),
        op("aten::mm", t0, work),
        op(c10d, t0 + work, 5),
        op(f"gloo:{op_name}", t0 + work + 3, 150 - work - 3, tid=9, cat="user_annotation"),
    ]
    return make_trace(events, metadata=_info(rank, world))


def test_gloo_ranges_are_calls_from_when_the_program_called_them():
    t = gloo_rank(1, 2, work=40)
    c = C.collectives(t)
    assert c["how"].tolist() == [C.NAME_ORDER] and c["name"].tolist() == ["gloo:all_reduce"]
    assert c["pg"].tolist() == ["0"] and c["pg_ranks"].tolist() == [(0, 1)]
    # from c10d::allreduce_'s start (40 µs) to the range's end (150 µs), not from the gloo thread's 43 µs
    assert int(c["start"].iat[0]) == int(t.events["ts"].min()) + 40 * US
    assert int(c["dur"].iat[0]) == 110 * US


def _summaries(traces: dict) -> dict:
    return {w: S.summarize(t) for w, t in traces.items()}


def test_the_last_to_arrive_is_late_and_the_others_wait_for_it():
    """rank 0 works 20 µs, rank 1 100 µs, rank 2 60 µs: rank 1 arrives last (at 100), rank 0 waits 80, rank 2 40."""
    sums = _summaries({f"r{r}": gloo_rank(r, 3, w) for r, w in enumerate((20, 100, 60))})
    job = cp.match(sums)
    assert len(job.inst) == 1 and job.workers[int(job.i_late[0])] == "r1"
    waits = {job.workers[int(w)]: int(x) for w, x in zip(job.c_w, job.c_wait)}
    assert waits == {"r0": 80 * US, "r1": 0, "r2": 40 * US}
    assert int(job.inst["transfer"].iat[0]) == 50 * US  # 150 - 100: the exchange once all were there


def test_a_broadcast_root_that_finishes_first_is_not_late():
    """The root (rank 0) arrives first (work 10) and its call ends at once (5 µs after its start), while the
    receivers came at 30 and 70 µs and left together: the late one is rank 2, never the root for its short call;
    the root waited only while its call ran."""
    traces = {f"r{r}": gloo_rank(r, 3, w, "broadcast") for r, w in enumerate((10, 30, 70))}
    root = traces["r0"]
    ev = root.events
    end = ev["ts"].to_numpy() + ev["dur"].to_numpy()
    i = int(np.flatnonzero(ev["name"].astype(str) == "gloo:broadcast")[0])
    ev.loc[i, "dur"] = (int(ev["ts"].min()) + 15 * US) - int(ev["ts"].iat[i])  # ends at 15 µs
    assert end.max() > 0
    job = cp.match(_summaries(traces))
    assert job.workers[int(job.i_late[0])] == "r2"
    waits = {job.workers[int(w)]: int(x) for w, x in zip(job.c_w, job.c_wait)}
    assert waits == {"r0": 5 * US, "r1": 40 * US, "r2": 0}


def test_entry_stagger_is_not_imbalance():
    """Both ranks work 20 µs, but rank 1 entered its step 50 µs later: rank 0 waits 50 µs, all of it stagger (not
    recoverable by balancing); with rank 1 working 70 µs from an even entry, the same wait is imbalance."""
    stag = cp.match(_summaries({"r0": gloo_rank(0, 2, 20), "r1": gloo_rank(1, 2, 20, shift=50)}))
    w0 = int(np.flatnonzero(np.array(stag.workers)[stag.c_w] == "r0")[0])
    assert int(stag.c_wait[w0]) == 50 * US and int(cp.entry_stagger(stag)[w0]) == 50 * US
    even = cp.match(_summaries({"r0": gloo_rank(0, 2, 20), "r1": gloo_rank(1, 2, 70)}))
    w0 = int(np.flatnonzero(np.array(even.workers)[even.c_w] == "r0")[0])
    assert int(even.c_wait[w0]) == 50 * US and int(cp.entry_stagger(even)[w0]) == 0
    # the ledger: the stagger's wait is sync skew, not recoverable; the imbalance's is
    for job_sums, rec in (
        (_summaries({"r0": gloo_rank(0, 2, 20), "r1": gloo_rank(1, 2, 20, shift=50)}), 0),
        (_summaries({"r0": gloo_rank(0, 2, 20), "r1": gloo_rank(1, 2, 70)}), 50 * US),
    ):
        led = run_ledger.worker_ledgers(job_sums)["r0"]
        assert led.buckets["sync_skew"].ns == [50 * US] and led.buckets["sync_skew"].recoverable_ns == [rec]


def chain_rank(rank: int, world: int, compute: float):
    """A send/recv chain 0 -> 1 -> ... in one step [0, 300): rank r > 0 receives from r - 1 (c10d::recv_ then
    gloo:recv, which lasts until the send is posted), rank r < n - 1 then sends to r + 1 (c10d::send, gloo:send
    of 2 µs); rank 0 computes `compute` µs first. Rank r's recv ends at compute + 10 r."""
    ev = [op("ProfilerStep#0", 0, 300, cat="user_annotation")]
    t = compute if rank == 0 else 1.0
    if rank == 0:
        ev.append(op("aten::mm", 0, compute))
    if rank > 0:
        got = compute + 10 * (rank - 1) + 4
        ev += [op("c10d::recv_", 1, 2), op("gloo:recv", 2, got - 2, cat="user_annotation")]
        t = got
    if rank < world - 1:
        ev += [op("c10d::send", t + 1, 4), op("gloo:send", t + 2, 2, cat="user_annotation")]
    return make_trace(ev, metadata=_info(rank, world))


def test_point_to_point_calls_pair_by_time_along_the_chain():
    sums = _summaries({f"r{r}": chain_rank(r, 4, 100) for r in range(4)})
    job = cp.match(sums)
    groups = sorted(str(g) for g in job.inst["group"])
    assert groups == ["p2p rank 0 -> rank 1", "p2p rank 1 -> rank 2", "p2p rank 2 -> rank 3"]
    late = {str(g): job.ranks[job.workers[int(w)]] for g, w in zip(job.inst["group"], job.i_late)}
    assert late == {"p2p rank 0 -> rank 1": 0, "p2p rank 1 -> rank 2": 1, "p2p rank 2 -> rank 3": 2}
    # each receiver waited from its recv's call (1 µs) until its sender called send: rank 0 at 101 µs (after its
    # compute), rank 1 at 105 (its recv ended at 104), rank 2 at 115 (its recv ended at 114)
    recv_wait = {
        job.ranks[job.workers[int(w)]]: int(x) // US
        for w, x, r in zip(job.c_w, job.c_wait, range(len(job.c_w)))
        if job.ranks[job.workers[int(w)]] and int(x)
    }
    assert recv_wait == {1: 100, 2: 104, 3: 114}


def test_a_sync_blocked_on_a_collective_is_not_host_sync():
    """cudaStreamSynchronize [10, 60) while the rank's NCCL kernel runs [20, 50): 20 µs of host sync (outside the
    kernel), not 50."""
    t = make_trace(
        [
            op("ProfilerStep#1", 0, 100, cat="user_annotation"),
            op("record_param_comms", 5, 4, **{"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 8}),
            runtime("cudaLaunchKernel", 6, 1, corr=1),
            runtime("cudaStreamSynchronize", 10, 50, corr=9),
            kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)", 20, 30, corr=1),
        ],
        metadata={"distributedInfo": {"rank": 0, "world_size": 2}},
    )
    assert worker_facts(t)["phases"]["host_sync"] == [20 * US]
