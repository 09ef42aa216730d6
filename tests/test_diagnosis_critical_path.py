"""The cross-rank critical path, the straggler's cause and the what-if (issue 22 items 3-5) on a hand-made 4-rank
job whose expected values are derived by hand below, through the real summaries (`summary.summarize`).

One step, 0-100 ms on every rank (CPU-only traces; collectives are record_param_comms calls):
  rank r: DataLoader 0..d_r ms with d = 10, 10, 50, 10 (rank 2 loads 40 ms longer);
  world all_reduce (group "0", ranks 0-3): starts at d_r, ends at 60 ms on every rank -> durations 50, 50, 10, 50:
      transfer 10 ms, rank 2 arrived last, ranks 0, 1, 3 waited 40 ms each; the second-latest arrival was 40 ms
      after rank 2's would-be median arrival (gap 50 - 10 = 40 ms);
  group "1" (ranks 0, 1): rank 1 runs aten::mm 60..75 ms, then all_reduce 75..80; rank 0's all_reduce is 60..80:
      transfer 5 ms, rank 1 late, rank 0 waited 15 ms;
  group "2" (ranks 2, 3): broadcast 60..90 ms on both (nobody waits).
Walk: ranks 0 and 1 end the step 20 ms after their last collective (ranks 2, 3: 10 ms), so it starts on rank 0
(first of the tie): rank 0 80..100 <- all_reduce #1 on group 1, late rank 1 (rank 0 waited 15) <- rank 1 60..75
<- all_reduce #1 on group 0, late rank 2 (3 ranks waited 40) <- rank 2 0..50 (data loading).
Busy time (step - own wait): rank 0 100 - 55 = 45, rank 1 100 - 40 = 60, rank 2 100, rank 3 100 - 40 = 60;
median 60 -> rank 2's excess is 40 ms; data loading 50 vs median 10 = +40 ms. What-if: rank 2 at the median
arrives 40 ms earlier at the world all_reduce (its gap), so the step takes 100 - min(40, 40) = 60 ms (checked by
replaying: all_reduce ends at 20, rank 1's mm 20..35, group 1 ends at 40, + 20 ms tail = 60; ranks 2, 3: 20 + 30
+ 10 = 60).
"""

from __future__ import annotations

import json

import pytest

from tb_plugin.run_level import critical_path, report, stragglers
from tb_plugin.summaries import summary
from tb_plugin.views import distributed

from .test_views_common_support import make_trace, op

MS = 1000  # µs
GROUPS = {"0": [0, 1, 2, 3], "1": [0, 1], "2": [2, 3]}
DL = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def comm(coll, pg, start_ms, end_ms):
    args = {
        "Collective name": coll,
        "Process Group Name": pg,
        "Group size": len(GROUPS[pg]),
        "dtype": "Float",
        "In msg nelems": 1024,
    }
    return op("record_param_comms", start_ms * MS, (end_ms - start_ms) * MS, **args)


def rank_trace(rank: int):
    d = [10, 10, 50, 10][rank]
    ev = [
        op("ProfilerStep#1", 0, 100 * MS, cat="user_annotation"),
        op(DL, 0, d * MS),
        comm("allreduce", "0", d, 60),
    ]
    if rank == 0:
        ev.append(comm("allreduce", "1", 60, 80))
    elif rank == 1:
        ev += [op("aten::mm", 60 * MS, 15 * MS), comm("allreduce", "1", 75, 80)]
    else:
        ev.append(comm("broadcast", "2", 60, 90))
    info = {"backend": "nccl", "rank": rank, "world_size": 4}
    info["pg_config"] = [{"pg_name": g, "ranks": r} for g, r in GROUPS.items() if rank in r]
    return make_trace(ev, metadata={"distributedInfo": info})


def job_summaries() -> dict:
    return {f"r{r}": summary.summarize(rank_trace(r)) for r in range(4)}


def test_critical_path_names_the_late_ranks_collectives_groups_and_waits():
    res = critical_path.critical_paths(job_summaries())
    assert res["reason"] is None and res["notes"] == []
    (step,) = res["steps"]
    assert step["step"] == "1" and step["step_ms"] == 100.0
    segs = step["segments"]
    assert [s["kind"] for s in segs] == ["work", "collective", "work", "collective", "work"]
    w2, world, w1, sub, w0 = segs
    assert (w2["worker"], w2["rank"], w2["ms"], w2["start_us"], w2["end_us"]) == ("r2", 2, 50.0, 0.0, 50_000.0)
    assert world["pg"] == "0" and world["members"] == 4 and world["call"] == 1
    assert (world["late_worker"], world["late_rank"], world["waiters"]) == ("r2", 2, 3)
    assert (world["wait_ms_median"], world["wait_ms_max"], world["wait_ms_total"]) == (40.0, 40.0, 120.0)
    assert (world["transfer_ms"], world["gap_ms"]) == (10.0, 40.0)
    assert (w1["worker"], w1["ms"]) == ("r1", 15.0)
    assert sub["pg"] == "1" and sub["members"] == 2 and sub["late_rank"] == 1
    assert (sub["waiters"], sub["wait_ms_median"], sub["transfer_ms"]) == (1, 15.0, 5.0)
    assert (w0["worker"], w0["ms"]) == ("r0", 20.0)


