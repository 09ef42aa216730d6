"""The cross-rank critical path of each step, from the per-worker summaries only (`worker_facts`' keys).

Collectives are matched across workers per process group and sequence number (`group_waits`: the k-th non-wait
call of a group on each member is one collective, whatever else the other groups do), so tensor-, pipeline- and
expert-parallel subgroups link the ranks too. A call is matched when every expected member has it under one
name. Its transfer time is the shortest duration any member saw; each member's wait is its own duration minus
that; the member with the shortest duration arrived last (no clock alignment between hosts is needed).

The walk, per step: it starts on the worker whose step ends longest after its last matched collective (a
collective ends at once on all its members, so that worker ends the step last; ties: the longer step, then the
first worker), and goes back in time: the worker's work since its previous collective, then that collective,
then on to the member that arrived last there, from the start of its call, until the step's start.

`critical_paths(summaries)` -> {"steps": [{"step", "step_ms", "segments": [...]}], "notes": [...], "reason"}
with segments in time order, each
  {"kind": "work", "worker", "rank", "ms", "start_us", "end_us", "before"}       # work on one worker
  {"kind": "collective", "name", "call", "group", "pg", "members", "late_worker", "late_rank",
   "waiters", "wait_ms_median", "wait_ms_max", "wait_ms_total", "transfer_ms", "gap_ms",
   "start_us", "end_us"}                                                         # on the late worker
(µs relative to each worker's origin, as the timeline's; `gap_ms`: what the late member cost the others there,
i.e. the second-latest member's exposed wait: its wait minus what its own compute covered of the call).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tb_plugin.views import group_waits

#: a member waited when its wait exceeds this (ns): clock noise below it names nobody
WAIT_EPS_NS = 1_000
NO_FACTS = "no worker's summary holds its collective calls and phases (summaries of an older gpuscope?)"


def worker_rank(summary: Mapping) -> int | None:
    """The worker's global rank as its summary records it, or None."""
    r = (summary.get("devices") or {}).get("rank")
    return int(r) if isinstance(r, int) and not isinstance(r, bool) else None


def label(worker: str, rank: int | None) -> str:
    """How a report names a worker: its rank when known."""
    return f"rank {rank}" if rank is not None else f"worker {worker}"


@dataclass
class Job:
    """Every worker's matched collective calls and step bounds, the input of the walk and the stragglers."""

    workers: list[str]
    ranks: dict[str, int | None]
    phases: dict[str, dict]
    calls: pd.DataFrame  # one row per call: w, group, pg, seq, name, step, start, end, dur, is_wait, inst
    inst: pd.DataFrame  # one row per matched collective: group, pg, seq, name, members, transfer, late, gap
    notes: list[str]

    def step_bounds(self, step: str) -> dict[int, tuple[int, int]]:
        """Worker index -> (start, end) ns of `step` on that worker."""
        out = {}
        for wi, w in enumerate(self.workers):
            ph = self.phases[w]
            names = ph.get("step") or []
            if step in names:
                i = names.index(step)
                out[wi] = (int(ph["start"][i]), int(ph["end"][i]))
        return out

    def step_order(self) -> list[str]:
        """Step names in the order the workers recorded them."""
        order: list[str] = []
        seen: set[str] = set()
        for w in self.workers:
            for s in self.phases[w].get("step") or []:
                if s not in seen:
                    seen.add(s)
                    order.append(str(s))
        return order


