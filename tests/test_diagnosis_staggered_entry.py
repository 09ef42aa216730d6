"""Ranks that enter the profiled window apart (benchmarks/gen_distributed.py `stagger`: rank r starts r x 5 ms
after rank 0, with the same work as the others): the first collective's wait is entry stagger, said in the path
and in the ledger's advice, and not recoverable by balancing; no rank is named a straggler for it. Its twin without
the stagger says nothing of the kind."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from profiler_core.trace.read.reader import read_trace
from tb_plugin.run_level import report
from tb_plugin.summaries import summary

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from gen_distributed import generate  # noqa: E402

RANKS, STEPS, STAGGER_US = 4, 3, 5000.0
#: a straggler named for less than this (ms) is the generator's noise (ranks' speeds differ by up to 6 %)
QUIET_MS = 1.0


def _diagnose(tmp: Path, stagger: float) -> dict:
    run = tmp / "job"
    generate(str(run), RANKS, events=2000, steps=STEPS, straggler=-1, stagger=stagger)
    sums = {p.name.split(".")[0]: summary.summarize(read_trace(p)) for p in sorted(run.iterdir())}
    return report.diagnose(sums)


@pytest.fixture(scope="module")
def staggered(tmp_path_factory) -> dict:
    return _diagnose(tmp_path_factory.mktemp("stagger"), STAGGER_US)


@pytest.fixture(scope="module")
def even(tmp_path_factory) -> dict:
    return _diagnose(tmp_path_factory.mktemp("even"), 0.0)


def _skew(rep: dict) -> dict:
    return next(b for b in rep["ledger"]["mean"]["buckets"] if b["key"] == "sync_skew")


def test_the_first_collective_waits_for_the_last_rank_in_and_says_it_is_stagger(staggered):
    first = staggered["steps"][0]
    late = [s for s in first["segments"] if s["kind"] == "collective" and s["waiters"]]
    assert late and late[0]["late_rank"] == RANKS - 1, first["path"]
    # the median waiter (rank 1 of 0-2) waited (3 - 1) x 5 ms for rank 3, all of it stagger
    assert late[0]["wait_ms_median"] == pytest.approx(2 * STAGGER_US / 1000, rel=0.1), late[0]
    assert late[0]["stagger_ms"] == pytest.approx(late[0]["wait_ms_median"], rel=0.05), late[0]
    assert "entered the step later" in first["path"]


def test_the_stagger_is_not_recoverable_and_the_ledger_says_why(staggered):
    skew = _skew(staggered)
    # ranks 0-2 wait 15, 10, 5 ms in the first step: 7.5 ms per rank, 2.5 ms per step over 3 steps
    assert skew["ms"] == pytest.approx(sum(r * STAGGER_US for r in range(RANKS)) / RANKS / STEPS / 1000, rel=0.15)
    assert skew["recoverable_ms"] < 0.1 * skew["ms"], skew
    assert any("stagger with which the ranks entered" in a for a in skew["advice"]), skew["advice"]


def test_no_rank_is_a_straggler_for_entering_late(staggered):
    named = [(s["rank"], s["step"], s["excess_ms"]) for s in staggered["stragglers"] if s["excess_ms"] >= QUIET_MS]
    assert named == []


def test_the_twin_without_stagger_says_nothing_of_it(even):
    skew = _skew(even)
    assert (skew["ms"] or 0) < QUIET_MS and not skew["advice"], skew
    assert not [s for s in even["stragglers"] if s["excess_ms"] >= QUIET_MS]
    for step in even["steps"]:
        assert "entered the step later" not in step["path"] or all(
            (s.get("stagger_ms") or 0) < QUIET_MS for s in step["segments"] if s["kind"] == "collective"
        ), step["path"]


def test_the_verdict_leads_with_the_stagger_and_its_twin_does_not(staggered, even):
    v = staggered["verdict"]
    assert v["kind"] == "stagger" and v["rank"] is None, v
    assert v["ms"] == pytest.approx(_skew(staggered)["ms"] - _skew(staggered)["recoverable_ms"], abs=0.01)
    assert v["text"].startswith("the ranks entered the profiled window apart")
    assert even["verdict"]["kind"] != "stagger", even["verdict"]
