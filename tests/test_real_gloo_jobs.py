"""Issue 37 (the diagnosis true on real jobs), groundwork: real `torch.distributed` jobs on gloo (CPU, 2-4
processes, torch 2.13 from the compat venv), profiled by `torch.profiler` (tests/real_jobs/gloo_job.py), with
real plants: one rank's data loader slower, one rank's extra matmuls, ranks started 0.7 s apart, a broadcast
from rank 0, uneven all_to_all splits, a send/recv chain, one profiled step vs five; each planted job has an
unplanted twin.

First the facts of the RAW traces (json only, never gpuscope) that prove each job holds its plant; then what
`gpuscope diagnose --json` answers on it. Where gpuscope is right today it is asserted; where it is wrong the
check is `xfail(strict=True)` with what is wrong, so that the change of issue 37 flips it.
What torch writes and how long the jobs take: tests/real_jobs/PROVENANCE.md."""

from __future__ import annotations

import contextlib
import io
import json
import statistics
from pathlib import Path

import pytest

from tb_plugin.summaries import cli

from .real_jobs import support
from .real_jobs.support import DATALOADER, JobCache

pytestmark = pytest.mark.slow  # about 5 s per job (12 jobs) on 2 shared cores

#: far above the scheduling noise of a loaded 2-core machine (a rank's step now and then ~90 ms longer)
PLANT_MS = 250.0
STAGGER_MS = 700.0
#: a plant is measured within 10 % in its own annotation; a wait it causes on other ranks within 25 %
#: (the waits also hold the scheduling noise of 4 processes on 2 shared cores: up to ~30 ms in a step when the
#: cores run two test processes beside the job)
PLANT_TOL, WAIT_TOL = 0.10, 0.25
#: "says nothing": no unplanted rank is called a straggler for more than half a plant in two steps or more, nor
#: for two plants in any step. (The scheduling noise of a loaded 2-core machine, load 5, makes one rank's step
#: up to ~50 ms longer now and then, in one step: a plant acts in every step.)
QUIET_MS = PLANT_MS / 2

#: name -> (job arguments, planted rank, planted cause (gpuscope's phase), the unplanted twin)
JOBS: dict[str, tuple[dict, int | None, str | None, str | None]] = {
    "data": (dict(data={2: PLANT_MS}), 2, "data_loading", "quiet"),
    "compute": (dict(compute={1: PLANT_MS}), 1, "compute", "quiet"),
    "stagger": (dict(stagger=STAGGER_MS), 3, "start", "quiet"),
    "broadcast": (dict(collective="broadcast", compute={0: PLANT_MS}), 0, "compute", "broadcast_quiet"),
    "all_to_all": (dict(collective="all_to_all", data={3: PLANT_MS}), 3, "data_loading", "all_to_all_quiet"),
    "sendrecv": (dict(collective="sendrecv", compute={0: PLANT_MS}), 0, "compute", "sendrecv_quiet"),
    "one_step": (dict(world=2, steps=1, data={1: PLANT_MS}), 1, "data_loading", "one_step_quiet"),
    "quiet": ({}, None, None, None),
    "broadcast_quiet": (dict(collective="broadcast"), None, None, None),
    "all_to_all_quiet": (dict(collective="all_to_all"), None, None, None),
    "sendrecv_quiet": (dict(collective="sendrecv"), None, None, None),
    "one_step_quiet": (dict(world=2, steps=1), None, None, None),
}
PLANTED = [n for n, j in JOBS.items() if j[1] is not None]
QUIET = [n for n, j in JOBS.items() if j[1] is None]
#: the jobs planted with a cause (data or compute) on one rank; the stagger job has a start time planted
PLANTED_CAUSES = [n for n in PLANTED if n != "stagger"]
DATA_PLANTED = [n for n in PLANTED if JOBS[n][2] == "data_loading"]
COMPUTE_PLANTED = [n for n in PLANTED if JOBS[n][2] == "compute"]
#: what torch 2.13 writes per collective: the c10d op (main thread) and the gloo annotation (a gloo thread)
OPS = {
    "all_reduce": ("c10d::allreduce_", "gloo:all_reduce"),
    "broadcast": ("c10d::broadcast_", "gloo:broadcast"),
    "all_to_all": ("c10d::alltoall_base_", "gloo:all_to_all"),
}


