"""The run-level ledger from summaries (tb_plugin/run_level/run_ledger.py): each worker's wait moves from
exposed communication to sync skew, the rank that set each step is the busiest one, and the mean is over ranks.
Summaries made by hand (values derived in the comments) and from a generated job with a straggler."""

from __future__ import annotations

import tb_plugin.loader  # noqa: F401 - bound to the real reader before any test patches read_trace
from profiler_core.analysis.worker import ledger as L
from profiler_core.analysis.worker.worker_facts import PHASES, empty_facts
from profiler_core.trace.read.reader import read_trace
from tb_plugin.run_level.run_ledger import ONE_WORKER, run_ledger
from tb_plugin.summaries import schema
from tb_plugin.summaries import summary as S

from .test_diagnosis_ledger import adds_up
from .test_summaries import _job

US = 1000


def _summary(
    compute: int, comm: int, other: int, coll_dur: int, pg: str = "0", size: int = 2, end: int = 70
) -> schema.Summary:
    """One step "1" of 100 µs: compute, exposed comm, other (µs); one all_reduce in it that ends at `end` µs and
    lasts `coll_dur` µs on this worker, which arrived when it started (the workers share one clock: origin 0)."""
    buckets = {b: {"ns": [0], "recoverable_ns": [0], "reason": None} for b in L.BUCKETS}
    buckets[L.COMPUTE]["ns"] = [compute * US]
    buckets[L.EXPOSED_COMM] = {"ns": [comm * US], "recoverable_ns": [comm * US], "reason": None}
    buckets[L.OTHER] = {"ns": [other * US], "recoverable_ns": [other * US], "reason": None}
    buckets[L.SYNC_SKEW] = {"ns": None, "recoverable_ns": None, "reason": L.NEEDS_ALL_RANKS}
    facts = empty_facts()
    facts["collective_calls"].update(
        groups=[f"{pg} (size {size})"],
        group_pg=[pg],
        group_ranks=[None],
        group_size=[size],
        group_how=["pg+seq"],
        names=["nccl:all_reduce"],
        group=[0],
        name=[0],
        step=[0],
        start=[(end - coll_dur) * US],
        dur=[coll_dur * US],
        bytes=[-1],
        wait=[0],
        covered=[0],
        lead=[0],
        tail=[coll_dur * US],
    )
    ph = facts["phases"]
    ph.update(step=["1"], start=[0], end=[100 * US], names=[], top_kernels=[[]], top_ops=[[]])
    for k in PHASES:
        ph[k] = [0]
    return schema.from_dict(
        {
            "ledger": {"steps": ["1"], "wall_ns": [100 * US], "has_gpu": True, "reason": None, "buckets": buckets},
            "distributed": {
                "origin": 0,
                "steps": {"step": ["1"], "start": [0], "end": [100 * US], "comp": [0], "comm": [0], "overlap": [0]},
                "collectives": {
                    "names": ["nccl:all_reduce"],
                    "pg": [pg],
                    "group_size": [size],
                    "name": [0],
                    "step": [0],
                    "dur": [coll_dur * US],
                    "bytes": [-1],
                    "wait": [0],
                },
            },
            **facts,
        }
    )


def test_two_ranks_by_hand():
    # w0 waits: its all_reduce runs 40-70 µs, w1's 60-70 µs -> w1 arrived last, 20 µs after w0: w0 waited 20, w1 0.
    # w0: compute 50, exposed comm 30 -> sync skew 20 + exposed comm 10, other 20: busy 100 - 20 = 80.
    # w1: compute 70, exposed comm 10 (no wait), other 20: busy 100 -> w1 set the step.
    run = run_ledger({"w0": _summary(50, 30, 20, 30), "w1": _summary(70, 10, 20, 10)})
    crit, mean = run["critical"], run["mean"]
    assert crit["workers"] == ["w1"] and crit["wall_ns"] == [100 * US]
    assert crit["buckets"][L.COMPUTE]["ns"] == [70 * US] and crit["buckets"][L.SYNC_SKEW]["ns"] == [0]
    # mean over the two ranks: compute (50 + 70) / 2 = 60, skew (20 + 0) / 2 = 10, comm (10 + 10) / 2 = 10
    assert mean["buckets"][L.COMPUTE]["ns"] == [60 * US]
    assert mean["buckets"][L.SYNC_SKEW]["ns"] == [10 * US] and mean["buckets"][L.SYNC_SKEW]["recoverable_ns"] == [
        10 * US
    ]
    assert mean["buckets"][L.EXPOSED_COMM]["ns"] == [10 * US]
    assert mean["buckets"][L.OTHER]["ns"] == [20 * US]
    assert adds_up(crit) == []
    view = L.ranked(mean)
    assert view["buckets"][0]["key"] == L.OTHER and view["buckets"][0]["recoverable_ms"] == 0.02


