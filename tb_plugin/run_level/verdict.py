"""The verdict of a run in one sentence: what `gpuscope diagnose` prints first after its caveats and what the
Overview and Distributed views show at the top, from the report `report.diagnose` returns (a pure function of it).

`verdict(report) -> {"text", "kind", "rank", "worker", "ms", "saved_ms"}`, `kind` one of:

* `straggler`: a step's straggler stands out (its step would be at least STANDS_OUT of its time shorter at the
  median): the report's worst straggler, else the rank that saves most over the steps where it stands out. "rank 5
  is 19.9 ms slow in 5 of 5 steps: data loading +20.0 ms; fixing it saves 19.8 ms per step". Its excess, cause and
  saving are means over the steps where it is the straggler and stands out, so a straggler is never hidden behind
  the ledger: it comes first whenever it stands out. `ms`: the excess per step, `saved_ms`: the saving per step
  over all the steps. Other ranks that stand out in other steps are named after it ("(rank 3 also stands out in
  other steps)").
* `ledger`: no rank stands out: "no rank holds the others up; the most recoverable: Data loading (GPU idle) 32.8
  ms per step" (the mean ledger's top bucket, the ranking the CLI's ledger and the Overview's default share). A
  straggler below the threshold is still named with its size, in parentheses, so that nothing is hidden. `ms`:
  the bucket's recoverable ms per step; `rank` None.
* `stagger`: the ranks entered the profiled window apart and the waiting for the last one in (the mean ledger's sync
  skew that is not recoverable: entry stagger) is more per step than a straggler's saving: it leads, with the
  ledger's top bucket. `ms`: that stagger per step; `rank` None.
* `exchange`: no straggler stands out and some exchanges are far slower than their bytes need once every member
  was there (`slow_exchanges`): communication latency, said with its figures before the ledger's top bucket. `ms`:
  their time per step; `rank` None.
* `withheld`: a caveat withholds the cross-rank claims (ranks missing): the sentence says so and gives the mean
  ledger's top bucket over the ranks present. `rank` None.
* `none`: nothing to say (no summaries, no ledger): the reason.

A one-worker run has no cross-rank claim to make: its verdict is the ledger's, without "no rank holds the others up".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: a straggler stands out when fixing it would make its steps at least this share of their time shorter
STANDS_OUT = 0.05
#: ... and at least this many ms shorter (below it, timer noise)
MIN_SAVED_MS = 0.05
#: other standing-out stragglers named after the first one
OTHERS_NAMED = 3
KINDS = ("straggler", "stagger", "exchange", "ledger", "withheld", "none")


def fmt_ms(ms: float) -> str:
    """'19.9 ms' from 1 ms up, '77 µs' below (a 0.4 ms step's parts are not all '0.1 ms')."""
    return f"{ms:.1f} ms" if abs(ms) >= 1 else f"{ms * 1000:.0f} µs"


def _who(worker: str, ranks: Mapping) -> tuple[Any, str]:
    rank = ranks.get(worker) if isinstance(ranks, Mapping) else None
    return rank, (f"rank {rank}" if rank is not None else f"worker {worker}")


def _stands_out(s: Mapping) -> bool:
    saved, step = s.get("saved_ms") or 0.0, s.get("step_ms") or 0.0
    return saved >= MIN_SAVED_MS and saved >= STANDS_OUT * step


def _top_bucket(report: Mapping) -> dict | None:
    """The mean ledger's bucket with the most recoverable ms (its ranking: recoverable, then ms), if any is above 0."""
    led = report.get("ledger")
    mean = led.get("mean") if isinstance(led, Mapping) else None
    rows = mean.get("buckets") if isinstance(mean, Mapping) else None
    best = None
    for r in rows if isinstance(rows, list) else []:
        rec = r.get("recoverable_ms") if isinstance(r, Mapping) else None
        if isinstance(rec, (int, float)) and rec > 0 and (best is None or rec > best["recoverable_ms"]):
            best = r
    return best


def _ledger_clause(report: Mapping, where: str = "") -> tuple[str, float | None]:
    top = _top_bucket(report)
    if top is None:
        led = report.get("ledger")
        if led is None:
            return f"no ledger ({report.get('ledger_reason') or 'the summaries hold none'})", None
        return "nothing recoverable stands out", None
    label = top.get("label") or top.get("key")
    return f"the most recoverable{where}: {label} {fmt_ms(top['recoverable_ms'])} per step", top["recoverable_ms"]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _cause(mine: list[Mapping]) -> str | None:
    """The `why` of the straggler's step that saves most, with its figures as means over `mine` (the straggler's
    standing-out steps): the phase it leads with, then the kernel or operator it names; that `why` as it is when
    it cannot be read so (a slow link's, whose figures are of its step)."""
    worst = max(mine, key=lambda s: s.get("saved_ms") or 0.0)
    why = worst.get("why")
    if not why or len(mine) < 2:
        return why
    phase = next((p for p in worst.get("phases") or [] if why.startswith(f"{p['label']} +")), None)
    if phase is None or phase.get("phase") == "link":
        return why

    def per_step(kind: str, key: str, name: str) -> float:
        return _mean([next((r["excess_ms"] for r in s.get(kind) or [] if r.get(key) == name), 0.0) for s in mine])

    parts = [f"{phase['label']} +{fmt_ms(per_step('phases', 'phase', phase['phase']))}"]
    for kind, word in (("kernels", "kernel"), ("ops", "op")):
        row = next((r for r in worst.get(kind) or [] if f"; {word} {r['name']} +" in why), None)
        if row is not None:
            parts.append(f"{word} {row['name']} +{fmt_ms(per_step(kind, 'name', row['name']))}")
            break
    return "; ".join(parts)


def _stagger_ms(report: Mapping) -> float | None:
    """The mean ledger's sync skew that is entry stagger (its ms less its recoverable ms), per step, when it is
    at least STANDS_OUT of the average step; else None."""
    led = report.get("ledger")
    mean = led.get("mean") if isinstance(led, Mapping) else None
    rows = mean.get("buckets") if isinstance(mean, Mapping) else None
    skew = next((r for r in rows or [] if isinstance(r, Mapping) and r.get("key") == "sync_skew"), None)
    if skew is None or skew.get("ms") is None or skew.get("recoverable_ms") is None:
        return None
    stagger = float(skew["ms"]) - float(skew["recoverable_ms"])
    wall = mean.get("average_wall_ms") if isinstance(mean, Mapping) else None
    if not wall or stagger < max(MIN_SAVED_MS, STANDS_OUT * float(wall)):
        return None
    return stagger


def verdict(report: Mapping) -> dict:
    """The run's verdict (module doc) from `report.diagnose(...)`'s answer."""
    out: dict = {"text": "", "kind": "none", "rank": None, "worker": None, "ms": None, "saved_ms": None}
    workers = report.get("workers") or 0
    if not workers:
        out["text"] = f"no verdict: {report.get('reason') or 'no worker summaries'}"
        return out
    held = report.get("withheld")
    if held:
        cav: Mapping = next((c for c in report.get("caveats") or [] if c.get("key") == held), {})
        what = str(cav.get("text") or held.replace("_", " ")).split(" (")[0].split(":")[0]
        clause, ms = _ledger_clause(report, " on the ranks present")
        out.update(kind="withheld", ms=round(ms, 3) if ms is not None else None)
        out["text"] = f"no straggler or waiting across ranks is claimed: {what}; {clause}"
        return out
    steps = [s for s in report.get("steps") or [] if isinstance(s, Mapping)]
    worst = report.get("worst")
    ranks = report.get("ranks") or {}
    stagger = _stagger_ms(report)
    if stagger is not None and stagger > sum((s.get("straggler") or {}).get("saved_ms") or 0.0 for s in steps) / max(
        len(steps), 1
    ):
        out.update(kind="stagger", ms=round(stagger, 3))
        clause, _ = _ledger_clause(report)
        out["text"] = (
            f"the ranks entered the profiled window apart: {fmt_ms(stagger)} per step of waiting for the last one in, "
            f"which balancing the work inside the steps does not recover (profile more steps); {clause}"
        )
        return out
    standing: dict[str, list[Mapping]] = {}
    for s in steps:
        if isinstance(s.get("straggler"), Mapping) and _stands_out(s["straggler"]):
            standing.setdefault(s["straggler"]["worker"], []).append(s["straggler"])
    if standing:
        # the worst straggler's rank; when it does not stand out, the one that saves most in all the steps that do
        w = worst["worker"] if isinstance(worst, Mapping) and worst.get("worker") in standing else None
        w = w or max(sorted(standing), key=lambda x: sum(s["saved_ms"] for s in standing[x]))
        mine = standing[w]
        rank, who = _who(w, ranks)
        excess = _mean([s["excess_ms"] for s in mine])
        saved = _mean([s["saved_ms"] for s in mine])
        per_step = sum(s["saved_ms"] for s in mine) / len(steps)
        n, total = len(mine), len(steps)
        where = "in the one profiled step" if total == 1 else f"in {n} of {total} steps"
        where += f" (step {mine[0]['step']})" if n == 1 and total > 1 else ""
        cause = _cause(mine)
        if n == total:
            fix = f"fixing it saves {fmt_ms(saved)} per step"
        else:
            each = "in that step" if n == 1 else "in each of those steps"
            fix = f"fixing it saves {fmt_ms(saved)} {each}, {fmt_ms(per_step)} per step over all {total}"
        others = sorted(set(standing) - {w})
        also = ""
        if others:
            named = ", ".join(_who(o, ranks)[1] for o in others[:OTHERS_NAMED])
            more = f" and {len(others) - OTHERS_NAMED} more" if len(others) > OTHERS_NAMED else ""
            also = f" ({named}{more} also {'stands' if len(others) == 1 else 'stand'} out in other steps)"
        out.update(kind="straggler", rank=rank, worker=w, ms=round(excess, 3), saved_ms=round(per_step, 3))
        out["text"] = f"{who} is {fmt_ms(excess)} slow {where}" + (f": {cause}" if cause else "") + f"; {fix}{also}"
        return out
    slow = report.get("slow_exchanges")
    if isinstance(slow, Mapping) and slow.get("text") and workers > 1:
        g = slow["groups"][0]
        out.update(kind="exchange", ms=round(float(g["total_ms"]) / max(len(steps), 1), 3))
        clause, _ = _ledger_clause(report)
        out["text"] = f"no rank holds the others up; {slow['text']}; {clause}"
        return out
    clause, ms = _ledger_clause(report)
    out.update(kind="ledger" if ms is not None else "none", ms=round(ms, 3) if ms is not None else None)
    if workers < 2:
        out["text"] = f"one worker: {clause}"
        return out
    lead = "no rank holds the others up"
    if report.get("reason"):
        lead = f"no straggler analysis ({report['reason']})"
    small = ""
    if isinstance(worst, Mapping):
        _, who = _who(worst["worker"], ranks)
        small = (
            f" (the slowest, {who}, would save {fmt_ms(worst.get('saved_ms') or 0.0)} in step {worst.get('step')}: "
            f"under {STANDS_OUT:.0%} of the step)"
        )
    out["text"] = f"{lead}{small}; {clause}"
    return out
