"""The vectorised run-level steps against the per-call loops they replaced (kept here as references), on random
inputs: `group_waits.match_codes` (one collective per group and sequence) and `what_if.replay` (the replay by
rounds against the replay collective by collective). Equal outputs, not timings."""

from __future__ import annotations

import types

import numpy as np
import pytest

from profiler_core.analysis.comm import group_waits
from tb_plugin.run_level import what_if
from tb_plugin.run_level.critical_path import WAIT_EPS_NS


def _reference_match(worker, group, name, dur, is_wait, members, group_keys, names):
    """match_codes call by call: sequence numbers by counting, then each (group, seq) gathered in a dict."""
    n = len(dur)
    seq, aligned, transfer = [-1] * n, [False] * n, [int(d) for d in dur]
    counter: dict = {}
    colls: dict = {}
    for i in range(n):
        if is_wait[i]:
            continue
        key = (int(worker[i]), int(group[i]))
        seq[i] = counter.get(key, 0)
        counter[key] = seq[i] + 1
        colls.setdefault((int(group[i]), seq[i]), []).append(i)
    notes = []
    for (g, k), rows in sorted(colls.items()):
        expected = max(int(members[i]) for i in rows)
        differ = {int(name[i]) for i in rows}
        if len(rows) == expected and expected >= 2 and len(differ) == 1:
            t = min(int(dur[i]) for i in rows)
            for i in rows:
                aligned[i], transfer[i] = True, t
        elif expected >= 2:
            why = (
                f"names differ ({', '.join(sorted(str(names[x]) for x in differ))})"
                if len(differ) > 1
                else f"{len(rows)} of {expected} members have it"
            )
            notes.append(f"process group {group_keys[g]}: call #{k + 1} not matched ({why}); counted as transfer only")
    for i in range(n):
        if is_wait[i]:
            transfer[i] = 0
    return seq, aligned, transfer, notes


@pytest.mark.parametrize("seed", range(40))
def test_match_codes_equals_the_loop(seed):
    rng = np.random.default_rng(seed)
    W, G = int(rng.integers(1, 6)), int(rng.integers(1, 4))
    group_keys = [f"g{i}" for i in range(G)]
    names = ["nccl:all_reduce", "nccl:broadcast", "gloo:all_gather"]
    gsize = rng.integers(1, W + 2, G)
    rows = []
    for _ in range(int(rng.integers(0, 60))):
        g = int(rng.integers(G))
        nm = int(rng.integers(2)) if rng.random() < 0.9 else 2
        for w in range(W):
            if rng.random() < 0.9:  # now and then a member misses the call
                rows.append(
                    (w, g, nm if rng.random() < 0.95 else (nm + 1) % 3, int(rng.integers(0, 1000)), rng.random() < 0.1)
                )
    order = rng.permutation(len(rows)) if rng.random() < 0.3 else np.arange(len(rows))
    rows = [rows[i] for i in order]  # sometimes calls of several workers interleave in another order
    cols = list(zip(*rows)) if rows else [[], [], [], [], []]
    worker, group, name, dur = (np.asarray(c, np.int64) for c in cols[:4])
    is_wait = np.asarray(cols[4], bool)
    members = np.minimum(gsize[group], W) if len(group) else np.zeros(0, np.int64)
    got = group_waits.match_codes(worker, group, name, dur, is_wait, members, group_keys, names)
    want = _reference_match(worker, group, name, dur, is_wait, members, group_keys, names)
    assert got[0].tolist() == want[0]
    assert got[1].tolist() == want[1]
    assert got[2].tolist() == want[2]
    assert got[3] == want[3]


def _reference_order(job, k, rows, ws, inv, n):
    """The replay's order before rounds: by mean start when every worker agrees, else call by call."""
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

    def arrive(w):
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


