"""JSON -> msgspec structs: the event and args structs the reader decodes into, and the lenient
decoding of pieces (repairing what old writers leave in, skipping entries that are not events)."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from profiler_core import settings
from profiler_core.trace.event_args import ARGS, FLOAT, INT32, INT64, JSON, Arg
from profiler_core.trace.read.budget import EVENT_PEAK_BYTES, memory_budget

CHUNK = 4096  # events per chunk on the whole-file path (small: the decoded chunk stays in cache)
#: uncompressed JSON bytes read per byte of the memory budget: not what memory bounds (the streaming and native
#: readers hold a few pieces of JSON at a time, and the budget counts the cost of what is kept: `budget`), only a
#: ceiling on the inflating work (real traces hold 224-465 bytes of JSON an entry, and take 230-240 to read)
JSON_PER_LOADED_BYTE = 4


def max_trace_bytes() -> int:
    """Largest uncompressed trace the reader reads (bytes): GPUSCOPE_MAX_TRACE_BYTES when set,
    else JSON_PER_LOADED_BYTE times the memory budget (`budget.memory_budget()`)."""
    explicit = settings.get("GPUSCOPE_MAX_TRACE_BYTES")
    if explicit is not None:
        return explicit
    return JSON_PER_LOADED_BYTE * memory_budget()


def max_trace_events() -> int:
    """Most events (entries of traceEvents) the reader reads: the memory budget over the measured peak cost of
    an entry, EVENT_PEAK_BYTES (so a gzip bomb of tiny `{"ph":"X"}` entries is bounded by its count, not by
    its JSON size)."""
    return memory_budget() // EVENT_PEAK_BYTES


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


class TraceReadError(ValueError):
    """A file that is not a readable Kineto trace; the message names the file and the problem."""


def refuse_nul(path: str, data: Any, at: int = 0) -> None:
    """Raise TraceReadError at the first NUL byte of `data` (JSON text at offset `at` of the file's inflated
    bytes): a NUL is never JSON, not even inside a string, and unlike the other control characters that old
    writers leave in strings it is never repaired. It is what a preallocated, sparse or zero-filled file holds,
    so every reader stops at the first block that has one, before it holds or scans more."""
    i = data.find("\0" if isinstance(data, str) else b"\0")
    if i >= 0:
        raise TraceReadError(
            f"{path}: a NUL byte at offset {at + i} of its JSON, which cannot be JSON "
            "(a preallocated, zero-filled or partly written file?)"
        )


# --------------------------------------------------------------------------- decoding structs
_NO_RAW = msgspec.Raw(b"")  # the default of absent raw args (one shared object)


def decoder_fields(args: tuple[Arg, ...] | None = None) -> list[tuple[str, Any, Any, str]]:
    """(field, type, default, Kineto key) of the args struct: one per kept key of the schema, then one
    per older spelling (`{field}__{i}`, None when absent). Numbers absent default to their column's
    missing value (a mix of present and absent converts in one pass); JSON lists stay raw."""
    out, olds = [], []
    for a in ARGS if args is None else args:
        if a.column is None:
            continue
        raw = a.kind is JSON
        typ = msgspec.Raw if raw else Any
        default = a.missing if a.kind in (INT64, INT32, FLOAT) else None
        out.append((a.field, typ, _NO_RAW if raw else default, a.keys[0]))
        olds += [(f"{a.field}__{i}", typ, None, k) for i, k in enumerate(a.keys[1:], 1)]
    return out + olds


def args_struct(args: tuple[Arg, ...] | None = None) -> type:
    """The msgspec struct the args of an event decode into: the schema's keys, every other key skipped."""
    fields = decoder_fields(args)
    return msgspec.defstruct(
        "_Args",
        [(f, t, d) for f, t, d, _ in fields],
        frozen=True,
        gc=False,
        rename={f: k for f, _, _, k in fields},
        module=__name__,
    )


