"""JSON -> msgspec structs: the event and args structs the reader decodes into, and the lenient
decoding of pieces (repairing what old writers leave in, skipping entries that are not events)."""

from __future__ import annotations

import re
from operator import attrgetter
from typing import Any

import msgspec

from profiler_core import settings

CHUNK = 4096  # events per chunk on the whole-file path (small: the decoded chunk stays in cache)
#: uncompressed JSON bytes read per byte of that budget (reading a trace peaks at about 0.6-1 byte
#: of memory per byte of its JSON, so a trace at the limit stays within the budget)
JSON_PER_LOADED_BYTE = 1


def max_trace_bytes() -> int:
    """Largest uncompressed trace the reader reads (bytes): GPUSCOPE_MAX_TRACE_BYTES when set,
    else JSON_PER_LOADED_BYTE times the memory budget GPUSCOPE_MAX_LOADED_BYTES (default 4 GiB)."""
    explicit = settings.get("GPUSCOPE_MAX_TRACE_BYTES")
    if explicit is not None:
        return explicit
    return JSON_PER_LOADED_BYTE * settings.get("GPUSCOPE_MAX_LOADED_BYTES")


#: memory one event may take while a trace is read (its columns, about 220 bytes, and the sorting
#: and merging copies of them): a trace of tiny events (a gzip bomb of `{"ph":"X"}` repeated) is
#: bounded by its event count, not by its JSON size
EVENT_PEAK_BYTES = 400


def max_trace_events() -> int:
    """Most events (entries of traceEvents) the reader reads: the memory budget
    GPUSCOPE_MAX_LOADED_BYTES (default 4 GiB) over EVENT_PEAK_BYTES."""
    return settings.get("GPUSCOPE_MAX_LOADED_BYTES") // EVENT_PEAK_BYTES


def too_many_events(path: str, limit: int) -> TraceReadError:
    """The error for a trace of more than `limit` events."""
    return TraceReadError(
        f"{path}: trace has more than {limit} events, more than the memory budget "
        "holds (raise GPUSCOPE_MAX_LOADED_BYTES to read it)"
    )


def too_big(path: str, limit: int) -> TraceReadError:
    """The error for a trace over `limit` uncompressed bytes, naming the setting that raises it."""
    how = (
        "GPUSCOPE_MAX_TRACE_BYTES"
        if settings.get("GPUSCOPE_MAX_TRACE_BYTES") is not None
        else "GPUSCOPE_MAX_LOADED_BYTES, the memory budget for loaded traces,"
    )
    return TraceReadError(f"{path}: trace is larger than {limit} bytes uncompressed (raise {how} to read it)")


#: the limit at import time (read again by max_trace_bytes() at each read)
MAX_TRACE_BYTES = max_trace_bytes()


class TraceReadError(ValueError):
    """A file that is not a readable Kineto trace; the message names the file and the problem."""


# --------------------------------------------------------------------------- decoding structs
_ARG_NAMES = {
    "ext_id": "External id",
    "ext_id_lc": "external id",
    "registers": "registers per thread",
    "shared_memory": "shared memory",
    "blocks_per_sm": "blocks per SM",
    "static_shared_memory": "static shared memory",
    "dynamic_shared_memory": "dynamic shared memory",
    "warps_per_sm": "warps per SM",
    "occupancy": "est. achieved occupancy %",
    "nbytes": "bytes",
    "input_dims": "Input Dims",
    "input_type": "Input type",
    "call_stack": "Call stack",
    "input_dims_v18": "Input dims",  # torch <= 1.8's spelling (arg_spellings.py)
    "python_id": "Python id",
    "python_parent_id": "Python parent id",
    "python_module_id": "Python module id",
    "sequence_nr": "Sequence number",
    "fwd_thread": "Fwd thread id",
    "coll_name": "Collective name",
    "in_nelems": "In msg nelems",
    "out_nelems": "Out msg nelems",
    "group_size": "Group size",
    "pg_name": "Process Group Name",
    "graph_id": "graph id",
    "graph_node_id": "graph node id",
    "mem_bytes": "Bytes",
    "addr": "Addr",
    "total_allocated": "Total Allocated",
    "total_reserved": "Total Reserved",
    "device_type": "Device Type",
    "device_id": "Device Id",
    "m_name": "name",
    "m_labels": "labels",
    "m_sort_index": "sort_index",
}


