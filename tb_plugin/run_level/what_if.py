"""What a step would have taken had one worker run at the median, or some collectives transferred at the speed of
their peers, and what each worker needs on its own: the step's collective calls replayed with shifts, from the
per-worker summaries only (`critical_path.Job`), without aligning clocks across hosts.

Each worker carries a shift: how much earlier its own work runs in the replay (the straggler starts with its
excess over the median worker, everyone else with 0). The calls are replayed in an order every member agrees with
(each worker's calls in time order). In the replay a member arrives at a call when it is ready for it (`ready`,
earlier by its shift) or, for a call that in the trace started after its previous call ended (queued behind it on
the comm stream, or blocking the thread), when that one ended in the replay, whichever is later. Its slack is how
long before the actual start of the call's transfer (its end less the transfer) it arrives. A collective ends
when its last member arrives plus its transfer, so it ends earlier by

    gain = min over its members of slack (+ cut: the transfer time taken off it)

With `alone`, each call is the worker's own (as if the others were always there in time): its gain is the
member's slack, so what remains is only the worker's own work and transfers. After a call, a member whose compute
was idle when the call ended (for `tail` ns: its next work waited for the call; on a worker without GPU activity
a call blocks its thread, so all of it) runs on min(gain, tail + shift) earlier; after a call its compute ran on
through, its shift stays. A worker's step ends earlier by its shift after its last call in the step; the step's
what-if time is the median over the workers of (its step time - its shift), as the step's time is the median of
theirs.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tb_plugin.run_level.critical_path import WAIT_EPS_NS, Job


def replay(
    job: Job, k: int, shift: Mapping[int, float], cut: Mapping[int, float] | None = None, alone: bool = False
) -> np.ndarray:
    """Per worker index: how much earlier (ns) its step `k` (a step code) ends when the workers in `shift` start
    that much earlier and the collectives in `cut` (instance -> ns) transfer that much faster; with `alone`,
    each worker on its own, never held by another (module doc)."""
    W = len(job.workers)
    s = np.zeros(W)
    for w, v in shift.items():
        s[w] = max(float(v), 0.0)
    cut = cut or {}
    rows = np.flatnonzero(job.c_step == k)
    if not len(rows) or not (alone or s.any() or any(v > 0 for v in cut.values())):
        return s  # nothing moves
    rows = rows[np.lexsort((job.c_start[rows], job.c_w[rows]))]
    ws = job.c_w[rows]
    inst = job.c_inst[rows]
    # a call matched on no other worker is an instance of its own (after the matched ones)
    key = np.where(inst >= 0, inst, len(job.inst) + np.arange(len(rows)))
    uniq, inv = np.unique(key, return_inverse=True)
    inv = inv.reshape(-1)
    order = np.argsort(inv, kind="stable")
    bounds = np.searchsorted(inv[order], np.arange(len(uniq) + 1))
    start = job.c_start[rows].astype(np.float64)
    end = job.c_end[rows].astype(np.float64)
    ready = job.c_ready[rows].astype(np.float64)
    transfer = end - start - job.c_wait[rows]
    # on a worker without GPU activity a call blocks its thread: whatever ops enclose it, nothing runs meanwhile
    idle = np.where(job.on_gpu()[ws], job.c_tail[rows].astype(np.float64), end - start)
    cuts = np.array([float(cut.get(int(u), 0.0)) if u < len(job.inst) else 0.0 for u in uniq.tolist()])
    prev_end = np.full(W, -np.inf)  # per worker: its previous call's end in the trace, and how much earlier
    prev_gain = np.zeros(W)  # it ended in the replay
    for j in _agreed_order(job, k, rows, ws, inv, len(uniq)):
        pos = order[bounds[j] : bounds[j + 1]]
        mw = ws[pos]
        arrive = ready[pos] - s[mw]
        queued = start[pos] >= prev_end[mw] - WAIT_EPS_NS
        arrive = np.where(queued, np.maximum(arrive, prev_end[mw] - prev_gain[mw]), arrive)
        slack = end[pos] - transfer[pos] - arrive
        gain = (slack if alone else np.full(len(pos), slack.min())) + cuts[j]
        held = idle[pos] > WAIT_EPS_NS
        s[mw] = np.where(held, np.minimum(gain, idle[pos] + s[mw]), s[mw])
        prev_end[mw] = end[pos]
        prev_gain[mw] = gain
    return s


def _agreed_order(job: Job, k: int, rows: np.ndarray, ws: np.ndarray, inv: np.ndarray, n: int) -> list[int]:
    """The step's collectives (`inv`: each row's collective, rows sorted by worker then time) in an order every
    member agrees with: by their mean start in the members' steps when that order holds on every worker (the
    usual case, checked at once), else found call by call (a topological order)."""
    rel = (job.c_start[rows] - job.b_start[k, ws]).astype(np.float64)
    mean = np.bincount(inv, weights=rel, minlength=n) / np.maximum(np.bincount(inv, minlength=n), 1)
    cand = np.argsort(mean, kind="stable")
    rank = np.empty(n, np.int64)
    rank[cand] = np.arange(n)
    r = rank[inv]
    same = ws[1:] == ws[:-1]
    if bool(np.all(r[1:][same] > r[:-1][same])):
        return cand.tolist()
    W = len(job.workers)
    off = np.searchsorted(ws, np.arange(W + 1))
    need = np.bincount(inv, minlength=n)
    have = np.zeros(n, np.int64)
    ptr = off[:-1].copy()
    ready: list[int] = []
    out: list[int] = []

    def arrive(w: int) -> None:
        if ptr[w] < off[w + 1]:
            j = int(inv[ptr[w]])
            have[j] += 1
            if have[j] == need[j]:
                ready.append(j)

    for w in range(W):
        arrive(w)
    members = [np.flatnonzero(inv == j) for j in range(n)]
    while ready:
        j = ready.pop()
        out.append(j)
        for w in ws[members[j]].tolist():
            ptr[w] += 1
            arrive(w)
    return out


def step_time(job: Job, k: int, shifts: np.ndarray) -> float:
    """The median over the workers that recorded step code `k` of (step time - shift), in ns."""
    has = job.b_idx[k] >= 0
    if not has.any():
        return 0.0
    length = (job.b_end[k] - job.b_start[k])[has].astype(np.float64)
    return float(np.median(np.maximum(length - shifts[has], 0.0)))