def _frame(summaries: Mapping[str, Mapping], workers: list[str]) -> pd.DataFrame:
    cols: dict[str, list] = {k: [] for k in ("w", "group", "pg", "ranks", "size", "seq", "name", "step")}
    arrays: dict[str, list] = {"start": [], "end": [], "covered": [], "is_wait": []}
    for wi, w in enumerate(workers):
        cc = summaries[w].get("collective_calls") or {}
        n = len(cc.get("group") or [])
        if not n:
            continue
        steps = (summaries[w].get("phases") or {}).get("step") or []
        g = cc["group"]
        cols["w"] += [wi] * n
        cols["group"] += [cc["groups"][i] for i in g]
        cols["pg"] += [cc["group_pg"][i] for i in g]
        cols["ranks"] += [tuple(cc["group_ranks"][i]) if cc["group_ranks"][i] is not None else None for i in g]
        cols["size"] += [cc["group_size"][i] for i in g]
        cols["seq"] += cc["seq"]
        cols["name"] += [cc["names"][i] for i in cc["name"]]
        cols["step"] += [str(steps[i]) if 0 <= i < len(steps) else None for i in cc["step"]]
        arrays["start"].append(np.asarray(cc["start"], np.int64))
        arrays["end"].append(np.asarray(cc["end"], np.int64))
        arrays["covered"].append(np.asarray(cc.get("covered") or np.zeros(n), np.int64))
        arrays["is_wait"].append(np.asarray(cc["wait"], bool))
    f = pd.DataFrame(cols)
    for k, v in arrays.items():
        f[k] = np.concatenate(v) if v else np.zeros(0, bool if k == "is_wait" else np.int64)
    f["dur"] = f["end"] - f["start"]
    return f


def match(summaries: Mapping[str, Mapping]) -> Job:
    """The workers' calls matched per process group and sequence (module doc); `inst` -1 where unmatched."""
    workers = sorted(summaries)
    ranks = {w: worker_rank(summaries[w]) for w in workers}
    phases = {w: summaries[w].get("phases") or {} for w in workers}
    f = _frame(summaries, workers)
    notes: list[str] = []
    f["inst"] = -1
    f["wait_ns"] = np.where(f["is_wait"].to_numpy(bool), f["dur"].to_numpy(np.int64), 0) if len(f) else []
    f["exposed"] = np.maximum(f["wait_ns"].to_numpy(np.int64) - f["covered"].to_numpy(np.int64), 0) if len(f) else []
    inst_cols = ("group", "pg", "seq", "name", "members", "transfer", "late", "gap")
    if not len(f):
        return Job(workers, ranks, phases, f, pd.DataFrame({c: [] for c in inst_cols}), notes)
    real = f[~f["is_wait"]]
    g = real.groupby(["group", "seq"], sort=True)
    agg = g.agg(
        n=("w", "size"),
        names=("name", "nunique"),
        name=("name", "first"),
        pg=("pg", "first"),
        ranks=("ranks", "first"),
        size=("size", "max"),
    ).reset_index()
    agg["members"] = [
        group_waits.expected_members(r, int(s), ranks) for r, s in zip(agg["ranks"], agg["size"].tolist())
    ]
    ok = (agg["n"] == agg["members"]) & (agg["members"] >= 2) & (agg["names"] == 1)
    bad = agg[~ok & (agg["members"] >= 2)]
    if len(bad):
        notes.append(
            f"{len(bad)} collective calls are not on every member of their process group under one name "
            "(a member's trace misses them); the path does not cross them"
        )
    agg = agg[ok].reset_index(drop=True)
    key = pd.MultiIndex.from_frame(agg[["group", "seq"]])
    pos = key.get_indexer(pd.MultiIndex.from_frame(real[["group", "seq"]]))
    f.loc[real.index, "inst"] = pos
    m = f[f["inst"] >= 0].sort_values(["inst", "dur", "w"], kind="stable")
    first = ~m["inst"].duplicated()
    shortest = m[first].set_index("inst")
    transfer = shortest["dur"].reindex(range(len(agg))).to_numpy(np.int64)
    inst = f["inst"].to_numpy(np.int64)
    dur = f["dur"].to_numpy(np.int64)
    f["wait_ns"] = np.where(inst >= 0, dur - transfer[np.maximum(inst, 0)], f["wait_ns"])
    # exposed: the wait not covered by the member's own compute (waiting comes first in a call; what compute
    # covers of the call is taken from the wait first)
    exposed = np.minimum(f["wait_ns"].to_numpy(np.int64), dur - f["covered"].to_numpy(np.int64))
    f["exposed"] = np.where(inst >= 0, np.maximum(exposed, 0), f["exposed"])
    second = f.loc[m[~first].index].groupby("inst")["exposed"].first() if len(m) else pd.Series(dtype=np.int64)
    agg["transfer"] = transfer
    agg["late"] = shortest["w"].reindex(range(len(agg))).to_numpy(np.int64)
    agg["gap"] = second.reindex(range(len(agg))).fillna(0).to_numpy(np.int64)
    return Job(workers, ranks, phases, f, agg[list(inst_cols)], notes)


