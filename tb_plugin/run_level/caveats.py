"""What a run's diagnosis cannot know, said first (issue 37 item 5): `caveats(summaries) -> [Caveat]`, from the
per-worker summaries only.

Each `Caveat` has a stable `key`, a `text` with the figures and `withholds`: True when the run-level answers claim
nothing across ranks because of it (no waiting for other ranks, straggler, what-if or sync skew). In this order:

* `missing_ranks` (withholds): fewer ranks present than distributedInfo's `world_size` (or the workers disagree on
  it): a missing rank may be the one the others waited for, so no cross-rank waiting is claimed. Left out when no
  summary knows its world size.
* `no_steps`: a worker's trace has no ProfilerStep (`phases.whole_trace`): its one step "0" is the whole trace
  window (the `steps` stage's rule), set-up and tear-down included; or a worker has no step at all.
* `one_step`: one profiled step: steady state is unknown.
* `unmatched_collectives` (a run of several workers): collective calls not matched across the workers and why
  (no `Collective name`/process group in the trace; call counts or names that differ between a group's members),
  or no collective at all; and which way the matched ones were matched when not by process group and sequence.
* `matched_by_order`: every call matched, some of them by name and order (no `Collective name` in the traces).
* `hosts`: the traces come from several hosts (`devices.host`, where a trace names its host: gpuscope's writer
  does, torch's does not; without it this caveat is left out rather than guessed): their clocks differ.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from tb_plugin.run_level.job_diff import ranges
from tb_plugin.summaries.schema import Summary

MISSING_RANKS = "missing_ranks"
NO_STEPS = "no_steps"
ONE_STEP = "one_step"
UNMATCHED = "unmatched_collectives"
MATCHED_BY_ORDER = "matched_by_order"
HOSTS = "hosts"
KEYS = (MISSING_RANKS, NO_STEPS, ONE_STEP, UNMATCHED, MATCHED_BY_ORDER, HOSTS)
#: the steps to profile for a steady state (the first ones carry warm-up, allocator and compilation costs)
STEADY_STEPS = 5
#: groups named in the call-count reason
SHOWN_GROUPS = 3


@dataclass(frozen=True)
class Caveat:
    key: str
    text: str
    withholds: bool = False

    def as_dict(self) -> dict:
        return {"key": self.key, "text": self.text, "withholds": self.withholds}


def as_json(cavs: list[Caveat]) -> list[dict]:
    return [c.as_dict() for c in cavs]


def withheld(cavs: list[Caveat]) -> str | None:
    """The key of the first caveat that withholds the cross-rank claims, else None."""
    return next((c.key for c in cavs if c.withholds), None)


def caveats(summaries: Mapping[str, Summary], job: object | None = None) -> list[Caveat]:
    """The run's caveats (module doc); `job`: `critical_path.match(summaries)` when the caller has it."""
    workers = sorted(summaries)
    if not workers:
        return []
    out = [c for c in (_missing_ranks(summaries, workers), *_steps(summaries, workers)) if c is not None]
    if len(workers) > 1:
        c = _unmatched(summaries, workers, job)
        if c is not None:
            out.append(c)
    c = _hosts(summaries, workers)
    if c is not None:
        out.append(c)
    return out


def _int(v: object) -> int | None:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else None


def _missing_ranks(summaries: Mapping[str, Summary], workers: list[str]) -> Caveat | None:
    devs = [summaries[w].devices for w in workers]
    sizes = sorted({x for d in devs if d is not None and (x := _int(d.world_size)) is not None and x > 0})
    if not sizes:
        return None  # no distributedInfo: how many ranks the job had is unknown
    ranks = [_int(d.rank) if d is not None else None for d in devs]
    known = sorted({r for r in ranks if r is not None})
    present = len(known) + sum(r is None for r in ranks)
    world = sizes[-1]
    which = f"rank{'s' if len(known) != 1 else ''} {ranges(known)}" if known else "ranks unknown"
    claim = "so no cross-rank waiting, straggler, what-if or sync skew is claimed"
    if len(sizes) > 1:
        return Caveat(
            MISSING_RANKS,
            f"the workers' distributedInfo disagree on world_size ({', '.join(map(str, sizes))}): {present} ranks "
            f"present ({which}), traces of different jobs or a damaged distributedInfo; {claim}",
            True,
        )
    if present >= world:
        return None
    return Caveat(
        MISSING_RANKS,
        f"{present} of {world} ranks present ({which}; distributedInfo world_size {world}): {world - present} "
        f"rank{'s' if world - present != 1 else ''} missing, "
        f"{'any of which' if world - present != 1 else 'which'} may be the one the others waited for, {claim}",
        True,
    )