def test_wait_never_exceeds_exposed_comm():
    # w0 waited 20 µs but only 5 µs of its collective were exposed (the rest under compute): skew 5, comm 0
    run = run_ledger({"w0": _summary(75, 5, 20, 30), "w1": _summary(70, 10, 20, 10)})
    # mean skew (5 + 0) / 2 = 2.5 µs, mean exposed comm (0 + 10) / 2 = 5 µs
    assert run["mean"]["buckets"][L.SYNC_SKEW]["ns"] == [2.5 * US]
    assert run["mean"]["buckets"][L.EXPOSED_COMM]["ns"] == [5 * US]


def test_waits_are_matched_within_subgroups():
    # two tensor-parallel pairs: tp0 = w0, w1 (w0's call 40-70 µs, w1's 60-70: w0 waited 20); tp1 = w2, w3 (both
    # 55-70 µs: nobody waited). Matched per group of 2, not over all 4 workers.
    run = run_ledger(
        {
            "w0": _summary(50, 30, 20, 30, pg="tp0"),
            "w1": _summary(70, 10, 20, 10, pg="tp0"),
            "w2": _summary(65, 15, 20, 15, pg="tp1"),
            "w3": _summary(65, 15, 20, 15, pg="tp1"),
        }
    )
    assert run["totals"]["w0"][L.SYNC_SKEW] == 20 * US and run["totals"]["w0"][L.EXPOSED_COMM] == 10 * US
    assert [run["totals"][w][L.SYNC_SKEW] for w in ("w1", "w2", "w3")] == [0, 0, 0]
    # busy: w0 80, w1 100, w2 100, w3 100: w1 is the first of the busiest
    assert run["critical"]["workers"] == ["w1"]


def test_one_worker_says_sync_skew_cannot_be_measured():
    run = run_ledger({"w0": _summary(50, 30, 20, 30)})
    assert run["critical"]["buckets"][L.SYNC_SKEW]["ns"] is None
    assert run["critical"]["buckets"][L.SYNC_SKEW]["reason"] == ONE_WORKER
    assert run["critical"]["buckets"][L.EXPOSED_COMM]["ns"] == [30 * US]


def test_generated_job_names_the_straggler(tmp_path):
    """gen_distributed plants extra compute on rank ranks // 3 = 1 of 4: the others wait for it at each step's
    all-reduce, so rank 1 sets every step and the others' sync skew exceeds its own."""
    run = _job(tmp_path, ranks=4, events=3000, steps=4)
    sums = {
        p.name.split(".")[0]: S.decode(S.encode(S.summarize(read_trace(str(p), processes=0))))
        for p in sorted(run.glob("*.pt.trace.json*"))
    }
    out = run_ledger(sums)
    assert set(out["critical"]["workers"]) == {"node0_rank00001"}
    assert adds_up(out["critical"]) == []
    tot = out["totals"]
    for w in sums:
        if w != "node0_rank00001":
            assert tot[w][L.SYNC_SKEW] > tot["node0_rank00001"][L.SYNC_SKEW], w


def test_no_workers():
    assert run_ledger({})["critical"] is None


def test_plugin_overview_carries_the_run_ledger(tmp_path, monkeypatch):
    """A 4-rank run with its summaries written by `gpuscope summarize`: the Overview of one worker holds that
    worker's ledger and the run's, whose critical ledger names the straggler (rank 1) at every step."""
    from tb_plugin.summaries import cli

    from .test_summaries import P, _plugin

    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    logdir = tmp_path / "logs"
    _job(logdir, ranks=4, events=3000, steps=4)
    assert cli.summarize_logdir(str(logdir))["done"] == 4
    c, _ = _plugin(logdir)
    assert c.get(f"{P}/runs").json["runs"] == ["job"]
    got = c.get(f"{P}/overview?run=job&worker=node0_rank00000&span=1")
    assert got.status_code == 200, got.json
    o = got.json
    assert o["recommendations"] is not None and o["ledger"]["buckets"]
    run = o["run_ledger"]
    assert run["workers"] == 4 and run["pending"] == [] and run["errors"] == []
    assert {s["worker"] for s in run["critical"]["steps"]} == {"node0_rank00001"}
    mean = {r["key"]: r for r in run["mean"]["buckets"]}
    assert mean[L.SYNC_SKEW]["ms"] > 0 and mean[L.SYNC_SKEW]["reason"] is None
