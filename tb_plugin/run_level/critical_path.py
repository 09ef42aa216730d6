"""The cross-rank critical path of each step, from the per-worker summaries only (`worker_facts`' keys).

Collectives are matched across workers per process group and sequence number (`group_waits`: the k-th non-wait
call of a group on each member is one collective, whatever else the other groups do), so tensor-, pipeline- and
expert-parallel subgroups link the ranks too. Traces without record_param_comms (gloo, torch before 2.1) give
their backend ranges instead (`collectives.backend_calls`), matched by name and order in the default group; their
point-to-point calls are paired here by time (`_pair_p2p`), as are the send/recv calls of named process groups
(`NAMED_P2P`: a pipeline's stages). A call is matched when every expected member has it
under one name.

Arrival is read from evidence, never from a duration: a member arrives when its call starts (a kernel's start:
when its launch, its stream's earlier work and its inputs let it run; a CPU call's: when the program called it),
on the traces' clocks (ranks of one host share one; traces from several hosts, or a rank whose every collective
ends off by the same amount, are first aligned on the matched collectives' ends, `_end_alignment`). The member
that arrived last is the late one; each member waits from its own arrival until the last arrival, within its call
(a broadcast root that finished before the last member came waited only while its call ran); the collective's
transfer is the exchange's own time once all were there (the last end less the last arrival), so members that
end apart do not turn the exchange into waiting.

The walk, per step: it starts on the worker whose step ends last on the common clock (ties: the longer step,
then the first worker; without clocks, the one whose step ends longest after its last matched collective), and
goes back in time: the worker's work since its previous collective, then that collective, then on to the member
that arrived last there, from the start of its call, until the step's start.

`critical_paths(summaries)` -> {"steps": [{"step", "step_ms", "span_ms", "segments": [...]}], "notes": [...],
"reason"} (`step_ms`: the median of the workers' step times, what the what-if is said against; `span_ms`: from the
first rank into the step to the last out of it, on the common clock, which every segment fits in)
with segments in time order, each
  {"kind": "work", "worker", "rank", "ms", "start_us", "end_us", "before"}       # work on one worker; "before":
                                                    # the collective it follows (the work runs from its end)
  {"kind": "collective", "name", "call", "group", "pg", "members", "late_worker", "late_rank",
   "waiters", "wait_ms_median", "wait_ms_max", "wait_ms_total", "idle_ms", "transfer_ms", "gap_ms",
   "stagger_ms", "start_us", "end_us"}                                           # on the late worker
(µs relative to each worker's origin, as the timeline's; `name` as the trace names the call (`mpi::Allreduce`,
`nccl:all_reduce`), `call` which call of that name on its group it is on the late worker, from 1 (`_name_calls`);
`gap_ms`: what the late member cost the others there,
i.e. the second-latest member's exposed wait: its wait minus what its own compute covered of the call;
`idle_ms`: how long the member ready next to last had its next work wait for the call (its compute idle since;
on a worker without GPU activity, its wait); `stagger_ms`: of the median wait, what the late member's later entry
into the step explains (`entry_stagger`), which balancing the work inside the step does not recover).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from profiler_core.analysis.comm import group_waits
from profiler_core.analysis.comm.collectives import P2P_GROUP, PEER_TIME, PG_SEQ
from profiler_core.analysis.worker.worker_facts import sequence
from tb_plugin.run_level.verdict import fmt_ms
from tb_plugin.summaries.schema import CollectiveCalls, Phases, Summary, empty_phases

#: a worker's collective ends all off by more than this (ns, and 3 times their spread): its clock is off
CLOCK_EVIDENT_NS = 50_000
#: ... over at least this many of its matched collectives
CLOCK_MIN_CALLS = 5
#: a member waited when its wait exceeds this (ns): clock noise below it names nobody
WAIT_EPS_NS = 1_000
NO_FACTS = "no worker's summary holds its collective calls and phases (summaries of an older gpuscope?)"


def worker_rank(summary: Summary) -> int | None:
    """The worker's global rank as its summary records it, or None."""
    r = summary.devices.rank if summary.devices is not None else None
    return int(r) if isinstance(r, int) and not isinstance(r, bool) else None


def label(worker: str, rank: int | None) -> str:
    """How a report names a worker: its rank when known."""
    return f"rank {rank}" if rank is not None else f"worker {worker}"