def _us(ns: int) -> float:
    return round(ns / 1e3, 3)


def _ms(ns: float) -> float:
    return round(float(ns) / 1e6, 3)


def _walk(job: Job, step: str, bounds: dict[int, tuple[int, int]], by_ws: dict) -> list[dict]:
    """The segments of one step's path, in time order."""

    def tail(wi: int) -> tuple:
        a, b = bounds[wi]
        c = by_ws.get(wi)
        last = int(c["end"].max()) if c is not None and len(c) else a
        return (b - last, b - a, -wi)

    cur = max(bounds, key=tail)
    t = bounds[cur][1]
    segs: list[dict] = []
    seen: set[int] = set()
    calls = job.calls
    while True:
        a = bounds[cur][0]
        c = by_ws.get(cur)
        prior = c[c["end"] <= t] if c is not None else None
        if prior is None or not len(prior):
            segs.append(_work(job, cur, a, t, None))
            break
        last = prior.iloc[int(np.argmax(prior["end"].to_numpy()))]
        i = int(last["inst"])
        segs.append(_work(job, cur, int(last["end"]), t, i))
        if i in seen:
            break
        seen.add(i)
        members = calls[calls["inst"] == i]
        late = int(job.inst.at[i, "late"])
        if late not in bounds:  # the late member did not record this step
            segs.append(_collective(job, i, members, late))
            break
        mine = members[members["w"] == late].iloc[0]
        segs.append(_collective(job, i, members, late))
        cur, t = late, int(mine["start"])
    segs.reverse()
    return [s for s in segs if s["kind"] != "work" or s["ms"] > 0]


def _work(job: Job, wi: int, a: int, b: int, before: int | None) -> dict:
    w = job.workers[wi]
    return {
        "kind": "work",
        "worker": w,
        "rank": job.ranks[w],
        "ms": _ms(max(b - a, 0)),
        "start_us": _us(a),
        "end_us": _us(b),
        "before": None if before is None else _call_label(job, before),
    }


def _call_label(job: Job, i: int) -> str:
    r = job.inst.iloc[i]
    return f"{r['name']} #{int(r['seq']) + 1} on group {r['pg'] or r['group']}"


def _collective(job: Job, i: int, members: pd.DataFrame, late: int) -> dict:
    r = job.inst.iloc[i]
    waits = members["wait_ns"].to_numpy(np.int64)
    waiting = waits[waits > WAIT_EPS_NS]
    mine = members[members["w"] == late].iloc[0]
    w = job.workers[late]
    return {
        "kind": "collective",
        "name": str(r["name"]),
        "call": int(r["seq"]) + 1,
        "group": str(r["group"]),
        "pg": str(r["pg"]),
        "members": int(r["members"]),
        "late_worker": w,
        "late_rank": job.ranks[w],
        "waiters": int(len(waiting)),
        "wait_ms_median": _ms(np.median(waiting)) if len(waiting) else 0.0,
        "wait_ms_max": _ms(waiting.max()) if len(waiting) else 0.0,
        "wait_ms_total": _ms(waiting.sum()),
        "transfer_ms": _ms(int(r["transfer"])),
        "gap_ms": _ms(int(r["gap"])),
        "start_us": _us(int(mine["start"])),
        "end_us": _us(int(mine["end"])),
    }


