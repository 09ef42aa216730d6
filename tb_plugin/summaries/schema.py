"""The per-worker summary's schema: what a summary file holds, as `msgspec` types, and its version history.

`summary.decode` decodes a file with `type=Summary`: a missing field or one of another type is a decode error
(`SummaryError`), and the summary is recomputed. `check(s)` holds what a type cannot say (lists that go together
have one length, indices in range, bounds); `decode` runs it on every file it reads.

Every part is a `Struct`, which the run-level code (`tb_plugin/run_level/*`, the run routes, `summaries.cli`) reads
as attributes. The producers are analyses in `profiler_core` (`profiler_core/analysis/step_breakdown.overview`,
`profiler_core/analysis/worker/*`, `profiler_core/analysis/gpu_idle/gpu_idle_summary`) and return plain dicts;
`summary.summarize` turns them into these types, and where a run-level function is fed a part computed from a live
trace, `convert` does at that boundary. Field order is the file's key order: a `Summary` encodes to the bytes its
dict did. Optional fields UNSET are left out when encoded, as a dict without that key was.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

import msgspec
import numpy as np
from msgspec import UNSET, UnsetType

#: bump when a summary's fields or the views' definitions they hold change
#: (2: GPU work counts in the step it runs in; without ProfilerStep the whole trace window; Tensor Core names;
#: 3: kernels replayed by CUDA graphs count for the ops that captured them;
#: 4: the recoverable-time ledger and the GPU idle projection;
#: 5: collective calls per process group and step phases for the cross-rank diagnosis;
#: 6: MPI collectives (mpi:: ops) are collective calls, their communicator the process group;
#: 7: the pipeline projection;
#: 8: the kernel table (kernels per op path and name with their place, for the job diff's alignment)
#: 9: per collective call, when its worker was ready for it and how long its compute idled at its end (`lead`, `tail`)
#: 10: whether the worker's one step is the whole trace window (`phases.whole_trace`: no ProfilerStep) and the host
#: that wrote the trace (`devices.host`, where the trace names it), for the run's caveats
#: 11: communication kernels by name family (DeepEP, RCCL, MSCCL, NVSHMEM, custom all-to-all: `classify`) and by the
#: communication op that launched them; NCCL's CPU calls are host time in the ledger; collective calls without
#: record_param_comms (gloo's and older NCCL's backend ranges) with how each group is matched (`group_how`)
#: and the ledger's `start_up` bucket (one-time CUDA start-up); without ProfilerStep the window is the operators'
#: span (Python frames and profiler overhead around them left out)
#: 12: the roofline (`roofline`: MFU/HFU per step, the ops losing the most ms to their bound, by cause) and the
#: compute bucket's split (below / near its roofline bound, no roof) with its recoverable ns
#: 13: whether the worker replays CUDA graphs (`ledger.graph_launches`: its advice never proposes them)
#: 14: the ledger's `pipeline_bubble` bucket (a pipeline stage's send/recv kernels, no longer exposed_comm)
#: 15: an MPI collective named as the trace names it (`mpi::Allreduce`, not `mpi:all_reduce`), in its communicator's
#: process group in the distributed part too
VERSION = 15
KIND = "gpuscope-summary"


class SummaryError(ValueError):
    """A summary file that cannot be used (damaged, another version, another file's)."""


#: an integer within int64 (JSON allows any; numpy and the views' arrays do not)
Int64 = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)]
#: a number as JSON gives it back: an int stays an int (a bare `float` would turn 3 into 3.0); floats are finite
#: (msgspec refuses 1e999)
Num = Int64 | float
#: a count (within int64)
Count = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]
#: a plain JSON value (distributedInfo's values, a GPU's properties, the Overview's averages)
Scalar = None | str | bool | Int64 | float


class Source(msgspec.Struct, kw_only=True):
    """The trace file the summary was computed from (`summary.matches`)."""

    size: Int64
    mtime_ns: Int64
    etag: str
    ident: list[Int64]