@dataclass
class Job:
    """Every worker's matched collective calls and step bounds, the input of the walk and the stragglers: per
    call `c_*` (worker, step code, instance or -1, start, end, wait, exposed wait, ready, idle tail), per step code
    and worker `b_start`/`b_end`/`b_idx` (the step's index in the worker's phases, -1: not recorded), per matched
    collective `inst` (its group, name, members, bytes (-1: unknown), transfer, late worker, gap) with `i_*`
    arrays and its members' call rows `members(i)`."""

    workers: list[str]
    ranks: dict[str, int | None]
    phases: dict[str, Phases]
    steps: list[str]
    calls: dict[str, np.ndarray]
    inst: pd.DataFrame
    notes: list[str]
    #: the ways of matching (`collectives.PG_SEQ`...) the calls' `how` codes index
    how_names: list[str] = field(default_factory=list)
    #: per worker: what puts its times on the common clock (its origin on its host's clock, aligned across hosts)
    clock: np.ndarray | None = None

    def __post_init__(self) -> None:
        code = {s: i for i, s in enumerate(self.steps)}
        W, S = len(self.workers), len(self.steps)
        self.b_start = np.zeros((S, W), np.int64)
        self.b_end = np.zeros((S, W), np.int64)
        self.b_idx = np.full((S, W), -1, np.int64)
        for wi, w in enumerate(self.workers):
            ph = self.phases[w]
            for i, (name, a, b) in enumerate(zip(ph.step, ph.start, ph.end)):
                k = code[str(name)]
                if self.b_idx[k, wi] < 0:
                    self.b_idx[k, wi], self.b_start[k, wi], self.b_end[k, wi] = i, a, b
        c = self.calls
        self.c_w, self.c_step, self.c_inst = c["w"], c["step"], c["inst"]
        self.c_start, self.c_end, self.c_wait, self.c_exposed = c["start"], c["end"], c["wait"], c["exposed"]
        self.c_ready, self.c_tail = c["ready"], c["tail"]
        ni = len(self.inst)
        rows = np.flatnonzero(self.c_inst >= 0)
        rows = rows[np.argsort(self.c_inst[rows], kind="stable")]
        self.inst_rows = rows
        self.inst_off = np.searchsorted(self.c_inst[rows], np.arange(ni + 1))
        self.i_late = self.inst["late"].to_numpy(np.int64) if ni else np.zeros(0, np.int64)
        self.i_gap = self.inst["gap"].to_numpy(np.int64) if ni else np.zeros(0, np.int64)

    def on_gpu(self) -> np.ndarray:
        """Per worker: whether its compute runs on a GPU beside its communication (its phases measure GPU idle);
        on a worker without, a call blocks its thread."""
        got = self.__dict__.get("_on_gpu")
        if got is None:
            got = np.array([any(x is not None for x in self.phases[w].gpu_idle) for w in self.workers])
            self.__dict__["_on_gpu"] = got.astype(bool)
        return self.__dict__["_on_gpu"]

    def code(self, step: str) -> int | None:
        """The step's index in `steps`, or None."""
        return self.steps.index(step) if step in self.steps else None

    def step_bounds(self, step: str) -> dict[int, tuple[int, int]]:
        """Worker index -> (start, end) ns of `step` on that worker."""
        k = self.code(step)
        if k is None:
            return {}
        has = np.flatnonzero(self.b_idx[k] >= 0)
        return {int(w): (int(self.b_start[k, w]), int(self.b_end[k, w])) for w in has}

    def members(self, i: int) -> np.ndarray:
        """The call rows of matched collective `i`."""
        return self.inst_rows[self.inst_off[i] : self.inst_off[i + 1]]


def _step_order(phases: Mapping[str, Phases], workers: list[str]) -> list[str]:
    """Step names in the order the workers recorded them."""
    order: dict[str, None] = {}
    for w in workers:
        for s in phases[w].step:
            order.setdefault(str(s), None)
    return list(order)


class _Codes:
    """Global codes of the workers' process groups and collective names (each summary numbers its own)."""

    def __init__(self) -> None:
        self.groups: dict[str, int] = {}
        self.pg: list[str] = []
        self.ranks: list[tuple[int, ...] | None] = []
        self.size: list[int] = []
        self.names: dict[str, int] = {}
        self.how: dict[str, int] = {}

    def group_codes(self, cc: CollectiveCalls) -> np.ndarray:
        out = []
        for key, pg, r, size in zip(cc.groups, cc.group_pg, cc.group_ranks, cc.group_size):
            i = self.groups.setdefault(key, len(self.groups))
            if i == len(self.pg):
                self.pg.append(pg)
                self.ranks.append(tuple(r) if r is not None else None)
                self.size.append(int(size))
            else:
                self.size[i] = max(self.size[i], int(size))
            out.append(i)
        return np.asarray(out, np.int64)

    def add_group(self, key: str, ranks: tuple[int, ...] | None, size: int) -> int:
        """The code of a group the run level makes (a point-to-point pair), added when new."""
        i = self.groups.setdefault(key, len(self.groups))
        if i == len(self.pg):
            self.pg.append(key)
            self.ranks.append(ranks)
            self.size.append(size)
        return i

    def how_codes(self, how: list[str]) -> np.ndarray:
        return np.asarray([self.how.setdefault(str(h), len(self.how)) for h in how], np.int64)

    def name_codes(self, cc: CollectiveCalls) -> np.ndarray:
        return np.asarray([self.names.setdefault(n, len(self.names)) for n in cc.names], np.int64)


