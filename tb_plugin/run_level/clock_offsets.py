"""Each rank's clock offset against a reference rank, from the collectives' common end times (summaries only).

A collective ends at the same instant on all its members (the last to arrive releases everyone), so for every
collective matched across its members (per process group and sequence, as `critical_path.match`) the difference
of two members' end times is the difference of their clocks. Per pair of ranks linked by collectives, the
estimate is the median of those differences (robust to the few calls whose ends differ by launch or completion
noise); ranks that share no collective with the reference are reached through others, chained along the links
with the most collectives (a maximum spanning tree from the reference), so tensor- and pipeline-parallel
subgroups align too. A rank that no chain of matched collectives links to the reference has no offset, and a
reason says why.

`clock_offsets(summaries)` -> {"reference": worker | None, "workers": [{"worker", "rank", "shift_us",
"raw_shift_us", "offset_us", "collectives", "spread_us", "via", "reason", "steps"}...] (by rank, then worker),
"notes": [...], "reason": text | None}:
  shift_us      what to add to the worker's timeline times (µs from its origin, as `/timeline` answers) to place
                them on the reference's timeline, aligned (None: unknown, see `reason`)
  raw_shift_us  the same with the clocks taken as they are (origin difference; None if a summary lacks it)
  offset_us     the worker's clock minus the reference's clock (None where either origin is unknown)
  collectives   matched collectives behind the link that placed it; `spread_us` the median absolute deviation
                of their differences from the estimate (how far the ends agree); `via` the worker it was
                chained from.
  steps         the worker's steps on its own timeline: [{"step", "start_us", "end_us"}] (µs from its origin; the
                merged timeline marks where each rank's steps end); [] for a trace without ProfilerStep (its one
                step is the trace window) or a summary without them.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import Any

import numpy as np

from tb_plugin.run_level.critical_path import NO_FACTS, label, match
from tb_plugin.summaries.schema import Summary


def _origin(summary: Summary) -> int | None:
    o = summary.distributed.origin if summary.distributed is not None else None
    return int(o) if isinstance(o, (int, float)) and not isinstance(o, bool) else None


def _links(job: Any) -> dict[tuple[int, int], np.ndarray]:
    """(a, b) worker indices, a < b -> the end differences end_a - end_b (ns) over the collectives both are in.
    Each collective contributes its pairs with its first member (the lowest worker index), so a world-sized
    collective adds n - 1 pairs, not n^2."""
    rows = np.flatnonzero(job.c_inst >= 0)
    if not len(rows):
        return {}
    inst, w, end = job.c_inst[rows], job.c_w[rows], job.c_end[rows]
    o = np.lexsort((w, inst))
    inst, w, end = inst[o], w[o], end[o]
    first = np.ones(len(inst), dtype=bool)
    first[1:] = inst[1:] != inst[:-1]
    head = np.maximum.accumulate(np.where(first, np.arange(len(inst)), 0))  # each row's instance's first row
    keep = ~first & (w != w[head])
    a, b, diff = w[head][keep], w[keep], (end[head] - end)[keep]
    n = len(job.workers)
    code = a * n + b
    o = np.argsort(code, kind="stable")
    code, diff = code[o], diff[o]
    keys, starts = np.unique(code, return_index=True)
    bounds = [*starts.tolist(), len(code)]
    return {(int(k) // n, int(k) % n): diff[bounds[i] : bounds[i + 1]] for i, k in enumerate(keys.tolist())}


def _tree(n: int, ref: int, links: dict[tuple[int, int], np.ndarray]) -> dict[int, tuple[int, float, int, float]]:
    """Worker -> (parent, shift ns onto the reference's frame, collectives on the link, spread ns), reached from
    `ref` along the links with the most collectives first (Prim's algorithm on the link counts)."""
    adj: dict[int, list[tuple[int, int]]] = {}
    for a, b in links:
        adj.setdefault(a, []).append((b, 1))
        adj.setdefault(b, []).append((a, -1))
    placed: dict[int, tuple[int, float, int, float]] = {ref: (ref, 0.0, 0, 0.0)}
    heap: list[tuple[int, int, int, int]] = []

    def push(u: int) -> None:
        for v, sign in adj.get(u, ()):
            if v not in placed:
                key = (u, v) if sign == 1 else (v, u)
                heapq.heappush(heap, (-len(links[key]), u, v, sign))

    push(ref)
    while heap and len(placed) < n:
        _, u, v, sign = heapq.heappop(heap)
        if v in placed:
            continue
        d = np.asarray(links[(u, v) if sign == 1 else (v, u)], np.float64)
        diff = d if sign == 1 else -d  # end_u - end_v: what v's times need to land on u's frame
        med = float(np.median(diff))
        spread = float(np.median(np.abs(diff - med)))
        placed[v] = (u, placed[u][1] + med, len(d), spread)
        push(v)
    return placed


def _steps(summary: Summary | None) -> list[dict]:
    """The worker's steps on its own timeline (module doc, `steps`)."""
    if summary is None or summary.distributed is None:
        return []
    d = summary.distributed
    if summary.phases is not None and summary.phases.whole_trace:
        return []
    o = _origin(summary) or 0
    return [
        {"step": str(n), "start_us": _us(a - o), "end_us": _us(e - o)}
        for n, a, e in zip(d.steps.step, d.steps.start, d.steps.end)
    ]


def clock_offsets(summaries: Mapping[str, Summary]) -> dict:
    """Each worker's clock offset and timeline shift against the reference worker (module doc)."""
    out = _clock_offsets(summaries)
    for row in out["workers"]:
        row["steps"] = _steps(summaries.get(row["worker"]))
    return out


def _clock_offsets(summaries: Mapping[str, Summary]) -> dict:
    workers = sorted(summaries)
    if not workers:
        return {"reference": None, "workers": [], "notes": [], "reason": "the run has no worker summaries"}
    if not any(s.collective_calls is not None for s in summaries.values()):
        return {"reference": None, "workers": [], "notes": [], "reason": NO_FACTS}
    job = match(summaries)
    links = _links(job)
    linked = {w for k in links for w in k}
    ranks = job.ranks
    order = sorted(range(len(workers)), key=lambda i: (ranks[workers[i]] is None, ranks[workers[i]] or 0, i))
    ref = next((i for i in order if i in linked), None)
    rows = []
    if ref is None:
        reason = "no collective is matched on every member of its process group, so no two clocks can be compared"
        for i in order:
            w = workers[i]
            rows.append(_row(w, ranks[w], None, None, None, 0, None, None, reason))
        return {"reference": None, "workers": rows, "notes": job.notes, "reason": reason}
    placed = _tree(len(workers), ref, links)
    origins = {w: _origin(summaries[w]) for w in workers}
    o_ref = origins[workers[ref]]
    for i in order:
        w = workers[i]
        o_w = origins[w]
        raw = o_w - o_ref if o_w is not None and o_ref is not None else None
        if i not in placed:
            why = (
                f"it shares no matched collective with any rank linked to {label(workers[ref], ranks[workers[ref]])}"
                if i in linked
                else "none of its collectives is matched on every member of its process group"
            )
            rows.append(_row(w, ranks[w], None, raw, None, 0, None, None, why))
            continue
        parent, shift, count, spread = placed[i]
        offset = raw - shift if raw is not None else None
        via = workers[parent] if parent != i else None
        rows.append(_row(w, ranks[w], shift, raw, offset, count, spread if via else None, via, None))
    return {"reference": workers[ref], "workers": rows, "notes": job.notes, "reason": None}


def _us(ns: float | None) -> float | None:
    return None if ns is None else round(float(ns) / 1e3, 3)


def _row(
    w: str,
    rank: int | None,
    shift: float | None,
    raw: float | None,
    offset: float | None,
    count: int,
    spread: float | None,
    via: str | None,
    reason: str | None,
) -> dict:
    return {
        "worker": w,
        "rank": rank,
        "shift_us": _us(shift),
        "raw_shift_us": _us(raw),
        "offset_us": _us(offset),
        "collectives": count,
        "spread_us": _us(spread),
        "via": via,
        "reason": reason,
    }