_Args = args_struct()
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


#: an event with its args (the shared, read-only _NO_ARGS when it has none: flows ... allocate none)
_Event = msgspec.defstruct("_Event", [("args", _Args, _NO_ARGS)], bases=(_LooseEvent,), gc=False, module=__name__)


_CHUNK_DECODER = msgspec.json.Decoder(list[_Event])  # type: ignore[valid-type]  # (a class made by defstruct)
_EVENT_DECODER = msgspec.json.Decoder(_Event)
_LOOSE_DECODER = msgspec.json.Decoder(_LooseEvent)
RAW_LIST_DECODER = msgspec.json.Decoder(list[msgspec.Raw])
TOP_DECODER = msgspec.json.Decoder(dict[str, msgspec.Raw])
ANY_DECODER = msgspec.json.Decoder()


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


def decode_chunk(raws: list, counts: dict) -> list:
    """Decode a slice of raw events into `_Event`s; undecodable ones become None (counted)."""
    buf = b"[" + b",".join(raws) + b"]"
    try:
        return _CHUNK_DECODER.decode(buf)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        pass
    return [_decode_one(raw, counts) for raw in raws]


#: a JSON string, a quote that opens no string closed within the text (the last alternative), or one of
#: the characters that shape the structure around it. Each alternative matches or fails in one pass over
#: the string's bytes (a backslash takes the byte after it, so there is one way to split the text)
_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|"|[\[\]{},]')


def element_bounds(
    buf: bytes | memoryview, pos: int = 0, end: int | None = None, stop_after: int | None = None
) -> tuple[list, int]:
    """(start, end) of each element of a JSON array's content buf[pos:end] (the text between its
    brackets) that a comma closes, found by a scan that skips strings and tracks nesting without
    recursion (linear in the bytes scanned); and where the rest begins (the element after the
    last comma, or the array's closing bracket). With `stop_after`, the scan stops at the first
    comma past that offset. A string not closed before `end` ends the scan there: the quotes
    inside it are never taken for the start of another string (which made the scan quadratic
    in a long run of escaped quotes)."""
    end = len(buf) if end is None else end
    depth, start, out = 0, pos, []
    for m in _TOKENS.finditer(buf, pos, end):
        c = buf[m.start()]
        if c == 34:  # a string
            if m.end() - m.start() == 1:  # one that does not close within the text
                break
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


class NotStreamable(Exception):
    """The quick splitter could not cut this file safely; the whole-file path reads it."""


_BARE_WORDS = re.compile(rb"([:\[,]\s*)(N/A|NaN|-?Infinity|nan|-?inf)(?=\s*[,}\]])")
_CONTROL = bytes.maketrans(bytes(c for c in range(32) if c not in (10, 13)), b" " * 30)
REPAIRED = "pieces of invalid JSON repaired (bare N/A/NaN/Infinity quoted, control characters)"


def repair_json(data: bytes) -> bytes | None:
    """Fix what old Kineto/Python writers leave in: bare N/A, NaN, Infinity; raw control chars."""
    fixed = _BARE_WORDS.sub(rb'\1"\2"', data).translate(_CONTROL)
    return None if fixed == data else fixed


def decode_piece(piece: bytes | memoryview, counts: dict) -> list:
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
            raise NotStreamable from None
        try:
            buf = fixed
            evs = _CHUNK_DECODER.decode(buf)
            counts[REPAIRED] = counts.get(REPAIRED, 0) + 1
            return evs
        except msgspec.ValidationError:
            counts[REPAIRED] = counts.get(REPAIRED, 0) + 1
        except msgspec.DecodeError:
            raise NotStreamable from None
    try:
        raws = RAW_LIST_DECODER.decode(buf)
    except (msgspec.ValidationError, msgspec.DecodeError):
        raise NotStreamable from None
    except RecursionError:
        return _decode_elements(buf[1:-1], counts)
    return decode_chunk(raws, counts)
