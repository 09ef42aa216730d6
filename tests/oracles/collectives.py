"""Oracle of the facts of real multi-rank jobs, read straight from the raw Kineto events (issue 37).

It imports nothing of gpuscope (`profiler_core`, `tb_plugin`): only the standard library. What it computes is
what the diagnosis must agree with, so every definition is written here, and kept as plain as the events allow.

Units: trace microseconds (`ts`, `dur` as the file has them). Every time below is on the host clock of the rank's
trace; ranks are compared on those clocks as they are (the shared multi-rank jobs ran their ranks on one host, or
say nothing better): no clock alignment is attempted.

Reading
    load_json(path): the JSON of a trace file, gzip or plain by its first two bytes (never by its name).
    load_ranks(paths): one `Rank` per rank. A file whose events name several ranks (a fused file, such as
    TraceLens's TraceFusion writes) is split: an event's rank is its `args.rank` when present, else
    `pid // 100_000_000` (the fusion writes pid = rank x 1e8 + pid). Any other file is one rank, numbered by
    `distributedInfo.rank` (else its position). `world_size` is `distributedInfo.world_size` when a file says it.

Per rank
    step windows: host-side `X` events (cat `user_annotation`/`cpu_op`) named like the step pattern (default
        `ProfilerStep#N`); a window is [ts, ts + dur].
    kernels: `X` events of cat `kernel`; stream = `args.stream` (else tid), device = `args.device` (else pid).
    stream work: kernels, `gpu_memcpy`, `gpu_memset` of one (device, stream), in start order.
    launch of a kernel: the host runtime/driver event (cat `cuda_runtime`/`cuda_driver`; cudaLaunchKernel[ExC],
        cuLaunchKernel[Ex], hipLaunchKernel, hipExtModuleLaunchKernel, ...) with the kernel's `args.correlation`;
        where none has it, the `ac2g` flow whose start sits on a runtime event and whose end sits on the kernel
        (same id). `launch` is that event's ts (the call's start: the kernel cannot start earlier).
    previous work end (`prev_end`): the latest end among the work of the kernel's stream that started before it.

Communication kernels (`comm_kind`)
    `nccl`: names with `ncclDevKernel`, `ncclKernel` or `rccl` (NCCL and RCCL); `deepep`: DeepEP kernels
    (`deep_ep::` / `dpsk::ep::` namespaces) named `dispatch` or `combine` (their notify/layout helpers are
    `deepep_aux`); `all_to_all`: other kernels whose name says all_to_all/alltoall. `cub::DispatchReduceByKey`
    and the like are not communication.

Collective metadata (`Member.meta`)
    `Collective name`, `Process Group Name`, `Process Group Ranks`, `In msg nelems`, `Out msg nelems`, `dtype`,
    `Group size` from the kernel's args, else from the `record_param_comms` host op with the kernel's
    `External id`; `seq` from that op's `Concrete Inputs[1]` (c10d's sequence number of the process group),
    or an arg `Seq`/`seq`.

Matching the members of a collective across ranks (`Collective.how`)
    `pg+seq`: when every communication kernel of the ranks has a process group name and a seq, members are the
        kernels with the same (process group name, seq).
    `stream+name+order`: otherwise the k-th communication kernel with a given name on a given stream of each
        rank are members of one collective (k counted per rank, per stream, per name, in start order).

Per member of a collective
    arrival = the kernel's start: when it could start, the moment its host launch, its own stream's previous work
        and any wait on another stream (cudaStreamWaitEvent: the compute that makes its input) let it run; never
        from its duration or end. max(launch, prev_end) (`earliest`) is only a lower bound: in
        moe_a100_2rank_alltoall rank 0's kernel of seq 40 was launched 2.45 ms before it started on an idle stream
        (held by the compute stream) and then took 12 us, while rank 1's kernel, running since before that launch,
        took 4.5 ms: rank 1 waited for rank 0, which the launch alone would have called early.
    waiting = last arrival of the collective - own arrival (>= 0; 0 for the last arrival).
    The late rank of a collective is the member with the last arrival (a single rank; ties within `TIE_US`
    name none). Roots of broadcast/reduce/scatter/gather and one-sided send/recv are judged the same way, by
    arrival: finishing first never makes a member late.

Per collective
    last_arrival = max arrival; first_end / last_end = min / max of the members' kernel ends.
    exchange = last_end - last_arrival (>= 0): the time the collective took once every member was there, i.e. the
        exchange's own time (communication), whatever the members' ends spread; it is never waiting.
    end_spread = last_end - first_end.
    bytes = `In msg nelems` x the size of `dtype` when both are known.

Steps
    step_skew(ranks, pattern): per window name matching `pattern` present on several ranks (each rank's first
    window of that name): entry skew = max start - min start, end (exit) skew = max end - min end, with the
    first and the last rank in.
    busy_time(spans, lo, hi): the union of spans clipped to [lo, hi] (the share of a step in some kernels).

Known limits (what these traces do not say)
    cudaStreamWaitEvent/cudaEventRecord carry no stream or event ids in these traces, so why a kernel started after
    its launch and its stream allowed (in moe_a100_2rank_alltoall several NCCL kernels start ~2.4 ms after both) is
    not seen; its start is when it arrived all the same. A kernel delayed by a busy GPU alone would count late too.
    Members matched by stream+name+order are only as right as the ranks' orders agree (hta_trace_filter: not).
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

GZIP_MAGIC = b"\x1f\x8b"
#: a fused file's pid = rank x FUSED_PID_STRIDE + the process's own pid
FUSED_PID_STRIDE = 100_000_000
#: two arrivals closer than this (us) name no late rank
TIE_US = 1.0
STEP_PATTERN = r"ProfilerStep#\d+"
HOST_CATS = ("user_annotation", "cpu_op")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
WORK_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
META_KEYS = (
    "Collective name",
    "Process Group Name",
    "Process Group Ranks",
    "In msg nelems",
    "Out msg nelems",
    "dtype",
    "Group size",
)
DTYPE_BYTES = {
    "float": 4,
    "float32": 4,
    "int": 4,
    "int32": 4,
    "long": 8,
    "int64": 8,
    "double": 8,
    "float64": 8,
    "half": 2,
    "float16": 2,
    "bfloat16": 2,
    "byte": 1,
    "char": 1,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}
ONE_SIDED = ("broadcast", "reduce", "scatter", "gather", "send", "recv")

_NCCL = re.compile(r"ncclDevKernel|ncclKernel|rccl", re.IGNORECASE)
_DEEPEP = re.compile(r"(?:deep_ep|dpsk::ep)::(?:\w+::)*(\w+)")
_ALL_TO_ALL = re.compile(r"all_?to_?all", re.IGNORECASE)


def load_json(path: str | Path) -> dict:
    """The JSON document of a trace file, gzip or plain by its first two bytes."""
    data = Path(path).read_bytes()
    if data[:2] == GZIP_MAGIC:
        data = gzip.decompress(data)
    doc = json.loads(data)
    return doc if isinstance(doc, dict) else {"traceEvents": doc}


def event_rank(event: dict) -> int | None:
    """The rank of an event of a fused file: args.rank, else pid // 1e8 (None when the pid is not a number)."""
    args = event.get("args")
    if isinstance(args, dict) and isinstance(args.get("rank"), int):
        return args["rank"]
    pid = event.get("pid")
    return pid // FUSED_PID_STRIDE if isinstance(pid, int) else None