class Overview(msgspec.Struct, kw_only=True):
    """`profiler_core/analysis/step_breakdown.overview`: its per-step rows (free-form: the Overview's columns),
    average and GPU part."""

    steps: list[dict[str, Any]]
    average: dict[str, Scalar]
    gpu: dict[str, Any] | None  # free-form: the Overview's GPU block, shown as it is


class DistributedSteps(msgspec.Struct, kw_only=True):
    """Per step: its name, bounds and computation, communication and overlap ns."""

    step: list[str]
    start: list[Num]
    end: list[Num]
    comp: list[Num]
    comm: list[Num]
    overlap: list[Num]


class DistributedCollectives(msgspec.Struct, kw_only=True):
    """Per (name, process group): `names`, `pg`, `group_size`, `pg_ranks`; per call in time order: its name
    (index), step (index or -1), duration, bytes (-1: unknown) and whether it is a `wait`."""

    names: list[str]
    pg: list[str]
    group_size: list[Int64]
    pg_ranks: list[list[Int64] | None] | UnsetType = UNSET  # hand-made parts may leave it out
    name: list[Int64]
    step: list[Int64]
    dur: list[Int64]
    bytes: list[Int64]
    wait: list[Int64]


class Distributed(msgspec.Struct, kw_only=True):
    """`profiler_core/analysis/worker/distributed.worker_summary` (a dict there; `convert` turns a live one into
    this). Hand-made parts may leave out origin, info and gpus (UNSET: left out when encoded too); a stored
    summary must hold them (`check`)."""

    origin: Num | None | UnsetType = UNSET
    #: the trace's time base (ns since the epoch; its times count from it): base_ns + origin is on the host's clock
    base_ns: Int64 | UnsetType = UNSET
    steps: DistributedSteps
    collectives: DistributedCollectives
    info: dict[str, Scalar] | UnsetType = UNSET
    gpus: dict[str, dict[str, Scalar]] | UnsetType = UNSET


class Devices(msgspec.Struct, kw_only=True):
    """The worker's distributedInfo and GPUs (hand-made summaries may leave any out)."""

    rank: Scalar = None
    world_size: Scalar = None
    backend: Scalar = None
    #: the host that wrote the trace (gpuscope's `host_name`; torch writes none): None when the trace does not say
    host: str | None = None
    gpus: dict[str, dict[str, Scalar]] = msgspec.field(default_factory=dict)


class ComputeSplit(msgspec.Struct, kw_only=True):
    """The compute bucket's time per step by the roofline (`ledger._split`): below / near the bound, no roof (they
    add up to the bucket's ns), ns lost to the bound (by cause) and what is recoverable."""

    below_bound_ns: list[Int64]
    near_bound_ns: list[Int64]
    no_roof_ns: list[Int64]
    lost_ns: list[Int64]
    recoverable_ns: list[Int64]
    causes: dict[str, list[Int64]]


