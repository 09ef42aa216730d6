"""One trace file's summary: what the run-level views need, computed once by the views' own functions.

A summary is a JSON object (a few KB to a few hundred KB, far under 1 % of the trace):
  {"kind": "gpuscope-summary", "version": VERSION,
   "source": {"size", "mtime_ns", "etag"},       # the file it was computed from
   "events": N,                                  # complete events in the trace
   "overview": {"steps": [...], "average": {...}, "gpu": {...} | None},   # views.overview.overview
   "distributed": {...},                         # views.distributed.worker_summary: per-step
                                                 #   computation/communication/overlap, collectives
   "top_operators": [...], "top_kernels": [...], # the first TOP rows of the operators/kernels views
   "memory_peak": {"CPU"|"GPU0"...: {"allocated", "reserved"}},   # bytes, -1 when not recorded
   "devices": {"rank", "world_size", "backend", "gpus"}}
Never pickle: summaries may be computed on another machine and are read by the plugin.
"""
from __future__ import annotations

import gzip
from typing import Any

import msgspec
import numpy as np

from tb_plugin.summaries import fs

#: bump when a summary's fields or the views' definitions they hold change
#: (2: GPU work counts in the step it runs in; without ProfilerStep the whole trace window; Tensor Core names)
VERSION = 2
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
    from tb_plugin.views import distributed, kernels, operators, overview

    ov = overview.overview(t)
    dist = distributed.worker_summary(t)
    ops = operators.operators(t)["rows"][:TOP]
    ks = kernels.kernels(t)["rows"][:TOP]
    info = dist["info"]
    src = source or fs.Stat(0, 0)
    out = {
        "kind": KIND, "version": VERSION,
        "source": {"size": int(src.size), "mtime_ns": int(src.mtime_ns), "etag": src.etag},
        "events": int(len(t.events)),
        "overview": {"steps": ov["steps"], "average": ov["average"], "gpu": ov["gpu"]},
        "distributed": dist,
        "top_operators": ops, "top_kernels": ks,
        "memory_peak": _memory_peak(t),
        "devices": {"rank": info.get("rank"), "world_size": info.get("world_size"),
                    "backend": info.get("backend"), "gpus": dist["gpus"]},
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


def decode(data: bytes, source: fs.Stat | None = None) -> dict:
    """A summary from its file's bytes; SummaryError when damaged, of another version, or (with
    `source`) computed from another content of the trace file."""
    try:
        obj = msgspec.json.decode(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
    except (OSError, EOFError, msgspec.DecodeError, ValueError) as e:
        raise SummaryError(f"damaged summary ({e})") from None
    if not isinstance(obj, dict) or obj.get("kind") != KIND:
        raise SummaryError("not a gpuscope summary")
    if obj.get("version") != VERSION:
        raise SummaryError(f"summary version {obj.get('version')!r}, this gpuscope reads {VERSION}")
    if source is not None and not matches(obj, source):
        raise SummaryError("summary of another version of the trace file")
    d = obj.get("distributed")
    if not isinstance(d, dict) or not isinstance(d.get("steps"), dict) or not isinstance(d.get("collectives"), dict):
        raise SummaryError("summary without its distributed part")
    return obj


def matches(summary: dict, source: fs.Stat) -> bool:
    """Whether `summary` was computed from the file content `source` describes."""
    s = summary.get("source") or {}
    if s.get("size") != source.size:
        return False
    if source.etag and s.get("etag"):
        return s.get("etag") == source.etag
    return s.get("mtime_ns") == source.mtime_ns


def summarize_path(path: str) -> dict:
    """Reads the trace at `path` (a local path or URL) in this process and returns its summary."""
    from profiler_core.trace.reader import read_trace

    src = fs.stat(path)
    t = read_trace(path, processes=0)
    return summarize(t, src)