def _calls(summaries: Mapping[str, Summary], workers: list[str], steps: list[str], codes: _Codes) -> dict:
    """Every worker's calls as flat arrays with global codes (group, name, step)."""
    step_code = {s: i for i, s in enumerate(steps)}
    parts: dict[str, list] = {
        k: []
        for k in (
            "w",
            "group",
            "seq",
            "name",
            "step",
            "start",
            "end",
            "covered",
            "bytes",
            "is_wait",
            "ready",
            "tail",
            "how",
        )
    }
    for wi, w in enumerate(workers):
        cc = summaries[w].collective_calls
        n = len(cc.group) if cc is not None else 0
        if cc is None or not n:
            continue
        ph = summaries[w].phases
        local_steps = np.asarray([step_code[str(x)] for x in (ph.step if ph is not None else [])] + [-1], np.int64)
        st = np.asarray(cc.step, np.int64)
        parts["w"].append(np.full(n, wi, np.int64))
        parts["group"].append(codes.group_codes(cc)[np.asarray(cc.group, np.int64)])
        how = cc.group_how if cc.group_how is not None else [PG_SEQ] * len(cc.groups)
        parts["how"].append(codes.how_codes(how)[np.asarray(cc.group, np.int64)])
        parts["name"].append(codes.name_codes(cc)[np.asarray(cc.name, np.int64)])
        parts["step"].append(local_steps[np.where((st >= 0) & (st < len(local_steps) - 1), st, -1)])
        parts["seq"].append(sequence(np.asarray(cc.group, np.int64), np.asarray(cc.wait, bool)))
        parts["start"].append(np.asarray(cc.start, np.int64))
        parts["end"].append(np.asarray(cc.start, np.int64) + np.asarray(cc.dur, np.int64))
        parts["covered"].append(np.asarray(cc.covered or np.zeros(n), np.int64))
        parts["bytes"].append(np.asarray(cc.bytes or np.full(n, -1), np.int64))
        parts["is_wait"].append(np.asarray(cc.wait, bool))
        start = np.asarray(cc.start, np.int64)
        lead = cc.lead  # hand-made facts may leave it out: ready when started
        parts["ready"].append(start - np.maximum(np.asarray(lead, np.int64), 0) if lead is not None else start)
        tail = cc.tail  # likewise: idle for the whole call
        parts["tail"].append(np.asarray(tail, np.int64) if tail is not None else np.asarray(cc.dur, np.int64))
    return {k: np.concatenate(v) if v else np.zeros(0, bool if k == "is_wait" else np.int64) for k, v in parts.items()}


#: inside `shared_matches()`: (worker, id(summary))... -> (the summaries, their Job)
_SHARED: contextvars.ContextVar[dict | None] = contextvars.ContextVar("critical_path_shared", default=None)


@contextlib.contextmanager
def shared_matches() -> Iterator[None]:
    """Inside it, `match` of the same summary objects is computed once: one run's diagnosis asks for it from the
    ledger, the caveats, the path and the what-if (six times per run); a history of 100 runs would match each six
    times. The Job is read only by its users; the summaries must not change inside the block. Nested: the
    outer block's."""
    if _SHARED.get() is not None:
        yield
        return
    token = _SHARED.set({})
    try:
        yield
    finally:
        _SHARED.reset(token)


def match(summaries: Mapping[str, Summary]) -> Job:
    """The workers' calls matched per process group and sequence (module doc); `inst` -1 where unmatched.
    Once per summary objects inside `shared_matches()`."""
    memo = _SHARED.get()
    if memo is None:
        return _match(summaries)
    key = tuple((w, id(summaries[w])) for w in sorted(summaries))
    hit = memo.get(key)
    if hit is None:
        # the summaries are kept with their Job, so that their ids are not reused inside the block
        hit = memo[key] = (list(summaries.values()), _match(summaries))
    return hit[1]