def _reference_replay(job, k, shift, cut=None, alone=False):
    """what_if.replay collective by collective (the loop the rounds replaced)."""
    W = len(job.workers)
    s = np.zeros(W)
    for w, v in shift.items():
        s[w] = max(float(v), 0.0)
    cut = cut or {}
    rows = np.flatnonzero(job.c_step == k)
    if not len(rows) or not (alone or s.any() or any(v > 0 for v in cut.values())):
        return s
    rows = rows[np.lexsort((job.c_start[rows], job.c_w[rows]))]
    ws = job.c_w[rows]
    inst = job.c_inst[rows]
    key = np.where(inst >= 0, inst, len(job.inst) + np.arange(len(rows)))
    uniq, inv = np.unique(key, return_inverse=True)
    inv = inv.reshape(-1)
    order = np.argsort(inv, kind="stable")
    bounds = np.searchsorted(inv[order], np.arange(len(uniq) + 1))
    start = job.c_start[rows].astype(np.float64)
    end = job.c_end[rows].astype(np.float64)
    ready = job.c_ready[rows].astype(np.float64)
    transfer = end - start - job.c_wait[rows]
    idle = np.where(job.on_gpu()[ws], job.c_tail[rows].astype(np.float64), end - start)
    cuts = np.array([float(cut.get(int(u), 0.0)) if u < len(job.inst) else 0.0 for u in uniq.tolist()])
    prev_end = np.full(W, -np.inf)
    prev_gain = np.zeros(W)
    for j in _reference_order(job, k, rows, ws, inv, len(uniq)):
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


def _random_job(rng):
    """A job of 2-6 workers whose collectives (random member sets, some on one worker only: unmatched) run on
    clocks of their own, calls queued or overlapping, sometimes two calls of a worker swapped (orders that
    contradict each other), over two steps."""
    W = int(rng.integers(2, 7))
    clock = rng.integers(0, 10**6, W).astype(np.int64)
    cols: dict = {k: [] for k in ("w", "step", "inst", "start", "end", "wait", "ready", "tail")}
    ni = 0
    for c in range(int(rng.integers(1, 40))):
        m = np.flatnonzero(rng.random(W) < 0.6)
        if not len(m):
            continue
        i = ni if len(m) > 1 else -1
        ni += len(m) > 1
        step = int(c >= 20)
        for w in m.tolist():
            start = int(clock[w] + rng.integers(-2000, 50_000))
            dur = int(rng.integers(0, 40_000))
            cols["w"].append(w)
            cols["step"].append(step)
            cols["inst"].append(i)
            cols["start"].append(start)
            cols["end"].append(start + dur)
            cols["wait"].append(int(rng.integers(0, dur + 1)))
            cols["ready"].append(start - int(rng.integers(0, 20_000)) * int(rng.random() < 0.5))
            cols["tail"].append(int(rng.integers(0, 30_000)) * int(rng.random() < 0.7))
            clock[w] = start + dur
    a = {k: np.asarray(v, np.int64) for k, v in cols.items()}
    if rng.random() < 0.3 and len(a["w"]) > 3:  # swap the times of two calls of one worker
        w = int(a["w"][0])
        mine = np.flatnonzero(a["w"] == w)
        if len(mine) >= 2:
            x, y = mine[0], mine[-1]
            for key in ("start", "end", "ready"):
                a[key][[x, y]] = a[key][[y, x]]
    on_gpu = rng.random(W) < 0.7
    job = types.SimpleNamespace(
        workers=[f"w{i}" for i in range(W)],
        inst=[None] * ni,
        c_w=a["w"],
        c_step=a["step"],
        c_inst=a["inst"],
        c_start=a["start"],
        c_end=a["end"],
        c_wait=a["wait"],
        c_ready=a["ready"],
        c_tail=a["tail"],
        b_start=np.zeros((2, W), np.int64),
    )
    job.on_gpu = lambda: on_gpu
    return job


@pytest.mark.parametrize("seed", range(60))
def test_replay_by_rounds_equals_the_replay_call_by_call(seed):
    rng = np.random.default_rng(seed)
    job = _random_job(rng)
    W = len(job.workers)
    for k in (0, 1):
        assert what_if.replay(job, k, {}, alone=True).tolist() == _reference_replay(job, k, {}, alone=True).tolist()
        for _ in range(3):
            shift = {int(w): float(rng.integers(0, 60_000)) + 0.5 * int(rng.integers(2)) for w in rng.choice(W, 2)}
            insts = np.unique(job.c_inst[(job.c_step == k) & (job.c_inst >= 0)])
            cut = {int(i): float(rng.integers(1, 30_000)) for i in insts[: int(rng.integers(0, 3))]}
            cut[len(job.inst) + 5] = 7.0  # not a collective of the step: ignored by both
            for alone in (False, True):
                got = what_if.replay(job, k, shift, cut, alone=alone)
                want = _reference_replay(job, k, shift, cut, alone=alone)
                assert got.tolist() == want.tolist()