def _who(summaries: Mapping[str, Summary], ws: list[str], n: int) -> str:
    """`every worker`, or the workers `ws` of `n` by rank where known."""
    if len(ws) == n:
        return "every worker" if n > 1 else "the worker"
    ranks = [_int(d.rank) if (d := summaries[w].devices) is not None else None for w in ws]
    if all(r is not None for r in ranks):
        return f"{len(ws)} of {n} workers (rank{'s' if len(ws) != 1 else ''} {ranges(ranks)})"  # type: ignore[arg-type]
    return f"{len(ws)} of {n} workers ({', '.join(ws[:4])}{', ...' if len(ws) > 4 else ''})"


def _ms_range(xs: list[float]) -> str:
    lo, hi = min(xs), max(xs)
    return f"{lo:.1f} ms" if round(lo, 1) == round(hi, 1) else f"{lo:.1f}-{hi:.1f} ms"


def _steps(summaries: Mapping[str, Summary], workers: list[str]) -> list[Caveat | None]:
    ph = {w: summaries[w].phases for w in workers if summaries[w].phases is not None}
    if not ph:
        return []
    n = len(workers)
    whole = [w for w, p in ph.items() if p.whole_trace and p.step]  # type: ignore[union-attr]
    empty = [w for w, p in ph.items() if not p.step]  # type: ignore[union-attr]
    out: list[Caveat | None] = []
    texts = []
    if whole:
        wins = [(ph[w].end[0] - ph[w].start[0]) / 1e6 for w in whole]  # type: ignore[union-attr]
        texts.append(
            f"no ProfilerStep in the trace of {_who(summaries, whole, n)}: the span of its events, the whole trace "
            f'window ({_ms_range(wins)}), is taken as one step "0", set-up and anything outside the training loop '
            "included; mark each iteration with prof.step() (torch.profiler.schedule)"
        )
    if empty:
        texts.append(f"no step at all in the trace of {_who(summaries, empty, n)} (no events to take as one)")
    if texts:
        out.append(Caveat(NO_STEPS, "; ".join(texts)))
    one = [w for w, p in ph.items() if w not in whole and len(p.step) == 1]  # type: ignore[union-attr]
    if one:
        names = sorted({str(ph[w].step[0]) for w in one})  # type: ignore[union-attr]
        out.append(
            Caveat(
                ONE_STEP,
                f"one profiled step (ProfilerStep#{', #'.join(names[:4])}) on {_who(summaries, one, n)}: steady "
                "state is unknown (a first step carries warm-up, allocator and compilation costs): profile "
                f"{STEADY_STEPS} steps or more (torch.profiler.schedule(wait=1, warmup=1, active={STEADY_STEPS}))",
            )
        )
    return out


def _unmatched(summaries: Mapping[str, Summary], workers: list[str], job: object | None) -> Caveat | None:
    from tb_plugin.run_level import critical_path

    # calls the trace names no process group for: NCCL kernels (or c10d/gloo ops) no record_param_comms with a
    # `Collective name` launched (`distributed.worker_summary`: pg "" and size -1)
    nameless: dict[str, int] = {}
    kernels = 0
    for w in workers:
        d = summaries[w].distributed
        cc = summaries[w].collective_calls
        if d is None or (cc is not None and len(cc.group)):
            continue  # its calls are in its facts (by record_param_comms or its backend ranges)
        c = d.collectives
        no_pg = np.asarray([pg == "" and int(z) < 0 for pg, z in zip(c.pg, c.group_size)], bool)
        real = ~np.asarray(c.wait, bool) if c.wait else np.zeros(0, bool)
        kernels += int(real.sum())
        k = int((no_pg[np.asarray(c.name, np.int64)] & real).sum()) if len(real) else 0
        if k:
            nameless[w] = k
    named = sum(len(cc.group) for w in workers if (cc := summaries[w].collective_calls) is not None)
    if not kernels and not named:
        return Caveat(
            UNMATCHED,
            f"no collective in any of the {len(workers)} workers' traces: nothing links the ranks, so each step's "
            "path stays on one worker and no rank is seen waiting for another",
        )
    jb = job if isinstance(job, critical_path.Job) else critical_path.match(summaries)
    real = ~jb.calls["is_wait"]
    total_named = int(real.sum())
    matched = int((jb.c_inst[real] >= 0).sum())
    why: list[str] = []
    if nameless:
        k = sum(nameless.values())
        why.append(
            f"{k} calls, on {_who(summaries, sorted(nameless), len(workers))}, carry no `Collective name` or "
            "process group: no record_param_comms names them (an older torch, or gloo's c10d ops)"
        )
    if matched < total_named:
        why += _named_reasons(summaries, workers, jb)
    unmatched = sum(nameless.values()) + total_named - matched
    total = sum(nameless.values()) + total_named
    how = _matched_how(jb)
    if not unmatched:
        return Caveat(MATCHED_BY_ORDER, how) if how else None
    tail = "" if matched else ": no collective links the ranks, each step's path stays on one worker"
    text = f"{unmatched} of {total} collective calls are not matched across the workers ({'; '.join(why)}){tail}"
    return Caveat(UNMATCHED, f"{text}; {how}" if how else text)