def _match(summaries: Mapping[str, Summary]) -> Job:
    workers = sorted(summaries)
    ranks = {w: worker_rank(summaries[w]) for w in workers}
    phases = {w: summaries[w].phases or empty_phases() for w in workers}
    steps = _step_order(phases, workers)
    codes = _Codes()
    c = _calls(summaries, workers, steps, codes)
    notes: list[str] = []
    _named_p2p_by_time(c, codes)
    _pair_p2p(c, codes, workers, ranks, _origins(summaries, workers))
    n = len(c["w"])
    dur = c["end"] - c["start"]
    is_wait = c["is_wait"]
    c["inst"] = np.full(n, -1, np.int64)
    c["wait"] = np.where(is_wait, dur, 0)
    c["exposed"] = np.maximum(c["wait"] - c["covered"], 0)
    inst_cols = ("group", "pg", "seq", "name", "call", "members", "bytes", "transfer", "late", "gap")
    empty = pd.DataFrame({k: [] for k in inst_cols})
    real = np.flatnonzero(~is_wait)
    if not len(real):
        clock = _origins(summaries, workers)
        c["arrival"] = c["start"] + clock[c["w"]]
        return Job(workers, ranks, phases, steps, c, empty, notes, list(codes.how), clock)
    kmax = int(c["seq"][real].max()) + 1
    cand, inv, count = np.unique(c["group"][real] * kmax + c["seq"][real], return_inverse=True, return_counts=True)
    inv = inv.reshape(-1)
    g_of, seq_of = cand // kmax, cand % kmax
    lo = np.full(len(cand), np.iinfo(np.int64).max)
    hi = np.full(len(cand), np.iinfo(np.int64).min)
    np.minimum.at(lo, inv, c["name"][real])
    np.maximum.at(hi, inv, c["name"][real])
    expected = np.asarray(
        [group_waits.expected_members(r, s, ranks) for r, s in zip(codes.ranks, codes.size)], np.int64
    )[g_of]
    ok = (count == expected) & (expected >= 2) & (lo == hi)
    bad = int((~ok & (expected >= 2)).sum())
    if bad:
        notes.append(
            f"{bad} collective calls are not on every member of their process group under one name "
            "(a member's trace misses them); the path does not cross them"
        )
    new = np.full(len(cand), -1, np.int64)
    new[ok] = np.arange(int(ok.sum()))
    c["inst"][real] = new[inv]
    ni = int(ok.sum())
    origin = _origins(summaries, workers)
    c["arrival"] = c["start"] + origin[c["w"]]
    if not ni:
        return Job(workers, ranks, phases, steps, c, empty, notes, list(codes.how), origin)
    inst = c["inst"]
    origin = origin - _end_alignment(c, origin, always=_hosts(summaries, workers) > 1)
    base = origin[c["w"]]  # per call: what puts its worker's times on the common clock
    arrival = c["start"] + base
    c["arrival"] = arrival
    start, end = c["start"] + base, c["end"] + base
    m = np.flatnonzero(inst >= 0)
    m = m[np.lexsort((c["w"][m], -arrival[m], inst[m]))]  # per instance: the last to arrive first
    first = np.ones(len(m), dtype=bool)
    first[1:] = inst[m][1:] != inst[m][:-1]
    late_row = m[first]
    last = np.full(ni, 0, np.int64)
    last[inst[late_row]] = arrival[late_row]
    last_end = np.full(ni, np.iinfo(np.int64).min)
    np.maximum.at(last_end, inst[m], end[m])
    transfer = np.maximum(last_end - last, 0)  # the exchange's own time, once every member was there
    # a member waits from when it was ready (or its call started) until the last member arrived, within its call
    li = last[np.maximum(inst, 0)]
    wait = np.maximum(np.minimum(li, end) - np.maximum(arrival, start), 0)
    c["wait"] = np.where(inst >= 0, wait, c["wait"])
    # exposed: the wait not covered by the member's own compute (waiting comes first in a call; what compute
    # covers of the call is taken from the wait first)
    exposed = np.maximum(np.minimum(c["wait"], dur - c["covered"]), 0)
    c["exposed"] = np.where(inst >= 0, exposed, c["exposed"])
    second = np.zeros(ni, np.int64)
    pos = np.flatnonzero(first)
    has2 = pos + 1 < len(m)
    has2[has2] &= ~first[(pos + 1)[has2]]
    second[inst[late_row[has2]]] = c["exposed"][m[pos[has2] + 1]]
    order = np.argsort(inst[late_row], kind="stable")
    late_row = late_row[order]
    gi = g_of[ok]
    group_keys = list(codes.groups)
    name_keys = list(codes.names)
    table = pd.DataFrame(
        {
            "group": [group_keys[g] for g in gi.tolist()],
            "pg": [codes.pg[g] for g in gi.tolist()],
            "seq": seq_of[ok],
            "name": [name_keys[x] for x in c["name"][late_row].tolist()],
            "call": _name_calls(c)[late_row],
            "members": expected[ok],
            "bytes": c["bytes"][late_row],
            "transfer": transfer,
            "late": c["w"][late_row],
            "gap": second,
        }
    )
    return Job(workers, ranks, phases, steps, c, table, notes, list(codes.how), origin)


#: how the run level matches the point-to-point calls of a named process group (record_param_comms' send/recv):
#: by time, as `_pair_p2p` pairs PEER_TIME's. The group's sequence cannot pair them: each pair of its members
#: exchanges its own calls (a pipeline's middle stages send and receive twice as often as its first and last), so
#: the members' counts differ by design, neither a missing call nor a reason to warn
NAMED_P2P = "pg p2p+time"


def _named_p2p_by_time(c: dict, codes: _Codes) -> None:
    """Marks the send/recv calls of process groups matched by sequence (`collectives.PG_SEQ`) NAMED_P2P, for
    `_pair_p2p`."""
    seq = codes.how.get(PG_SEQ)
    if seq is None or not len(c["name"]):
        return
    is_p2p = np.asarray([n.endswith((":send", ":recv")) for n in codes.names], bool)
    rows = (c["how"] == seq) & is_p2p[c["name"]]
    if rows.any():
        c["how"][rows] = codes.how.setdefault(NAMED_P2P, len(codes.how))


#: how many sends on either side of a receive's end `_pair_by_end` considers
_PAIR_WINDOW = 64


def _pair_by_end(c: dict, rows: np.ndarray, names: list[str], arrival: np.ndarray, end: np.ndarray) -> list:
    """(send row, recv row) pairs of point-to-point calls: a transfer ends on both sides at about one instant, so
    each receive (in the order they end) pairs with the free send of another worker, posted before the receive
    ended, whose end is nearest its own (among the _PAIR_WINDOW sends ending nearest it on either side)."""
    is_send = np.asarray([names[x].endswith(":send") for x in c["name"][rows].tolist()], bool)
    sends, recvs = rows[is_send], rows[~is_send]
    sends = sends[np.argsort(end[sends], kind="stable")]
    recvs = recvs[np.argsort(end[recvs], kind="stable")]
    s_end = end[sends]
    taken = np.zeros(len(sends), dtype=bool)
    out = []
    for r in recvs.tolist():
        k = int(np.searchsorted(s_end, end[r]))
        best, gap = -1, None
        for j in range(max(k - _PAIR_WINDOW, 0), min(k + _PAIR_WINDOW, len(sends))):
            s = int(sends[j])
            if taken[j] or c["w"][s] == c["w"][r] or arrival[s] > end[r] + WAIT_EPS_NS:
                continue
            d = abs(int(s_end[j]) - int(end[r]))
            if gap is None or d < gap:
                best, gap = j, d
        if best >= 0:
            taken[best] = True
            out.append((int(sends[best]), r))
    return out


