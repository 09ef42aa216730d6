"""The run-level diagnosis from the per-worker summaries only: what `gpuscope diagnose`, the `/diagnosis` route
and the views serve.

`diagnose(summaries: {worker: summary}) -> dict` (JSON-able):
  {"caveats": [{"key", "text", "withholds"}...],  # what it cannot know (`caveats.py`), first
   "verdict": {"text", "kind", "rank", "worker", "ms", "saved_ms"},  # the run in one sentence (`verdict.py`)
   "withheld": key | None,                       # the caveat that withholds the cross-rank claims (ranks missing):
                                                 #   then steps and stragglers are [], worst None, `reason` says
                                                 #   why, the ledger has no sync skew and no `critical`
   "workers": n, "ranks": {worker: rank | None},
   "ledger": the run's recoverable-time ledger (`run_ledger.run_view`) or None, "ledger_reason": text | None,
   "steps": [{"step", "step_ms", "segments": [...critical_path segments, work ones with "why"...],
              "path": text, "straggler": stragglers.explain(...) | None}...],
   "worst": {"step", "straggler"...} | None,     # the step whose straggler would save the most
   "stragglers": [explain(...)...],              # the path stragglers of all steps, most saved first
   "notes": [text...], "reason": text | None,    # reason: why there is no path (no facts, one worker)
   "single_rank": single_rank(...) | None,       # one worker: its single-rank critical path per step
   "slow_exchanges": slow_exchanges(...) | None} # exchanges far slower than their bytes need, once all were there
`render_text(report) -> str`: the same in words, for a terminal or a CI log.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from profiler_core.analysis.worker.buckets import COMPUTE, START_UP
from tb_plugin.run_level import caveats as cv
from tb_plugin.run_level import critical_path, slow_exchanges, stragglers
from tb_plugin.run_level.verdict import fmt_ms, verdict
from tb_plugin.summaries.schema import Summary

#: the critical paths reported in words (every step is in the JSON)

TEXT_STEPS = 5
#: the steps whose critical rank's ledger is reported in words (most time outside compute; all in the JSON)
TEXT_LEDGER_STEPS = 20
#: buckets under this many ms are left out of the text
TEXT_MIN_MS = 0.05
#: a single-rank run: the steps whose critical path is computed (the longest ones), the segments and the
#: (kind, name) totals kept per step
SINGLE_STEPS = 20
SINGLE_SEGMENTS = 20
SINGLE_TOP = 10
LEDGER_PENDING = "the recoverable-time ledger is not part of this gpuscope"


def _ledger(summaries: Mapping[str, Summary]) -> tuple[Any, str | None]:
    """The run's ledger (`tb_plugin.run_level.run_ledger.run_view`, with its caveats) when this gpuscope has it and
    the summaries hold the workers' ledgers, else None and the reason."""
    try:
        mod = importlib.import_module("tb_plugin.run_level.run_ledger")
    except ImportError:
        return None, LEDGER_PENDING
    fn = getattr(mod, "run_view", None)
    if fn is None:
        return None, LEDGER_PENDING
    if not all(s.ledger is not None for s in summaries.values()):
        return None, "the summaries hold no ledger"
    return fn(dict(summaries)), None


def _explained(job: critical_path.Job, step: str, worker: str, cache: dict) -> dict | None:
    key = (step, worker)
    if key not in cache:
        if ("busy", step) not in cache:
            cache[("busy", step)] = stragglers.busy(job, step)
        cache[key] = stragglers.explain(job, step, worker, cache[("busy", step)])
    return cache[key]


def _annotate(job: critical_path.Job, step: dict, cache: dict) -> None:
    """Each work segment gets the `why` of its worker in the step: what it spent more on than the median worker."""
    for seg in step["segments"]:
        if seg["kind"] == "work":
            s = _explained(job, step["step"], seg["worker"], cache)
            seg["why"] = s["why"] if s else None


#: ranks listed one by one in the text's MFU section (more: the lowest ones, with the spread over all)
TEXT_MFU_RANKS = 8