def step_paths(job: Job) -> list[dict]:
    """The critical path of every step the workers recorded (module doc)."""
    out = []
    real = job.calls[job.calls["inst"] >= 0]
    by_step = dict(list(real.groupby("step", sort=False)))
    for step in job.step_order():
        bounds = job.step_bounds(step)
        if not bounds:
            continue
        g = by_step.get(step)
        by_ws = {int(w): c for w, c in g.groupby("w", sort=False)} if g is not None else {}
        lengths = [b - a for a, b in bounds.values()]
        out.append(
            {"step": step, "step_ms": _ms(float(np.median(lengths))), "segments": _walk(job, step, bounds, by_ws)}
        )
    return out


def critical_paths(summaries: Mapping[str, Mapping]) -> dict:
    """The cross-rank critical path per step (module doc), or a `reason` when the summaries lack the facts."""
    if not any(isinstance(s.get("phases"), dict) for s in summaries.values()):
        return {"steps": [], "notes": [], "reason": NO_FACTS}
    job = match(summaries)
    return {"steps": step_paths(job), "notes": job.notes, "reason": None}


def segment_text(seg: Mapping[str, Any]) -> str:
    """One segment in words: `rank 12: 41.0 ms` or `late at nccl:all_reduce #37 on group 3 (256 ranks) -> 255
    ranks waited 38.0 ms`."""
    if seg["kind"] == "work":
        why = f" ({seg['why']})" if seg.get("why") else ""
        return f"{label(seg['worker'], seg['rank'])}: {seg['ms']:.1f} ms{why}"
    where = f"{seg['name']} #{seg['call']} on group {seg['pg'] or seg['group']} ({seg['members']} ranks)"
    if not seg["waiters"]:
        return f"{where}, transfer {seg['transfer_ms']:.1f} ms"
    who = label(seg["late_worker"], seg["late_rank"])
    n = seg["waiters"]
    return f"{who} late at {where} -> {n} rank{'s' if n != 1 else ''} waited {seg['wait_ms_median']:.1f} ms"


def path_text(segments: list[dict]) -> str:
    """A step's path in words, each run of segments on one worker (its work and the collectives it arrived last
    at) said once: `rank 2: 11.6 ms (data loading +40.0 ms) -> late at 12 collectives on group 0 (4 ranks,
    nccl:all_reduce #1..#12) -> 3 ranks waited 4.8 ms in all`."""
    runs: list[list[dict]] = []
    for seg in segments:
        owner = seg["worker"] if seg["kind"] == "work" else seg["late_worker"]
        if runs and (runs[-1][0]["worker"] if runs[-1][0]["kind"] == "work" else runs[-1][0]["late_worker"]) == owner:
            runs[-1].append(seg)
        else:
            runs.append([seg])
    parts: list[str] = []
    for run in runs:
        work = [s for s in run if s["kind"] == "work"]
        colls = [s for s in run if s["kind"] == "collective"]
        if work:
            parts.append(segment_text({**work[0], "ms": round(sum(s["ms"] for s in work), 3)}))
        late = [c for c in colls if c["waiters"]]
        quiet = [c for c in colls if not c["waiters"]]
        if len(late) == 1:
            parts.append(segment_text(late[0]))
        elif late:
            parts.append(_many(late))
        if quiet:
            parts.append(segment_text(quiet[0]) if len(quiet) == 1 else f"{len(quiet)} collectives nobody waited at")
    return " -> ".join(parts)


def _many(colls: list[dict]) -> str:
    """Several collectives one worker arrived last at, in words."""
    groups = sorted({c["pg"] or c["group"] for c in colls})
    names = sorted({c["name"] for c in colls})
    who = label(colls[0]["late_worker"], colls[0]["late_rank"])
    where = f"group {groups[0]} ({colls[0]['members']} ranks)" if len(groups) == 1 else f"groups {', '.join(groups)}"
    calls = f"{names[0]} #{colls[0]['call']}..#{colls[-1]['call']}" if len(names) == 1 else ", ".join(names)
    n = max(c["waiters"] for c in colls)
    waited = sum(c["wait_ms_median"] for c in colls)
    return (
        f"{who} late at {len(colls)} collectives on {where}, {calls} -> {n} rank{'s' if n != 1 else ''} "
        f"waited {waited:.1f} ms in all"
    )
