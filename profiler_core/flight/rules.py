"""The triggers: rules over the per-step telemetry that decide when a deep capture runs, and why.

- **slow step** (`step_factor` k): this rank's step took more than k x the running median of its last `window`
  steps (after `min_history` steps). Local to the rank.
- **data wait** (`data_ms` y): this rank waited more than y ms for data in one step. Local to the rank.
- **slow rank** (`rank_ms` x, `rank_steps` n): a rank's time outside collectives (wall minus collectives: the
  work it did, not the waiting for the others) exceeded the median of the other ranks' by more than x ms in n
  consecutive steps. It needs every rank's numbers: every `exchange_every` steps the ranks allgather their last
  steps' work through the hooked communicator; every rank then takes the same decision from the same numbers:
  the slow ranks are *affected*, the other rank of least work is the *healthy* one for comparison, and with
  `capture_ranks="all"` (the default) every rank captures the same steps, because the cross-rank diagnosis
  (`gpuscope diagnose`) names a straggler only when it sees every rank of the collectives' group; "named" captures
  the affected and the healthy rank only (cheaper on a big job; their traces then give per-rank ledgers, and the
  diagnosis says that the other ranks are missing). Without a hooked communicator the rule is skipped, and the
  header says why.

A capture covers the next `capture_steps` steps; a rank starts at most one capture per `interval_steps` steps
(the slow-rank rule keeps its own interval, the same on every rank, so that ranks agree on it).
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class Rules:
    """Thresholds of the triggers; None turns a rule off."""

    step_factor: float | None = 3.0
    window: int = 100
    min_history: int = 20
    data_ms: float | None = None
    rank_ms: float | None = 20.0
    rank_steps: int = 5
    exchange_every: int = 10
    capture_steps: int = 5
    interval_steps: int = 1000
    healthy: bool = True
    capture_ranks: str = "all"

    def __post_init__(self) -> None:
        for name in ("window", "min_history", "rank_steps", "exchange_every", "capture_steps", "interval_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"Rules.{name} must be at least 1, got {getattr(self, name)}")
        if self.capture_ranks not in ("all", "named"):
            raise ValueError(f"Rules.capture_ranks must be 'all' or 'named', got {self.capture_ranks!r}")
        for name in ("step_factor", "data_ms", "rank_ms"):
            v = getattr(self, name)
            if v is not None and not v > 0:
                raise ValueError(f"Rules.{name} must be positive or None, got {v}")

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Trigger:
    """A decision to capture: the rule, a sentence saying why, the ranks it names and the healthy one."""

    rule: str
    why: str
    ranks: tuple[int, ...]
    healthy: int | None = None


class RunningMedian:
    """The median of the last `window` values: a sorted list beside the window (O(window) per value, a few
    microseconds for 100)."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.values: deque[float] = deque()
        self.sorted: list[float] = []

    def add(self, v: float) -> None:
        self.values.append(v)
        bisect.insort(self.sorted, v)
        if len(self.values) > self.window:
            old = self.values.popleft()
            del self.sorted[bisect.bisect_left(self.sorted, old)]

    def __len__(self) -> int:
        return len(self.values)

    def median(self) -> float:
        s, n = self.sorted, len(self.sorted)
        return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


class LocalRules:
    """The rules one rank decides alone (slow step, data wait)."""

    def __init__(self, rules: Rules, rank: int) -> None:
        self.rules = rules
        self.rank = rank
        self.median = RunningMedian(rules.window)

    def check(self, step: int, wall_ms: float, data_ms: float) -> Trigger | None:
        r = self.rules
        hit = None
        if r.step_factor is not None and len(self.median) >= r.min_history:
            med = self.median.median()
            if wall_ms > r.step_factor * med:
                hit = Trigger(
                    "slow_step",
                    f"step {step} took {wall_ms:.1f} ms, {wall_ms / med:.1f} x the running median {med:.1f} ms "
                    f"(rule: > {r.step_factor:g} x the median of the last {r.window} steps)",
                    (self.rank,),
                )
        if hit is None and r.data_ms is not None and data_ms > r.data_ms:
            hit = Trigger(
                "data_wait",
                f"step {step} waited {data_ms:.1f} ms for data (rule: > {r.data_ms:g} ms)",
                (self.rank,),
            )
        if hit is None or r.step_factor is None or wall_ms <= r.step_factor * self.median.median():
            self.median.add(wall_ms)  # a slow step does not move the median it is judged against
        return hit


def others_median(col: np.ndarray) -> np.ndarray:
    """For each entry, the median of the other entries (exact, O(n log n) for the whole column)."""
    w = len(col)
    order = np.argsort(col, kind="stable")
    s = col[order]
    pos = np.empty(w, np.int64)
    pos[order] = np.arange(w)

    def kth(k: int) -> np.ndarray:  # the k-th smallest of the others, for each entry
        return np.where(pos > k, s[k], s[min(k + 1, w - 1)])

    m = w - 1
    if m % 2:
        return kth(m // 2)
    return (kth(m // 2 - 1) + kth(m // 2)) / 2


class RankRules:
    """The slow-rank rule over the exchanged numbers: `check(steps, work)` with `work` (world, N) in ms."""

    def __init__(self, rules: Rules) -> None:
        self.rules = rules
        self.run: np.ndarray | None = None  # consecutive slow steps per rank
        self.excess: np.ndarray | None = None  # each rank's excess over the others' median in its current run

    def check(self, steps: np.ndarray, work: np.ndarray) -> Trigger | None:
        r = self.rules
        if r.rank_ms is None:
            return None
        world, n = work.shape
        if world < 2:
            return None
        if self.run is None or len(self.run) != world:
            self.run = np.zeros(world, np.int64)
            self.excess = np.zeros(world)
        assert self.excess is not None
        for j in range(n):
            col = work[:, j]
            exc = col - others_median(col)
            slow = exc > r.rank_ms
            self.run = np.where(slow, self.run + 1, 0)
            self.excess = np.where(slow, self.excess + exc, 0.0)
            hit = np.flatnonzero(self.run >= r.rank_steps)
            if len(hit):
                ranks = tuple(int(i) for i in hit)
                mean_exc = self.excess[hit] / self.run[hit]
                healthy = None
                if r.healthy:
                    rest = [i for i in np.argsort(exc, kind="stable") if i not in hit]
                    healthy = int(rest[0]) if rest else None
                names = ", ".join(f"rank {k} +{e:.1f} ms" for k, e in zip(ranks, mean_exc))
                self.run[:] = 0
                self.excess[:] = 0.0
                return Trigger(
                    "slow_rank",
                    f"{names} over the other ranks' median, outside collectives, for {r.rank_steps} steps up to "
                    f"step {int(steps[j])} (rule: > {r.rank_ms:g} ms for {r.rank_steps} consecutive steps)",
                    ranks,
                    healthy,
                )
        return None