def utilisation(summaries: Mapping[str, Summary]) -> list[dict]:
    """MFU and HFU per worker from the summaries' `roofline` parts, lowest MFU first (None last): worker, rank,
    device, roof, peak_tflops, mfu, hfu, step_mfu, note, lost_ms, top (its 3 ops losing most), causes."""
    rows = []
    for w in sorted(summaries):
        r = summaries[w].roofline
        if r is None:
            continue
        rows.append(
            {
                "worker": w,
                "rank": critical_path.worker_rank(summaries[w]),
                "device": r.device,
                "roof": r.roof,
                "peak_tflops": r.peak_tflops,
                "mfu": r.mfu,
                "hfu": r.hfu,
                "step_mfu": list(r.step_mfu),
                "note": r.note,
                "lost_ms": r.lost_ms,
                "top": [
                    {"name": o.name, "dtype": o.dtype, "lost_ms": o.lost_ms, "fraction": o.fraction, "cause": o.cause}
                    for o in r.top[:3]
                ],
                "causes": {k: {"label": c.label, "fix": c.fix, "lost_ms": c.lost_ms} for k, c in r.causes.items()},
            }
        )
    rows.sort(key=lambda x: (x["mfu"] is None, x["mfu"] if x["mfu"] is not None else 0.0, x["worker"]))
    return rows


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:.1f} %"


def mfu_lines(rows: list[dict], ranks: Mapping) -> list[str]:
    """The MFU section in words: per rank (lowest first; beyond TEXT_MFU_RANKS the spread and the lowest ones)
    its MFU, HFU, roof and steps' range, and the ops losing most to their bound with the cause's fix."""
    if not rows:
        return ["  not available: the summaries hold no roofline (made by an older gpuscope)"]
    out = []
    known = [r for r in rows if r["mfu"] is not None]
    if len(rows) > TEXT_MFU_RANKS and known:
        vals = sorted(r["mfu"] for r in known)
        out.append(
            f"  over {len(known)} ranks: min {_pct(vals[0])} ({_who(known[0]['worker'], ranks)}), "
            f"median {_pct(vals[len(vals) // 2])}, max {_pct(vals[-1])}"
        )
    for r in rows[:TEXT_MFU_RANKS]:
        who = _who(r["worker"], ranks)
        if r["mfu"] is None:
            out.append(f"  {who}: no MFU ({r['note'] or 'no roof'})" + (f" on {r['device']}" if r["device"] else ""))
            continue
        steps = [x for x in r["step_mfu"] if x is not None]
        spread = f"; steps {_pct(min(steps))} to {_pct(max(steps))}" if len(steps) > 1 else ""
        out.append(
            f"  {who}: MFU {_pct(r['mfu'])}, HFU {_pct(r['hfu'])} of the {r['device']} {r['roof']} roof "
            f"({r['peak_tflops']:g} TFLOP/s){spread}"
        )
        for o in r["top"]:
            cause = r["causes"].get(o["cause"]) or {}
            frac = f", at {_pct(o['fraction'])} of its bound" if o["fraction"] is not None else ""
            fix = f" -- {cause['fix']}" if cause.get("fix") else ""
            out.append(f"    {o['name']} ({o['dtype']}): {fmt_ms(o['lost_ms'])} below its bound{frac}{fix}")
    if len(rows) > TEXT_MFU_RANKS:
        out.append(f"  ({len(rows) - TEXT_MFU_RANKS} more ranks in --json)")
    return out


def diagnose(summaries: Mapping[str, Summary], trace: Callable[[str], Any] | None = None) -> dict:
    """The diagnosis of one run and span (module doc). `trace(worker)`: the parsed trace of a worker, read only for
    a run of one worker (its single-rank critical path); an exception there becomes a note."""
    with critical_path.shared_matches():
        out = _diagnose(summaries, trace)
    out["verdict"] = verdict(out)
    return out


def run_verdict(summaries: Mapping[str, Summary]) -> dict:
    """The run's verdict (`verdict.py`), as `diagnose(summaries)["verdict"]`, without what the verdict does not read
    (each work segment's `why`, the paths in words, the utilisation): what a job's history needs per run, at a
    fraction of the diagnosis' time."""
    with critical_path.shared_matches():
        return verdict(_diagnose(summaries, None, brief=True))