def is_fused(events: list[dict]) -> bool:
    """Whether the events of one file belong to several ranks (by `event_rank`)."""
    seen = {r for r in map(event_rank, events) if r is not None}
    return len(seen) > 1


def comm_kind(name: str) -> str | None:
    """`nccl`, `deepep`, `deepep_aux`, `all_to_all` or None (see the module's docstring)."""
    if _NCCL.search(name):
        return "nccl"
    m = _DEEPEP.search(name)
    if m:
        return "deepep" if m.group(1) in ("dispatch", "combine") else "deepep_aux"
    if _ALL_TO_ALL.search(name):
        return "all_to_all"
    return None


@dataclass
class Window:
    name: str
    start: float
    end: float


@dataclass
class Kernel:
    name: str
    device: object
    stream: object
    start: float
    end: float
    correlation: object
    external_id: object
    args: dict
    launch: float | None = None
    launch_name: str | None = None
    prev_end: float | None = None

    @property
    def dur(self) -> float:
        return self.end - self.start

    @property
    def arrival(self) -> float:
        """The kernel's start: the moment its host launch, its stream's previous work and whatever else it waited
        for (another stream's event) let it run (see the module's docstring)."""
        return self.start

    @property
    def earliest(self) -> float:
        """max(launch, prev_end): the lower bound of the arrival that the launch and the stream alone give; the
        kernel's start where neither is known."""
        known = [t for t in (self.launch, self.prev_end) if t is not None]
        return max(known) if known else self.start