#: how the calls matched other than by process group and sequence, in words
_HOW_WORDS = {
    "name+order": "by name and order within their process group",
    "peer+time": "point-to-point, each receive paired with its send by time and order",
    "stream+name+order": "by the kernel's stream, name and order",
}


def _matched_how(job: object) -> str | None:
    """Which way the matched calls were matched, when some were not by process group and sequence: the traces
    carry no `Collective name` (gloo's ranges, older torch), so a rank whose trace lacks a call shifts the order."""
    from tb_plugin.run_level import critical_path

    assert isinstance(job, critical_path.Job)
    hows = job.calls.get("how")
    if hows is None:
        return None
    real = (~job.calls["is_wait"]) & (job.c_inst >= 0)
    counts = {h: int((real & (hows == i)).sum()) for i, h in enumerate(job.how_names)}
    parts = [f"{n} {_HOW_WORDS[h]}" for h, n in counts.items() if n and h in _HOW_WORDS]
    if not parts:
        return None
    n = sum(counts.values())
    return (
        f"of the {n} matched calls, {', '.join(parts)}: the traces name no `Collective name`, process group or "
        "sequence for them (gloo's ranges, or a torch before 2.1), so a member's missing call would shift the matching"
    )


def _named_reasons(summaries: Mapping[str, Summary], workers: list[str], job: object) -> list[str]:
    """Why calls with a `Collective name` were not matched: per process group, the members' call counts that
    differ; calls whose names differ between members."""
    counts: dict[str, dict[str, int]] = {}
    for w in workers:
        cc = summaries[w].collective_calls
        if cc is None or not cc.group:
            continue
        g = np.asarray(cc.group, np.int64)[~np.asarray(cc.wait, bool)]
        for gi, k in zip(*np.unique(g, return_counts=True)):
            counts.setdefault(cc.groups[int(gi)], {})[w] = int(k)
    out = []
    differ = [(key, c) for key, c in counts.items() if len(set(c.values())) > 1]
    for key, c in differ[:SHOWN_GROUPS]:
        per = ", ".join(f"{_label(summaries, w)}: {k}" for w, k in sorted(c.items(), key=lambda x: (x[1], x[0]))[:4])
        out.append(f"group {key}: call counts differ between its members ({per}{', ...' if len(c) > 4 else ''})")
    if len(differ) > SHOWN_GROUPS:
        out.append(f"{len(differ) - SHOWN_GROUPS} more groups whose call counts differ")
    if not out:
        out.append("their names differ between the members of their process group, or a member lacks them")
    return out


def _label(summaries: Mapping[str, Summary], w: str) -> str:
    d = summaries[w].devices
    r = _int(d.rank) if d is not None else None
    return f"rank {r}" if r is not None else w


def _hosts(summaries: Mapping[str, Summary], workers: list[str]) -> Caveat | None:
    hosts: dict[str, list[str]] = {}
    for w in workers:
        d = summaries[w].devices
        if d is not None and d.host:
            hosts.setdefault(d.host, []).append(w)
    if len(hosts) < 2:
        return None  # one host, or the traces do not say
    names = sorted(hosts)
    return Caveat(
        HOSTS,
        f"the traces come from {len(hosts)} hosts ({', '.join(names[:4])}{', ...' if len(names) > 4 else ''}): "
        "their clocks differ, so times are compared across ranks only as durations; the merged timeline aligns "
        "the clocks from the matched collectives (clock offsets)",
    )
