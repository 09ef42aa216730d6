"""The run-level ledger: the per-worker ledgers of the summaries (`ledger.worker_ledger`, key "ledger") put
together, without reading any trace.

Sync skew: one trace cannot tell waiting from transferring, so each worker's ledger has all collective time in
`exposed_comm`. Here each worker's wait per step moves from `exposed_comm` to `sync_skew`, at most the step's
exposed communication (a wait hidden under compute costs nothing), so the buckets still add up to the step
exactly. The wait is the cross-rank critical path's (`critical_path.match`: the members of a collective matched
per process group and sequence, each waiting from its arrival until the last member arrived), so the ledger, the
path, the stragglers and the what-if count one wait. Of it, only the imbalance is recoverable by balancing the
ranks' work; the part the late member's later entry into the stretch explains (`critical_path.entry_stagger`: ranks
that enter a step, or the profiled window, apart) is not.

Per step, two ledgers:
* `critical`: the step's ledger on the rank that set the step's time: the step's path straggler (`stragglers.pick`:
  of the ranks the others waited for on its critical path, the busiest), so the ledger and the straggler give one
  answer; without the facts, the rank with the longest busy time (wall time minus its own sync skew; ties: the
  first worker by name);
* `mean`: each bucket averaged over the ranks that recorded the step.
Both have the shape of a worker ledger (`steps`, `wall_ns`, `buckets`), so `ledger.ranked` renders them; the
critical one also names the rank per step (`workers`). A bucket a rank's trace cannot measure (None there) counts
0 for that rank, whose time is in another bucket, and its reason names the ranks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import msgspec
import numpy as np

from profiler_core.analysis.worker.buckets import BUCKETS, COMPUTE, EXPOSED_COMM, PIPELINE_BUBBLE, SYNC_SKEW
from tb_plugin.summaries.schema import ComputeSplit, Ledger, LedgerBucket, Summary

ONE_WORKER = "one worker: waiting for other ranks cannot be measured"


def wait_by_step(summaries: Mapping[str, Summary]) -> tuple[dict[str, dict[str, tuple[int, int]]], list[str]]:
    """Per worker, per step name: (wait ns, of which entry stagger ns) of its matched collective calls, as the
    cross-rank critical path matches them (`critical_path.match`: by arrival; `critical_path.entry_stagger`), so
    the ledger, the path, the stragglers and the what-if count one wait; and the notes on calls not matched. The
    send/recv calls of a pipeline stage (`critical_path.NAMED_P2P` on a worker whose ledger has a pipeline bubble)
    are left out: their waits are the bubble, which stays in its own bucket."""
    from tb_plugin.run_level import critical_path

    workers = sorted(summaries)
    out: dict[str, dict[str, tuple[int, int]]] = {w: {} for w in workers}
    if not any(summaries[w].collective_calls is not None for w in workers):
        return out, [critical_path.NO_FACTS]
    job = critical_path.match(summaries)
    stagger = critical_path.entry_stagger(job)
    keep = (job.c_inst >= 0) & (job.c_step >= 0)
    if critical_path.NAMED_P2P in job.how_names:
        staged = np.asarray([_has_bubble(summaries[w]) for w in job.workers], bool)
        p2p = job.calls["how"] == job.how_names.index(critical_path.NAMED_P2P)
        keep &= ~(p2p & staged[job.c_w])
    rows = np.flatnonzero(keep)
    if len(rows):
        key = job.c_w[rows] * len(job.steps) + job.c_step[rows]
        size = len(job.workers) * len(job.steps)
        wait = np.bincount(key, weights=job.c_wait[rows].astype(np.float64), minlength=size)
        stag = np.bincount(key, weights=stagger[rows].astype(np.float64), minlength=size)
        for i in np.flatnonzero(wait > 0).tolist():
            w, k = divmod(i, len(job.steps))
            out[job.workers[w]][job.steps[k]] = (int(wait[i]), int(stag[i]))
    return out, list(job.notes)


def _has_bubble(s: Summary) -> bool:
    """True if the worker's ledger holds pipeline bubble time (its trace is a pipeline stage)."""
    b = s.ledger.buckets.get(PIPELINE_BUBBLE) if s.ledger is not None else None
    return b is not None and b.ns is not None and sum(b.ns) > 0