class LedgerBucket(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One bucket's ns and recoverable ns per step (None, with a reason: the trace cannot measure it); the compute
    bucket's `split` where some op has a roofline."""

    ns: list[Int64] | None
    recoverable_ns: list[Int64] | None
    reason: str | None
    split: ComputeSplit | UnsetType = UNSET


class Ledger(msgspec.Struct, kw_only=True):
    """`profiler_core/analysis/worker/ledger.worker_ledger` (a dict there: `ledger.ranked` reads that Mapping)."""

    steps: list[str]
    wall_ns: list[Int64]
    reason: str | None
    buckets: dict[str, LedgerBucket]
    has_gpu: bool
    graph_launches: bool = False


class GpuIdle(msgspec.Struct, kw_only=True):
    """`profiler_core/analysis/gpu_idle/gpu_idle_summary.gpu_idle_summary`: counts per step (None: not measured)."""

    steps: list[str]
    kernel_wait_threshold_ns: Int64
    devices: dict[str, dict[str, list[Int64] | None]] | None
    launches: dict[str, list[Int64] | None] | None
    queue_max: dict[str, Int64]
    reasons: list[str]


class CollectiveCalls(msgspec.Struct, kw_only=True):
    """`profiler_core/analysis/worker/worker_facts.collective_calls`: columnar, per group and per call (module doc
    there)."""

    groups: list[str]
    group_pg: list[str]
    group_ranks: list[list[Int64] | None]
    group_size: list[Int64]
    #: per group, how its calls are matched across ranks (`collectives.PG_SEQ`...); hand-made facts: by pg+seq
    group_how: list[str] | None = None
    names: list[str]
    group: list[Int64]
    name: list[Int64]
    step: list[Int64]
    start: list[Int64]
    dur: list[Int64]
    # hand-made facts may leave these out (the readers take: bytes unknown, nothing covered, ready when started,
    # idle for the whole call); a stored summary must hold them (`check`)
    bytes: list[Int64] | None = None
    wait: list[Int64]
    covered: list[Int64] | None = None
    lead: list[Int64] | None = None
    tail: list[Int64] | None = None
    dropped: Int64 = 0


class PipelineStep(msgspec.Struct, kw_only=True):
    """One step of a pipeline projection: spans [kind, micro-batch, stage (-1: none), start, end] in time order,
    P2P kernels [coll, start, end, span index (-1: none)], busy [start, end] ranges (ns from `base_ns`)."""

    step: str
    spans: list[tuple[Literal["F", "B", "I", "W"], Int64, Int64, Int64, Int64]]
    p2p: list[tuple[Literal["send", "recv"], Int64, Int64, Int64]]
    busy: list[tuple[Int64, Int64]]
    closed_gap_ns: Int64


class Pipeline(msgspec.Struct, kw_only=True):
    """`profiler_core/analysis/worker/pipeline.project` (a dict there): its steps within the projection's bounds
    (`check`); hand-made ones may leave out rank, steps_dropped and reason."""

    version: int
    rank: Int64 | None = None
    base_ns: Int64
    steps: list[PipelineStep]
    steps_dropped: Count = 0
    reason: str | None = None


class KernelTable(msgspec.Struct, kw_only=True):
    """`profiler_core/analysis/worker/kernel_table.project` (a dict there): per group its path (index into
    `paths`), name, ordinal, count and total ns (lists of one length, `check`)."""

    steps: Count
    paths: list[str]
    path: list[Int64]
    name: list[str]
    ordinal: list[Int64]
    count: list[Count]
    total: list[Count]
    dropped: Count
    dropped_ns: Count


class Phases(msgspec.Struct, kw_only=True):
    """`profiler_core/analysis/worker/worker_facts.phases`: per step, its bounds and phases (ns, None: not
    measurable), its tops."""

    step: list[str]
    start: list[Int64]
    end: list[Int64]
    data_loading: list[Int64 | None]
    h2d: list[Int64 | None]
    host_sync: list[Int64 | None]
    launch: list[Int64 | None]
    gpu_idle: list[Int64 | None]
    compute: list[Int64 | None]
    comm: list[Int64 | None]
    names: list[str]
    top_kernels: list[list[list[Num]]]  # per step, [name index, ns] pairs (`check`)
    top_ops: list[list[list[Num]]]
    reasons: dict[str, str]
    dropped_steps: Int64 = 0
    #: True: no ProfilerStep in the trace, its one step "0" is the whole trace window (`steps` stage)
    whole_trace: bool = False

    def phase(self, name: str) -> list[int | None]:
        """The per-step values of phase `name` (one of `worker_facts.PHASES`)."""
        return getattr(self, name)


class RooflineOp(msgspec.Struct, kw_only=True):
    """One op group of the roofline's `top` (most ms lost to the bound first)."""

    name: str
    dtype: str
    family: str
    calls: Count
    device_ms: float
    lost_ms: float
    fraction: float | None
    bound: str
    cause: str


class RooflineCause(msgspec.Struct, kw_only=True):
    label: str
    fix: str
    lost_ms: float


class Roofline(msgspec.Struct, kw_only=True):
    """`profiler_core/analysis/roofline/worker.worker_roofline`: MFU/HFU (fractions; None: no model FLOPs or no
    peaks, `note` says which) over the steps and per step, the device's matrix roof, the ops losing most."""

    device: str
    roof: str
    peak_tflops: float | None
    mfu: float | None
    hfu: float | None
    steps: list[str]
    step_ms: list[float]
    step_model_tflop: list[float]
    step_all_tflop: list[float]
    step_mfu: list[float | None]
    note: str
    fraction: float
    modelled_ms: float
    no_model_ms: float
    lost_ms: float
    top: list[RooflineOp]
    causes: dict[str, RooflineCause]


class Summary(msgspec.Struct, kw_only=True):
    """One trace file's summary (`summary.summarize`). Every part defaults to None so that hand-made summaries
    (tests, `from_dict`) may leave out what their reader does not need; `check` requires every part of a stored
    one."""

    kind: str
    version: int
    source: Source | None = None
    events: Int64 = 0
    overview: Overview | None = None
    distributed: Distributed | None = None
    # free-form rows: the operators and kernels views' columns, shown as they are
    top_operators: list[dict[str, Any]] = msgspec.field(default_factory=list)
    top_kernels: list[dict[str, Any]] = msgspec.field(default_factory=list)
    memory_peak: dict[str, dict[str, Int64]] = msgspec.field(default_factory=dict)
    devices: Devices | None = None
    ledger: Ledger | None = None
    gpu_idle: GpuIdle | None = None
    collective_calls: CollectiveCalls | None = None
    phases: Phases | None = None
    pipeline: Pipeline | None = None
    kernel_table: KernelTable | None = None
    roofline: Roofline | None = None


class Header(msgspec.Struct):
    """The fields that say what a file is, read alone when it is not a `Summary` (for the error's message)."""

    kind: Any = None
    version: Any = None


def from_dict(d: dict[str, Any]) -> Summary:
    """A summary given as a dict (hand-made ones in tests: this kind and version unless they say) as a `Summary`:
    typed, not checked."""
    return msgspec.convert({"kind": KIND, "version": VERSION, **d}, Summary)


def empty_phases() -> Phases:
    """The phases of a worker without steps."""
    from profiler_core.analysis.worker.worker_facts import empty_facts

    return msgspec.convert(empty_facts()["phases"], Phases)


def empty_kernel_table() -> KernelTable:
    """The kernel table of a worker with no kernels (a hand-made summary without one)."""
    from profiler_core.analysis.worker import kernel_table

    return msgspec.convert(kernel_table.empty(), KernelTable)


def plain(o: Any) -> Any:
    """A numpy value as the JSON value it stands for (`enc_hook` of the summary's encoding and of `convert`)."""
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"cannot store {type(o).__name__} in a summary")


