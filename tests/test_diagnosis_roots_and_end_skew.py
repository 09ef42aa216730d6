"""The generator learns what real jobs do (benchmarks/gen_distributed.py): a broadcast whose root sends and is done
before the last member comes, and members of a collective that end apart after the last one came. The facts are
read from the generated files' raw events (each member's NCCL kernel start and end), never from gpuscope; the
diagnosis must agree: the root is never late for finishing first, waiting is the last arrival less one's own, and the
exchange's own time is not waiting. Each planted job has its unplanted twin."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from profiler_core.trace.read.reader import read_trace
from tb_plugin.run_level import critical_path, report
from tb_plugin.summaries import summary

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from gen_distributed import Plant, generate  # noqa: E402

RANKS, STEPS, MS = 4, 3, 15.0
PLANTED = 2
END_SKEW_US = 500.0
#: below this (ms) a straggler is the generator's noise (ranks' speeds differ by up to 6 %)
QUIET_MS = 1.0


def _job(tmp: Path, planted: bool, **kw) -> tuple[list[dict], dict, critical_path.Job]:
    run = tmp / "job"
    plants = (Plant(PLANTED, "data", MS),) if planted else ()
    paths = generate(str(run), RANKS, events=2000, steps=STEPS, gz=False, straggler=-1, plants=plants, **kw)
    raw = [json.loads(Path(p).read_text()) for p in paths]
    sums = {Path(p).name.split(".")[0]: summary.summarize(read_trace(p)) for p in paths}
    return raw, report.diagnose(sums), critical_path.match(sums)


def _collectives(raw: list[dict]) -> list[list[tuple[int, float, float]]]:
    """Per collective (in order; the k-th communication kernel of each rank): [(rank, start µs, end µs)...]."""
    per_rank = []
    for t in raw:
        rank = t["distributedInfo"]["rank"]
        ks = sorted(
            (e for e in t["traceEvents"] if e.get("cat") == "kernel" and "ncclDevKernel" in e["name"]),
            key=lambda e: e["ts"],
        )
        per_rank.append([(rank, e["ts"], e["ts"] + e["dur"], e["name"]) for e in ks])
    return [list(c) for c in zip(*per_rank, strict=True)]


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    return _job(tmp_path_factory.mktemp("roots"), True, broadcast_root=0)


@pytest.fixture(scope="module")
def roots_twin(tmp_path_factory):
    return _job(tmp_path_factory.mktemp("roots_twin"), False, broadcast_root=0)


@pytest.fixture(scope="module")
def skew(tmp_path_factory):
    return _job(tmp_path_factory.mktemp("skew"), True, end_skew=END_SKEW_US)


@pytest.fixture(scope="module")
def skew_twin(tmp_path_factory):
    return _job(tmp_path_factory.mktemp("skew_twin"), False, end_skew=END_SKEW_US)


def _late_by_start(coll: list[tuple]) -> int:
    return max(coll, key=lambda m: m[1])[0]


def test_the_root_finishes_first_and_is_never_late_for_it(roots):
    raw, rep, job = roots
    colls = _collectives(raw)
    casts = [c for c in colls if "Broadcast" in c[0][3]]
    assert len(casts) == STEPS
    for c in casts:
        assert min(c, key=lambda m: m[2])[0] == 0  # the root (rank 0) ends first ...
        assert _late_by_start(c) == PLANTED  # ... while the planted rank came last
    late = {
        str(n): job.ranks[job.workers[int(w)]]
        for n, w, s in zip(job.inst["name"], job.i_late, job.inst["seq"])
        if "broadcast" in str(n)
    }
    assert late and set(late.values()) == {PLANTED}, late
    w = rep["worst"]
    assert w["rank"] == PLANTED and w["why"].startswith("data loading +"), w
    assert w["excess_ms"] == pytest.approx(MS, rel=0.1)


def test_the_roots_twin_names_no_one(roots_twin):
    _, rep, _ = roots_twin
    assert not [s for s in rep["stragglers"] if s["excess_ms"] >= QUIET_MS], rep["stragglers"]


def test_members_that_end_apart_do_not_turn_the_exchange_into_waiting(skew):
    """Each member's wait is the last kernel start less its own (the raw events), whatever the ends' spread; the
    exchange (last end less last start) holds the spread."""
    raw, _, job = skew
    colls = _collectives(raw)
    order = sorted(range(len(job.inst)), key=lambda i: job.calls["arrival"][job.members(i)].min())
    assert len(order) == len(colls)
    spreads = []
    for c, i in zip(colls, order):
        last = max(m[1] for m in c)
        ends = max(m[2] for m in c)
        waits = {job.ranks[job.workers[int(job.c_w[r])]]: job.c_wait[r] / 1e3 for r in job.members(i)}
        for rank, start, end, _ in c:
            assert waits[rank] == pytest.approx(max(0.0, min(last, end) - start), abs=0.01), (rank, c)
        assert job.inst["transfer"].iat[i] / 1e3 == pytest.approx(ends - last, abs=0.01)
        spreads.append(ends - min(m[2] for m in c))
    assert max(spreads) >= 0.5 * END_SKEW_US  # the ends are far apart (more than a transfer takes)


def test_end_skew_twin_names_no_one_and_the_planted_job_its_rank(skew, skew_twin):
    assert skew[1]["worst"]["rank"] == PLANTED
    assert skew[1]["worst"]["excess_ms"] == pytest.approx(MS, rel=0.1)
    assert not [s for s in skew_twin[1]["stragglers"] if s["excess_ms"] >= QUIET_MS], skew_twin[1]["stragglers"]
