"""Distributed view: computation/communication overlap, wait vs transfer time and collective
statistics across the workers of one run and span (torch-tb-profiler's definitions).

distributed(traces: {worker: TraceData}) ->
  {"workers": {w: {"computation_us", "overlap_us", "communication_us", "other_us",
                   "transfer_us", "wait_us"}},            # mean per step
   "steps":   {step: {w: {same keys}}},                    # per step (steps in time order)
   "comm_ops": {w: [{"name", "calls", "total_bytes", "avg_bytes", "total_latency_us",
                     "avg_latency_us", "transfer_us", "avg_transfer_us", "bandwidth_gbps", "busbw_gbps",
                     "latency_bound"}]},
   "devices": {w: {"rank", "world_size", "backend", "gpus": {"GPU0": {"name", "memory_bytes",
                   "compute_capability"}}}},
   "groups": {process group: {w: {"calls", "transfer_us", "wait_us"}}},   # per process group (its
                   # `group_waits.group_key`; calls without a group: "name <collective>"), its members only
   "stragglers": [{"worker", "step", "busy_us", "median_us", "excess_us", "collective",
                   "others_wait_us"}],                     # largest excess first, at most 20 (the plugin adds
                   # "why", "what_if_ms", "diff": {"worker", "exp_worker", "step"}: run_level.stragglers)
   "notes": [text...]}
It is computed in two halves: `worker_summary(t)` per worker (`analysis.worker.distributed`: JSON, kept in
the per-worker summaries, with the definitions of the four time parts), then `from_summaries({worker:
summary})` across workers, so the view of a 256-worker run never needs a whole trace. Bandwidth is the
algorithm bandwidth, bytes / transfer time (GB/s); `busbw_gbps` is NCCL-tests' bus bandwidth (`analysis.comm.
bandwidth`: the factor of the collective's kind and group size), `latency_bound` whether the average call is far
slower than its bytes need (that module's rule). A straggler is a
(worker, step) whose busy time (step time minus its own wait) exceeds the step's median over the
workers; its collective is the one of that step whose other workers waited longest.
Wait vs transfer, per process group (`group_waits`): the k-th non-wait call of a process group on each
of its members is one collective (calls without a group: the k-th call of a name on every worker); when
every expected member has it under one name, its transfer time is the shortest duration any member saw
(the last to arrive waits for nobody), and each member's wait time is its own duration minus that, so
tensor-, pipeline- and expert-parallel subgroups get the split too. This needs no clock alignment.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from profiler_core.analysis.comm import bandwidth, group_waits
from profiler_core.analysis.worker.distributed import worker_summary
from tb_plugin.errors import BadRequest
from tb_plugin.summaries.schema import Distributed, DistributedSteps, convert

_PARTS = ("computation_us", "overlap_us", "communication_us", "other_us", "transfer_us", "wait_us")


def _r(ns: float) -> float:
    return round(float(ns) / 1e3, 3)


def _cumcount(keys: np.ndarray) -> np.ndarray:
    """For each element, how many earlier elements have the same key (pandas' cumcount)."""
    n = len(keys)
    if not n:
        return np.zeros(0, np.int64)
    o = np.argsort(keys, kind="stable")
    sk = keys[o]
    first = np.ones(n, dtype=bool)
    first[1:] = sk[1:] != sk[:-1]
    pos = np.arange(n)
    rank = pos - np.maximum.accumulate(np.where(first, pos, 0))
    out = np.empty(n, np.int64)
    out[o] = rank
    return out


class _Collectives:
    """Every worker's collectives as flat arrays, matched across workers per process group (`group_waits`): the
    k-th non-wait call of a group on each member is one collective (calls without a group: the k-th call of a
    name on every worker); when every expected member has it under one name, its transfer is the shortest
    duration any member saw, each member's wait its own duration minus that (no clock alignment needed)."""

    def __init__(self, parts: Mapping[str, Distributed], workers: list[str]) -> None:
        self.workers = workers
        names: dict[tuple[str, str], int] = {}  # (name, process group) -> global code
        gsize: dict[tuple[str, str], int] = {}
        granks: dict[tuple[str, str], tuple[int, ...] | None] = {}
        w_, c_, s_, d_, b_, x_ = [], [], [], [], [], []
        for wi, w in enumerate(workers):
            c = parts[w].collectives
            codes = np.asarray(c.name, np.int64)
            if not len(codes):
                continue
            local = [str(n) for n in c.names]
            pgs = [str(g) for g in (c.pg or [""] * len(local))]
            sizes = [int(g) for g in (c.group_size or [-1] * len(local))]
            ranks = c.pg_ranks or [None] * len(local)
            for key, g, r in zip(zip(local, pgs), sizes, ranks):
                gsize[key] = max(gsize.get(key, -1), g)
                if r is not None:
                    granks[key] = tuple(int(x) for x in r)
            glob = np.array([names.setdefault(key, len(names)) for key in zip(local, pgs)], np.int64)
            c_.append(glob[codes])
            w_.append(np.full(len(codes), wi, np.int64))
            s_.append(np.asarray(c.step, np.int64))
            d_.append(np.asarray(c.dur, np.int64))
            b_.append(np.asarray(c.bytes, np.int64))
            x_.append(np.asarray(c.wait or np.zeros(len(codes)), np.int64))

        def cat(xs):
            return np.concatenate(xs) if xs else np.zeros(0, np.int64)

        self.names = [n for n, _ in names]
        self.pgs = [g for _, g in names]
        self.group_sizes = [gsize[key] for key in names]
        self.worker, self.name, self.step, self.dur, self.bytes = cat(w_), cat(c_), cat(s_), cat(d_), cat(b_)
        is_wait = cat(x_).astype(bool)
        present = {w: _rank_of(parts[w]) for w in workers}
        # what calls are matched within: a process group (its key), else the name; `wait` calls on their own
        match: dict[str, int] = {}
        self.members = []  # per match key: the workers expected to have each of its calls
        code_key = []
        for key in names:
            ranks = granks.get(key)
            mk = group_waits.group_key(key[1], ranks, gsize[key]) if key[1] else f"name {key[0]}"
            code_key.append(match.setdefault(mk, len(match)))
            if len(self.members) < len(match):
                self.members.append(
                    group_waits.expected_members(ranks, gsize[key], present) if key[1] else len(workers)
                )
        self.match_members = np.asarray(self.members, np.int64)
        self.match_keys = list(match)
        #: per call: the process group (match key index) it belongs to, `wait` calls included
        self.match_of = np.asarray(code_key, np.int64)[self.name] if len(self.name) else np.zeros(0, np.int64)
        mkey = np.asarray(code_key, np.int64)[self.name] if len(self.name) else np.zeros(0, np.int64)
        M = max(len(match), 1)
        mkey = np.where(is_wait, M + self.name, mkey)  # a wait call matches nothing
        self.k = _cumcount(self.worker * (M + len(self.names) + 1) + mkey)  # per worker, in time order
        #: per call: which call of its name on its group it is on its worker, from 1 (`mpi::Allreduce #4`, as the
        #: trace's occurrences of the name count; `k` also counts the group's calls of other names)
        self.call = _cumcount(self.worker * (len(self.names) + 1) + self.name) + 1
        kmax = int(self.k.max()) + 1 if len(self.k) else 1
        # one group per (key, k) that occurs: never G * kmax (a planted summary's 50k names and
        # 50k calls of one of them would ask for 2.5e9)
        uniq, inverse = np.unique(mkey * kmax + self.k, return_inverse=True)
        self.group = inverse.reshape(-1).astype(np.int64)
        ngroups = len(uniq)
        n_in = np.bincount(self.group, minlength=ngroups)
        shortest = np.full(ngroups, np.iinfo(np.int64).max)
        np.minimum.at(shortest, self.group, self.dur)
        lo = np.full(ngroups, np.iinfo(np.int64).max)
        hi = np.full(ngroups, np.iinfo(np.int64).min)
        np.minimum.at(lo, self.group, self.name)
        np.maximum.at(hi, self.group, self.name)
        expected = np.where(mkey < M, self.match_members[np.minimum(mkey, M - 1)], len(workers)) if len(mkey) else mkey
        self.expected = expected
        self.aligned = (n_in[self.group] == expected) & (lo[self.group] == hi[self.group]) & ~is_wait
        self.transfer = np.where(self.aligned, shortest[self.group], self.dur)
        self.transfer = np.where(is_wait, 0, self.transfer)  # a `wait` collective only waits
        self.wait = self.dur - self.transfer
        self.group_wait = np.bincount(self.group, weights=self.wait.astype(np.float64), minlength=ngroups)
        self._granks = [granks.get(key) for key in names]
        self._present = present

    def __len__(self) -> int:
        return len(self.dur)

    def count_notes(self) -> list[str]:
        """A note for every collective name called a different number of times per worker."""
        W, G = len(self.workers), len(self.names)
        if W < 2 or not G:
            return []
        counts = np.bincount(self.worker * G + self.name, minlength=W * G).reshape(W, G)
        notes = []
        for g in range(G):
            who = list(range(W))
            r = self._granks[g]
            if r is not None and all(v is not None for v in self._present.values()):  # the group's members only
                who = [i for i, w in enumerate(self.workers) if self._present[w] in r]
                if not who:
                    continue
            col = counts[who, g]
            if col.min() != col.max():
                if W <= 16:
                    desc = ", ".join(f"{self.workers[i]}: {int(n)}" for i, n in zip(who, col))
                else:
                    desc = f"from {int(col.min())} to {int(col.max())} calls"
                notes.append(
                    f"{self.names[g]} was called a different number of times per worker ({desc}); "
                    f"calls without a partner on every worker count as transfer only"
                )
        return notes

    def per_step(self, nsteps: int) -> tuple[np.ndarray, np.ndarray]:
        """[workers x steps] transfer and wait sums (ns) of the collectives inside each step."""
        W = len(self.workers)
        n = max(nsteps, 1)
        m = (self.step >= 0) & (self.step < n)
        key = self.worker[m] * n + self.step[m]
        tr = np.bincount(key, weights=self.transfer[m].astype(np.float64), minlength=W * n).reshape(W, n)
        wt = np.bincount(key, weights=self.wait[m].astype(np.float64), minlength=W * n).reshape(W, n)
        return tr, wt


def _rank_of(part: Distributed) -> int | None:
    r = (part.info or {}).get("rank")
    return int(r) if isinstance(r, int) and not isinstance(r, bool) else None


def _bus(name: str, group_size: int, nbytes: float, ns: float, calls: int) -> dict:
    """A collective's bus bandwidth (`bandwidth.bandwidth`: NCCL-tests' factor of its kind and group size; None
    where either is unknown) and whether its average call is far slower than its bytes need
    (`bandwidth.latency_bound`)."""
    if nbytes < 0 or ns <= 0 or calls <= 0:
        return {"busbw_gbps": None, "latency_bound": None}
    _, bus = bandwidth.bandwidth(nbytes, ns / 1e9, name, group_size)
    slow = bandwidth.latency_bound(nbytes / calls, ns / calls / 1e9)
    return {
        "busbw_gbps": round(float(bus) / 1e9, 3) if np.isfinite(bus) else None,
        "latency_bound": bool(slow),
    }


def _comm_rows(c: _Collectives) -> dict:
    """Per worker: one row per collective name (calls, bytes, latency, transfer, bandwidth)."""
    W, G = len(c.workers), max(len(c.names), 1)
    key = c.worker * G + c.name
    size = W * G
    calls = np.bincount(key, minlength=size)
    lat = np.bincount(key, weights=c.dur.astype(np.float64), minlength=size)
    tr = np.bincount(key, weights=c.transfer.astype(np.float64), minlength=size)
    known = c.bytes >= 0
    nbytes = np.bincount(key[known], weights=c.bytes[known].astype(np.float64), minlength=size)
    has_bytes = np.bincount(key[known], minlength=size) > 0
    out: dict = {w: [] for w in c.workers}
    for i in np.flatnonzero(calls).tolist():
        w, g = divmod(i, G)
        n = int(calls[i])
        b = int(nbytes[i]) if has_bytes[i] else -1
        t = float(tr[i])
        row = {
            "name": c.names[g],
            "calls": n,
            "total_bytes": b if b >= 0 else None,
            "avg_bytes": (b / n) if b >= 0 else None,
            "total_latency_us": _r(lat[i]),
            "avg_latency_us": _r(lat[i] / n),
            "transfer_us": _r(t),
            "avg_transfer_us": _r(t / n),
            # algorithm bandwidth, bytes per transfer time: bytes/ns is GB/s
            "bandwidth_gbps": round(b / t, 3) if b >= 0 and t > 0 else None,
            **_bus(c.names[g], c.group_sizes[g], b, t, n),
        }
        if c.pgs[g] or c.group_sizes[g] > 0:  # record_param_comms collectives: their group
            row["group_size"] = c.group_sizes[g] if c.group_sizes[g] > 0 else None
            row["process_group"] = c.pgs[g] or None
        out[c.workers[w]].append(row)
    for rows in out.values():
        rows.sort(key=lambda x: (-x["total_latency_us"], x["name"]))
    return out


#: a straggler row's excess is at least this many µs and this share of its step's median busy time: below either,
#: the difference is the noise of any two ranks (a 3 µs row named nothing), not a straggler
STRAGGLER_MIN_US = 50.0
STRAGGLER_MIN_SHARE = 0.01


def _stragglers(parts: Mapping[str, Distributed], c: _Collectives, wait: np.ndarray, limit: int = 20) -> list[dict]:
    """(worker, step) pairs whose busy time (step time minus own wait) exceeds the step's median over
    the workers by at least STRAGGLER_MIN_US and STRAGGLER_MIN_SHARE of it, largest excess first, each with the
    collective whose other workers waited longest for it."""
    workers = c.workers
    if len(workers) < 2:
        return []
    wi, si, names, length = [], [], [], []
    for i, w in enumerate(workers):
        s = parts[w].steps
        n = len(s.step)
        wi.extend([i] * n)
        si.extend(range(n))
        names.extend(str(x) for x in s.step)
        length.extend(e - a for a, e in zip(s.start, s.end))
    if not wi:
        return []
    f = pd.DataFrame({"w": wi, "si": si, "step": names, "length": np.asarray(length, np.float64)})
    f["wait"] = wait[f["w"].to_numpy(), f["si"].to_numpy()] if wait.size else 0.0
    f["busy"] = f["length"] - f["wait"]
    g = f.groupby("step", sort=False)["busy"]
    f["median"] = g.transform("median")
    f["n"] = g.transform("size")
    least = np.maximum(STRAGGLER_MIN_US * 1e3, STRAGGLER_MIN_SHARE * f["median"])  # ns
    f = f[(f["n"] >= 2) & (f["busy"] - f["median"] >= least)]
    f = f.assign(excess=f["busy"] - f["median"], worker=[workers[i] for i in f["w"]])
    f = f.sort_values(["excess", "worker"], ascending=[False, True]).head(limit)
    out = []
    for r in f.itertuples():
        name, waited = None, 0.0
        mine = np.flatnonzero((c.worker == r.w) & (c.step == r.si) & c.aligned) if len(c) else []
        if len(mine):
            others = c.group_wait[c.group[mine]] - c.wait[mine]
            best = mine[int(np.argmax(others))]
            name, waited = f"{c.names[c.name[best]]} #{int(c.call[best])}", float(others.max())
        out.append(
            {
                "worker": r.worker,
                "step": r.step,
                "busy_us": _r(r.busy),
                "median_us": _r(r.median),
                "excess_us": _r(r.excess),
                "collective": name,
                "others_wait_us": _r(waited),
            }
        )
    return out


def _group_rows(c: _Collectives) -> dict:
    """Per process group (calls without one: per name): per member worker its calls, transfer and wait (µs)."""
    W, K = len(c.workers), max(len(c.match_keys), 1)
    if not len(c):
        return {}
    key = c.match_of * W + c.worker
    calls = np.bincount(key, minlength=K * W).reshape(K, W)
    tr = np.bincount(key, weights=c.transfer.astype(np.float64), minlength=K * W).reshape(K, W)
    wt = np.bincount(key, weights=c.wait.astype(np.float64), minlength=K * W).reshape(K, W)
    out: dict = {}
    for k, name in enumerate(c.match_keys):
        members = np.flatnonzero(calls[k])
        out[name] = {
            c.workers[w]: {"calls": int(calls[k, w]), "transfer_us": _r(tr[k, w]), "wait_us": _r(wt[k, w])}
            for w in members.tolist()
        }
    return out


def _parts_of(ps: DistributedSteps, i: int, tr: float, wt: float) -> list:
    a, b = ps.start[i], ps.end[i]
    comp, comm, ovl = ps.comp[i], ps.comm[i], ps.overlap[i]
    return [comp - ovl, ovl, comm - ovl, (b - a) + ovl - comp - comm, tr, wt]


def from_summaries(parts: Mapping[str, Distributed]) -> dict:
    """The distributed view over the workers of one run and span (worker name -> its summary's `distributed`)."""
    if not isinstance(parts, dict) or not parts:
        raise BadRequest("distributed view needs at least one worker trace")
    notes: list[str] = []
    workers = sorted(parts)
    if len(workers) == 1:
        notes.append(f"only one worker ({workers[0]}): no wait time can be measured")
    for w in workers:
        if not parts[w].collectives.name:
            notes.append(f"worker {w} has no communication ops")
    c = _Collectives(parts, workers)
    notes.extend(c.count_notes())

    step_names = {w: [str(s) for s in parts[w].steps.step] for w in workers}
    distinct = {tuple(s) for s in step_names.values()}
    if len(distinct) > 1:
        if len(workers) <= 16:
            desc = "; ".join(f"{w}: {', '.join(step_names[w]) or 'none'}" for w in workers)
        else:
            desc = f"{len(distinct)} different step lists"
        notes.append(f"workers recorded different steps ({desc}); each is shown with its own steps")
    order: list[str] = []
    seen: set = set()
    for lst in distinct if len(distinct) == 1 else (step_names[w] for w in workers):
        for s in lst:
            if s not in seen:
                seen.add(s)
                order.append(s)
    nsteps = max((len(v) for v in step_names.values()), default=0)
    tr, wt = c.per_step(nsteps)
    steps_out: dict = {s: {} for s in order}
    workers_out: dict = {}
    for wi, w in enumerate(workers):
        ps = parts[w].steps
        sums = np.zeros(len(_PARTS))
        for i, name in enumerate(step_names[w]):
            vals = _parts_of(ps, i, tr[wi, i], wt[wi, i])
            sums += vals
            steps_out[name][w] = {k: _r(v) for k, v in zip(_PARTS, vals)}
        n = max(len(step_names[w]), 1)
        workers_out[w] = {k: _r(v / n) for k, v in zip(_PARTS, sums)}
    devices = {
        w: {
            "rank": (parts[w].info or {}).get("rank"),
            "world_size": (parts[w].info or {}).get("world_size"),
            "backend": (parts[w].info or {}).get("backend"),
            "gpus": parts[w].gpus or {},
        }
        for w in workers
    }
    return {
        "workers": workers_out,
        "steps": steps_out,
        "comm_ops": _comm_rows(c),
        "groups": _group_rows(c),
        "devices": devices,
        "stragglers": _stragglers(parts, c, wt),
        "notes": notes,
    }


def step_detail(parts: Mapping[str, Distributed], worker: str, step: str) -> dict:
    """One worker's step: its time parts and each collective it ran there with wait and transfer."""
    workers = sorted(parts)
    if worker not in parts:
        raise BadRequest(f"unknown worker {worker!r}")
    ps = parts[worker].steps
    names = [str(s) for s in ps.step]
    if step not in names:
        raise BadRequest(f"worker {worker!r} has no step {step!r}")
    i = names.index(step)
    c = _Collectives(parts, workers)
    mine = np.flatnonzero((c.worker == workers.index(worker)) & (c.step == i)) if len(c) else np.zeros(0, np.int64)
    rows = []
    for j in mine.tolist():
        b, t = int(c.bytes[j]), int(c.transfer[j])
        rows.append(
            {
                "name": c.names[c.name[j]],
                "call": int(c.call[j]),
                "duration_us": _r(c.dur[j]),
                "transfer_us": _r(t),
                "wait_us": _r(c.wait[j]),
                "bytes": b if b >= 0 else None,
                "bandwidth_gbps": round(b / t, 3) if b >= 0 and t > 0 else None,
                **_bus(c.names[c.name[j]], c.group_sizes[c.name[j]], b, t, 1),
            }
        )
    vals = _parts_of(ps, i, float(c.transfer[mine].sum()), float(c.wait[mine].sum()))
    origin = int(parts[worker].origin or 0)
    return {
        "worker": worker,
        "step": step,
        "start_us": _r(ps.start[i] - origin),
        "end_us": _r(ps.end[i] - origin),
        "parts": {k: _r(v) for k, v in zip(_PARTS, vals)},
        "collectives": rows,
    }


def distributed(traces: dict) -> dict:
    """The distributed view over the workers of one run and span (worker name -> TraceData)."""
    if not isinstance(traces, dict) or not traces:
        raise BadRequest("distributed view needs at least one worker trace")
    return from_summaries({w: convert(worker_summary(traces[w]), Distributed) for w in traces})
