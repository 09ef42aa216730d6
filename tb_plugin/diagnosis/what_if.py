"""What a step would have taken had one worker run at the median, or some collectives transferred at the speed of
their peers: the step's matched collectives replayed with shifts, from the per-worker summaries only
(`critical_path.Job`), without aligning clocks across hosts.

Each worker carries a shift: how much earlier its timeline runs in the what-if (the straggler starts with its
excess over the median worker, everyone else with 0). The collectives are replayed in an order every member
agrees with (each worker's calls in time order). A collective ends when its last member arrives plus its transfer,
and a member that waited `wait` ns arrived that much before the last one, so with every member's arrival moved
earlier by its shift the collective ends earlier by

    shift = min over its members (wait + shift of the member) + cut (the transfer time taken off it)

After it, a member that waited runs on from the collective's end (its shift becomes the collective's); the member
that arrived last keeps its own shift, or the collective's when that is larger (it ran on from the end too). A
worker's step ends earlier by its shift after its last call in the step; the step's what-if time is the median
over the workers of (its step time - its shift), as the step's time is the median of theirs.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tb_plugin.diagnosis.critical_path import WAIT_EPS_NS, Job


def replay(job: Job, k: int, shift: Mapping[int, float], cut: Mapping[int, float] | None = None) -> np.ndarray:
    """Per worker index: how much earlier (ns) its step `k` (a step code) ends when the workers in `shift` start
    that much earlier and the collectives in `cut` (instance -> ns) transfer that much faster (module doc)."""
    W = len(job.workers)
    s = np.zeros(W)
    for w, v in shift.items():
        s[w] = max(float(v), 0.0)
    cut = cut or {}
    rows = np.flatnonzero((job.c_step == k) & (job.c_inst >= 0))
    if not len(rows) or not (s.any() or any(v > 0 for v in cut.values())):
        return s  # nothing moves
    rows = rows[np.lexsort((job.c_start[rows], job.c_w[rows]))]
    ws = job.c_w[rows]
    uniq, inv = np.unique(job.c_inst[rows], return_inverse=True)
    inv = inv.reshape(-1)
    order = np.argsort(inv, kind="stable")
    bounds = np.searchsorted(inv[order], np.arange(len(uniq) + 1))
    waits = job.c_wait[rows].astype(np.float64)
    for j in _agreed_order(job, k, rows, ws, inv, len(uniq)):
        pos = order[bounds[j] : bounds[j + 1]]
        mw = ws[pos]
        sh = float((waits[pos] + s[mw]).min()) + float(cut.get(int(uniq[j]), 0.0))
        waited = waits[pos] > WAIT_EPS_NS
        s[mw[waited]] = sh
        s[mw[~waited]] = np.maximum(s[mw[~waited]], sh)
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


def own_floor(job: Job, k: int, straggler: int, cut: Mapping[int, float] | None = None) -> float:
    """A lower bound on step `k` had the straggler not been late: the longest any other worker with GPU activity
    needs on its own, in ns (0 when no such worker recorded the step).

    A worker's own need is its step time less its exposed waiting (waiting its own compute did not cover) and less
    the transfers of the calls after it first waited exposed: once idle, it ran those calls at the pace of the
    ones it waited for, where on its own they would have overlapped its compute. The replay alone cannot see this
    bound where a worker's calls queue back to back on its comm stream: each such call then waits for the late
    member's next bucket, and the replay moves the worker's whole timeline by the sum. `cut`: as in `replay`, the
    transfer time taken off collectives (a slow link), which no worker then needs."""
    W = len(job.workers)
    has = job.b_idx[k] >= 0
    has[straggler] = False
    # only workers whose compute runs on a GPU beside their communication: on a CPU-only worker a collective
    # blocks its thread, nothing overlaps it, and the replay is the answer
    has &= np.array([any(x is not None for x in (job.phases[w].get("gpu_idle") or [])) for w in job.workers], bool)
    if not has.any():
        return 0.0
    rows = np.flatnonzero(job.c_step == k)
    rows = rows[np.lexsort((job.c_start[rows], job.c_w[rows]))]
    ws = job.c_w[rows]
    exposed = job.c_exposed[rows].astype(np.float64)
    inst = job.c_inst[rows]
    transfer = np.zeros(len(rows))
    if len(job.inst):
        t = job.inst["transfer"].to_numpy(np.float64)
        transfer[inst >= 0] = t[inst[inst >= 0]]
    idle = exposed > WAIT_EPS_NS
    # per worker: whether an earlier call of its own in the step waited exposed (a running count by worker)
    first = np.r_[True, ws[1:] != ws[:-1]]
    seen = np.cumsum(idle) - idle
    base = np.maximum.accumulate(np.where(first, seen, 0))
    after = (seen - base) > 0
    saved = np.zeros(len(rows))
    for i, v in (cut or {}).items():
        saved[inst == i] = float(v)
    lost = np.bincount(ws, weights=exposed + np.where(after, transfer, saved), minlength=W)
    need = (job.b_end[k] - job.b_start[k]).astype(np.float64) - lost
    return float(need[has].max())
