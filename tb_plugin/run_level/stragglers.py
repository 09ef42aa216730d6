"""Why a straggler is slow, and what the step would take if it were not: from the per-worker summaries only.

A worker's busy time in a step is the step's time minus what other workers cost it: its step replayed on its own
(`what_if.replay` with `alone`), where each collective call starts when the worker was ready for it (or its own
previous call ended) and takes only its transfer time, so calls queued on a comm stream count their waiting once.
Its excess is its busy time minus the median busy time of the other workers in that step (with two workers, the
other one: a worker never moves the median it is compared with). The excess is split into the phases, kernels and
operators where the worker spent more than the others' median, comparing only what every worker measured: a
kernel or operator outside a worker's full top list (`worker_facts.TOP_N`) counts there as that list's smallest
entry, an upper bound, so the truncation never inflates an excess (a list that is not full: 0). The split names
what stands out; it does not add up to the excess, and phases may overlap each other. The straggler of a step's
path is chosen among the workers the others waited for (`pick`): a worker that only waited is never named.

What-if: the step replayed with the worker's timeline earlier by its excess (`what_if.replay`: each collective
ends earlier by the least slack of its members, and a member that waited for it runs on earlier by that much);
`what_if_ms` is the median over the workers of their step time less their shift. A replay of one step cannot see
work after the straggler's last collective of a step, which holds the others at the next step's first one: the
saving is at least what the others stop losing (`_held_others`: the median of their idle waits at the step's
collectives the straggler arrived last at, at most its excess).

`explain(job, step, worker)` -> {"worker", "rank", "step", "busy_ms", "median_ms", "excess_ms", "step_ms",
"what_if_ms", "saved_ms", "late_at": n, "phases": [{"phase", "label", "ms", "median_ms", "excess_ms"}...],
"kernels": [{"name", "ms", "median_ms", "excess_ms"}...], "ops": [...], "why": text, "median_worker",
"diff": {"worker", "exp_worker", "step"}} (the Diff view's pair: the median worker as the baseline, this worker
compared with it, so the Diff's deltas are this worker's excess).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from profiler_core.analysis.worker.worker_facts import PHASES, TOP_N
from tb_plugin.run_level import slow_links, what_if
from tb_plugin.run_level.critical_path import Job, label
from tb_plugin.run_level.verdict import fmt_ms
from tb_plugin.summaries.schema import Summary

PHASE_LABELS = {
    "data_loading": "data loading",
    "h2d": "host-to-device copies",
    "host_sync": "host synchronization",
    "launch": "kernel launches (CPU-bound)",
    "gpu_idle": "GPU idle",
    "compute": "compute",
    "comm": "communication",
    "link": "slow link (longer transfers)",
}
#: phases that name a cause; `gpu_idle` and `compute` are what they cause, named when nothing specific stands out
SPECIFIC = ("data_loading", "h2d", "host_sync", "launch", "link")
TOP = 5


def _ms(ns: float) -> float:
    return round(float(ns) / 1e6, 3)


def busy(job: Job, step: str) -> dict[int, float]:
    """Worker index -> busy ns in `step`: the step's time less what other workers cost it, i.e. its step replayed
    on its own (`what_if.replay` with `alone`: each call starts when the worker was ready for it, or when its own
    previous call ended, and takes its transfer time)."""
    k = job.code(step)
    if k is None:
        return {}
    lost = what_if.replay(job, k, {}, alone=True)
    has = np.flatnonzero(job.b_idx[k] >= 0)
    vals = (job.b_end[k] - job.b_start[k] - lost)[has]
    return dict(zip(has.tolist(), vals.tolist()))


_CAUSES = tuple(p for p in PHASES if p != "comm")  # a straggler waits less: its communication is not its excess


def _flat(job: Job) -> dict:
    """Every worker's phases as a [steps x phases x workers] array (NaN: not measured) and its top kernels and
    operators as flat arrays (worker, step code, global name code, ns), built once per job."""
    cache = job.__dict__.setdefault("_flat", {})
    if cache:
        return cache
    S, W = len(job.steps), len(job.workers)
    mat = np.full((S, len(_CAUSES), W), np.nan)
    codes: dict[str, int] = {}
    tops: dict[str, tuple[list, list, list, list]] = {k: ([], [], [], []) for k in ("top_kernels", "top_ops")}
    # a name missing from a worker's full top list is at most its smallest entry there, not 0 (TOP_N truncates)
    fills = {k: np.zeros((S, W)) for k in tops}
    for wi, w in enumerate(job.workers):
        ph = job.phases[w]
        ks = np.flatnonzero(job.b_idx[:, wi] >= 0)
        idx = job.b_idx[ks, wi]
        for j, p in enumerate(_CAUSES):
            vals = np.array(ph.phase(p), dtype=np.float64)
            ok = idx < len(vals)
            mat[ks[ok], j, wi] = vals[idx[ok]]
        gm = [codes.setdefault(str(n), len(codes)) for n in ph.names]
        step_of = dict(zip(idx.tolist(), ks.tolist()))
        for key, (tw, tk, tn, tv) in tops.items():
            for i, lst in enumerate(getattr(ph, key)):
                k = step_of.get(i)
                if k is None:
                    continue
                if len(lst) >= TOP_N:
                    fills[key][k, wi] = min(v for _, v in lst)
                for n, v in lst:
                    tw.append(wi)
                    tk.append(k)
                    tn.append(gm[n])
                    tv.append(v)
    cache["phases"] = mat
    cache["fills"] = fills
    cache["names"] = list(codes)
    for key, cols in tops.items():
        cache[key] = tuple(np.asarray(c, np.int64 if i < 3 else np.float64) for i, c in enumerate(cols))
    return cache


def _step_table(job: Job, k: int, key: str) -> tuple[list[str], np.ndarray]:
    """For step code `k`: the names (phases, or the kernels/operators of `key`'s top lists) and a [names x workers]
    matrix of their ns (NaN: not measured; a name missing from a worker's top list: 0 when the list is not full,
    else the list's smallest entry, an upper bound, so an excess is never overstated by the truncation). Cached on
    the job: every straggler of the step reads it."""
    tables = job.__dict__.setdefault("_tables", {})
    if (k, key) in tables:
        return tables[(k, key)]
    flat = _flat(job)
    W = len(job.workers)
    if key == "phases":
        names = list(_CAUSES)
        mat = flat["phases"][k]
    else:
        tw, tk, tn, tv = flat[key]
        sel = tk == k
        uniq, inv = np.unique(tn[sel], return_inverse=True)
        names = [flat["names"][i] for i in uniq.tolist()]
        mat = np.repeat(flat["fills"][key][k][None, :], len(names), axis=0) if len(names) else np.zeros((0, W))
        mat[inv.reshape(-1), tw[sel]] = tv[sel]
    tables[(k, key)] = (names, mat)
    return tables[(k, key)]


def _others_median(job: Job, k: int, mat: np.ndarray, wi: int) -> np.ndarray:
    """Per name: the median over the other workers that recorded step `k` and measured it (NaN: none did): the
    straggler is compared with the others, not with a median it moves itself (with two workers, the other one)."""
    has = np.flatnonzero(job.b_idx[k] >= 0)
    others = has[has != wi]
    if not len(others) or not len(mat):
        return np.full(len(mat), np.nan)
    sub = mat[:, others]
    out = np.full(len(mat), np.nan)
    known = ~np.isnan(sub)
    any_known = known.any(axis=1)
    if any_known.any():
        out[any_known] = np.nanmedian(sub[any_known], axis=1)
    return out


def _phase_rows(job: Job, k: int, wi: int) -> list[dict]:
    names, mat = _step_table(job, k, "phases")
    med = _others_median(job, k, mat, wi)
    rows: list[dict[str, Any]] = []
    for j, p in enumerate(names):
        mine = mat[j, wi]
        if np.isnan(mine) or np.isnan(med[j]) or mine - med[j] <= 0:
            continue
        rows.append(
            {
                "phase": p,
                "label": PHASE_LABELS[p],
                "ms": _ms(mine),
                "median_ms": _ms(med[j]),
                "excess_ms": _ms(mine - med[j]),
            }
        )
    rows.sort(key=lambda r: -r["excess_ms"])
    return rows


def _top_rows(job: Job, k: int, wi: int, key: str) -> list[dict]:
    names, mat = _step_table(job, k, key)
    if not names:
        return []
    med = _others_median(job, k, mat, wi)
    ex = mat[:, wi] - med
    rows = [
        {"name": names[j], "ms": _ms(mat[j, wi]), "median_ms": _ms(med[j]), "excess_ms": _ms(ex[j])}
        for j in np.flatnonzero(ex > 0).tolist()
    ]
    rows.sort(key=lambda r: (-r["excess_ms"], r["name"]))
    return rows[:TOP]


def _why(phases: list[dict], kernels: list[dict], ops: list[dict], link: str | None = None) -> str | None:
    if not phases and not kernels and not ops:
        return None
    spec = [p for p in phases if p["phase"] in SPECIFIC]
    top = phases[0] if phases else None
    if spec and top is not None and spec[0]["excess_ms"] >= 0.5 * top["excess_ms"]:
        top = spec[0]
    if top is not None and top["phase"] == "link" and link:
        return f"{top['label']} +{fmt_ms(top['excess_ms'])}: {link}"
    parts = [f"{top['label']} +{fmt_ms(top['excess_ms'])}"] if top else []
    on_gpu = top is None or top["phase"] == "compute"
    first, second = (kernels, ops) if on_gpu else (ops, kernels)
    detail = first or second
    if detail:
        kind = "kernel" if detail is kernels else "op"
        parts.append(f"{kind} {detail[0]['name']} +{fmt_ms(detail[0]['excess_ms'])}")
    return "; ".join(parts)


def _link_row(job: Job, link: dict) -> dict:
    """The phase row of a slow link: the transfer time of the suspect's grown collectives against their peers'."""
    tr = float(job.inst["transfer"].to_numpy(np.float64)[list(link["cut"])].sum())
    return {
        "phase": "link",
        "label": PHASE_LABELS["link"],
        "ms": _ms(tr),
        "median_ms": _ms(tr - link["excess_ns"]),
        "excess_ms": _ms(link["excess_ns"]),
    }


def _held_others(job: Job, k: int, wi: int, excess: float) -> float:
    """What the other workers stop waiting for when `wi` drops its excess, as far as one step shows it: the median
    over them of what they lost at the step's collectives `wi` arrived last at (their next work waited: the idle
    tail, the path's `idle_ms`), at most the excess. A replay of one step misses the work a straggler does after
    its last collective of a step, which holds the others at the next step's first one (a rank that enters every
    step late); their waiting says it."""
    rows = np.flatnonzero((job.c_step == k) & (job.c_inst >= 0) & (job.c_w != wi))
    rows = rows[job.i_late[job.c_inst[rows]] == wi]
    if not len(rows):
        return 0.0
    # what a waiting member lost: its idle tail (its next work waited for the call), on a worker without GPU
    # activity its wait (the call blocks its thread)
    lost = np.where(job.on_gpu()[job.c_w[rows]], np.minimum(job.c_tail[rows], job.c_wait[rows]), job.c_wait[rows])
    per = np.bincount(job.c_w[rows], weights=lost.astype(np.float64), minlength=len(job.workers))
    others = np.flatnonzero(job.b_idx[k] >= 0)
    others = others[others != wi]
    return float(min(np.median(per[others]), excess)) if len(others) else 0.0


def explain(job: Job, step: str, worker: str, busy_ns: Mapping[int, float] | None = None) -> dict | None:
    """The excess of `worker` in `step` over the median worker, split, with the what-if (module doc); None
    when the worker did not record the step or fewer than two workers did."""
    wi = job.workers.index(worker)
    b = dict(busy_ns) if busy_ns is not None else busy(job, step)
    k = job.code(step)
    if k is None or wi not in b or len(b) < 2:
        return None
    med = float(np.median([v for w, v in b.items() if w != wi]))  # the others: with two workers, the other one
    excess = max(b[wi] - med, 0.0)
    has = job.b_idx[k] >= 0
    step_ns = float(np.median((job.b_end[k] - job.b_start[k])[has]))
    rows = np.flatnonzero((job.c_step == k) & (job.c_w == wi) & (job.c_inst >= 0))
    insts = job.c_inst[rows]
    late = insts[job.i_late[insts] == wi]
    link = slow_links.suspect(job, k)
    link = link if link is not None and link["worker"] == wi else None
    # a slow link's longer transfers are in the worker's busy time: the replay takes them off the collectives
    own = max(excess - link["excess_ns"], 0.0) if link else excess
    shifts = what_if.replay(job, k, {wi: own}, link["cut"] if link else None)
    what_if_ns = min(what_if.step_time(job, k, shifts), step_ns)
    saved = max(step_ns - what_if_ns, _held_others(job, k, wi, own), 0.0)
    what_if_ns = step_ns - saved
    phases = _phase_rows(job, k, wi)
    link_text = None
    if link:
        phases = sorted([*phases, _link_row(job, link)], key=lambda r: -r["excess_ms"])
        who = label(worker, job.ranks[worker])
        link_text = f"transfers grew in groups {', '.join(link['groups'])}; {who} is the only member of all of them"
    kernels = _top_rows(job, k, wi, "top_kernels")
    ops = _top_rows(job, k, wi, "top_ops")
    median_w = min((w for w in b if w != wi), key=lambda w: (abs(b[w] - med), w))
    return {
        "worker": worker,
        "rank": job.ranks[worker],
        "step": step,
        "busy_ms": _ms(b[wi]),
        "median_ms": _ms(med),
        "excess_ms": _ms(excess),
        "step_ms": _ms(step_ns),
        "what_if_ms": _ms(step_ns - saved),
        "saved_ms": _ms(saved),
        "late_at": int(len(late)),
        "phases": phases,
        "kernels": kernels,
        "ops": ops,
        "why": _why(phases, kernels, ops, link_text),
        "median_worker": job.workers[median_w],
        "diff": {"worker": job.workers[median_w], "exp_worker": worker, "step": step},
    }


def pick(job: Job, step: str, segments: list[dict], busy_ns: Mapping[int, float]) -> str | None:
    """The straggler of a step's critical path: of the workers that arrived late (someone waited) at a collective
    on the path (without one, the path's workers), and the suspect of a slow link in the step
    (`slow_links.suspect`), the one with the largest busy time."""
    if len(busy_ns) < 2:
        return None
    late = {s["late_worker"] for s in segments if s["kind"] == "collective" and s["waiters"]}
    pool = late or {s["worker"] for s in segments if s["kind"] == "work"}
    k = job.code(step)
    link = slow_links.suspect(job, k) if k is not None else None
    if link is not None:
        pool = pool | {job.workers[link["worker"]]}
    pool = {w for w in pool if job.workers.index(w) in busy_ns}
    if not pool:
        return None
    return max(sorted(pool), key=lambda x: busy_ns[job.workers.index(x)])


def path_straggler(job: Job, step: str, segments: list[dict]) -> dict | None:
    """`explain` of the step's path straggler (`pick`), or None."""
    b = busy(job, step)
    w = pick(job, step, segments, b)
    return explain(job, step, w, b) if w is not None else None


def describe(s: Mapping) -> str:
    """A straggler in one line of words."""
    who = label(s["worker"], s["rank"])
    why = f": {s['why']}" if s.get("why") else ""
    return (
        f"{who} step {s['step']}: {fmt_ms(s['excess_ms'])} over the median worker{why}; "
        f"at the median the step would take {fmt_ms(s['what_if_ms'])} instead of {fmt_ms(s['step_ms'])}"
    )


def annotate_rows(rows: list[dict], summaries: Mapping[str, Summary]) -> list[dict]:
    """The Distributed view's straggler rows with `why`, `what_if_ms` and `diff` (the Diff view's pair: the row's
    worker against the median worker at that step); None where the summaries lack the facts."""
    if not rows:
        return rows
    job = None
    if any(s.phases is not None for s in summaries.values()):
        from tb_plugin.run_level.critical_path import match

        job = match(summaries)
    cache: dict[str, dict] = {}
    for r in rows:
        e = None
        if job is not None and r.get("worker") in job.workers:
            b = cache.setdefault(str(r["step"]), busy(job, str(r["step"])))
            e = explain(job, str(r["step"]), r["worker"], b)
        r["why"] = e["why"] if e else None
        r["what_if_ms"] = e["what_if_ms"] if e else None
        r["diff"] = e["diff"] if e else None
    return rows