T = TypeVar("T")


def convert(part: Any, type_: type[T]) -> T:
    """A summary part as its producer in profiler_core returns it (a dict, numpy values allowed) as its `msgspec`
    type, where a run-level function is fed a live part (`msgspec.ValidationError` when of another shape)."""
    return msgspec.convert(msgspec.to_builtins(part, enc_hook=plain), type_)


# ---------------------------------------------------------------------------------------------- check
def _check(ok: bool, what: str) -> None:
    if not ok:
        raise SummaryError(f"malformed summary: {what}")


def _one_length(d: Any, keys: tuple, what: str) -> int:
    """The common length of the lists d.k for k in keys."""
    n = None
    for k in keys:
        v = getattr(d, k)
        _check(n is None or len(v) == n, f"{what}.{k} has {len(v)} entries, not {n}")
        n = len(v)
    return n or 0


def check(s: Summary) -> None:
    """SummaryError unless a decoded summary holds every part, its lists that go together have one length and
    its indices are in range (what its types cannot say): a planted or damaged file is recomputed, never served."""
    from profiler_core.analysis.worker.pipeline import PROJECTION_VERSION

    _check(s.distributed is not None, "no distributed part")
    for k in ("source", "overview", "devices", "ledger", "gpu_idle", "collective_calls", "phases"):
        _check(getattr(s, k) is not None, f"{k} is not an object")
    _check(s.pipeline is not None, f"pipeline is not a version-{PROJECTION_VERSION} pipeline projection")
    _check(s.kernel_table is not None, "kernel_table is not an object")
    _check(s.roofline is not None, "roofline is not an object")
    r = s.roofline
    _check(
        r is not None
        and len(r.steps) == len(r.step_ms) == len(r.step_model_tflop) == len(r.step_all_tflop) == len(r.step_mfu),
        "roofline's per-step lists differ in length",
    )
    _check(s.events >= 0, "events is not a count")
    _check_distributed(s.distributed)  # type: ignore[arg-type]
    _check_ledger(s.ledger)  # type: ignore[arg-type]
    _check_gpu_idle(s.gpu_idle)  # type: ignore[arg-type]
    _check_calls(s.collective_calls)  # type: ignore[arg-type]
    _check_phases(s.phases)  # type: ignore[arg-type]
    _check_pipeline(s.pipeline)  # type: ignore[arg-type]
    _check_kernel_table(s.kernel_table)  # type: ignore[arg-type]