def test_straggler_cause_and_what_if():
    job = critical_path.match(job_summaries())
    segs = critical_path.step_paths(job)[0]["segments"]
    s = stragglers.path_straggler(job, "1", segs)
    assert s["worker"] == "r2" and s["rank"] == 2
    assert (s["busy_ms"], s["median_ms"], s["excess_ms"]) == (100.0, 60.0, 40.0)
    assert (s["step_ms"], s["what_if_ms"], s["saved_ms"]) == (100.0, 60.0, 40.0)
    top = s["phases"][0]
    assert (top["phase"], top["ms"], top["median_ms"], top["excess_ms"]) == ("data_loading", 50.0, 10.0, 40.0)
    assert s["ops"][0] == {"name": DL, "ms": 50.0, "median_ms": 10.0, "excess_ms": 40.0}
    assert s["why"].startswith("data loading +40.0 ms")
    # the Diff view's pair: a worker at the median busy time (60 ms: r1 or r3, the first) as the baseline, rank 2
    # compared with it (the Diff's deltas are its excess)
    assert s["diff"] == {"worker": "r1", "exp_worker": "r2", "step": "1"}


def test_rank_1_explained_by_its_operator():
    job = critical_path.match(job_summaries())
    s = stragglers.explain(job, "1", "r1")
    # busy 60 = the median: no excess, nothing saved
    assert (s["excess_ms"], s["what_if_ms"]) == (0.0, 100.0)


def test_report_is_json_and_says_it_in_words():
    rep = report.diagnose(job_summaries())
    json.dumps(rep)
    assert rep["worst"]["worker"] == "r2" and rep["worst"]["what_if_ms"] == 60.0
    text = report.render_text(rep)
    assert "rank 2: 50.0 ms (data loading +40.0 ms" in text
    assert "rank 2 late at nccl:all_reduce #1 on group 0 (4 ranks) -> 3 ranks waited 40.0 ms" in text
    assert "rank 1: 15.0 ms (compute +15.0 ms; op aten::mm +15.0 ms)" in text
    assert "rank 0: 20.0 ms\n" in text  # nothing above the median: no why
    assert "rank 1 late at nccl:all_reduce #1 on group 1 (2 ranks) -> 1 rank waited 15.0 ms" in text
    assert "instead of 100.0 ms" in text and "would take 60.0 ms" in text
    # the path's parts, each run of segments on one rank, in time order (the Distributed view lists them)
    first = rep["steps"][0]
    assert first["path_parts"] == [
        "rank 2: 50.0 ms (data loading +40.0 ms; op enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
        " +40.0 ms)",
        "rank 2 late at nccl:all_reduce #1 on group 0 (4 ranks) -> 3 ranks waited 40.0 ms",
        "rank 1: 15.0 ms (compute +15.0 ms; op aten::mm +15.0 ms)",
        "rank 1 late at nccl:all_reduce #1 on group 1 (2 ranks) -> 1 rank waited 15.0 ms",
        "rank 0: 20.0 ms",
    ], first["path_parts"]
    assert all(" -> ".join(s["path_parts"]) == s["path"] for s in rep["steps"])


def test_distributed_view_splits_wait_and_transfer_in_subgroups():
    """Item 5: the group-1 all_reduce only runs on ranks 0 and 1; matched per process group, rank 0's 15 ms wait
    is wait (matching only calls every worker has would call it transfer)."""
    s = job_summaries()
    view = distributed.from_summaries({w: x.distributed for w, x in s.items()})
    step = view["steps"]["1"]
    assert step["r0"]["wait_us"] == (40 + 15) * MS
    assert step["r1"]["wait_us"] == 40 * MS
    assert step["r2"]["wait_us"] == 0 and step["r3"]["wait_us"] == 40 * MS
    # transfer: world 10 ms each; group 1: 5 ms; group 2 broadcast: 30 ms
    assert [step[w]["transfer_us"] for w in ("r0", "r1", "r2", "r3")] == [15 * MS, 15 * MS, 40 * MS, 40 * MS]
    assert not any("different number of times" in n for n in view["notes"])
    assert view["groups"]["1 [0, 1]"] == {
        "r0": {"calls": 1, "transfer_us": 5 * MS, "wait_us": 15 * MS},
        "r1": {"calls": 1, "transfer_us": 5 * MS, "wait_us": 0},
    }
    assert view["groups"]["2 [2, 3]"]["r2"] == {"calls": 1, "transfer_us": 30 * MS, "wait_us": 0}
    assert sorted(view["groups"]["0 [0, 1, 2, 3]"]) == ["r0", "r1", "r2", "r3"]