def _pair_p2p(c: dict, codes: _Codes, workers: list[str], ranks: Mapping[str, int | None], origin: np.ndarray) -> None:
    """Pairs the point-to-point calls whose peer the traces do not name (`collectives.PEER_TIME`), on the traces'
    clocks. A receive cannot complete before its send is posted, and one that waited ends just after it. First
    whole links: a sender A and a receiver B with as many sends as receives, where each k-th send was posted before
    the k-th receive ended, are a link; of the links possible, the tightest (least median time from a send to the
    end of its receive) are taken first, each sender and receiver in one link at most (chains, rings and pipelines
    send to one peer), and their calls pair in order. The receives left (a sender with several peers) pair one by
    one, in the order they end, with the latest send of another worker posted before the receive ended. A pair
    becomes a two-member group `p2p A -> B` numbered in order; both calls are named `<backend>:send/recv`; a receive
    left without a send stays unmatched. The send/recv calls of named groups (NAMED_P2P) pair by their ends
    instead (`_pair_by_end`) and become such groups too."""
    how = [codes.how[h] for h in (PEER_TIME, NAMED_P2P) if h in codes.how]
    if not how:
        return
    every = np.flatnonzero(np.isin(c["how"], how) & ~c["is_wait"])
    names = list(codes.names)  # as the summaries name them (the pairs' common names are added after)
    arrival = c["ready"] + origin[c["w"]]
    end = c["end"] + origin[c["w"]]
    rows = every[c["how"][every] == codes.how.get(PEER_TIME, -1)]
    is_send = np.asarray([names[x].endswith(":send") for x in c["name"][rows].tolist()], bool)
    sends, recvs = rows[is_send], rows[~is_send]
    sends = sends[np.argsort(arrival[sends], kind="stable")]
    recvs = recvs[np.argsort(end[recvs], kind="stable")]
    by_sender = {int(w): sends[c["w"][sends] == w] for w in np.unique(c["w"][sends]).tolist()}
    by_receiver = {int(w): np.sort(recvs[c["w"][recvs] == w]) for w in np.unique(c["w"][recvs]).tolist()}
    links = []
    for a, ss in by_sender.items():
        for b, rr in by_receiver.items():
            if a == b or len(ss) != len(rr):
                continue
            slack = end[rr] - arrival[ss]
            if bool((slack >= -WAIT_EPS_NS).all()):
                links.append((float(np.median(slack)), a, b))
    final: list[tuple[int, int]] = []
    used_a: set[int] = set()
    used_b: set[int] = set()
    for _, a, b in sorted(links):
        if a not in used_a and b not in used_b:
            used_a.add(a)
            used_b.add(b)
            final += list(zip(by_sender[a].tolist(), by_receiver[b].tolist()))
    left_s = sends[~np.isin(c["w"][sends], list(used_a))]
    s_arr = arrival[left_s]
    taken = np.zeros(len(left_s), dtype=bool)
    for r in recvs[~np.isin(c["w"][recvs], list(used_b))].tolist():
        k = int(np.searchsorted(s_arr, end[r], side="right")) - 1
        while k >= 0 and (taken[k] or c["w"][left_s[k]] == c["w"][r]):
            k -= 1
        if k >= 0:
            taken[k] = True
            final.append((int(left_s[k]), r))
    if NAMED_P2P in codes.how:
        final += _pair_by_end(c, every[c["how"][every] == codes.how[NAMED_P2P]], names, arrival, end)
    final.sort(key=lambda x: int(end[x[1]]))
    count: dict[int, int] = {}
    paired = np.zeros(len(c["w"]), dtype=bool)
    for snd, r in final:
        wa, wb = workers[int(c["w"][snd])], workers[int(c["w"][r])]
        ra, rb = ranks.get(wa), ranks.get(wb)
        key = f"p2p {label(wa, ra)} -> {label(wb, rb)}"
        g = codes.add_group(key, (ra, rb) if ra is not None and rb is not None else None, 2)
        backend = names[int(c["name"][r])].split(":", 1)[0]
        nm = codes.names.setdefault(f"{backend}:send/recv", len(codes.names))
        c["group"][[snd, r]] = g
        c["seq"][[snd, r]] = count.get(g, 0)
        c["name"][[snd, r]] = nm
        count[g] = count.get(g, 0) + 1
        paired[[snd, r]] = True
    alone = every[~paired[every]]
    if len(alone):  # each its own call: never matched with another worker's unpaired one by order
        c["group"][alone] = codes.add_group(f"{P2P_GROUP} (no peer found)", None, 2)
        c["seq"][alone] = np.arange(len(alone))