def _diagnose(summaries: Mapping[str, Summary], trace: Callable[[str], Any] | None, brief: bool = False) -> dict:
    """The diagnosis without its verdict; `brief`: without the parts the verdict does not read (`run_verdict`)."""
    workers = sorted(summaries)
    ledger, ledger_reason = _ledger(summaries)
    has_facts = any(summaries[w].phases is not None for w in workers)
    job = critical_path.match(summaries) if has_facts else None
    cavs = cv.caveats(summaries, job)
    held = cv.withheld(cavs)
    out: dict = {
        "caveats": cv.as_json(cavs),
        "verdict": None,
        "withheld": held,
        "workers": len(workers),
        "ranks": {w: critical_path.worker_rank(summaries[w]) for w in workers},
        "ledger": ledger,
        "ledger_reason": ledger_reason,
        "steps": [],
        "worst": None,
        "stragglers": [],
        "notes": [],
        "reason": None,
        "single_rank": None,
        "slow_exchanges": None,
        "utilisation": [] if brief else utilisation(summaries),
    }
    if not workers:
        out["reason"] = "no worker summaries"
        return out
    if len(workers) == 1 and trace is not None:
        try:
            out["single_rank"] = single_rank(trace(workers[0]), workers[0])
        except Exception as e:  # noqa: BLE001 - the summaries' diagnosis stands without it
            out["notes"].append(f"no single-rank critical path: the trace cannot be read ({e})")
    if job is None:
        out["reason"] = critical_path.NO_FACTS
        return out
    out["notes"] += list(job.notes)
    if held is not None and len(workers) > 1:
        out["reason"] = (
            f"withheld: {held.replace('_', ' ')} (see the caveats): no cross-rank critical path, straggler or what-if"
        )
        return out
    if len(workers) < 2:
        out["notes"].append("one worker: no cross-rank critical path (see its single-rank critical path)")
    if not len(job.inst) and len(workers) > 1:
        out["notes"].append("no collective is matched across the workers: each step's path stays on one worker")
    cache: dict = {}
    for step in critical_path.step_paths(job):
        if not brief:
            step["segments"] = [dict(seg) for seg in step["segments"]]  # (shared with the ledger's: `step_paths`)
            _annotate(job, step, cache)
            step["path_parts"] = critical_path.path_parts(step["segments"])
            step["path"] = " -> ".join(step["path_parts"])
        if ("busy", step["step"]) not in cache:  # (setdefault would replay the step again each time)
            cache[("busy", step["step"])] = stragglers.busy(job, step["step"])
        b = cache[("busy", step["step"])]
        w = stragglers.pick(job, step["step"], step["segments"], b)
        step["straggler"] = _explained(job, step["step"], w, cache) if w is not None else None
        out["steps"].append(step)
    out["slow_exchanges"] = slow_exchanges.slow_exchanges(job)
    found = [s["straggler"] for s in out["steps"] if s["straggler"] is not None]
    found.sort(key=lambda s: (-s["saved_ms"], -s["excess_ms"], s["worker"]))
    out["stragglers"] = found
    out["worst"] = found[0] if found and found[0]["saved_ms"] > 0 else None
    return out


def single_rank(t: Any, worker: str) -> dict:
    """The single-rank critical path (`single_rank_path.critical_path`) of a one-worker run's trace, per step
    (the SINGLE_STEPS longest steps, in step order; without steps the trace window), each bounded to its
    SINGLE_SEGMENTS longest segments (in time order) and SINGLE_TOP (kind, name) totals:
    {"worker", "steps": [path...], "steps_total", "note": text | None}."""
    from profiler_core.analysis.stages.steps import steps as steps_stage
    from profiler_core.analysis.worker.single_rank_path import critical_path as path_of

    st = steps_stage(t)
    note = None
    if len(st):
        wall = (st["end"] - st["start"]).to_numpy()
        idx = sorted(sorted(range(len(st)), key=lambda i: (-int(wall[i]), i))[:SINGLE_STEPS])
        if len(idx) < len(st):
            note = f"the critical path of the {len(idx)} longest of {len(st)} steps"
        paths = [path_of(t, i) for i in idx]
    else:
        paths = [path_of(t, None)]
    for p in paths:
        segs = p["segments"]
        if len(segs) > SINGLE_SEGMENTS:
            keep = sorted(range(len(segs)), key=lambda i: (-(segs[i]["end_ns"] - segs[i]["start_ns"]), i))
            p["segments"] = [segs[i] for i in sorted(keep[:SINGLE_SEGMENTS])]
        p["top"] = p["top"][:SINGLE_TOP]
    return {"worker": worker, "steps": paths, "steps_total": len(st), "note": note}


