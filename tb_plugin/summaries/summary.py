"""One trace file's summary: what the run-level views need, computed once by the views' own functions.

A summary is a JSON object (a few KB to a few hundred KB, far under 1 % of the trace):
  {"kind": "gpuscope-summary", "version": VERSION,
   "source": {"size", "mtime_ns", "etag", "ident"},   # the file it was computed from
   "events": N,                                  # complete events in the trace
   "overview": {"steps": [...], "average": {...}, "gpu": {...} | None},   # views.overview.overview
   "distributed": {...},                         # views.distributed.worker_summary: per-step
                                                 #   computation/communication/overlap, collectives
   "top_operators": [...], "top_kernels": [...], # the first TOP rows of the operators/kernels views
   "memory_peak": {"CPU"|"GPU0"...: {"allocated", "reserved"}},   # bytes, -1 when not recorded
   "devices": {"rank", "world_size", "backend", "gpus"},
   "ledger": {...},                              # diagnosis.ledger.worker_ledger: per-step buckets (ns)
   "gpu_idle": {...},                            # views.gpu_idle_summary: idle by cause, launches, queue
   "collective_calls": {...}, "phases": {...},   # diagnosis.worker_facts: the cross-rank diagnosis' input
   "pipeline": {...},                            # diagnosis.pipeline.project: the pipeline schedule's input
   "kernel_table": {...}}                        # diagnosis.kernel_table.project: the job diff's kernels
Never pickle: summaries may be computed on another machine and are read by the plugin.
"""

from __future__ import annotations

import gzip
import math
import zlib
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np

from profiler_core import settings
from tb_plugin.summaries import fs

#: bump when a summary's fields or the views' definitions they hold change
#: (2: GPU work counts in the step it runs in; without ProfilerStep the whole trace window; Tensor Core names;
#: 3: kernels replayed by CUDA graphs count for the ops that captured them;
#: 4: the recoverable-time ledger and the GPU idle projection;
#: 5: collective calls per process group and step phases for the cross-rank diagnosis;
#: 6: MPI collectives (mpi:: ops) are collective calls, their communicator the process group;
#: 7: the pipeline projection;
#: 8: the kernel table (kernels per op path and name with their place, for the job diff's alignment)
#: 9: per collective call, when its worker was ready for it and how long its compute idled at its end (`lead`, `tail`)
VERSION = 9
KIND = "gpuscope-summary"
TOP = 20


class SummaryError(ValueError):
    """A summary file that cannot be used (damaged, another version, another file's)."""


def _memory_peak(t: Any) -> dict:
    mem = getattr(t, "memory", None)
    if mem is None or not len(mem) or "device_type" not in mem:
        return {}
    out = {}
    for (dtype, did), g in mem.groupby(["device_type", "device_id"], sort=True):
        name = "CPU" if int(dtype) == 0 else f"GPU{int(did)}"
        out[name] = {"allocated": int(g["total_allocated"].max()), "reserved": int(g["total_reserved"].max())}
    return out


def summarize(t: Any, source: fs.Stat | None = None) -> dict:
    """The summary of one parsed trace (`source`: the file's identity, stored for validation)."""
    from profiler_core.analysis import step_breakdown
    from profiler_core.analysis.gpu_idle import gpu_idle_summary
    from profiler_core.analysis.tables import kernels, operators
    from profiler_core.analysis.worker import distributed, kernel_table, ledger, pipeline, worker_facts

    ov = step_breakdown.overview(t)
    dist = distributed.worker_summary(t)
    ops = operators.operators(t)["rows"][:TOP]
    ks = kernels.kernels(t)["rows"][:TOP]
    info = dist["info"]
    src = source or fs.Stat(0, 0)
    out = {
        "kind": KIND,
        "version": VERSION,
        "source": source_fields(src),
        "events": int(len(t.events)),
        "overview": {"steps": ov["steps"], "average": ov["average"], "gpu": ov["gpu"]},
        "distributed": dist,
        "top_operators": ops,
        "top_kernels": ks,
        "memory_peak": _memory_peak(t),
        "devices": {
            "rank": info.get("rank"),
            "world_size": info.get("world_size"),
            "backend": info.get("backend"),
            "gpus": dist["gpus"],
        },
        "ledger": ledger.worker_ledger(t),
        "gpu_idle": gpu_idle_summary.gpu_idle_summary(t),
        **worker_facts.worker_facts(t),
        "pipeline": pipeline.project(t),
        "kernel_table": kernel_table.project(t),
    }
    return normalize(out)