def args(name: str) -> dict:
    return {"world": 4, "steps": 5, "collective": "all_reduce", **JOBS[name][0]}


@pytest.fixture(scope="session")
def gloo_jobs(tmp_path_factory) -> JobCache:
    support.compat_python()  # missing() before any job when the venv is absent
    return JobCache(tmp_path_factory.mktemp("gloo_jobs"))


@pytest.fixture(scope="session")
def diagnoses() -> dict:
    return {}


def run_folder(gloo_jobs: JobCache, name: str) -> Path:
    return gloo_jobs.get(run=name, **args(name))


def diagnosis(gloo_jobs: JobCache, diagnoses: dict, name: str) -> dict:
    """`gpuscope diagnose LOGDIR RUN --json` on the job (once per session)."""
    if name not in diagnoses:
        folder = run_folder(gloo_jobs, name)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main(["diagnose", str(folder.parent), name, "--json"])
        assert rc in (0, None), err.getvalue()
        diagnoses[name] = json.loads(out.getvalue())
    return diagnoses[name]


def ms(events: list[dict]) -> float:
    return sum(e["dur"] for e in events) / 1e3


def per_step(rank: support.Rank, name: str) -> list[float]:
    """ms of the events called `name` that start in each ProfilerStep of `rank` (any thread)."""
    return [ms(rank.in_step(s, name)) for s in rank.steps]


def within(value: float, expected: float, tol: float) -> bool:
    return abs(value - expected) <= tol * expected


#: what a loaded 2-core machine (CI runs two test processes beside these jobs' four) adds to a timed span now and
#: then; it never takes time away, so it widens the bound above only
LOAD_SLACK_MS = QUIET_MS


def about(value: float, expected: float, tol: float) -> bool:
    """`value` is `expected` within `tol` below it, and within `tol` plus LOAD_SLACK_MS above it."""
    return (1 - tol) * expected <= value <= (1 + tol) * expected + LOAD_SLACK_MS


# --- the raw traces ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(JOBS))
def test_one_gloo_trace_per_rank_with_its_steps_and_collectives(gloo_jobs, name):
    a = args(name)
    ranks = support.load(run_folder(gloo_jobs, name))
    assert sorted(ranks) == list(range(a["world"]))
    for r, rank in ranks.items():
        info = rank.meta["distributedInfo"]
        assert info["backend"] == "gloo" and info["rank"] == r and info["world_size"] == a["world"]
        assert [s["name"] for s in rank.steps] == [f"ProfilerStep#{i}" for i in range(a["steps"])]
        assert len(rank.named(DATALOADER)) == a["steps"] and len(rank.named("compute")) == a["steps"]
        names = {e["name"] for e in rank.events}
        assert not any("record_param_comms" in n for n in names)
        comm = {n for n in names if n.startswith(("c10d::", "gloo:"))}
        if a["collective"] == "sendrecv":  # the chain 0 -> 1 -> ... -> n-1
            want = set()
            if r > 0:
                want |= {"c10d::recv_", "gloo:recv"}
            if r < a["world"] - 1:
                want |= {"c10d::send", "gloo:send"}
        else:
            want = set(OPS[a["collective"]])
        assert comm == want
        for n in want:
            evs = rank.named(n)
            assert len(evs) == a["steps"], n
            # c10d:: ops on the loop's thread (cpu_op, they only enqueue); the gloo: annotation of a collective on
            # a gloo worker thread, of a send/recv on the loop's thread (it starts inside c10d::recv_ and outlasts
            # it: the wait, not nested in the op)
            if n.startswith("c10d::"):
                assert all(e["cat"] == "cpu_op" and e["tid"] == rank.main_tid for e in evs)
            else:
                assert all(e["cat"] == "user_annotation" for e in evs)
                on_main = {e["tid"] == rank.main_tid for e in evs}
                assert on_main == {a["collective"] == "sendrecv"}, n