def _single_lines(single: Mapping) -> list[str]:
    """The single-rank critical path per step: its length, the kinds on it and its largest (kind, name) totals."""
    out = []
    for p in single.get("steps") or []:
        where = f"step {p['step']}" if p.get("step") is not None else "trace window"
        if p.get("reason"):
            out.append(f"  {where}: not available: {p['reason']}")
            continue
        kinds = sorted(
            ((k, v["ns"]) for k, v in p["by_kind"].items() if v.get("ns")),
            key=lambda kv: -kv[1],
        )
        out.append(
            f"  {where} ({fmt_ms(p['window_ns'] / 1e6)}): path {fmt_ms(p['length_ns'] / 1e6)}: "
            + ", ".join(f"{k} {fmt_ms(ns / 1e6)}" for k, ns in kinds if ns >= TEXT_MIN_MS * 1e6)
        )
        for x in p["top"][:3]:
            out.append(f"    {x['kind']} {x['name'][:120]}: {fmt_ms(x['ns'] / 1e6)}")
    if single.get("note"):
        out.append(f"  ({single['note']})")
    return out


def _ledger_lines(ledger: Any) -> list[str]:
    """The run's mean ledger, ranked by recoverable time: one line per bucket; one-time start-up first when there
    is any (it is not a cost of the steps that follow, and the window it inflates is what every other line is a
    share of)."""
    mean = ledger.get("mean") if isinstance(ledger, dict) else None
    rows = mean.get("buckets") if isinstance(mean, dict) else None
    if not isinstance(mean, dict) or not isinstance(rows, list):
        notes = ledger.get("notes") if isinstance(ledger, dict) else None
        return [f"  not available{': ' + '; '.join(notes) if notes else ''}"]
    out = []
    if mean.get("average_wall_ms") is not None:
        out.append(f"  average step {fmt_ms(mean['average_wall_ms'])} (mean over ranks)")
    small = 0
    rows = sorted(rows, key=lambda r: not (isinstance(r, dict) and r.get("key") == START_UP and (r.get("ms") or 0)))
    for r in rows:
        if not isinstance(r, dict):
            continue
        if r.get("ms") is not None and r["ms"] < 0.05:
            small += 1
            continue
        if r.get("ms") is None:
            out.append(f"  {r.get('label', r.get('key'))}: n/a ({r.get('reason')})")
            continue
        rec = r.get("recoverable_ms")
        # start-up is paid once (nothing recoverable from the steps) and its fix is where to profile
        fix = f" -- {r['fix']}" if r.get("fix") and (rec or r.get("key") == START_UP) else ""
        out.append(
            f"  {r.get('label', r.get('key'))}: {fmt_ms(r['ms'])}"
            + (f", recoverable {fmt_ms(rec)}" if rec is not None else "")
            + (fix if r.get("key") != COMPUTE or not r.get("split") else "")
        )
        out += [f"    {a}" for a in r.get("advice") or [] if isinstance(a, str)]
        for part in r.get("split") or []:
            if part.get("ms") is None or part["ms"] < TEXT_MIN_MS:
                continue
            more = f", recoverable {fmt_ms(part['recoverable_ms'])}" if part.get("recoverable_ms") else ""
            out.append(f"    {part['label']}: {fmt_ms(part['ms'])}{more}")
            for c in part.get("causes") or []:
                if (c.get("lost_ms") or 0) >= TEXT_MIN_MS:
                    out.append(f"      {c['label']}: {fmt_ms(c['lost_ms'])} lost -- {c['fix']}")
    if small:
        out.append(f"  ({small} bucket{'s' if small != 1 else ''} under 0.05 ms left out)")
    return out


def _who(worker: Any, ranks: Mapping) -> str:
    rank = ranks.get(worker) if isinstance(ranks, Mapping) else None
    return f"rank {rank}" if rank is not None else f"worker {worker}"


def _critical_lines(ledger: Any, ranks: Mapping) -> list[str]:
    """Per step, the ledger of the rank that set the step's time (`run_ledger`'s `critical`): its buckets of at
    least TEXT_MIN_MS, largest first. At most TEXT_LEDGER_STEPS steps, those with the most time outside compute,
    in step order."""
    crit = ledger.get("critical") if isinstance(ledger, dict) else None
    steps = crit.get("steps") if isinstance(crit, dict) else None
    if not isinstance(steps, list) or not steps or not isinstance(crit, dict):
        return []
    rows = {r["key"]: r for r in crit.get("buckets") or [] if isinstance(r, dict) and "key" in r}

    def saving(s: dict) -> float:
        return sum(ms for b, ms in (s.get("buckets") or {}).items() if ms is not None and b != COMPUTE)

    shown = steps
    if len(steps) > TEXT_LEDGER_STEPS:
        keep = sorted(range(len(steps)), key=lambda i: (-saving(steps[i]), i))[:TEXT_LEDGER_STEPS]
        shown = [steps[i] for i in sorted(keep)]
    out = []
    for s in shown:
        parts = sorted(
            ((b, ms) for b, ms in (s.get("buckets") or {}).items() if ms is not None and ms >= TEXT_MIN_MS),
            key=lambda p: -p[1],
        )
        text = ", ".join(f"{(rows.get(b) or {}).get('label', b)} {fmt_ms(ms)}" for b, ms in parts)
        # that rank's own step window, labelled: the critical path's step time is the median over the ranks
        out.append(
            f"  step {s['step']}, set by {_who(s.get('worker'), ranks)} (its step {fmt_ms(s['wall_ms'])}): {text}"
        )
    if len(shown) < len(steps):
        out.append(f"  ({len(steps) - len(shown)} more steps with less recoverable time in --json)")
    return out