def _with_skew(led: Ledger | None, wait: Mapping[str, tuple[int, int]] | None, reason: str = ONE_WORKER) -> Ledger:
    """A worker's ledger with its wait moved from exposed_comm to sync_skew (a new `Ledger`); `wait`: step name ->
    (wait ns, of which entry stagger ns), None: sync skew is not measured, for `reason`. Only the imbalance part of
    the wait is recoverable by balancing the ranks' work; the stagger with which they entered is not."""
    if led is None:
        raise KeyError("ledger")  # a stored summary always has one (`schema.check`)
    buckets = dict(led.buckets)
    comm = buckets[EXPOSED_COMM]
    if comm.ns is None:
        return led  # no collectives: sync skew keeps the ledger's reason
    if wait is None:
        buckets[SYNC_SKEW] = LedgerBucket(ns=None, recoverable_ns=None, reason=reason)
        return msgspec.structs.replace(led, buckets=buckets)
    per = [wait.get(str(st), (0, 0)) for st in led.steps]
    skew = [min(max(int(w), 0), c) for (w, _), c in zip(per, comm.ns)]
    skew += [0] * (len(comm.ns) - len(skew))
    rec_skew = [max(x - min(int(st), x), 0) for x, (_, st) in zip(skew, per)]
    left = [c - s for c, s in zip(comm.ns, skew)]
    rec = [min(r, x) for r, x in zip(comm.recoverable_ns or [], left)]
    buckets[EXPOSED_COMM] = msgspec.structs.replace(comm, ns=left, recoverable_ns=rec)
    buckets[SYNC_SKEW] = LedgerBucket(ns=skew, recoverable_ns=rec_skew, reason=None)
    return msgspec.structs.replace(led, buckets=buckets)


def worker_ledgers(
    summaries: Mapping[str, Summary], notes: list[str] | None = None, withheld: str | None = None
) -> dict[str, Ledger]:
    """worker -> its ledger with its wait for other ranks moved from exposed_comm to sync_skew (module doc);
    the notes on calls that could not be matched go to `notes`. `withheld`: a reason not to claim waiting across
    ranks (a caveat's text: ranks missing): sync skew is then not measured, its time stays in exposed_comm."""
    workers = sorted(summaries)
    waits: dict[str, dict[str, tuple[int, int]]] | None = None
    if withheld is not None and len(workers) > 1:
        return {w: _with_skew(summaries[w].ledger, None, withheld) for w in workers}
    if len(workers) > 1:
        waits, wnotes = wait_by_step(summaries)
        if notes is not None:
            notes.extend(wnotes[:5] + ([f"... and {len(wnotes) - 5} more such calls"] if len(wnotes) > 5 else []))
    return {w: _with_skew(summaries[w].ledger, waits[w] if waits else None) for w in workers}


