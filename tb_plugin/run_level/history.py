"""A job's history across runs, from the per-worker summaries only: when did it get slower, and why.

A logdir of a job profiled again and again (nightly, per release, per config change) holds one run per profile.
`history(series) -> dict` takes those runs in order, each `(name, time_ns, {worker: summary})`, and gives per run
its step time statistics, its MFU (the summaries' roofline), the job's ledger buckets, per rank its median step and
MFU, and the diagnosis' verdict; then it
names the first run slower than the noise of the runs before it and explains it with the job diff against the run
before (`job_diff.job_diff`). What `gpuscope history`, the `/history` route and `gpuscope.open(...).history()`
answer:
  {"order": "time" | "name", "rule": text,
   "runs": [{"run", "time_ns", "workers", "steps", "step_ms", "mean_ms", "mad_ms", "min_ms", "max_ms", "mfu",
             "buckets": {bucket: ms per step}, "per_rank": [{"rank", "worker", "step_ms", "mfu"}...],
             "verdict": text, "baseline_ms", "threshold_ms", "regressed": bool}...],
   "regression": {"run", "previous", "step_ms", "baseline_ms", "threshold_ms", "delta_ms", "cause",
                  "jobdiff": job_diff's answer} | None,
   "notes": [text...]}

The rule (RULE): a run's step time is the median over its steps of the step's time averaged over its ranks (the
job diff's step time, per step). Run i, from the MIN_BASELINE-th run on, is compared with the runs before it: their
step times' median M and MAD (median absolute deviation, x1.4826 so that it estimates a normal noise's sigma).
Run i regressed when its step time exceeds M + K x max(MAD, the runs' own step noise, REL_FLOOR x M), the runs' own
step noise being the median of their per-run MADs over steps (a series of identical runs still has steps that
differ). The first such run is named; its `previous` is the run just before it.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from profiler_core.analysis.worker.buckets import BUCKETS
from tb_plugin.run_level import critical_path, job_diff, report
from tb_plugin.run_level.run_ledger import worker_ledgers
from tb_plugin.run_level.verdict import verdict as one_line
from tb_plugin.summaries.schema import Summary

#: runs needed before one can be called a regression (fewer say nothing about the noise)
MIN_BASELINE = 5
#: how many noise widths above the baseline's median a run must be
K = 4.0
#: the smallest noise width, as a fraction of the baseline's median: with K, a run less than 8 % slower is never named
#: (profiles of one job on other days differ by a few % with no cause: clocks, placement, neighbours)
REL_FLOOR = 0.02
#: MAD -> sigma of a normal distribution
MAD_SIGMA = 1.4826
RULE = (
    f"a run regressed when its median step time (each step's time averaged over the ranks) exceeds the median of the "
    f"runs before it by more than {K:g} x max(their MAD x {MAD_SIGMA}, the median of their within-run step MADs, "
    f"{REL_FLOOR:.0%} of that median); at least {MIN_BASELINE} runs before it; the first such run is named and "
    f"explained by the job diff against the run before it"
)


def select(runs: Iterable[Any], span: str = "1", match: str | None = None) -> list[Any]:
    """The runs (objects with `name`, `workers` and `file(worker, span)`, as the scan's) whose name matches the glob
    `match` (all without it) and of which some worker has `span`."""
    out = []
    for r in runs:
        if match and not fnmatch.fnmatchcase(r.name, match):
            continue
        if any(r.file(w, span) is not None for w in r.workers):
            out.append(r)
    return out


def run_time(run: Any) -> int:
    """A run's time: its earliest trace file's (the file-name timestamp, else the file's mtime), ns."""
    return min((f.stamp_ns for f in run.files()), default=0)


def _natural(name: str) -> list[Any]:
    """`run10` after `run9`: digits compared as numbers."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def ordered(series: Sequence[tuple[str, int, Mapping[str, Summary]]], order: str) -> list:
    """The series by time (then name), or by name ("name": digits as numbers)."""
    if order == "name":
        return sorted(series, key=lambda x: _natural(x[0]))
    return sorted(series, key=lambda x: (x[1], _natural(x[0])))


def _mad(x: np.ndarray) -> float:
    return float(np.median(np.abs(x - np.median(x)))) if len(x) else 0.0


def _mfu(s: Summary) -> float | None:
    """A worker's MFU over its steps (its summary's roofline; None: no model FLOPs, no peaks or an older summary)."""
    return None if s.roofline is None or s.roofline.mfu is None else float(s.roofline.mfu)


def run_stats(summaries: Mapping[str, Summary]) -> dict:
    """One run's step times (ms; per step, the mean over ranks of the rank's step), per rank median and MFU, the run's
    MFU (the mean over its ranks that have one, as the job diff's; None: none has) and the mean ledger buckets (ms per
    step, averaged over ranks, as the job diff's)."""
    leds = worker_ledgers(summaries)
    walls: list[list[float]] = []
    per_rank = []
    buckets = dict.fromkeys(BUCKETS, 0.0)
    counted = 0
    for w in sorted(leds):
        led = leds[w]
        if not led.wall_ns:
            continue
        counted += 1
        for i, ns in enumerate(led.wall_ns):
            while len(walls) <= i:
                walls.append([])
            walls[i].append(ns / 1e6)
        d = summaries[w].devices
        per_rank.append(
            {
                "rank": d.rank if d is not None else None,
                "worker": w,
                "step_ms": round(float(np.median(led.wall_ns)) / 1e6, 4),
                "mfu": _mfu(summaries[w]),
            }
        )
        for k in BUCKETS:
            per_step = led.buckets[k].ns if k in led.buckets else None
            if per_step:
                buckets[k] += float(np.mean(per_step)) / 1e6
    steps = np.array([float(np.mean(x)) for x in walls])
    mfus = [m for m in (_mfu(s) for s in summaries.values()) if m is not None]
    return {
        "steps": len(steps),
        "step_ms": round(float(np.median(steps)), 4) if len(steps) else None,
        "mean_ms": round(float(np.mean(steps)), 4) if len(steps) else None,
        "mad_ms": round(_mad(steps), 4),
        "min_ms": round(float(steps.min()), 4) if len(steps) else None,
        "max_ms": round(float(steps.max()), 4) if len(steps) else None,
        "mfu": round(float(np.mean(mfus)), 6) if mfus else None,
        "buckets": {k: round(v / max(counted, 1), 4) for k, v in buckets.items()},
        "per_rank": per_rank,
    }


def verdict(diagnosis: Mapping[str, Any]) -> str:
    """One line of a diagnosis (`report.diagnose`'s answer): its verdict (`verdict.py`), the sentence `gpuscope
    diagnose` prints first and the views show at the top."""
    v = diagnosis.get("verdict")
    if isinstance(v, Mapping) and v.get("text"):
        return str(v["text"])
    return one_line(diagnosis)["text"]


def run_row(summaries: Mapping[str, Summary]) -> dict:
    """What the history says of one run: its `run_stats` and its diagnosis' verdict (`report.run_verdict`: the
    verdict without the rest of the diagnosis), the cross-rank matching done once for both. A pure function of the
    summaries, so kept per run by their identity (`history(keep=...)`)."""
    with critical_path.shared_matches():
        stats = {**run_stats(summaries), "workers": len(summaries)}
        if stats["step_ms"] is None:
            return stats
        try:
            why = report.run_verdict(summaries)["text"]
        except Exception as e:  # noqa: BLE001 - one run's diagnosis must not hide the series
            why = f"no diagnosis ({type(e).__name__}: {e})"
    return {**stats, "verdict": why}


#: `keep(summaries, compute)`: compute()'s answer for one run's summaries, kept by their identity
Keep = Callable[[Mapping[str, Summary], Callable[[], dict]], dict]


def history(
    series: Sequence[tuple[str, int, Mapping[str, Summary]]], order: str = "time", keep: Keep | None = None
) -> dict:
    """The history of `series` ((run, time_ns, {worker: summary}) per run), ordered by `order` (module doc).
    `keep`: where each run's row (`run_row`) is kept (the route: the run-level answers, `answers.answer`), so that
    a logdir with one run more computes that run only."""
    runs = []
    notes: list[str] = []
    for name, t, summaries in ordered(series, order):
        if not summaries:
            notes.append(f"run {name}: no readable trace")
            continue
        row = keep(summaries, functools.partial(run_row, summaries)) if keep is not None else run_row(summaries)
        stats = {k: v for k, v in row.items() if k not in ("verdict", "workers")}
        if stats["step_ms"] is None:
            notes.append(f"run {name}: no step recorded")
            continue
        why = row["verdict"]
        runs.append(
            {
                "run": name,
                "time_ns": int(t),
                "workers": int(row.get("workers", len(summaries))),
                **stats,
                "verdict": why,
                "baseline_ms": None,
                "threshold_ms": None,
                "regressed": False,
            }
        )
    regression = None
    for i in range(MIN_BASELINE, len(runs)):
        before = np.array([r["step_ms"] for r in runs[:i]])
        base = float(np.median(before))
        noise = max(MAD_SIGMA * _mad(before), float(np.median([r["mad_ms"] for r in runs[:i]])), REL_FLOOR * base)
        threshold = base + K * noise
        r = runs[i]
        r["baseline_ms"], r["threshold_ms"] = round(base, 4), round(threshold, 4)
        r["regressed"] = r["step_ms"] > threshold
        if r["regressed"] and regression is None:
            regression = {
                "run": r["run"],
                "previous": runs[i - 1]["run"],
                "step_ms": r["step_ms"],
                "baseline_ms": r["baseline_ms"],
                "threshold_ms": r["threshold_ms"],
                "delta_ms": round(r["step_ms"] - base, 4),
                "cause": None,
                "jobdiff": None,
            }
    if len(runs) <= MIN_BASELINE:
        notes.append(f"{len(runs)} runs: at least {MIN_BASELINE + 1} are needed to call one a regression")
    if regression is not None:
        sm = {name: s for name, _, s in series}
        try:
            jd = job_diff.job_diff(sm[regression["previous"]], sm[regression["run"]])
            regression["jobdiff"] = jd
            regression["cause"] = jd["lines"][0]["text"] if jd["lines"] else None
        except job_diff.JobDiffError as e:
            notes.append(f"the regression cannot be explained: {e}")
    return {"order": order, "rule": RULE, "runs": runs, "regression": regression, "notes": notes}


def render_text(result: Mapping[str, Any]) -> str:
    """The history in words: one line per run, then the first regression and its job diff."""
    out = [f"{len(result['runs'])} runs by {result['order']}"]
    for r in result["runs"]:
        mark = "  REGRESSED" if r["regressed"] else ""
        mfu = f", MFU {r['mfu']:.1%}" if r.get("mfu") is not None else ""
        base = f" (baseline {r['baseline_ms']:.3f}, threshold {r['threshold_ms']:.3f})" if r["baseline_ms"] else ""
        out.append(
            f"{r['run']}: {r['workers']} workers, {r['steps']} steps, step {r['step_ms']:.3f} ms "
            f"+/- {r['mad_ms']:.3f}{mfu}{base}{mark}"
        )
    reg = result["regression"]
    if reg is None:
        out.append("no run is slower than the noise of the runs before it")
    else:
        out.append(
            f"first regression: {reg['run']}: step {reg['step_ms']:.3f} ms, {reg['delta_ms']:+.3f} ms over the "
            f"baseline {reg['baseline_ms']:.3f} ms (threshold {reg['threshold_ms']:.3f}); against {reg['previous']}:"
        )
        verdicts = [r["verdict"] for r in result["runs"] if r["run"] == reg["run"]]
        out += [f"  its diagnosis: {v}" for v in verdicts]
        if reg["jobdiff"] is not None:
            out += ["  " + line for line in job_diff.render_text(reg["jobdiff"], limit=5).rstrip("\n").split("\n")]
    out.append(f"rule: {result['rule']}")
    out += [f"note: {n}" for n in result["notes"]]
    return "\n".join(out) + "\n"
