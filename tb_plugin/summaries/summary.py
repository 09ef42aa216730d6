"""One trace file's summary: what the run-level views need, computed once by the analyses that own each part.

A summary is a JSON object (a few KB to a few hundred KB, far under 1 % of the trace):
  {"kind": "gpuscope-summary", "version": VERSION,
   "source": {"size", "mtime_ns", "etag", "ident"},   # the file it was computed from
   "events": N,                                  # complete events in the trace
   "overview": {"steps": [...], "average": {...}, "gpu": {...} | None},   # analysis.step_breakdown.overview
   "distributed": {...},                         # analysis.worker.distributed.worker_summary: per-step
                                                 #   computation/communication/overlap, collectives
   "top_operators": [...], "top_kernels": [...], # the first TOP rows of the operator and kernel tables
   "memory_peak": {"CPU"|"GPU0"...: {"allocated", "reserved"}},   # bytes, -1 when not recorded
   "devices": {"rank", "world_size", "backend", "host", "gpus"},   # host: None unless the trace names it
   "ledger": {...},                              # analysis.worker.ledger.worker_ledger: per-step buckets (ns)
   "gpu_idle": {...},                            # analysis.gpu_idle.gpu_idle_summary: idle by cause, launches, queue
   "collective_calls": {...}, "phases": {...},   # analysis.worker.worker_facts: the cross-rank diagnosis' input
   "pipeline": {...},                            # analysis.worker.pipeline.project: the pipeline schedule's input
   "kernel_table": {...}}                        # analysis.worker.kernel_table.project: the job diff's kernels
Its types, what a stored one must hold and the version history: `schema` (`schema.Summary`).
Never pickle: summaries may be computed on another machine and are read by the plugin.
"""

from __future__ import annotations

import gzip
import zlib
from typing import Any

import msgspec

from profiler_core import settings
from tb_plugin.summaries import fs
from tb_plugin.summaries.schema import KIND, VERSION, Header, Summary, SummaryError, check, plain

TOP = 20


def _memory_peak(t: Any) -> dict:
    mem = getattr(t, "memory", None)
    if mem is None or not len(mem) or "device_type" not in mem:
        return {}
    out = {}
    for (dtype, did), g in mem.groupby(["device_type", "device_id"], sort=True):
        name = "CPU" if int(dtype) == 0 else f"GPU{int(did)}"
        out[name] = {"allocated": int(g["total_allocated"].max()), "reserved": int(g["total_reserved"].max())}
    return out


def _host(t: Any) -> str | None:
    """The host that wrote the trace, where its top level names it (gpuscope's writer: `host_name`), else None."""
    meta = getattr(t, "metadata", None)
    host = meta.get("host_name") if isinstance(meta, dict) else None
    return host[:200] if isinstance(host, str) and host else None


def summarize(t: Any, source: fs.Stat | None = None) -> Summary:
    """The summary of one parsed trace (`source`: the file's identity, stored for validation)."""
    from profiler_core.analysis import step_breakdown
    from profiler_core.analysis.gpu_idle import gpu_idle_summary
    from profiler_core.analysis.roofline.worker import worker_roofline
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
            "host": _host(t),
            "gpus": dist["gpus"],
        },
        "ledger": ledger.worker_ledger(t),
        "gpu_idle": gpu_idle_summary.gpu_idle_summary(t),
        **worker_facts.worker_facts(t),
        "pipeline": pipeline.project(t),
        "kernel_table": kernel_table.project(t),
        "roofline": worker_roofline(t),
    }
    # the producers' dicts (numpy values allowed) as the schema's Structs: what a file of it decodes to
    return msgspec.json.decode(msgspec.json.encode(out, enc_hook=plain), type=Summary)


def encode(summary: Summary | dict) -> bytes:
    """The bytes of a summary file: gzipped JSON (a `Summary` gives the bytes of its dict: same keys, same order)."""
    return gzip.compress(msgspec.json.encode(summary, enc_hook=plain), compresslevel=6, mtime=0)


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


def decode(data: bytes, source: fs.Stat | None = None) -> Summary:
    """A summary from its file's bytes; SummaryError when damaged, too big, of another version,
    not of the expected shape (`schema.Summary`, `schema.check`), or (with `source`) computed from another
    content of the trace file."""
    raw = _json_bytes(data)
    try:
        obj = msgspec.json.decode(raw, type=Summary)
    except msgspec.ValidationError as e:
        _header(raw)
        raise SummaryError(f"malformed summary: {e}") from None
    except (msgspec.DecodeError, ValueError, RecursionError) as e:
        raise SummaryError(f"damaged summary ({e})") from None
    _header(obj)
    if source is not None and not matches(obj, source):
        raise SummaryError("summary of another version of the trace file")
    check(obj)
    return obj


def _header(obj: bytes | Summary) -> None:
    """SummaryError unless `obj` (a decoded summary, or JSON that is not one) says it is a summary of this version."""
    h: Header | Summary
    if isinstance(obj, bytes):
        try:
            h = msgspec.json.decode(obj, type=Header)
        except (msgspec.DecodeError, ValueError, RecursionError):
            raise SummaryError("not a gpuscope summary") from None
    else:
        h = obj
    if h.kind != KIND:
        raise SummaryError("not a gpuscope summary")
    if h.version != VERSION:
        raise SummaryError(f"summary version {h.version!r}, this gpuscope reads {VERSION}")


def source_fields(src: fs.Stat) -> dict:
    """The summary's record of the trace file it was computed from."""
    return {
        "size": int(src.size),
        "mtime_ns": int(src.mtime_ns),
        "etag": src.etag,
        "ident": [int(x) for x in src.ident],
    }


def matches(summary: Summary, source: fs.Stat) -> bool:
    """Whether `summary` was computed from the file content `source` describes: the parse cache's
    rule (size and ETag remotely; size, mtime, inode and ctime locally)."""
    s = summary.source
    if s is None or s.size != source.size:
        return False
    if source.etag and s.etag:
        return s.etag == source.etag
    if source.ident:
        return s.ident == list(source.ident)
    return s.mtime_ns == source.mtime_ns


def summarize_path(path: str) -> Summary:
    """Reads the trace at `path` (a local path or URL) in this process and returns its summary."""
    from profiler_core.trace.read.reader import read_trace

    src = fs.stat(path)
    t = read_trace(path, processes=0, tune_memory=True)
    return summarize(t, src)