def run_ledger(summaries: Mapping[str, Summary], withheld: str | None = None) -> dict:
    """The run's ledger from its workers' summaries (worker -> summary with "ledger" and "distributed"):
    `workers`, `critical` and `mean` (module docstring), `totals` (worker -> bucket -> ns over its steps, None
    where its trace cannot measure the bucket), `notes`. `withheld` (a caveat's text, `caveats.py`): no waiting
    across ranks is claimed: sync skew is not measured and, for several workers, `critical` (the rank the others
    waited for) is None."""
    workers = sorted(summaries)
    notes: list[str] = []
    if not workers:
        return {"workers": [], "critical": None, "mean": None, "notes": ["no worker summaries"]}
    leds = worker_ledgers(summaries, notes, withheld)
    order: list[str] = []
    where: dict[str, list[tuple[str, int]]] = {}
    for w in workers:
        for i, s in enumerate(leds[w].steps):
            if s not in where:
                order.append(s)
                where[s] = []
            where[s].append((w, i))
    if any(len(v) < len(workers) for v in where.values()):
        notes.append("not every worker recorded every step: each step is over the workers that recorded it")
    reasons: dict[str, str | None] = {}
    for b in BUCKETS:
        lacking = [w for w in workers if leds[w].buckets[b].ns is None]
        why = sorted({str(leds[w].buckets[b].reason) for w in lacking})
        if len(lacking) == len(workers):
            reasons[b] = "; ".join(why)
        elif lacking:
            reasons[b] = f"not measured on {len(lacking)} of {len(workers)} workers ({'; '.join(why)}): 0 there"
        else:
            reasons[b] = None
    # every (worker, step) pair as one row, workers in name order: per step, the critical row and the means
    code_of = {st: k for k, st in enumerate(order)}
    row_w = [w for w in workers for _ in leds[w].steps]
    code = np.asarray([code_of[st] for w in workers for st in leds[w].steps], np.int64)
    count = np.bincount(code, minlength=len(order))

    def column(b: str, key: str) -> np.ndarray:
        """The bucket's `key` list of every row (0 where a worker cannot measure the bucket)."""
        parts = [
            np.asarray(getattr(leds[w].buckets[b], key), np.int64)
            if leds[w].buckets[b].ns is not None
            else np.zeros(len(leds[w].steps), np.int64)
            for w in workers
        ]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def per_step_mean(x: np.ndarray) -> list[float]:
        return (np.bincount(code, weights=x.astype(np.float64), minlength=len(order)) / count).tolist()

    wall = np.concatenate([np.asarray(leds[w].wall_ns, np.int64) for w in workers])
    busy = wall - column(SYNC_SKEW, "ns")
    # the longest busy time per step; ties: the first row (first worker by name)
    ranked = np.lexsort((np.arange(len(code)), -busy, code))
    first = ranked[np.r_[True, code[ranked][1:] != code[ranked][:-1]]] if len(code) else ranked
    # where the step's critical path names its straggler, that rank set the step
    row_of = {(row_w[r], int(code[r])): r for r in range(len(code))}
    for st, w in _set_by(summaries, workers, withheld).items():
        k = order.index(st) if st in where else None
        if k is not None and (w, k) in row_of:
            first[k] = row_of[(w, k)]
    crit_w = [row_w[r] for r in first]
    crit_wall = wall[first].tolist()
    mean_wall = per_step_mean(wall)
    crit: dict[str, tuple[list, list]] = {}
    mean: dict[str, tuple[list, list]] = {}
    for b in BUCKETS:
        ns, rec = column(b, "ns"), column(b, "recoverable_ns")
        crit[b] = (ns[first].tolist(), rec[first].tolist())
        mean[b] = (per_step_mean(ns), per_step_mean(rec))

    split_cols = _split_columns(leds, workers)

    def as_ledger(parts: dict, wall: list, pick: Callable[[np.ndarray], list] | None) -> dict:
        out: dict[str, Any] = {
            "steps": order,
            "wall_ns": wall,
            "reason": None if order else "no steps in any worker",
            "graph_launches": any(leds[w].graph_launches for w in workers),
            "buckets": {
                b: {
                    "ns": None if _all_lack(leds, b) else parts[b][0],
                    "recoverable_ns": None if _all_lack(leds, b) else parts[b][1],
                    "reason": reasons[b],
                }
                for b in BUCKETS
            },
        }
        if split_cols is not None and pick is not None and out["buckets"][COMPUTE]["ns"] is not None:
            split: dict[str, Any] = {k: pick(v) for k, v in split_cols.items() if k != "causes"}
            split["causes"] = {c: pick(v) for c, v in split_cols["causes"].items()}
            out["buckets"][COMPUTE]["split"] = split
        return out

    totals = {
        w: {b: (sum(xs) if (xs := led.buckets[b].ns) is not None else None) for b in BUCKETS} for w, led in leds.items()
    }
    hide = withheld is not None and len(workers) > 1
    return {
        "workers": workers,
        "totals": totals,
        "critical": None if hide else {**as_ledger(crit, crit_wall, lambda x: x[first].tolist()), "workers": crit_w},
        "mean": as_ledger(mean, mean_wall, per_step_mean),
        "notes": notes,
    }