def _plain(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"cannot store {type(o).__name__} in a summary")


def normalize(summary: dict) -> dict:
    """The summary as it reads back from its file (plain JSON types), so in-process and stored agree."""
    return msgspec.json.decode(msgspec.json.encode(summary, enc_hook=_plain))


def encode(summary: dict) -> bytes:
    """The bytes of a summary file: gzipped JSON."""
    return gzip.compress(msgspec.json.encode(summary, enc_hook=_plain), compresslevel=6, mtime=0)


#: a summary file bigger than this (on disk, then as JSON) is refused unread: real ones hold a few
#: hundred KB, and every JSON number becomes a Python object of about 30 bytes when decoded
MAX_FILE_BYTES = settings.get("GPUSCOPE_MAX_SUMMARY_BYTES")


def _json_bytes(data: bytes) -> bytes:
    """The JSON text of a summary file (gunzipped, never beyond MAX_FILE_BYTES)."""
    if len(data) > MAX_FILE_BYTES:
        raise SummaryError(f"{len(data)} bytes, more than the {MAX_FILE_BYTES} a summary may hold")
    if data[:2] != b"\x1f\x8b":
        return data
    d = zlib.decompressobj(31)
    try:
        out = d.decompress(data, MAX_FILE_BYTES + 1)
    except zlib.error as e:
        raise SummaryError(f"damaged summary ({e})") from None
    if len(out) > MAX_FILE_BYTES:
        raise SummaryError(f"more than {MAX_FILE_BYTES} bytes once gunzipped")
    if not d.eof:
        raise SummaryError("damaged summary (truncated gzip)")
    return out


def decode(data: bytes, source: fs.Stat | None = None) -> dict:
    """A summary from its file's bytes; SummaryError when damaged, too big, of another version,
    not of the expected shape (`validate`), or (with `source`) computed from another content of
    the trace file."""
    try:
        obj = msgspec.json.decode(_json_bytes(data))
    except (msgspec.DecodeError, ValueError, RecursionError) as e:
        if isinstance(e, SummaryError):
            raise
        raise SummaryError(f"damaged summary ({e})") from None
    if not isinstance(obj, dict) or obj.get("kind") != KIND:
        raise SummaryError("not a gpuscope summary")
    if obj.get("version") != VERSION:
        raise SummaryError(f"summary version {obj.get('version')!r}, this gpuscope reads {VERSION}")
    if source is not None and not matches(obj, source):
        raise SummaryError("summary of another version of the trace file")
    validate(obj)
    return obj


_INT64 = 1 << 63


def _is_num(x: Any) -> bool:
    return (isinstance(x, int) and not isinstance(x, bool) and -_INT64 <= x < _INT64) or (
        isinstance(x, float) and math.isfinite(x)
    )


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and -_INT64 <= x < _INT64


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise SummaryError(f"malformed summary: {what}")


def _all(item: Callable[[Any], bool], v: list) -> bool:
    """Whether `item` accepts every element of `v` (for the common item checks: by the set of element types and
    the list's extremes, without a Python call per element)."""
    fast = _FAST.get(item)
    return fast(v) if fast is not None else all(item(x) for x in v)


def _in_int64(v: list) -> bool:
    return not v or (min(v) >= -_INT64 and max(v) < _INT64)


def _ints_ok(v: list) -> bool:
    return set(map(type, v)) <= {int} and _in_int64(v)


def _nums_ok(v: list) -> bool:
    types = set(map(type, v))
    if not types <= {int, float}:
        return False
    if float not in types:
        return _in_int64(v)
    if not all(map(math.isfinite, [x for x in v if type(x) is float])):
        return False
    return int not in types or _in_int64([x for x in v if type(x) is int])