def entry_stagger(job: Job) -> np.ndarray:
    """Per call: the part of its wait that the late member's later entry into the profiled window explains, not
    extra work (ns; 0 for a call not matched). Only a member's first call counts: each member's work before it is
    measured from its first step's start; of its wait, the imbalance is how much longer the late member worked
    before that call than this member did (at most the wait), the rest is the stagger with which they entered the
    window (ranks started apart, or work before the profiler started), which balancing the work inside the steps
    does not recover. Later waits are imbalance: a rank that enters a step late because of its work after the
    previous collective, or whose calls queue behind a late one, is late by its work."""
    got = job.__dict__.get("_stagger")
    if got is not None:
        return got
    n = len(job.c_w)
    out = np.zeros(n, np.int64)
    rows = np.flatnonzero(job.c_inst >= 0)
    if len(rows):
        o = np.lexsort((job.c_start, job.c_w))
        first = np.zeros(n, dtype=bool)
        head = np.ones(len(o), dtype=bool)
        head[1:] = job.c_w[o][1:] != job.c_w[o][:-1]
        first[o[head]] = True  # each worker's first call in the trace
        k = np.maximum(job.c_step, 0)
        entered = np.where(job.c_step >= 0, job.b_start[k, job.c_w], job.c_start)
        work = np.maximum(job.c_start - entered, 0)
        late = job.i_late[job.c_inst[rows]]
        late_row = np.full(len(job.inst), -1, np.int64)
        is_late = job.c_w[rows] == late
        late_row[job.c_inst[rows][is_late]] = rows[is_late]
        lr = late_row[job.c_inst[rows]]
        both = first[rows] & first[lr]  # the first call of this member and of the late one: the window's entry
        wait = job.c_wait[rows]
        imbalance = np.clip(work[lr] - work[rows], 0, wait)
        out[rows] = np.where(both, wait - imbalance, 0)
    job.__dict__["_stagger"] = out
    return out


def _origins(summaries: Mapping[str, Summary], workers: list[str]) -> np.ndarray:
    """Per worker: the ns its summary's times count from on its host's clock (its trace's time base plus its
    origin; 0 where a hand-made summary lacks them), so that origin + time is the time on that clock."""
    out = np.zeros(len(workers), np.int64)
    for i, w in enumerate(workers):
        d = summaries[w].distributed
        o = d.origin if d is not None else None
        if isinstance(o, (int, float)) and not isinstance(o, bool):
            out[i] = int(o)
        base = d.base_ns if d is not None else None
        if isinstance(base, int) and not isinstance(base, bool):
            out[i] += base
    return out


def _hosts(summaries: Mapping[str, Summary], workers: list[str]) -> int:
    """How many hosts the traces name (0 or 1: one clock for all, as far as the traces say)."""
    return len({d.host for w in workers if (d := summaries[w].devices) is not None and d.host})


def _end_alignment(c: dict, origin: np.ndarray, always: bool = False) -> np.ndarray:
    """Per worker: how far its clock runs ahead of the others' (ns), from the ends of the collectives it shares
    with them (the median over its matched calls of its end less the median end of the call's members): a
    collective ends at about one instant on all its members, whoever came last. Applied `always` (the traces name
    different hosts), else only where it is evident: over at least CLOCK_MIN_CALLS collectives, the worker's ends
    sit off by more than CLOCK_EVIDENT_NS and more than 3 times their spread (a clock that is off moves every end
    alike; members that end apart now and then, a broadcast root, an exchange's own time, do not)."""
    inst = c["inst"]
    m = np.flatnonzero(inst >= 0)
    shift = np.zeros(len(origin), np.int64)
    if not len(m):
        return shift
    end = c["end"][m] + origin[c["w"][m]]
    ref = pd.Series(end).groupby(inst[m]).transform("median").to_numpy()
    dev = pd.Series(end - ref)
    by = dev.groupby(c["w"][m])
    med = by.median()
    mad = (dev - med.reindex(c["w"][m]).to_numpy()).abs().groupby(c["w"][m]).median()
    count = by.size()
    evident = (med.abs() > CLOCK_EVIDENT_NS) & (med.abs() > 3 * mad) & (count >= CLOCK_MIN_CALLS)
    keep = np.ones(len(med), dtype=bool) if always else evident.to_numpy()
    idx = med.index.to_numpy(np.int64)[keep]
    shift[idx] = np.round(med.to_numpy()[keep]).astype(np.int64)
    return shift


def _us(ns: int) -> float:
    return round(ns / 1e3, 3)


def _ms(ns: float) -> float:
    return round(float(ns) / 1e6, 3)


