"""One raw event of a loaded trace, read back from its file on request (the model keeps columns
only): the event-detail route's look-up. `TraceData` itself does no I/O."""

from __future__ import annotations

import bisect
import os
from typing import Any

import msgspec

from profiler_core import storage
from profiler_core.trace.model import TraceData
from profiler_core.trace.read import stream
from profiler_core.trace.read.decode import ANY_DECODER, RAW_LIST_DECODER, TraceReadError, repair_json
from profiler_core.trace.read.gunzip import GZIP_MAGIC
from profiler_core.trace.read.reader import event_raws, read_bytes, split_top


class TraceChangedError(RuntimeError):
    """The trace file changed on disk since it was parsed, so an event's `idx` cannot be trusted."""


def trace_event(t: TraceData, idx: int) -> Any:
    """The whole raw event at position `idx` of `t`'s file's traceEvents (TraceChangedError when
    the file is no longer the one `t` was parsed from; IndexError when there is no such event)."""
    if (
        t.source_stat != (-1, -1)
        and (storage.is_remote(t.path) or os.path.exists(t.path))
        and storage.fingerprint(t.path) != tuple(t.source_stat)
    ):
        raise TraceChangedError(f"{t.path} changed on disk since it was loaded")
    return read_event(t.path, int(idx), t.event_index)


def trace_event_args(t: TraceData, idx: int) -> dict:
    """The full `args` of the event at position `idx` of `t`'s file ({} when it has none)."""
    event = trace_event(t, idx)
    args = event.get("args") if isinstance(event, dict) else None
    return args if isinstance(args, dict) else {}


def read_event(path: str | os.PathLike, idx: int, index: tuple = ()) -> Any:
    """The raw event (decoded JSON) at position `idx` of a trace file's traceEvents.

    With `index` ((first idx, start, end) byte ranges of the pieces the reader cut, in the
    decompressed stream) only the piece holding the event is decoded."""
    path = os.fspath(path)
    if index and idx >= 0:
        pos = bisect.bisect_right([p[0] for p in index], idx) - 1
        if pos >= 0:
            first, begin, end = index[pos]
            text = b"[" + _byte_range(path, begin, end) + b"]"
            try:
                raws = RAW_LIST_DECODER.decode(text)
            except msgspec.DecodeError:
                raws = RAW_LIST_DECODER.decode(repair_json(text) or text)
            if idx - first < len(raws):
                return ANY_DECODER.decode(raws[idx - first])
            if pos + 1 == len(index):
                raise IndexError(f"event index {idx} out of range (trace has {first + len(raws)} events)")
            raise TraceReadError(f"{path}: event index does not match the file")
    data = read_bytes(path)
    try:
        _, events_raw = split_top(data, path)
        raws = event_raws(events_raw, path)
    except TraceReadError:
        data = repair_json(data) or data
        _, events_raw = split_top(data, path)
        raws = event_raws(events_raw, path)
    if not 0 <= idx < len(raws):
        raise IndexError(f"event index {idx} out of range (trace has {len(raws)} events)")
    return ANY_DECODER.decode(raws[idx])


def _byte_range(path: str, begin: int, end: int) -> bytes:
    """Bytes [begin, end) of the file's decompressed stream (decompressing what comes before; one
    range read for a plain JSON file)."""
    if storage.read_range(path, 0, 2) != GZIP_MAGIC:
        return storage.read_range(path, begin, end)
    out = []
    pos = 0
    for block in stream.read_blocks(path):
        if pos + len(block) > begin:
            out.append(block[max(0, begin - pos) : end - pos])
        pos += len(block)
        if pos >= end:
            break
    return b"".join(out)