@dataclass
class Rank:
    rank: int
    source: str
    events: list[dict]
    world_size: int | None = None
    distributed_info: dict = field(default_factory=dict)
    _kernels: list[Kernel] | None = field(default=None, repr=False)

    def steps(self, pattern: str = STEP_PATTERN) -> list[Window]:
        """The host-side step windows (see the module's docstring), in start order."""
        rx = re.compile(pattern)
        out = [
            Window(e["name"], float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
            for e in self.events
            if e.get("ph") == "X" and e.get("cat") in HOST_CATS and rx.fullmatch(str(e.get("name", "")))
        ]
        return sorted(out, key=lambda w: w.start)

    def kernels(self) -> list[Kernel]:
        """Every kernel with its launch and its stream's previous work end, in start order."""
        if self._kernels is None:
            self._kernels = _kernels(self.events)
        return self._kernels

    def comm_kernels(self, kinds: Iterable[str] = ("nccl", "deepep", "all_to_all")) -> list[Kernel]:
        kinds = tuple(kinds)
        return [k for k in self.kernels() if comm_kind(k.name) in kinds]


def _kernels(events: list[dict]) -> list[Kernel]:
    runtime_by_corr: dict[object, dict] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in RUNTIME_CATS:
            corr = (e.get("args") or {}).get("correlation")
            if corr is not None and ("aunch" in e.get("name", "") or corr not in runtime_by_corr):
                runtime_by_corr[corr] = e
    work = defaultdict(list)
    kernels = []
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in WORK_CATS:
            continue
        args = e.get("args") or {}
        key = (args.get("device", e.get("pid")), args.get("stream", e.get("tid")))
        start = float(e["ts"])
        end = start + float(e.get("dur", 0))
        work[key].append((start, end))
        if e["cat"] == "kernel":
            kernels.append(
                Kernel(
                    e.get("name", ""),
                    key[0],
                    key[1],
                    start,
                    end,
                    args.get("correlation"),
                    args.get("External id"),
                    args,
                )
            )
    flows = _flow_launches(events)
    for k in kernels:
        launch = runtime_by_corr.get(k.correlation)
        if launch is None:
            launch = flows.get((k.device, k.stream, k.start))
        if launch is not None:
            k.launch, k.launch_name = float(launch["ts"]), launch.get("name")
    prefix = {}
    for key, spans in work.items():
        spans.sort()
        running, acc = [], float("-inf")
        for _, end in spans:
            acc = max(acc, end)
            running.append(acc)
        prefix[key] = ([start for start, _ in spans], running)
    for k in kernels:
        starts, running = prefix[(k.device, k.stream)]
        i = bisect.bisect_left(starts, k.start)  # the work that started strictly before this kernel
        k.prev_end = running[i - 1] if i else None
    kernels.sort(key=lambda k: k.start)
    return kernels


def _flow_launches(events: list[dict]) -> dict[tuple, dict]:
    """(device, stream, kernel ts) -> runtime event, through `ac2g` flows (s on the runtime call, f on the kernel)."""
    starts, ends = {}, {}
    for e in events:
        if e.get("cat") == "ac2g" and e.get("ph") in ("s", "f"):
            (starts if e["ph"] == "s" else ends)[e.get("id")] = e
    if not starts:
        return {}
    runtime_at = {
        (e.get("pid"), e.get("tid"), e.get("ts")): e
        for e in events
        if e.get("ph") == "X" and e.get("cat") in RUNTIME_CATS
    }
    out = {}
    kernel_at = {
        (e.get("pid"), e.get("tid"), e.get("ts")): e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"
    }
    for fid, f in ends.items():
        s = starts.get(fid)
        kern = kernel_at.get((f.get("pid"), f.get("tid"), f.get("ts")))
        call = s and runtime_at.get((s.get("pid"), s.get("tid"), s.get("ts")))
        if kern is not None and call is not None:
            args = kern.get("args") or {}
            out[(args.get("device", kern.get("pid")), args.get("stream", kern.get("tid")), float(kern["ts"]))] = call
    return out


def _split(doc: dict, source: str, position: int) -> list[Rank]:
    events = doc.get("traceEvents") or []
    info = doc.get("distributedInfo") or {}
    world = info.get("world_size")
    if not is_fused(events):
        rank = info.get("rank", position)
        return [Rank(rank, source, events, world, info)]
    per_rank: dict[int, list[dict]] = defaultdict(list)
    for e in events:
        r = event_rank(e)
        if r is not None:
            per_rank[r].append(e)
    return [Rank(r, source, per_rank[r], world or len(per_rank), info) for r in sorted(per_rank)]


def load_ranks(paths: str | Path | Iterable[str | Path]) -> list[Rank]:
    """The ranks of a job: its trace files (or the folder holding them), fused files split, sorted by rank."""
    if isinstance(paths, (str, Path)):
        p = Path(paths)
        paths = sorted(x for x in p.iterdir() if x.is_file()) if p.is_dir() else [p]
    ranks = []
    for i, path in enumerate(paths):
        ranks.extend(_split(load_json(path), str(path), i))
    return sorted(ranks, key=lambda r: r.rank)


# ---- collectives -------------------------------------------------------------------------------------------------


def _record_param_comms(rank: Rank) -> dict[object, dict]:
    return {
        (e.get("args") or {}).get("External id"): e.get("args") or {}
        for e in rank.events
        if e.get("ph") == "X" and e.get("name") == "record_param_comms"
    }


def collective_meta(kernel: Kernel, comms: dict[object, dict]) -> dict:
    """The collective's metadata of a communication kernel (see the module's docstring); missing keys absent."""
    op = comms.get(kernel.external_id, {})
    meta = {}
    for key in META_KEYS:
        if key in kernel.args:
            meta[key] = kernel.args[key]
        elif key in op:
            meta[key] = op[key]
    seq = kernel.args.get("Seq", kernel.args.get("seq", op.get("Seq", op.get("seq"))))
    if seq is None:
        inputs = op.get("Concrete Inputs")
        if isinstance(inputs, list) and len(inputs) > 1 and str(inputs[1]).lstrip("-").isdigit():
            seq = int(inputs[1])
    if seq is not None:
        meta["seq"] = int(seq)
    return meta


@dataclass
class Member:
    rank: int
    kernel: Kernel
    meta: dict
    waiting: float = 0.0

    @property
    def arrival(self) -> float:
        return self.kernel.arrival

    @property
    def start(self) -> float:
        return self.kernel.start

    @property
    def end(self) -> float:
        return self.kernel.end


@dataclass
class Collective:
    key: tuple
    how: str
    members: dict[int, Member]

    @property
    def name(self) -> str:
        m = next(iter(self.members.values()))
        return str(m.meta.get("Collective name") or m.kernel.name)

    @property
    def one_sided(self) -> bool:
        return any(w in self.name.lower() for w in ONE_SIDED) and "all" not in self.name.lower()

    @property
    def last_arrival(self) -> float:
        return max(m.arrival for m in self.members.values())

    @property
    def first_arrival(self) -> float:
        return min(m.arrival for m in self.members.values())

    @property
    def late_rank(self) -> int | None:
        """The rank that arrived last; None when the two last arrivals are within TIE_US, or one member only."""
        order = sorted(self.members.values(), key=lambda m: m.arrival)
        if len(order) < 2 or order[-1].arrival - order[-2].arrival < TIE_US:
            return None
        return order[-1].rank

    @property
    def first_end(self) -> float:
        return min(m.end for m in self.members.values())

    @property
    def last_end(self) -> float:
        return max(m.end for m in self.members.values())

    @property
    def exchange(self) -> float:
        return max(0.0, self.last_end - self.last_arrival)

    @property
    def end_spread(self) -> float:
        return self.last_end - self.first_end

    @property
    def bytes(self) -> int | None:
        m = next(iter(self.members.values())).meta
        size = DTYPE_BYTES.get(str(m.get("dtype", "")).lower())
        n = m.get("In msg nelems")
        return int(n) * size if size and isinstance(n, int) else None


def collectives(ranks: list[Rank], kinds: Iterable[str] = ("nccl", "all_to_all")) -> list[Collective]:
    """The collectives of a job's ranks, members matched (see the module's docstring), in first-arrival order."""
    per_rank = {}
    for r in ranks:
        comms = _record_param_comms(r)
        per_rank[r.rank] = [(k, collective_meta(k, comms)) for k in r.comm_kernels(kinds)]
    by_seq = all(
        "Process Group Name" in meta and "seq" in meta for kernels in per_rank.values() for _, meta in kernels
    ) and any(per_rank.values())
    groups: dict[tuple, dict[int, Member]] = defaultdict(dict)
    for rank, kernels in per_rank.items():
        order: dict[tuple, int] = defaultdict(int)
        for k, meta in kernels:
            if by_seq:
                key = ("pg+seq", str(meta["Process Group Name"]), meta["seq"])
            else:
                base = (str(k.stream), k.name)
                key = ("stream+name+order", *base, order[base])
                order[base] += 1
            groups[key][rank] = Member(rank, k, meta)
    out = []
    for key, members in groups.items():
        c = Collective(key, key[0], members)
        last = c.last_arrival
        for m in members.values():
            m.waiting = last - m.arrival
        out.append(c)
    return sorted(out, key=lambda c: c.first_arrival)


def late_counts(colls: Iterable[Collective]) -> dict[int | None, int]:
    """How many collectives each rank arrived last at (None: a tie or a lone member)."""
    counts: dict[int | None, int] = defaultdict(int)
    for c in colls:
        counts[c.late_rank] += 1
    return dict(counts)


@dataclass
class Skew:
    name: str
    starts: dict[int, float]
    ends: dict[int, float]

    @property
    def entry(self) -> float:
        return max(self.starts.values()) - min(self.starts.values())

    @property
    def exit(self) -> float:
        return max(self.ends.values()) - min(self.ends.values())

    @property
    def first_in(self) -> int:
        return min(self.starts, key=self.starts.get)

    @property
    def last_in(self) -> int:
        return max(self.starts, key=self.starts.get)


def step_skew(ranks: list[Rank], pattern: str = STEP_PATTERN) -> list[Skew]:
    """Per step name present on at least two ranks: the ranks' starts and ends (first window of that name)."""
    starts: dict[str, dict[int, float]] = defaultdict(dict)
    ends: dict[str, dict[int, float]] = defaultdict(dict)
    for r in ranks:
        for w in r.steps(pattern):
            if r.rank not in starts[w.name]:
                starts[w.name][r.rank] = w.start
                ends[w.name][r.rank] = w.end
    out = [Skew(n, starts[n], ends[n]) for n in starts if len(starts[n]) > 1]
    return sorted(out, key=lambda s: min(s.starts.values()))


def busy_time(spans: Iterable[tuple[float, float]], lo: float, hi: float) -> float:
    """The length of the union of `spans` clipped to [lo, hi] (overlaps counted once)."""
    clipped = sorted((max(a, lo), min(b, hi)) for a, b in spans if b > lo and a < hi)
    total, cur_a, cur_b = 0.0, None, None
    for a, b in clipped:
        if cur_b is None or a > cur_b:
            if cur_b is not None:
                total += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    if cur_b is not None:
        total += cur_b - cur_a
    return total