@pytest.mark.parametrize("name", DATA_PLANTED)
def test_data_plant_is_in_the_planted_ranks_loader(gloo_jobs, name):
    ranks = support.load(run_folder(gloo_jobs, name))
    planted = JOBS[name][1]
    others = [statistics.median(per_step(ranks[r], DATALOADER)) for r in ranks if r != planted]
    extra = statistics.median(per_step(ranks[planted], DATALOADER)) - statistics.median(others)
    assert about(extra, PLANT_MS, PLANT_TOL), extra


@pytest.mark.parametrize("name", COMPUTE_PLANTED)
def test_compute_plant_is_in_the_planted_ranks_matmuls(gloo_jobs, name):
    ranks = support.load(run_folder(gloo_jobs, name))
    planted = JOBS[name][1]
    extra = per_step(ranks[planted], "extra_compute")
    assert all(about(x, PLANT_MS, PLANT_TOL) for x in extra), extra
    assert all(not rank.named("extra_compute") for r, rank in ranks.items() if r != planted)
    # the extra is matmuls: aten::mm fills much of the range (the rest: the loop's Python, and the time the
    # process is off the shared cores between two matmuls)
    mm = ranks[planted].named("aten::mm")
    for e in ranks[planted].named("extra_compute"):
        inside = ms([m for m in mm if e["ts"] <= m["ts"] < e["ts"] + e["dur"]])
        assert inside > 0.3 * e["dur"] / 1e3


@pytest.mark.parametrize("name", PLANTED_CAUSES)
def test_the_other_ranks_wait_the_plant_at_the_collective(gloo_jobs, name):
    """The waiting ranks' gloo annotation lasts about the plant longer than the planted rank's (send/recv: every
    recv of the chain waits about the plant for rank 0)."""
    ranks = support.load(run_folder(gloo_jobs, name))
    planted = JOBS[name][1]
    if args(name)["collective"] == "sendrecv":
        for r in range(1, len(ranks)):
            wait = statistics.median(per_step(ranks[r], "gloo:recv"))
            assert about(wait, PLANT_MS, WAIT_TOL), (r, wait)
        # gloo's send returns at once (the scheduling noise aside): rank 0 never waits
        assert statistics.median(per_step(ranks[0], "gloo:send")) < 1.0
        return
    op = OPS[args(name)["collective"]][1]
    mine = per_step(ranks[planted], op)
    for r in ranks:
        if r != planted:
            waited = statistics.median(o - m for o, m in zip(per_step(ranks[r], op), mine, strict=True))
            assert about(waited, PLANT_MS, WAIT_TOL), (r, waited)


def test_staggered_ranks_start_their_steps_apart_and_wait_at_the_first_collective(gloo_jobs):
    ranks = support.load(run_folder(gloo_jobs, "stagger"))
    n = len(ranks)
    t0 = ranks[0].steps[0]["ts"]
    for r, rank in ranks.items():
        if r:
            assert about((rank.steps[0]["ts"] - t0) / 1e3, r * STAGGER_MS, PLANT_TOL), r
        # in step 0 rank r waits for the last rank: (n-1-r) * STAGGER; the later steps are in step again
        first, *later = per_step(rank, "gloo:all_reduce")
        if r < n - 1:
            assert about(first, (n - 1 - r) * STAGGER_MS, WAIT_TOL), (r, first)
        assert max(later) < QUIET_MS + LOAD_SLACK_MS, (r, later)


@pytest.mark.parametrize("name", QUIET)
def test_unplanted_twins_are_even(gloo_jobs, name):
    ranks = support.load(run_folder(gloo_jobs, name))
    loads = [statistics.median(per_step(rank, DATALOADER)) for rank in ranks.values()]
    computes = [statistics.median(per_step(rank, "compute")) for rank in ranks.values()]
    assert max(loads) - min(loads) < QUIET_MS / 2 and max(computes) - min(computes) < QUIET_MS / 2
    assert not any(rank.named("extra_compute") for rank in ranks.values())
    t0 = ranks[0].steps[0]["ts"]
    assert all(abs(rank.steps[0]["ts"] - t0) / 1e3 < QUIET_MS for rank in ranks.values())


# --- what gpuscope answers --------------------------------------------------------------------------------------


def _names_the_plant(rep: dict, planted: int, cause: str) -> bool:
    w = rep["worst"]
    return (
        w is not None
        and w["rank"] == planted
        and bool(w["phases"])
        and w["phases"][0]["phase"] == cause
        and within(w["excess_ms"], PLANT_MS, PLANT_TOL)
    )