_NO_RAW = msgspec.Raw(b"")  # the default of absent raw args (one shared object)


class _Args(msgspec.Struct, frozen=True, gc=False, rename=lambda f: _ARG_NAMES.get(f, f)):
    """The args keys the columns need, under Kineto's names; every other key is skipped.

    Fields follow Kineto's key order (cpu_op first): msgspec looks keys up fastest that way."""

    ext_id: Any = None
    # -1 (the column's missing value) when absent: cpu_op events carry these and user annotations do
    # not, and a default the column takes as it is converts the mix in one pass
    sequence_nr: Any = -1
    fwd_thread: Any = -1
    input_type: msgspec.Raw = msgspec.Raw(b"")
    input_dims: msgspec.Raw = msgspec.Raw(b"")
    input_dims_v18: msgspec.Raw = _NO_RAW
    call_stack: Any = None
    coll_name: Any = None
    dtype: Any = None
    in_nelems: Any = None
    out_nelems: Any = None
    group_size: Any = None
    pg_name: Any = None
    # [memory] instant events
    total_reserved: Any = None
    total_allocated: Any = None
    mem_bytes: Any = None
    device_id: Any = None
    device_type: Any = None
    addr: Any = None
    # python_function
    python_parent_id: Any = None
    python_id: Any = None
    python_module_id: Any = None
    # GPU activities and runtime calls
    device: Any = None
    stream: Any = None
    correlation: Any = None
    ext_id_lc: Any = None
    registers: Any = None
    shared_memory: Any = None
    static_shared_memory: Any = None
    dynamic_shared_memory: Any = None
    blocks_per_sm: Any = None
    warps_per_sm: Any = None
    grid: Any = None
    block: Any = None
    occupancy: Any = None
    nbytes: Any = None
    graph_id: Any = None
    graph_node_id: Any = None
    # M metadata events
    m_name: Any = None
    m_labels: Any = None
    m_sort_index: Any = None


_NO_ARGS = _Args()


class _LooseEvent(msgspec.Struct, gc=False):
    """An event's top-level fields; alone, the fallback when its args is not an object (dropped)."""

    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    id: Any = None
    bp: Any = None


class _Event(_LooseEvent, gc=False):
    args: _Args = _NO_ARGS  # shared, read-only: events without args (flows ...) allocate none


_CHUNK_DECODER = msgspec.json.Decoder(list[_Event])
_EVENT_DECODER = msgspec.json.Decoder(_Event)
_LOOSE_DECODER = msgspec.json.Decoder(_LooseEvent)
_RAW_LIST_DECODER = msgspec.json.Decoder(list[msgspec.Raw])
_TOP_DECODER = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ANY_DECODER = msgspec.json.Decoder()


TOO_DEEP = "events nested too deeply to read skipped"
_NOT_EVENT_OBJECT = "entries of traceEvents that are not event objects"


def _count(counts: dict, what: str) -> None:
    counts[what] = counts.get(what, 0) + 1


def _decode_one(raw: Any, counts: dict) -> Any:
    """One raw event -> an `_Event`; its args dropped when unreadable; None when it is not an
    event object or nests too deeply to decode (each counted)."""
    try:
        return _EVENT_DECODER.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError):
        pass
    except RecursionError:
        _count(counts, TOO_DEEP)
        return None
    try:
        loose = _LOOSE_DECODER.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError):
        _count(counts, _NOT_EVENT_OBJECT)
        return None
    except RecursionError:
        _count(counts, TOO_DEEP)
        return None
    _count(counts, "events with unreadable args (args dropped)")
    return _Event(**{f: getattr(loose, f) for f in loose.__struct_fields__})


def _decode_chunk(raws: list, counts: dict) -> list:
    """Decode a slice of raw events into `_Event`s; undecodable ones become None (counted)."""
    buf = b"[" + b",".join(raws) + b"]"
    try:
        return _CHUNK_DECODER.decode(buf)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        pass
    return [_decode_one(raw, counts) for raw in raws]