def test_summary_with_nccl_kernels_no_call_launched_reads_back(shared_traces):
    """A real MI300 trace has NCCL kernels no record_param_comms call launched: they have no process group ("",
    size -1), so the summary reads back (a missing group made every read refuse it and recompute it)."""
    path = shared_traces / "public" / "tl_mi300_resnet_ckpt" / "resnet_act_checkpoint.json.gz"
    if not path.exists():
        pytest.skip(f"{path} is not in the shared traces")
    s = summary.summarize_path(str(path))
    assert s.distributed is not None
    coll = s.distributed.collectives
    assert "" in coll.pg and all(isinstance(g, str) for g in coll.pg)
    assert summary.decode(summary.encode(s)).distributed == s.distributed


def test_text_shows_the_run_ledger_ranked_with_reasons():
    """The run ledger as `run_ledger.run_view` gives it (docs/diagnosis.md, ## Ledger): its mean buckets, largest
    recoverable first, a reason where a bucket has no number, near-zero buckets counted, not listed."""
    rep = report.diagnose(job_summaries())
    rep["ledger"] = {
        "mean": {
            "average_wall_ms": 100.0,
            "buckets": [
                {"key": "sync_skew", "label": "Sync skew", "ms": 40.0, "recoverable_ms": 40.0, "fix": "Balance."},
                {"key": "compute", "label": "Compute", "ms": 0.0, "recoverable_ms": 0.0, "fix": None},
                {"key": "launch_overhead", "label": "Launches", "ms": None, "reason": "no launch events"},
            ],
        }
    }
    lines = report.render_text(rep).splitlines()
    i = lines.index("Ledger (recoverable time per step, across ranks):")
    assert lines[i + 1 : i + 5] == [
        "  average step 100.0 ms (mean over ranks)",
        "  Sync skew: 40.0 ms, recoverable 40.0 ms -- Balance.",
        "  Launches: n/a (no launch events)",
        "  (1 bucket under 0.05 ms left out)",
    ]


def test_what_if_replays_collectives_in_an_order_every_member_agrees_with():
    """Collective A (workers 0, 1) and B (workers 0, 2): worker 0 calls A at 50 then B at 60; worker 1 calls A at
    100, worker 2 calls B at 0 (clocks differ across hosts). By mean start B (30) would come before A (75), which
    worker 0 contradicts: the order found call by call is A, B."""
    import types

    import numpy as np

    from tb_plugin.run_level import what_if

    job = types.SimpleNamespace(
        workers=["w0", "w1", "w2"], c_start=np.array([50, 60, 100, 0]), b_start=np.zeros((1, 3), np.int64)
    )
    rows, ws, inv = np.arange(4), np.array([0, 0, 1, 2]), np.array([0, 1, 0, 1])
    assert what_if._agreed_order(job, 0, rows, ws, inv, 2) == [0, 1]
    # worker 2 calling B at 90: the mean order (A 75, B 75) holds on every worker
    job.c_start = np.array([50, 60, 100, 90])
    assert what_if._agreed_order(job, 0, rows, ws, inv, 2) == [0, 1]


def test_idle_tails_give_the_wait_to_the_call_the_next_compute_waited_for():
    """Compute ran [0, 10) and [30, 40); four calls: A [2, 8) ends while compute runs (0); B [8, 14) and C [14, 25)
    end before D [26, 29), which also ends before the next compute (at 30), so that compute waited for D, not for
    them (0, 0); D held it, the compute idle since 10 (19). With no compute at all, a call is idle from its
    start."""
    import numpy as np

    from profiler_core.analysis import intervals
    from profiler_core.analysis.worker.worker_facts import idle_tails

    compute = intervals.prepare(np.array([0, 30]), np.array([10, 40]))
    start, end = np.array([2, 8, 14, 26]), np.array([8, 14, 25, 29])
    assert idle_tails(compute, start, end).tolist() == [0, 0, 0, 19]
    # the last call before no further compute at all holds the rest: idle since the compute's end
    assert idle_tails(compute, np.array([41]), np.array([45])).tolist() == [5]
    none = intervals.prepare(np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert idle_tails(none, start, end).tolist() == [6, 6, 11, 3]