@pytest.mark.parametrize("name", PLANTED_CAUSES)
def test_gpuscope_names_the_planted_rank_and_cause(gloo_jobs, diagnoses, name):
    _, planted, cause, _ = JOBS[name]
    rep = diagnosis(gloo_jobs, diagnoses, name)
    assert _names_the_plant(rep, planted, cause), (rep["worst"], [s["path"] for s in rep["steps"]])


@pytest.mark.parametrize("name", PLANTED)
def test_gpuscope_names_the_planted_rank_late_at_each_steps_collective(gloo_jobs, diagnoses, name):
    """Every step's path crosses a collective (a send/recv) at which the planted rank is late and the others waited
    (stagger: step 0, where the last-started rank is late)."""
    _, planted, _, _ = JOBS[name]
    rep = diagnosis(gloo_jobs, diagnoses, name)
    assert len(rep["steps"]) == args(name)["steps"]
    for step in rep["steps"][:1] if name == "stagger" else rep["steps"]:
        late = [s["late_rank"] for s in step["segments"] if s["kind"] == "collective" and s["waiters"]]
        if args(name)["collective"] == "sendrecv":
            # the chain: rank r sends only once its own receive is done, so the path goes back link by link to the
            # rank the whole chain waited for (from the rank whose step ended last: any of the chain's), and each
            # link's wait is about the plant
            assert late and late == list(range(len(late))), step["path"]
            waits = [s["wait_ms_max"] for s in step["segments"] if s["kind"] == "collective"]
            assert all(about(w, PLANT_MS, WAIT_TOL) for w in waits), (waits, step["path"])
        else:
            assert set(late) == {planted}, step["path"]
    assert "no collective is matched across the workers: each step's path stays on one worker" not in rep["notes"]


@pytest.mark.parametrize("name", PLANTED_CAUSES)
def test_gpuscope_ledger_has_the_planted_rank_set_each_step_by_its_cause(gloo_jobs, diagnoses, name):
    """Right today but for the chain: the rank that sets each step in the ledger is the planted one and its largest
    bucket is the plant's (host compute: the CPU job's matmuls), of at least the plant."""
    _, planted, cause, _ = JOBS[name]
    bucket = {"data_loading": "data_loading", "compute": "host_compute"}[cause]
    crit = diagnosis(gloo_jobs, diagnoses, name)["ledger"]["critical"]
    assert len(crit["steps"]) == args(name)["steps"]
    for step in crit["steps"]:
        b = {k: v for k, v in step["buckets"].items() if v is not None}
        assert step["worker"] == f"rank{planted}" and max(b, key=b.get) == bucket, step
        assert b[bucket] >= (1 - PLANT_TOL) * PLANT_MS, step


def _false_claims(rep: dict, planted: int | None) -> list:
    """The stragglers gpuscope names that are not the planted rank: for QUIET_MS or more in two steps or more, or
    for 2 * PLANT_MS or more in a step (see QUIET_MS)."""
    named = [s for s in rep["stragglers"] if s["rank"] != planted and s["excess_ms"] >= QUIET_MS]
    ranks = [s["rank"] for s in named]
    return [
        (s["rank"], s["step"], s["excess_ms"], s["why"])
        for s in named
        if ranks.count(s["rank"]) > 1 or s["excess_ms"] >= 2 * PLANT_MS
    ]


@pytest.mark.parametrize("name", PLANTED)
def test_gpuscope_says_nothing_false_about_the_unplanted_ranks(gloo_jobs, diagnoses, name):
    _, planted, _, _ = JOBS[name]
    rep = diagnosis(gloo_jobs, diagnoses, name)
    assert _false_claims(rep, planted) == []