#: a JSON string, or one of the characters that shape the structure around it
_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},]')


def element_bounds(
    buf: bytes | memoryview, pos: int = 0, end: int | None = None, stop_after: int | None = None
) -> tuple[list, int]:
    """(start, end) of each element of a JSON array's content buf[pos:end] (the text between its
    brackets) that a comma closes, found by a scan that skips strings and tracks nesting without
    recursion (linear in the bytes scanned); and where the rest begins (the element after the
    last comma, or the array's closing bracket). With `stop_after`, the scan stops at the first
    comma past that offset."""
    end = len(buf) if end is None else end
    depth, start, out = 0, pos, []
    for m in _TOKENS.finditer(buf, pos, end):
        c = buf[m.start()]
        if c == 34:  # a string
            continue
        if c in (123, 91):
            depth += 1
        elif c in (125, 93):
            depth -= 1
            if depth < 0:  # the array's own end
                return out, start
        elif depth == 0:  # a comma between two elements
            out.append((start, m.start()))
            start = m.end()
            if stop_after is not None and start > stop_after:
                break
    return out, start


def _decode_elements(inner: bytes, counts: dict) -> list:
    """Decode array content element by element (after a whole-piece failure such as one event
    nesting too deeply): every element that reads is kept, the others are counted."""
    bounds, rest = element_bounds(inner)
    if inner[rest:].strip():
        bounds.append((rest, len(inner)))
    return [_decode_one(inner[a:b], counts) for a, b in bounds if inner[a:b].strip()]


class _NotStreamable(Exception):
    """The quick splitter could not cut this file safely; the whole-file path reads it."""


_BARE_WORDS = re.compile(rb"([:\[,]\s*)(N/A|NaN|-?Infinity|nan|-?inf)(?=\s*[,}\]])")
_CONTROL = bytes.maketrans(bytes(c for c in range(32) if c not in (10, 13)), b" " * 30)
REPAIRED = "pieces of invalid JSON repaired (bare N/A/NaN/Infinity quoted, control characters)"


def repair_json(data: bytes) -> bytes | None:
    """Fix what old Kineto/Python writers leave in: bare N/A, NaN, Infinity; raw control chars."""
    fixed = _BARE_WORDS.sub(rb'\1"\2"', data).translate(_CONTROL)
    return None if fixed == data else fixed


def _decode_piece(piece: bytes | memoryview, counts: dict) -> list:
    """Decode a run of whole events (as cut by the splitter) into `_Event`s."""
    buf = b"".join((b"[", piece, b"]"))
    try:
        return _CHUNK_DECODER.decode(buf)
    except msgspec.ValidationError:
        pass
    except RecursionError:
        return _decode_elements(buf[1:-1], counts)
    except msgspec.DecodeError:
        fixed = repair_json(buf)
        if fixed is None:
            raise _NotStreamable from None
        try:
            buf = fixed
            evs = _CHUNK_DECODER.decode(buf)
            counts[REPAIRED] = counts.get(REPAIRED, 0) + 1
            return evs
        except msgspec.ValidationError:
            counts[REPAIRED] = counts.get(REPAIRED, 0) + 1
        except msgspec.DecodeError:
            raise _NotStreamable from None
    try:
        raws = _RAW_LIST_DECODER.decode(buf)
    except (msgspec.ValidationError, msgspec.DecodeError):
        raise _NotStreamable from None
    except RecursionError:
        return _decode_elements(buf[1:-1], counts)
    return _decode_chunk(raws, counts)


def old_spelling_dims(values: list, args: list) -> list:
    """`Input Dims` raws with the empty ones filled from torch 1.8's `Input dims` (same order as `args`)."""
    old = list(map(_get_dims_v18, args))
    if old.count(_NO_RAW) == len(old):  # the shared default everywhere (an identity test per item)
        return values
    if not any(map(len, old)):
        return values
    return [o if len(v) == 0 and len(o) else v for v, o in zip(values, old)]


_get_dims_v18 = attrgetter("input_dims_v18")