def _ints_or_none_ok(v: list) -> bool:
    return set(map(type, v)) <= {int, type(None)} and _in_int64([x for x in v if x is not None])


def _strs_ok(v: list) -> bool:
    return set(map(type, v)) <= {str}


def _lists(d: dict, keys: tuple, item: Callable[[Any], bool], what: str) -> int:
    """The common length of the lists d[k] for k in keys, each of items `item` accepts."""
    n = None
    for k in keys:
        v = d.get(k)
        _check(isinstance(v, list) and _all(item, v), f"{what}.{k} is not a list of the expected type")
        _check(n is None or len(v) == n, f"{what}.{k} has {len(v)} entries, not {n}")
        n = len(v)
    return n or 0


def _is_str(x: Any) -> bool:
    return isinstance(x, str)


def _is_scalar(x: Any) -> bool:
    return x is None or isinstance(x, (str, bool)) or _is_num(x)


def validate(obj: dict) -> None:
    """SummaryError unless every field the run-level views read has its type and the lists that
    go together have one length (a planted or damaged file is recomputed, never served)."""
    d = obj.get("distributed")
    _check(isinstance(d, dict), "no distributed part")
    _check(d.get("origin") is None or _is_num(d.get("origin")), "distributed.origin is not a number")
    steps = d.get("steps")
    _check(isinstance(steps, dict), "distributed.steps is not an object")
    n = _lists(steps, ("step",), _is_str, "distributed.steps")
    _check(
        _lists(steps, ("start", "end", "comp", "comm", "overlap"), _is_num, "distributed.steps") == n,
        "distributed.steps lists differ in length",
    )
    coll = d.get("collectives")
    _check(isinstance(coll, dict), "distributed.collectives is not an object")
    names = _lists(coll, ("names", "pg"), _is_str, "distributed.collectives")
    _lists(coll, ("group_size",), _is_int, "distributed.collectives")
    _check(len(coll["group_size"]) == names, "distributed.collectives.group_size does not match names")
    _lists(coll, ("name", "step", "dur", "bytes", "wait"), _is_int, "distributed.collectives")
    _check(all(0 <= x < names for x in coll["name"]), "distributed.collectives.name out of range")
    info = d.get("info")
    _check(
        isinstance(info, dict) and all(_is_scalar(v) for v in info.values()),
        "distributed.info is not an object of plain values",
    )
    gpus = d.get("gpus")
    _check(
        isinstance(gpus, dict)
        and all(isinstance(v, dict) and all(_is_scalar(x) for x in v.values()) for v in gpus.values()),
        "distributed.gpus is not an object of objects",
    )
    _check(_is_int(obj.get("events")) and obj["events"] >= 0, "events is not a count")
    peak = obj.get("memory_peak")
    _check(
        isinstance(peak, dict)
        and all(isinstance(v, dict) and all(_is_int(x) for x in v.values()) for v in peak.values()),
        "memory_peak is not an object of byte counts",
    )
    ov = obj.get("overview")
    _check(
        isinstance(ov, dict)
        and isinstance(ov.get("average"), dict)
        and all(_is_scalar(v) for v in ov["average"].values()),
        "overview.average is not an object of numbers",
    )
    _check(
        isinstance(ov.get("steps"), list) and (ov.get("gpu") is None or isinstance(ov.get("gpu"), dict)),
        "overview is not of the expected shape",
    )
    for k in ("top_operators", "top_kernels"):
        _check(isinstance(obj.get(k), list) and all(isinstance(r, dict) for r in obj[k]), f"{k} is not a list of rows")
    _check(isinstance(obj.get("devices"), dict), "devices is not an object")
    _validate_ledger(obj.get("ledger"))
    _validate_gpu_idle(obj.get("gpu_idle"))
    _validate_facts(obj)
    _validate_pipeline(obj.get("pipeline"))
    _validate_kernel_table(obj.get("kernel_table"))


def _validate_kernel_table(p: Any) -> None:
    from profiler_core.analysis.worker.kernel_table import check

    try:
        check(p)
    except ValueError as e:
        raise SummaryError(f"malformed summary: kernel_table {e}") from None


