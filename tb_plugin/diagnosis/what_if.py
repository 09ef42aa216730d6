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
    if not len(rows):
        return s
    rows = rows[np.lexsort((job.c_start[rows], job.c_w[rows]))]
    inst = job.c_inst[rows]
    ws = job.c_w[rows]
    off = np.searchsorted(ws, np.arange(W + 1))
    order = np.argsort(inst, kind="stable")
    uniq, first, need = np.unique(inst[order], return_index=True, return_counts=True)
    where = {int(i): order[a : a + n] for i, a, n in zip(uniq.tolist(), first.tolist(), need.tolist())}
    have = dict.fromkeys(where, 0)
    ptr = off[:-1].copy()
    ready: list[int] = []

    def arrive(w: int) -> None:
        if ptr[w] < off[w + 1]:
            i = int(inst[ptr[w]])
            have[i] += 1
            if have[i] == len(where[i]):
                ready.append(i)

    for w in range(W):
        arrive(w)
    waits = job.c_wait.astype(np.float64)
    while ready:
        i = ready.pop()
        pos = where[i]
        mw = ws[pos]
        wt = waits[rows[pos]]
        sh = float((wt + s[mw]).min()) + float(cut.get(i, 0.0))
        waited = wt > WAIT_EPS_NS
        s[mw[waited]] = sh
        s[mw[~waited]] = np.maximum(s[mw[~waited]], sh)
        for w in mw.tolist():
            ptr[w] += 1
            arrive(w)
    return s


def step_time(job: Job, k: int, shifts: np.ndarray) -> float:
    """The median over the workers that recorded step code `k` of (step time - shift), in ns."""
    has = job.b_idx[k] >= 0
    if not has.any():
        return 0.0
    length = (job.b_end[k] - job.b_start[k])[has].astype(np.float64)
    return float(np.median(np.maximum(length - shifts[has], 0.0)))