def _check_distributed(d: Distributed) -> None:
    for k in ("origin", "base_ns", "info", "gpus"):
        _check(getattr(d, k) is not UNSET, f"distributed.{k} is missing")
    _one_length(d.steps, ("step", "start", "end", "comp", "comm", "overlap"), "distributed.steps")
    coll = d.collectives
    names = _one_length(coll, ("names", "pg", "group_size"), "distributed.collectives")
    _one_length(coll, ("name", "step", "dur", "bytes", "wait"), "distributed.collectives")
    _check(all(0 <= x < names for x in coll.name), "distributed.collectives.name out of range")


def _check_ledger(led: Ledger) -> None:
    from profiler_core.analysis.worker.buckets import BUCKETS

    n = _one_length(led, ("steps", "wall_ns"), "ledger")
    b = led.buckets
    _check(sorted(b) == sorted(BUCKETS), "ledger.buckets are not the ledger's buckets")
    for k, e in b.items():
        _check((e.ns is None) == (e.recoverable_ns is None), f"ledger.buckets.{k}: ns without recoverable")
        if e.split is not UNSET:
            parts = ("below_bound_ns", "near_bound_ns", "no_roof_ns", "lost_ns", "recoverable_ns")
            _check(
                _one_length(e.split, parts, f"ledger.buckets.{k}.split") == n, f"ledger.buckets.{k}.split: not per step"
            )
            _check(all(len(v) == n for v in e.split.causes.values()), f"ledger.buckets.{k}.split.causes: not per step")
        if e.ns is not None:
            _check(
                _one_length(e, ("ns", "recoverable_ns"), f"ledger.buckets.{k}") == n,
                f"ledger.buckets.{k}: not one value per step",
            )


def _check_gpu_idle(g: GpuIdle) -> None:
    n = len(g.steps)
    cols = [*(("devices", c) for c in (g.devices or {}).values()), ("launches", g.launches or {})]
    for part, c in cols:
        for k, xs in c.items():
            _check(xs is None or len(xs) == n, f"gpu_idle.{part}.{k} is not one count per step")