def _validate_pipeline(p: Any) -> None:
    from profiler_core.analysis.worker.pipeline import check_projection

    try:
        check_projection(p)
    except ValueError as e:
        raise SummaryError(f"malformed summary: pipeline {e}") from None


def _is_opt_str(x: Any) -> bool:
    return x is None or isinstance(x, str)


def _validate_ledger(led: Any) -> None:
    from profiler_core.analysis.worker.buckets import BUCKETS

    _check(isinstance(led, dict), "ledger is not an object")
    n = _lists(led, ("steps",), _is_str, "ledger")
    _check(_lists(led, ("wall_ns",), _is_int, "ledger") == n, "ledger.wall_ns does not match ledger.steps")
    _check(
        isinstance(led.get("has_gpu"), bool) and _is_opt_str(led.get("reason")), "ledger is not of the expected shape"
    )
    b = led.get("buckets")
    _check(isinstance(b, dict) and sorted(b) == sorted(BUCKETS), "ledger.buckets are not the ledger's buckets")
    for k, e in b.items():
        _check(isinstance(e, dict) and _is_opt_str(e.get("reason")), f"ledger.buckets.{k} is not of the expected shape")
        _check(
            (e.get("ns") is None) == (e.get("recoverable_ns") is None), f"ledger.buckets.{k}: ns without recoverable"
        )
        if e.get("ns") is not None:
            _check(
                _lists(e, ("ns", "recoverable_ns"), _is_int, f"ledger.buckets.{k}") == n,
                f"ledger.buckets.{k}: not one value per step",
            )


def _validate_gpu_idle(g: Any) -> None:
    _check(isinstance(g, dict), "gpu_idle is not an object")
    n = _lists(g, ("steps",), _is_str, "gpu_idle")
    _check(_is_int(g.get("kernel_wait_threshold_ns")), "gpu_idle.kernel_wait_threshold_ns is not a number")
    _check(
        isinstance(g.get("reasons"), list) and all(map(_is_str, g["reasons"])),
        "gpu_idle.reasons is not a list of texts",
    )
    q = g.get("queue_max")
    _check(isinstance(q, dict) and all(_is_int(v) for v in q.values()), "gpu_idle.queue_max is not an object of counts")
    for part in ("devices", "launches"):
        v = g.get(part)
        _check(v is None or isinstance(v, dict), f"gpu_idle.{part} is not an object")
        cols = v.values() if part == "devices" and v is not None else [v] if v is not None else []
        for c in cols:
            _check(isinstance(c, dict), f"gpu_idle.{part} is not an object of objects")
            for k, xs in c.items():
                _check(
                    xs is None or (isinstance(xs, list) and len(xs) == n and _ints_ok(xs)),
                    f"gpu_idle.{part}.{k} is not one count per step",
                )


def _is_int_or_none(x: Any) -> bool:
    return x is None or _is_int(x)


def _int_lists(d: dict, keys: tuple, what: str) -> int:
    """`_lists` of int64 values, checked by type and range at once (these lists hold every collective call)."""
    n = None
    for k in keys:
        v = d.get(k)
        _check(
            isinstance(v, list) and _ints_ok(v),
            f"{what}.{k} is not a list of integers",
        )
        assert isinstance(v, list)
        _check(n is None or len(v) == n, f"{what}.{k} has {len(v)} entries, not {n}")
        n = len(v)
    return n or 0