def _set_by(summaries: Mapping[str, Summary], workers: list[str], withheld: str | None) -> dict[str, str]:
    """Step -> the path straggler of the step (`stragglers.pick` over its critical path: the rank the others
    waited for), so that the ledger's rank that set a step and the straggler are one answer; {} without the
    facts, with one worker, or where the cross-rank claims are withheld."""
    if withheld is not None or len(workers) < 2 or not any(summaries[w].phases is not None for w in workers):
        return {}
    from tb_plugin.run_level import critical_path, stragglers

    job = critical_path.match(summaries)
    out = {}
    for step in critical_path.step_paths(job):
        w = stragglers.pick(job, step["step"], step["segments"], stragglers.busy(job, step["step"]))
        if w is not None:
            out[str(step["step"])] = w
    return out


def withheld_text(cavs: list) -> str | None:
    """The reason sync skew is not measured when a caveat withholds the cross-rank claims (`caveats.Caveat`)."""
    c = next((c for c in cavs if c.withholds), None)
    return f"not claimed: {c.key.replace('_', ' ')} (see the caveats)" if c is not None else None


def _split_columns(leds: Mapping[str, Ledger], workers: list[str]) -> dict | None:
    """The compute split's lists of every (worker, step) row, workers in name order (0 where a worker's compute
    has no split: a trace without shapes); None when no worker has one."""
    splits = [leds[w].buckets[COMPUTE].split for w in workers]
    if not any(isinstance(sp, ComputeSplit) for sp in splits):
        return None
    keys = ("below_bound_ns", "near_bound_ns", "no_roof_ns", "lost_ns", "recoverable_ns")
    causes = sorted({c for sp in splits if isinstance(sp, ComputeSplit) for c in sp.causes})
    out: dict = {k: [] for k in keys}
    out["causes"] = {c: [] for c in causes}
    for w, sp in zip(workers, splits):
        n = len(leds[w].steps)
        zero = np.zeros(n, np.int64)
        have = isinstance(sp, ComputeSplit)
        for k in keys:
            out[k].append(np.asarray(getattr(sp, k), np.int64) if have else zero)
        for c in causes:
            out["causes"][c].append(
                np.asarray(sp.causes.get(c, zero), np.int64) if isinstance(sp, ComputeSplit) else zero
            )
    cat: dict[str, Any] = {
        k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in out.items() if k != "causes"
    }
    cat["causes"] = {c: np.concatenate(v) if v else np.zeros(0, np.int64) for c, v in out["causes"].items()}
    return cat


def _all_lack(leds: Mapping[str, Ledger], b: str) -> bool:
    return all(led.buckets[b].ns is None for led in leds.values())


def run_view(summaries: Mapping[str, Summary], pending: list[str] | None = None) -> dict:
    """The run's ledger as the Overview shows it (docs/diagnosis.md): `caveats` (`caveats.caveats`, first; while
    summaries are pending, []), `critical` and `mean` rendered by `ledger.ranked` (`critical.workers`: the rank
    that set each step; None when a caveat withholds cross-rank claims), `workers` (how many), `notes`, and
    `pending` (workers whose summary is still computed: the ledger waits for every worker)."""

    if pending:
        return {
            "caveats": [],
            "workers": len(summaries) + len(pending),
            "critical": None,
            "mean": None,
            "notes": [],
            "pending": pending,
        }
    from tb_plugin.run_level import critical_path

    with critical_path.shared_matches():  # the caveats, the waits, the set-by and the advice match once
        return _view(summaries)