def caveat_lines(caveats: list) -> list[str]:
    """The caveats in words, one line each (a withholding one says so)."""
    rows = [c for c in caveats if isinstance(c, Mapping) and c.get("text")]
    if not rows:
        return []
    return ["What this diagnosis cannot know:"] + [
        f"  ! {c['text']}" + (" [cross-rank claims withheld]" if c.get("withholds") else "") for c in rows
    ]


def render_text(report: Mapping) -> str:
    """The diagnosis in words: first what it cannot know (the caveats), then the verdict, the ledger, the worst
    straggler with its what-if, the critical paths."""
    lines = caveat_lines(report.get("caveats") or [])
    if isinstance(report.get("verdict"), Mapping) and report["verdict"].get("text"):
        lines.append(f"Verdict: {report['verdict']['text']}")
    if lines:
        lines.append("")
    lines.append(f"gpuscope diagnosis: {report['workers']} workers")
    lines.append("")
    lines.append("Ledger (recoverable time per step, across ranks):")
    if report.get("ledger") is not None:
        lines += _ledger_lines(report["ledger"])
        crit = _critical_lines(report["ledger"], report.get("ranks") or {})
        if crit:
            lines.append("")
            lines.append("Ledger of the rank that set each step (its buckets of at least 0.05 ms, largest first):")
            lines += crit
    else:
        lines.append(f"  not available: {report.get('ledger_reason')}")
    lines.append("")
    lines.append("Model FLOPs utilisation (FLOPs of the ops' shapes over step time x the matrix roof; lowest first):")
    lines += mfu_lines(report.get("utilisation") or [], report.get("ranks") or {})
    lines.append("")
    if report.get("reason"):
        lines.append(f"Critical path: not available: {report['reason']}")
    else:
        worst = report.get("worst")
        lines.append("Straggler:")
        if worst:
            lines.append("  " + stragglers.describe(worst))
            for p in worst["phases"][:3]:
                lines.append(
                    f"    {p['label']}: {fmt_ms(p['ms'])} (median {fmt_ms(p['median_ms'])}, +{fmt_ms(p['excess_ms'])})"
                )
            for kind in ("kernels", "ops"):
                for k in worst[kind][:2]:
                    lines.append(
                        f"    {kind[:-1]} {k['name']}: {fmt_ms(k['ms'])} "
                        f"(median {fmt_ms(k['median_ms'])}, +{fmt_ms(k['excess_ms'])})"
                    )
        else:
            lines.append("  none: no rank's lateness made others wait")
        slow = report.get("slow_exchanges")
        if slow:
            lines.append("")
            lines.append("Slow exchanges:")
            lines.append(f"  {slow['text']}")
        lines.append("")
        steps = report.get("steps") or []
        shown = sorted(steps, key=lambda s: -(s["straggler"] or {}).get("saved_ms", 0.0))[:TEXT_STEPS]
        lines.append(f"Critical path per step ({len(shown)} of {len(steps)} steps, largest what-if saving first):")
        for s in shown:
            span = s.get("span_ms")
            # the median step and the step from the first rank in to the last out differ where ranks enter apart
            both = f"; {fmt_ms(span)} first in to last out" if span and span > 1.1 * s["step_ms"] else ""
            lines.append(f"  step {s['step']} (median step {fmt_ms(s['step_ms'])}{both}): {s['path']}")
    if report.get("single_rank"):
        lines.append("")
        lines.append("Single-rank critical path (from the trace: the chain of CPU and GPU work that set each step):")
        lines += _single_lines(report["single_rank"])
    notes = report.get("notes") or []
    if notes:
        lines.append("")
        lines.append("Notes:")
        lines += [f"  {n}" for n in notes]
    return "\n".join(lines) + "\n"
