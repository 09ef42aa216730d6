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
    p = _plan(job, k)
    if p is None or not (alone or s.any() or any(v > 0 for v in cut.values())):
        return s  # nothing moves
    cuts = np.zeros(len(p.uniq))
    for i, v in cut.items():  # the few cut collectives (a slow link's), placed among the step's
        j = int(np.searchsorted(p.uniq, int(i)))
        if int(i) < len(job.inst) and j < len(p.uniq) and p.uniq[j] == int(i):
            cuts[j] = float(v)
    cut_o = cuts[p.coll]
    prev_gain = np.zeros(W)  # per worker: how much earlier its previous call ended in the replay
    # The loop that is left is the dependency chain itself: a collective's gain needs its members' shifts, which
    # the previous collective of each member set. Each pass is one round (`_plan`): collectives of disjoint
    # members whose every member's previous call is in an earlier round, done at once. Its length is the number
    # of rounds, not of calls: one per collective of the world group, far fewer where subgroups run side by side.
    for t in range(len(p.round_at) - 1):
        a, b = int(p.round_at[t]), int(p.round_at[t + 1])
        mw = p.ws[a:b]
        sm = s[mw]
        arrive = p.ready[a:b] - sm
        q = p.queued[a:b]
        arrive = np.where(q, np.maximum(arrive, p.prev_end[a:b] - prev_gain[mw]), arrive)
        slack = p.t0[a:b] - arrive
        if alone:
            gain = slack + cut_o[a:b]
        elif b - a == p.round_single[t]:  # one collective in the round
            gain = np.full(b - a, slack.min()) + cut_o[a:b]
        else:
            seg = p.seg_at[t]
            gain = np.repeat(np.minimum.reduceat(slack, seg), np.diff(np.append(seg, b - a))) + cut_o[a:b]
        s[mw] = np.where(p.held[a:b], np.minimum(gain, p.idle[a:b] + sm), sm)
        prev_gain[mw] = gain
    return s


class _Plan:
    """What every replay of one step shares (cached on the job per step): the step's calls in replay order
    (rounds, then collectives, then members) with what does not depend on the shifts: per call its worker `ws`,
    collective `coll` (an index into `uniq`, the instances, a call matched on no other worker one of its own),
    `ready`, `t0` (its transfer's actual start: end - transfer), `prev_end` (the worker's previous call's end in
    the trace, -inf for its first), `queued` (started after that one ended), `idle`, `held` (idle > eps);
    `round_at` (where each round starts), per round `round_single` (its size when it is one collective, else 0)
    and `seg_at` (its collectives' starts within it)."""

    def __init__(self, job: Job, k: int, rows: np.ndarray) -> None:
        W = len(job.workers)
        rows = rows[np.lexsort((job.c_start[rows], job.c_w[rows]))]
        ws = job.c_w[rows]
        inst = job.c_inst[rows]
        # a call matched on no other worker is an instance of its own (after the matched ones)
        key = np.where(inst >= 0, inst, len(job.inst) + np.arange(len(rows)))
        uniq, inv = np.unique(key, return_inverse=True)
        inv = inv.reshape(-1)
        self.uniq = uniq
        start = job.c_start[rows].astype(np.float64)
        end = job.c_end[rows].astype(np.float64)
        transfer = end - start - job.c_wait[rows]
        # on a worker without GPU activity a call blocks its thread: whatever ops enclose it, nothing runs meanwhile
        idle = np.where(job.on_gpu()[ws], job.c_tail[rows].astype(np.float64), end - start)
        same = np.zeros(len(rows), dtype=bool)
        same[1:] = ws[1:] == ws[:-1]  # rows are by worker, then time: the previous row is the previous call
        prev_end = np.full(len(rows), -np.inf)
        prev_end[1:][same[1:]] = end[:-1][same[1:]]
        level = _levels(ws, inv, len(uniq), W)
        keep = np.flatnonzero(level[inv] >= 0)  # a collective never reached (orders that contradict) is not replayed
        o = keep[np.lexsort((inv[keep], level[inv[keep]]))]
        self.ws, self.coll = ws[o], inv[o]
        self.ready = job.c_ready[rows].astype(np.float64)[o]
        self.t0 = (end - transfer)[o]
        self.prev_end = prev_end[o]
        self.queued = (start >= prev_end - WAIT_EPS_NS)[o]
        self.idle = idle[o]
        self.held = self.idle > WAIT_EPS_NS
        lv = level[self.coll]
        n_rounds = int(lv.max()) + 1 if len(lv) else 0
        self.round_at = np.searchsorted(lv, np.arange(n_rounds + 1))
        first = np.ones(len(o), dtype=bool)
        first[1:] = self.coll[1:] != self.coll[:-1]
        at = np.flatnonzero(first)
        per_round = np.split(at, np.searchsorted(at, self.round_at[1:-1]))
        self.seg_at = [x - self.round_at[t] for t, x in enumerate(per_round)]
        size = np.diff(self.round_at)
        self.round_single = np.where(np.asarray([len(x) for x in per_round]) == 1, size, 0)


def _plan(job: Job, k: int) -> _Plan | None:
    """The step's `_Plan`, None when it has no calls; cached on the job."""
    cache = job.__dict__.setdefault("_replay_plans", {})
    if k not in cache:
        rows = np.flatnonzero(job.c_step == k)
        cache[k] = _Plan(job, k, rows) if len(rows) else None
    return cache[k]


def _levels(ws: np.ndarray, inv: np.ndarray, n: int, W: int) -> np.ndarray:
    """The round of each collective (`inv`: each row's collective, rows sorted by worker then time): 0 for those
    every member calls first, then one more than the latest round of its members' previous calls; -1 for those
    never reached (members' orders that contradict each other). Found round by round, vectorised over the workers:
    a collective is in the round where it is the next call of all its members."""
    level = np.full(n, -1, np.int64)
    off = np.searchsorted(ws, np.arange(W + 1))
    need = np.bincount(inv, minlength=n)
    have = np.zeros(n, np.int64)  # scratch: how many members point at each collective this round
    ptr = off[:-1].copy()
    act = np.flatnonzero(ptr < off[1:])
    t = 0
    while len(act):
        cur = inv[ptr[act]]  # each active worker's next collective
        np.add.at(have, cur, 1)
        full = have[cur] == need[cur]
        have[cur] = 0
        if not full.any():
            break
        level[cur[full]] = t
        adv = act[full]
        ptr[adv] += 1
        act = np.concatenate([act[~full], adv[ptr[adv] < off[adv + 1]]])
        t += 1
    return level


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