def _walk(job: Job, k: int) -> list[dict]:
    """The segments of one step's path (step code `k`), in time order."""
    W = len(job.workers)
    has = job.b_idx[k] >= 0
    rows = np.flatnonzero((job.c_step == k) & (job.c_inst >= 0))
    rows = rows[np.lexsort((job.c_end[rows], job.c_w[rows]))]
    off = np.searchsorted(job.c_w[rows], np.arange(W + 1))
    ends = job.c_end[rows]
    count = np.diff(off)
    last = np.where(count > 0, ends[np.maximum(off[1:] - 1, 0)] if len(rows) else 0, job.b_start[k])
    tail = job.b_end[k] - last
    length = job.b_end[k] - job.b_start[k]
    cand = np.flatnonzero(has)
    if job.clock is not None:  # the worker whose step ends last on the common clock
        tail = job.b_end[k] + job.clock
    cur = int(cand[np.lexsort((cand, -length[cand], -tail[cand]))[0]])
    t = int(job.b_end[k, cur])
    segs: list[dict] = []
    seen: set[int] = set()
    while True:
        mine = rows[off[cur] : off[cur + 1]]
        j = int(np.searchsorted(job.c_end[mine], t, side="right")) - 1
        if j < 0:
            segs.append(_work(job, cur, int(job.b_start[k, cur]), t, None))
            break
        r = int(mine[j])
        i = int(job.c_inst[r])
        segs.append(_work(job, cur, int(job.c_end[r]), t, i))
        if i in seen:
            break
        seen.add(i)
        late = int(job.i_late[i])
        segs.append(_collective(job, i, late))
        if not has[late]:  # the late member did not record this step
            break
        m = job.members(i)
        cur, t = late, int(job.c_start[m[job.c_w[m] == late][0]])
    segs.reverse()
    return [s for s in segs if s["kind"] != "work" or s["ms"] > 0]


def _work(job: Job, wi: int, a: int, b: int, before: int | None) -> dict:
    w = job.workers[wi]
    return {
        "kind": "work",
        "worker": w,
        "rank": job.ranks[w],
        "ms": _ms(max(b - a, 0)),
        "start_us": _us(a),
        "end_us": _us(b),
        "before": None if before is None else _call_label(job, before),
    }


def _name_calls(c: dict) -> np.ndarray:
    """Per call: which call of its name on its group it is on its worker, from 1 in the order of the group's
    sequence (`mpi::Allreduce #4`: the worker's fourth mpi::Allreduce there, as the timeline's occurrences of that
    name count; the group's sequence also counts the calls of other names)."""
    n = len(c["w"])
    if not n:
        return np.zeros(0, np.int64)
    order = np.lexsort((c["seq"], c["name"], c["group"], c["w"]))
    key = np.stack([c["w"][order], c["group"][order], c["name"][order]])
    new = np.ones(n, bool)
    new[1:] = (key[:, 1:] != key[:, :-1]).any(axis=0)
    pos = np.arange(n)
    start = np.maximum.accumulate(np.where(new, pos, 0))
    out = np.empty(n, np.int64)
    out[order] = pos - start + 1
    return out


def _call_label(job: Job, i: int) -> str:
    r = job.inst.iloc[i]
    return f"{r['name']} #{int(r['call'])} on group {r['pg'] or r['group']}"


def _collective(job: Job, i: int, late: int) -> dict:
    r = job.inst.iloc[i]
    m = job.members(i)
    waits = job.c_wait[m]
    waiting = waits[waits > WAIT_EPS_NS]
    # the member ready next to last (least slack): how long its next work waited for the call (its compute idle
    # since, where the next compute waited for this call; a call on a worker without GPU activity blocks its
    # thread: its wait), what the late member cost the others there
    idle = np.where(job.on_gpu()[job.c_w[m]], job.c_tail[m], waits)[waits > WAIT_EPS_NS]
    slack = job.c_end[m] - int(r["transfer"]) - job.c_ready[m]  # how long before the transfer each was ready
    mine = m[job.c_w[m] == late][0]
    w = job.workers[late]
    return {
        "kind": "collective",
        "name": str(r["name"]),
        "call": int(r["call"]),
        "group": str(r["group"]),
        "pg": str(r["pg"]),
        "members": int(r["members"]),
        "late_worker": w,
        "late_rank": job.ranks[w],
        "waiters": int(len(waiting)),
        "wait_ms_median": _ms(np.median(waiting)) if len(waiting) else 0.0,
        "wait_ms_max": _ms(waiting.max()) if len(waiting) else 0.0,
        "wait_ms_total": _ms(waiting.sum()),
        "idle_ms": _ms(idle[np.argmin(slack[waits > WAIT_EPS_NS])]) if len(waiting) else 0.0,
        "transfer_ms": _ms(int(r["transfer"])),
        "gap_ms": _ms(int(r["gap"])),
        # of the median wait, how much the late member's later entry into the stretch explains (`entry_stagger`)
        "stagger_ms": _ms(np.median(entry_stagger(job)[m][waits > WAIT_EPS_NS])) if len(waiting) else 0.0,
        "start_us": _us(int(job.c_start[mine])),
        "end_us": _us(int(job.c_end[mine])),
    }


def step_paths(job: Job) -> list[dict]:
    """The critical path of every step the workers recorded (module doc). Once per Job inside `shared_matches()`
    (the ledger's rank that set each step and the diagnosis walk the same paths): a new list of new step dicts each
    call, their segments shared (read only)."""
    memo = _SHARED.get()
    if memo is None:
        return _step_paths(job)
    hit = memo.get(("steps", id(job)))
    if hit is None:
        hit = memo[("steps", id(job))] = (job, _step_paths(job))
    return [{**st, "segments": list(st["segments"])} for st in hit[1]]