def _view(summaries: Mapping[str, Summary]) -> dict:
    """`run_view` of summaries that are all there."""
    from profiler_core.analysis.worker.ledger import ranked
    from tb_plugin.run_level import caveats as cv

    cavs = cv.caveats(summaries)
    run = run_ledger(summaries, withheld_text(cavs))
    if run["mean"] is None:
        return {"caveats": [], "workers": 0, "critical": None, "mean": None, "notes": run["notes"], "pending": []}
    advice = _stagger_advice(run["mean"]) + _alternation_advice(summaries, run["mean"])
    crit = None
    if run["critical"] is not None:
        crit = ranked(run["critical"], advice)
        for row, w in zip(crit["steps"], run["critical"]["workers"]):
            row["worker"] = w
    return {
        "caveats": cv.as_json(cavs),
        "workers": len(run["workers"]),
        "critical": crit,
        "mean": ranked(run["mean"], advice),
        "notes": run["notes"],
        "pending": [],
    }


#: a rank late at no more than this share of the collectives others waited at: the lateness alternates
ALTERNATES = 0.6


def _alternation_advice(
    summaries: Mapping[str, Summary], mean: Mapping[str, Any] | None
) -> list[tuple[str | None, str]]:
    """The sync skew's advice when no rank is the one mostly waited for (each late at no more than ALTERNATES of
    the collectives others waited at): there is no rank's work to balance; what makes ranks late in turn is
    elsewhere (an exchange that ends apart on its members, the work it delays)."""
    b = (mean or {}).get("buckets", {}).get(SYNC_SKEW) or {}
    if not b.get("ns") or not any(b["ns"]) or len(summaries) < 2:
        return []
    if not any(summaries[w].collective_calls is not None for w in summaries):
        return []
    from tb_plugin.run_level import critical_path

    job = critical_path.match(summaries)
    waited = [i for i in range(len(job.inst)) if (job.c_wait[job.members(i)] > critical_path.WAIT_EPS_NS).any()]
    if len(waited) < 2:
        return []
    late = np.bincount(job.i_late[waited], minlength=len(job.workers))
    top = int(late.max())
    if top > ALTERNATES * len(waited):
        return []
    share = ", ".join(
        f"{critical_path.label(job.workers[w], job.ranks[job.workers[w]])}: {int(late[w])}"
        for w in np.argsort(-late, kind="stable")[:4].tolist()
        if late[w]
    )
    return [
        (
            SYNC_SKEW,
            f"the rank that arrives last alternates ({share} of the {len(waited)} collectives others waited at): "
            "no one rank's work is to balance; look at what delays each in turn (exchanges that end apart, the "
            "work they hold back)",
        )
    ]


#: the stagger below this (ms per step) is not worth a line
STAGGER_MIN_MS = 0.05


def _stagger_advice(mean: Mapping[str, Any] | None) -> list[tuple[str | None, str]]:
    """The sync skew's advice when part of it is entry stagger (its ns less its recoverable ns: `_with_skew`)."""
    b = (mean or {}).get("buckets", {}).get(SYNC_SKEW) or {}
    ns, rec = b.get("ns"), b.get("recoverable_ns")
    if not ns or rec is None:
        return []
    stagger = (sum(ns) - sum(rec)) / len(ns) / 1e6
    if stagger < STAGGER_MIN_MS:
        return []
    return [
        (
            SYNC_SKEW,
            f"{stagger:.1f} ms of it per step is the stagger with which the ranks entered the profiled window (ranks "
            "started apart, or work before the profiler started): balancing the work inside the steps does not "
            "recover it; profile more steps to see the steady state",
        )
    ]
