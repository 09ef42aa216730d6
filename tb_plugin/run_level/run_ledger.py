"""The run-level ledger: the per-worker ledgers of the summaries (`ledger.worker_ledger`, key "ledger") put
together, without reading any trace.

Sync skew: one trace cannot tell waiting from transferring, so each worker's ledger has all collective time in
`exposed_comm`. Here each worker's wait per step moves from `exposed_comm` to `sync_skew`, at most the step's
exposed communication (a wait hidden under compute costs nothing), so the buckets still add up to the step
exactly. The wait: the summary's `distributed.collectives` matched within their process group by
`analysis.comm.group_waits.match_in_groups` (the k-th call of a group on each member is one collective; its transfer is
the shortest duration a member saw, each member's wait its own duration minus that).

Per step, two ledgers:
* `critical`: the step's ledger on the rank that set the step's time: the rank with the longest busy time (wall
  time minus its own sync skew), i.e. the one the others waited for (ties: the first worker by name);
* `mean`: each bucket averaged over the ranks that recorded the step.
Both have the shape of a worker ledger (`steps`, `wall_ns`, `buckets`), so `ledger.ranked` renders them; the
critical one also names the rank per step (`workers`). A bucket a rank's trace cannot measure (None there) counts
0 for that rank, whose time is in another bucket, and its reason names the ranks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
import numpy as np

from profiler_core.analysis.comm import group_waits
from profiler_core.analysis.worker.buckets import BUCKETS, EXPOSED_COMM, SYNC_SKEW
from tb_plugin.summaries.schema import Ledger, LedgerBucket, Summary

ONE_WORKER = "one worker: waiting for other ranks cannot be measured"


def wait_by_step(summaries: Mapping[str, Summary]) -> tuple[dict[str, list[int]], list[str]]:
    """Per worker: the wait ns of its collectives in each of its steps (`group_waits.match_in_groups`' rule over
    the summaries' collectives, in their recorded time order, on integer codes: `group_waits.match_codes`), and
    the notes on calls that could not be matched."""
    ranks: dict[str, Any] = {}
    nsteps: dict[str, int] = {}
    workers = sorted(summaries)
    for w in workers:
        d = summaries[w].distributed
        nsteps[w] = len(d.steps.step) if d is not None else 0
        ranks[w] = dev.rank if (dev := summaries[w].devices) is not None else None
    out = {w: [0] * n for w, n in nsteps.items()}
    # summaries do not hold the communicator's ranks: a group is its name and size (`group_waits.group_key`)
    groups: dict[tuple[str, int], int] = {}
    names: dict[str, int] = {}
    cols: dict[str, list] = {k: [] for k in ("w", "group", "name", "dur", "is_wait", "step")}
    for wi, w in enumerate(workers):
        dist = summaries[w].distributed
        if dist is None or not dist.collectives.name:
            continue
        c = dist.collectives
        code = np.asarray(c.name, np.int64)
        # this summary's table of (name, pg, size) -> global codes, then per call by its index there
        g_of = np.asarray(
            [groups.setdefault((str(pg), int(z)), len(groups)) for pg, z in zip(c.pg, c.group_size)], np.int64
        )
        n_of = np.asarray([names.setdefault(str(x), len(names)) for x in c.names], np.int64)
        cols["w"].append(np.full(len(code), wi, np.int64))
        cols["group"].append(g_of[code])
        cols["name"].append(n_of[code])
        cols["dur"].append(np.asarray(c.dur, np.int64))
        cols["is_wait"].append(np.asarray(c.wait, np.int64).astype(bool))
        cols["step"].append(np.asarray(c.step, np.int64))
    if not cols["w"]:
        return out, []
    present = {workers[wi]: ranks.get(workers[wi]) for wi in sorted({int(x[0]) for x in cols["w"]})}  # with calls
    keys = [group_waits.group_key(pg, None, z) for pg, z in groups]
    key_list = sorted(set(keys))
    index = {k: i for i, k in enumerate(key_list)}
    key_code = np.asarray([index[k] for k in keys], np.int64)
    members = np.asarray([group_waits.expected_members(None, z, present) for _, z in groups], np.int64)
    wc, gc, dur, step = (np.concatenate(cols[k]) for k in ("w", "group", "dur", "step"))
    _, _, transfer, notes = group_waits.match_codes(
        wc,
        key_code[gc],
        np.concatenate(cols["name"]),
        dur,
        np.concatenate(cols["is_wait"]),
        members[gc],
        key_list,
        list(names),
    )
    wait = dur - transfer
    limit = np.asarray([nsteps[w] for w in workers], np.int64)
    inside = (step >= 0) & (wait > 0) & (step < limit[wc])
    S = int(limit.max()) if len(limit) else 0
    total = np.zeros(len(workers) * S, np.int64)
    np.add.at(total, wc[inside] * S + step[inside], wait[inside])
    for wi, w in enumerate(workers):
        out[w] = total[wi * S : wi * S + nsteps[w]].tolist()
    return out, notes


def _with_skew(led: Ledger | None, wait: list[int] | None, reason: str = ONE_WORKER) -> Ledger:
    """A worker's ledger with its wait moved from exposed_comm to sync_skew (a new `Ledger`); `wait` None: sync
    skew is not measured, for `reason`."""
    if led is None:
        raise KeyError("ledger")  # a stored summary always has one (`schema.check`)
    buckets = dict(led.buckets)
    comm = buckets[EXPOSED_COMM]
    if comm.ns is None:
        return led  # no collectives: sync skew keeps the ledger's reason
    if wait is None:
        buckets[SYNC_SKEW] = LedgerBucket(ns=None, recoverable_ns=None, reason=reason)
        return msgspec.structs.replace(led, buckets=buckets)
    skew = [min(max(int(w), 0), c) for w, c in zip(wait, comm.ns)]
    skew += [0] * (len(comm.ns) - len(skew))
    left = [c - s for c, s in zip(comm.ns, skew)]
    rec = [min(r, x) for r, x in zip(comm.recoverable_ns or [], left)]
    buckets[EXPOSED_COMM] = msgspec.structs.replace(comm, ns=left, recoverable_ns=rec)
    buckets[SYNC_SKEW] = LedgerBucket(ns=skew, recoverable_ns=list(skew), reason=None)
    return msgspec.structs.replace(led, buckets=buckets)


def worker_ledgers(
    summaries: Mapping[str, Summary], notes: list[str] | None = None, withheld: str | None = None
) -> dict[str, Ledger]:
    """worker -> its ledger with its wait for other ranks moved from exposed_comm to sync_skew (module doc);
    the notes on calls that could not be matched go to `notes`. `withheld`: a reason not to claim waiting across
    ranks (a caveat's text: ranks missing): sync skew is then not measured, its time stays in exposed_comm."""
    workers = sorted(summaries)
    waits: dict[str, list[int]] | None = None
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
    crit_w = [row_w[r] for r in first]
    crit_wall = wall[first].tolist()
    mean_wall = per_step_mean(wall)
    crit: dict[str, tuple[list, list]] = {}
    mean: dict[str, tuple[list, list]] = {}
    for b in BUCKETS:
        ns, rec = column(b, "ns"), column(b, "recoverable_ns")
        crit[b] = (ns[first].tolist(), rec[first].tolist())
        mean[b] = (per_step_mean(ns), per_step_mean(rec))

    def as_ledger(parts: dict, wall: list) -> dict:
        return {
            "steps": order,
            "wall_ns": wall,
            "reason": None if order else "no steps in any worker",
            "buckets": {
                b: {
                    "ns": None if _all_lack(leds, b) else parts[b][0],
                    "recoverable_ns": None if _all_lack(leds, b) else parts[b][1],
                    "reason": reasons[b],
                }
                for b in BUCKETS
            },
        }

    totals = {
        w: {b: (sum(xs) if (xs := led.buckets[b].ns) is not None else None) for b in BUCKETS} for w, led in leds.items()
    }
    hide = withheld is not None and len(workers) > 1
    return {
        "workers": workers,
        "totals": totals,
        "critical": None if hide else {**as_ledger(crit, crit_wall), "workers": crit_w},
        "mean": as_ledger(mean, mean_wall),
        "notes": notes,
    }


def withheld_text(cavs: list) -> str | None:
    """The reason sync skew is not measured when a caveat withholds the cross-rank claims (`caveats.Caveat`)."""
    c = next((c for c in cavs if c.withholds), None)
    return f"not claimed: {c.key.replace('_', ' ')} (see the caveats)" if c is not None else None


def _all_lack(leds: Mapping[str, Ledger], b: str) -> bool:
    return all(led.buckets[b].ns is None for led in leds.values())


def run_view(summaries: Mapping[str, Summary], pending: list[str] | None = None) -> dict:
    """The run's ledger as the Overview shows it (docs/diagnosis.md): `caveats` (`caveats.caveats`, first; while
    summaries are pending, []), `critical` and `mean` rendered by `ledger.ranked` (`critical.workers`: the rank
    that set each step; None when a caveat withholds cross-rank claims), `workers` (how many), `notes`, and
    `pending` (workers whose summary is still computed: the ledger waits for every worker)."""
    from profiler_core.analysis.worker.ledger import ranked
    from tb_plugin.run_level import caveats as cv

    if pending:
        return {
            "caveats": [],
            "workers": len(summaries) + len(pending),
            "critical": None,
            "mean": None,
            "notes": [],
            "pending": pending,
        }
    cavs = cv.caveats(summaries)
    run = run_ledger(summaries, withheld_text(cavs))
    if run["mean"] is None:
        return {"caveats": [], "workers": 0, "critical": None, "mean": None, "notes": run["notes"], "pending": []}
    crit = None
    if run["critical"] is not None:
        crit = ranked(run["critical"])
        for row, w in zip(crit["steps"], run["critical"]["workers"]):
            row["worker"] = w
    return {
        "caveats": cv.as_json(cavs),
        "workers": len(run["workers"]),
        "critical": crit,
        "mean": ranked(run["mean"]),
        "notes": run["notes"],
        "pending": [],
    }