@pytest.mark.parametrize("name", QUIET)
def test_gpuscope_says_nothing_on_the_unplanted_twin(gloo_jobs, diagnoses, name):
    """The twin of a planted job: no straggler of more than half a plant, no rank late at a collective by half a
    plant, no waiting for other ranks (sync skew) of half a plant in the ledger. (The scheduling noise of the shared
    cores makes some rank the last to arrive by a few ms: named, but under the bound.)"""
    rep = diagnosis(gloo_jobs, diagnoses, name)
    assert _false_claims(rep, None) == []
    waits = [s for step in rep["steps"] for s in step["segments"] if s["kind"] == "collective"]
    assert waits, "every step's path crosses its collective"
    assert not [(s["late_rank"], s["wait_ms_max"]) for s in waits if s["wait_ms_max"] >= QUIET_MS]
    skew = [b for b in rep["ledger"]["critical"]["buckets"] if b["key"] == "sync_skew"][0]
    assert (skew["ms"] or 0) < QUIET_MS, skew


@pytest.mark.parametrize("name", ["quiet", "one_step_quiet", "sendrecv_quiet"])
def test_gpuscope_says_first_what_it_cannot_know(gloo_jobs, diagnoses, name):
    """Issue 37 item 5: the caveats lead; all ranks are there (nothing withheld); gloo's collectives carry no
    `Collective name`, so gpuscope says they were matched by name and order (send/recv: paired by time); a job of
    one profiled step says steady state is unknown."""
    rep = diagnosis(gloo_jobs, diagnoses, name)
    keys = [c["key"] for c in rep["caveats"]]
    assert list(rep)[0] == "caveats" and "missing_ranks" not in keys and rep["withheld"] is None
    assert "unmatched_collectives" not in keys, rep["caveats"]
    [how] = [c["text"] for c in rep["caveats"] if c["key"] == "matched_by_order"]
    n = args(name)["steps"] * args(name)["world"]
    if args(name)["collective"] == "sendrecv":
        assert f"of the {2 * (n - args(name)['steps'])} matched calls" in how and "point-to-point" in how, how
    else:
        assert f"of the {n} matched calls, {n} by name and order" in how, how
    assert ("one_step" in keys) == (args(name)["steps"] == 1), keys


def test_gpuscope_ledger_recovers_no_entry_stagger(gloo_jobs, diagnoses):
    """Ranks started 0.7 s apart: in step 0 the first ranks wait seconds for the last one, which did no more work;
    that wait is sync skew, but not recoverable by balancing (the ledger's recoverable sync skew stays under half a
    plant), while the data plant's wait is recoverable (about the plant)."""

    def skew(name: str) -> dict:
        crit = diagnosis(gloo_jobs, diagnoses, name)["ledger"]["mean"]
        return [b for b in crit["buckets"] if b["key"] == "sync_skew"][0]

    verdict = diagnosis(gloo_jobs, diagnoses, "stagger")["verdict"]
    assert verdict["kind"] == "stagger" and verdict["rank"] is None, verdict  # no rank is blamed for its start
    stagger = skew("stagger")
    n = args("stagger")["world"]
    waited = sum(r * STAGGER_MS for r in range(n)) / n / args("stagger")["steps"]  # mean over ranks and steps
    assert about(stagger["ms"], waited, WAIT_TOL), stagger
    assert stagger["recoverable_ms"] < QUIET_MS, stagger
    data = skew("data")
    assert about(data["recoverable_ms"], PLANT_MS * 3 / 4, WAIT_TOL), data  # 3 of 4 ranks wait the plant


@pytest.mark.parametrize("name", PLANTED + QUIET)
def test_one_answer_per_step(gloo_jobs, diagnoses, name):
    """The ledger's rank that set a step is the path's straggler of that step, wherever both name one; no segment
    of a step's path is longer than the step."""
    rep = diagnosis(gloo_jobs, diagnoses, name)
    crit = rep["ledger"]["critical"]
    set_by = {s["step"]: s["worker"] for s in crit["steps"]}
    pairs = [(s["step"], set_by.get(s["step"]), s["straggler"]["worker"]) for s in rep["steps"] if s["straggler"]]
    assert pairs and all(a == b for _, a, b in pairs), pairs
    # no part of a step's path is longer than the step (from the first rank in to the last out)
    for s in rep["steps"]:
        parts = [x["ms"] if x["kind"] == "work" else x["wait_ms_max"] for x in s["segments"]]
        assert s["span_ms"] is not None and max(parts) <= s["span_ms"] + 0.01, (s["step"], s["span_ms"], parts)