def _check_calls(cc: CollectiveCalls) -> None:
    from profiler_core.analysis.worker.worker_facts import MAX_CALLS

    for k in ("bytes", "covered", "lead", "tail", "group_how"):
        _check(getattr(cc, k) is not None, f"collective_calls.{k} is missing")
    ng = _one_length(cc, ("groups", "group_pg", "group_size", "group_ranks", "group_how"), "collective_calls")
    nn = len(cc.names)
    n = _one_length(
        cc, ("group", "name", "step", "start", "dur", "bytes", "wait", "covered", "lead", "tail"), "collective_calls"
    )
    _check(not n or min(cc.dur) >= 0, "collective_calls.dur is negative")
    _check(not n or min(cc.lead or [0]) >= 0, "collective_calls.lead is negative")
    _check(not n or min(cc.tail or [0]) >= 0, "collective_calls.tail is negative")
    _check(n <= MAX_CALLS, "collective_calls holds too many calls")
    _check(not n or (min(cc.group) >= 0 and max(cc.group) < ng), "collective_calls.group out of range")
    _check(not n or (min(cc.name) >= 0 and max(cc.name) < nn), "collective_calls.name out of range")


def _check_phases(ph: Phases) -> None:
    from profiler_core.analysis.worker.worker_facts import MAX_STEPS, PHASES, TOP_N

    ns = _one_length(ph, ("step", "start", "end", *PHASES, "top_kernels", "top_ops"), "phases")
    _check(ns <= MAX_STEPS, "phases holds too many steps")
    nt = len(ph.names)
    for k in ("top_kernels", "top_ops"):
        v = getattr(ph, k)
        _check(all(len(x) <= TOP_N for x in v), f"phases.{k} is not a list of lists of at most {TOP_N} entries")
        pairs = [p for x in v for p in x]
        _check(set(map(len, pairs)) <= {2}, f"phases.{k} entries are not [name, value] pairs")
        idx = [p[0] for p in pairs]
        _check(
            set(map(type, idx)) <= {int} and (not idx or (min(idx) >= 0 and max(idx) < nt)),
            f"phases.{k}: a name out of range or a value not a number",
        )


def _check_pipeline(p: Pipeline) -> None:
    """`pipeline.check_projection`'s bounds and order (its types are `Pipeline`'s)."""
    from profiler_core.analysis.worker import pipeline as pp

    def ok(cond: bool, what: str) -> None:
        _check(cond, f"pipeline {what}")

    ok(p.version == pp.PROJECTION_VERSION, f"is not a version-{pp.PROJECTION_VERSION} pipeline projection")
    ok(len(p.steps) <= pp.MAX_STEPS, f"steps is not a list of at most {pp.MAX_STEPS}")
    for s in p.steps:
        ok(0 < len(s.spans) <= pp.MAX_SPANS, f"step {s.step}: not 1 to {pp.MAX_SPANS} spans")
        ok(all(a[3] <= b[3] for a, b in zip(s.spans, s.spans[1:])), f"step {s.step}: spans are not in time order")
        ok(len(s.p2p) <= pp.MAX_P2P, f"step {s.step}: p2p is not a list of at most {pp.MAX_P2P}")
        ok(all(-1 <= c[3] < len(s.spans) for c in s.p2p), f"step {s.step}: a P2P kernel's span is out of range")
        ok(len(s.busy) <= pp.MAX_BUSY_RANGES, f"step {s.step}: busy is not a list of at most {pp.MAX_BUSY_RANGES}")


def _check_kernel_table(kt: KernelTable) -> None:
    """`kernel_table.check`'s lengths and ranges (its types are `KernelTable`'s)."""
    from profiler_core.analysis.tables.kernel_places import NO_OP

    _one_length(kt, ("path", "name", "ordinal", "count", "total"), "kernel_table")
    _check(all(0 <= x < len(kt.paths) for x in kt.path), "kernel_table.path out of range")
    _check(all(x >= NO_OP for x in kt.ordinal), "kernel_table.ordinal is negative")