def _step_paths(job: Job) -> list[dict]:
    out = []
    for k, step in enumerate(job.steps):
        has = job.b_idx[k] >= 0
        if not has.any():
            continue
        lengths = (job.b_end[k] - job.b_start[k])[has]
        span = None
        if job.clock is not None:  # from the first rank in to the last out, on the common clock
            span = _ms(float((job.b_end[k] + job.clock)[has].max() - (job.b_start[k] + job.clock)[has].min()))
        out.append(
            {"step": step, "step_ms": _ms(float(np.median(lengths))), "span_ms": span, "segments": _walk(job, k)}
        )
    return out


def critical_paths(summaries: Mapping[str, Summary]) -> dict:
    """The cross-rank critical path per step (module doc), or a `reason` when the summaries lack the facts."""
    if not any(s.phases is not None for s in summaries.values()):
        return {"steps": [], "notes": [], "reason": NO_FACTS}
    job = match(summaries)
    return {"steps": step_paths(job), "notes": job.notes, "reason": None}


def segment_text(seg: Mapping[str, Any]) -> str:
    """One segment in words: `rank 12: 41.0 ms` or `late at nccl:all_reduce #37 on group 3 (256 ranks) -> 255
    ranks waited 38.0 ms`."""
    if seg["kind"] == "work":
        why = f" ({seg['why']})" if seg.get("why") else ""
        return f"{label(seg['worker'], seg['rank'])}: {fmt_ms(seg['ms'])}{why}"
    where = f"{seg['name']} #{seg['call']} on group {seg['pg'] or seg['group']} ({seg['members']} ranks)"
    if not seg["waiters"]:
        return f"{where}, transfer {fmt_ms(seg['transfer_ms'])}"
    who = label(seg["late_worker"], seg["late_rank"])
    n = seg["waiters"]
    stagger = seg.get("stagger_ms") or 0.0
    entered = f" ({fmt_ms(stagger)} of it: {who} entered the step later)" if stagger >= 0.05 else ""
    return f"{who} late at {where} -> {n} rank{'s' if n != 1 else ''} waited {fmt_ms(seg['wait_ms_median'])}{entered}"


def path_text(segments: list[dict]) -> str:
    """A step's path in words, each run of segments on one worker (its work and the collectives it arrived last
    at) said once: `rank 2: 11.6 ms (data loading +40.0 ms) -> late at 12 collectives on group 0 (4 ranks,
    nccl:all_reduce #1..#12) -> 3 ranks waited 4.8 ms in all`: `path_parts` joined by " -> "."""
    return " -> ".join(path_parts(segments))


def path_parts(segments: list[dict]) -> list[str]:
    """The parts of `path_text` in time order (the Distributed view lists them, one item each)."""
    runs: list[list[dict]] = []
    for seg in segments:
        owner = seg["worker"] if seg["kind"] == "work" else seg["late_worker"]
        if runs and (runs[-1][0]["worker"] if runs[-1][0]["kind"] == "work" else runs[-1][0]["late_worker"]) == owner:
            runs[-1].append(seg)
        else:
            runs.append([seg])
    parts: list[str] = []
    for run in runs:
        work = [s for s in run if s["kind"] == "work"]
        colls = [s for s in run if s["kind"] == "collective"]
        if work:
            parts.append(segment_text({**work[0], "ms": round(sum(s["ms"] for s in work), 3)}))
        late = [c for c in colls if c["waiters"]]
        quiet = [c for c in colls if not c["waiters"]]
        if len(late) == 1:
            parts.append(segment_text(late[0]))
        elif late:
            parts.append(_many(late))
        if quiet:
            parts.append(segment_text(quiet[0]) if len(quiet) == 1 else f"{len(quiet)} collectives nobody waited at")
    return parts


def _many(colls: list[dict]) -> str:
    """Several collectives one worker arrived last at, in words."""
    groups = sorted({c["pg"] or c["group"] for c in colls})
    by_name: dict[str, list[int]] = {}
    for c in colls:
        by_name.setdefault(c["name"], []).append(int(c["call"]))
    who = label(colls[0]["late_worker"], colls[0]["late_rank"])
    where = f"group {groups[0]} ({colls[0]['members']} ranks)" if len(groups) == 1 else f"groups {', '.join(groups)}"
    # each name with its calls' numbers, as the trace's occurrences of it count them
    calls = ", ".join(
        f"{n} #{min(k)}" + (f"..#{max(k)}" if max(k) != min(k) else "") for n, k in sorted(by_name.items())
    )
    n = max(c["waiters"] for c in colls)
    waited = sum(c["wait_ms_median"] for c in colls)
    idle = sum(c.get("idle_ms", c["wait_ms_median"]) for c in colls)
    # calls queued on a comm stream wait one after another while the ranks compute: say what it cost them
    of_it = f", {fmt_ms(idle)} of it idle" if idle < 0.9 * waited else ""
    stagger = sum(c.get("stagger_ms") or 0.0 for c in colls)
    of_it += f", {fmt_ms(stagger)} of it because {who} entered the step later" if stagger >= 0.05 else ""
    return (
        f"{who} late at {len(colls)} collectives on {where}, {calls} -> {n} rank{'s' if n != 1 else ''} "
        f"waited {fmt_ms(waited)} in all{of_it}"
    )
