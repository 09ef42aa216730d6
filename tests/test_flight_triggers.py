"""The flight recorder's triggers (profiler_core/flight/rules.py): a slow step against the running median, a long
data wait, a rank slower than the others for n steps (from the exchanged numbers), at most one capture per
interval, and the capture itself: a trace of the next steps in the logdir and a record saying why it ran."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from profiler_core.flight import Recorder, Rules, format
from profiler_core.flight.rules import LocalRules, RankRules, RunningMedian, others_median


def test_running_median_over_its_window():
    m = RunningMedian(5)
    for v in [5, 1, 4, 2, 3, 100, 100]:
        m.add(v)
    assert m.median() == 4  # the window holds 4, 2, 3, 100, 100
    assert len(m) == 5


def test_others_median_leaves_each_out():
    col = np.array([10.0, 11.0, 40.0, 12.0])
    assert others_median(col).tolist() == [12.0, 12.0, 11.0, 11.0]
    assert others_median(np.array([3.0, 9.0])).tolist() == [9.0, 3.0]


def test_slow_step_rule_after_its_history():
    rules = LocalRules(Rules(step_factor=3.0, min_history=10, window=50), rank=0)
    assert rules.check(0, 100.0, 0.0) is None  # no history yet: nothing to compare with
    for s in range(1, 12):
        assert rules.check(s, 10.0, 0.0) is None
    assert rules.check(12, 29.0, 0.0) is None  # under 3 x 10 ms
    hit = rules.check(13, 31.0, 0.0)
    assert hit is not None and hit.rule == "slow_step" and hit.ranks == (0,)
    assert "3.1 x the running median 10.0 ms" in hit.why, hit.why
    assert rules.median.median() == 10.0  # a slow step does not move the median it is judged against


def test_data_wait_rule():
    rules = LocalRules(Rules(step_factor=None, data_ms=5.0), rank=3)
    assert rules.check(0, 20.0, 4.9) is None
    hit = rules.check(1, 20.0, 7.5)
    assert hit is not None and hit.rule == "data_wait" and hit.ranks == (3,) and "waited 7.5 ms" in hit.why


def _work(world: int, n: int, slow: dict[int, float]) -> np.ndarray:
    w = np.full((world, n), 10.0) + np.arange(world)[:, None] * 0.1
    for r, ms in slow.items():
        w[r] += ms
    return w


def test_slow_rank_rule_needs_n_consecutive_steps_and_carries_them_over():
    rr = RankRules(Rules(rank_ms=20.0, rank_steps=5))
    assert rr.check(np.arange(0, 4), _work(4, 4, {2: 30.0})) is None  # 4 steps: not yet
    hit = rr.check(np.arange(4, 8), _work(4, 4, {2: 30.0}))  # the 5th consecutive step is step 4
    assert hit is not None and hit.rule == "slow_rank" and hit.ranks == (2,)
    assert hit.healthy == 0  # the rank of least work among the others, for comparison
    assert "rank 2 +" in hit.why and "up to step 4" in hit.why, hit.why


def test_slow_rank_rule_resets_on_a_normal_step():
    rr = RankRules(Rules(rank_ms=20.0, rank_steps=3))
    w = _work(4, 6, {})
    w[1, [0, 1, 3, 4]] += 25.0  # never three in a row
    assert rr.check(np.arange(6), w) is None
    w2 = _work(4, 3, {1: 25.0})
    w2[1, 1] -= 10.0  # 15 ms over: not over 20 ms
    assert rr.check(np.arange(6, 9), w2) is None


def test_rules_are_checked():
    with pytest.raises(ValueError, match="capture_steps"):
        Rules(capture_steps=0)
    with pytest.raises(ValueError, match="step_factor"):
        Rules(step_factor=-1.0)


def _loop(rec: Recorder, walls_ms: list[float]) -> None:
    for ms in walls_ms:
        time.sleep(ms / 1000)
        rec.step()


def test_a_slow_step_starts_one_capture_per_interval(tmp_path):
    """Steps of 2 ms, a 150 ms step at 25 and another at 35 (within the interval): one capture of the 3 steps
    after step 26 (26 is its warm-up), a trace of those steps in capture_step000026/, and the record of why.
    (k = 20: a loaded machine's preemption does not make a 2 ms step 40 ms long.)"""
    rules = Rules(step_factor=20.0, min_history=10, capture_steps=3, interval_steps=100)
    walls = [2.0] * 50
    walls[25] = walls[35] = 150.0
    with Recorder(tmp_path, rules, worker="w0") as rec:
        _loop(rec, walls)
    t = format.decode("x", (tmp_path / "w0.telemetry.jsonl").read_bytes())
    assert len(t.captures) == 1, t.captures
    cap = t.captures[0]
    assert cap["rule"] == "slow_step" and cap["s"] == 26 and cap["first"] == 27 and cap["steps"] == 3
    assert cap["dir"] == "capture_step000026" and cap["tool"] == "gpuscope" and cap["role"] == "affected"
    assert cap["why"].startswith("step 25 took ") and "error" not in cap
    traces = list((tmp_path / "capture_step000026").glob("w0.*.pt.trace.json"))
    assert len(traces) == 1, traces
    events = json.loads(traces[0].read_text())["traceEvents"]
    steps = sorted(e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#"))
    assert len(steps) == 3, steps


def test_a_capture_still_running_at_close_is_written(tmp_path):
    rules = Rules(step_factor=None, data_ms=30.0, capture_steps=50)
    with Recorder(tmp_path, rules, worker="w0") as rec:
        for i in range(6):
            with rec.data():
                time.sleep(0.1 if i == 1 else 0)
            rec.step()
    t = format.decode("x", (tmp_path / "w0.telemetry.jsonl").read_bytes())
    assert [c["rule"] for c in t.captures] == ["data_wait"] and t.ended
    assert list((tmp_path / "capture_step000002").glob("*.pt.trace.json"))


def test_no_rules_no_capture(tmp_path):
    with Recorder(tmp_path, None, worker="w0") as rec:
        _loop(rec, [1.0] * 30 + [50.0] + [1.0] * 5)
    t = format.decode("x", (tmp_path / "w0.telemetry.jsonl").read_bytes())
    assert t.captures == [] and t.header["rules"] is None and t.header["slow_rank_rule"] == "off"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w0.telemetry.bin", "w0.telemetry.jsonl"]  # no capture


class FakeExchange:
    """The ranks' allgather, answered with a job where rank 2 does `slow_ms` more work in every step."""

    def __init__(self, rank: int, world: int, slow_ms: float) -> None:
        self.rank, self.world, self.slow_ms = rank, world, slow_ms
        self.calls = 0

    def allgather(self, values):
        self.calls += 1
        m = np.tile(np.asarray(values, float), (self.world, 1))
        m[2] += self.slow_ms
        m[0] -= 0.5  # rank 0 the least loaded: the healthy one
        return m


@pytest.mark.parametrize("capture_ranks, rank, captures", [("all", 1, True), ("named", 1, False), ("named", 0, True)])
def test_slow_rank_rule_through_the_exchange(tmp_path, capture_ranks, rank, captures):
    """Every `exchange_every` steps the recorder hands its last steps' work to the exchange; the same decision on
    every rank: rank 2 affected, rank 0 healthy; with capture_ranks="all" a third rank captures too, with "named"
    only those two."""
    rules = Rules(
        step_factor=None, rank_ms=20.0, rank_steps=5, exchange_every=10, capture_steps=2, capture_ranks=capture_ranks
    )
    rec = Recorder(tmp_path, rules, comm="none", worker=f"w{rank}")
    rec.rank, rec.world = rank, 4
    rec.exchange = FakeExchange(rank, 4, slow_ms=30.0)
    rec._ranks = RankRules(rules)  # what a hooked communicator gives at construction
    with rec:
        for _ in range(25):
            rec.step()
    assert rec.exchange.calls == 2
    t = format.decode("x", (tmp_path / f"w{rank}.telemetry.jsonl").read_bytes())
    if not captures:
        assert t.captures == []
        return
    (cap,) = t.captures
    assert cap["rule"] == "slow_rank" and cap["ranks"] == [2] and cap["healthy"] == 0 and cap["s"] == 10
    assert cap["role"] == {0: "healthy", 1: "other", 2: "affected"}[rank]
    assert "rank 2 +30.0 ms" in cap["why"] and "up to step 4" in cap["why"], cap["why"]