def _validate_facts(obj: dict) -> None:
    """The diagnosis' keys (`diagnosis.worker_facts`): their lists typed, of one length, indices in range."""
    from profiler_core.analysis.worker.worker_facts import MAX_CALLS, MAX_STEPS, PHASES, TOP_N

    cc = obj.get("collective_calls")
    if not isinstance(cc, dict):
        raise SummaryError("malformed summary: collective_calls is not an object")
    ng = _lists(cc, ("groups", "group_pg"), _is_str, "collective_calls")
    _check(_lists(cc, ("group_size",), _is_int, "collective_calls") == ng, "collective_calls.group_size does not match")
    ranks = cc.get("group_ranks")
    _check(
        isinstance(ranks, list)
        and len(ranks) == ng
        and all(r is None or (isinstance(r, list) and all(_is_int(x) for x in r)) for r in ranks),
        "collective_calls.group_ranks is not a list of rank lists",
    )
    nn = _lists(cc, ("names",), _is_str, "collective_calls")
    n = _int_lists(
        cc, ("group", "name", "step", "start", "dur", "bytes", "wait", "covered", "lead", "tail"), "collective_calls"
    )
    _check(not n or min(cc["dur"]) >= 0, "collective_calls.dur is negative")
    _check(all(x >= 0 for x in cc["lead"]), "collective_calls.lead is negative")
    _check(all(x >= 0 for x in cc["tail"]), "collective_calls.tail is negative")
    _check(n <= MAX_CALLS and _is_int(cc.get("dropped")), "collective_calls holds too many calls")
    _check(not n or (min(cc["group"]) >= 0 and max(cc["group"]) < ng), "collective_calls.group out of range")
    _check(not n or (min(cc["name"]) >= 0 and max(cc["name"]) < nn), "collective_calls.name out of range")
    ph = obj.get("phases")
    if not isinstance(ph, dict):
        raise SummaryError("malformed summary: phases is not an object")
    ns = _lists(ph, ("step",), _is_str, "phases")
    _check(ns <= MAX_STEPS, "phases holds too many steps")
    _check(_lists(ph, ("start", "end"), _is_int, "phases") == ns, "phases.start/end do not match the steps")
    _check(_lists(ph, PHASES, _is_int_or_none, "phases") == ns, "phases lists do not match the steps")
    nt = _lists(ph, ("names",), _is_str, "phases")

    for k in ("top_kernels", "top_ops"):
        v = ph.get(k)
        _check(
            isinstance(v, list) and set(map(type, v)) <= {list} and all(len(x) <= TOP_N for x in v),
            f"phases.{k} is not a list of lists of at most {TOP_N} entries",
        )
        pairs = [p for x in v for p in x]
        _check(
            set(map(type, pairs)) <= {list} and set(map(len, pairs)) <= {2},
            f"phases.{k} entries are not [name, value] pairs",
        )
        idx = [p[0] for p in pairs]
        _check(
            _ints_ok(idx) and (not idx or (min(idx) >= 0 and max(idx) < nt)) and _nums_ok([p[1] for p in pairs]),
            f"phases.{k}: a name out of range or a value not a number",
        )
        _check(len(v) == ns, "phases tops do not match the steps")
    _check(
        isinstance(ph.get("reasons"), dict) and all(isinstance(v, str) for v in ph["reasons"].values()),
        "phases.reasons is not an object of texts",
    )


#: `_all`'s checks of whole lists, one per element check
_FAST: dict[Callable[[Any], bool], Callable[[list], bool]] = {
    _is_int: _ints_ok,
    _is_num: _nums_ok,
    _is_str: _strs_ok,
    _is_int_or_none: _ints_or_none_ok,
}


def source_fields(src: fs.Stat) -> dict:
    """The summary's record of the trace file it was computed from."""
    return {
        "size": int(src.size),
        "mtime_ns": int(src.mtime_ns),
        "etag": src.etag,
        "ident": [int(x) for x in src.ident],
    }


def matches(summary: dict, source: fs.Stat) -> bool:
    """Whether `summary` was computed from the file content `source` describes: the parse cache's
    rule (size and ETag remotely; size, mtime, inode and ctime locally)."""
    s = summary.get("source") or {}
    if s.get("size") != source.size:
        return False
    if source.etag and s.get("etag"):
        return s.get("etag") == source.etag
    if source.ident:
        return s.get("ident") == list(source.ident)
    return s.get("mtime_ns") == source.mtime_ns


def summarize_path(path: str) -> dict:
    """Reads the trace at `path` (a local path or URL) in this process and returns its summary."""
    from profiler_core.trace.read.reader import read_trace

    src = fs.stat(path)
    t = read_trace(path, processes=0, tune_memory=True)
    return summarize(t, src)
