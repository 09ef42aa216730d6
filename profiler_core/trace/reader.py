"""Fast columnar reader of Kineto chrome-trace files (every torch version, ours, bare event lists).

The JSON is decoded by msgspec into small typed structs, chunk by chunk, and each column is built
in bulk with numpy; no Python dict is made per event. Odd values (`N/A`, strings for numbers,
nulls) are coerced to the column's missing value and counted in `TraceData.warnings`.
"""
from __future__ import annotations

import bisect
import gc
import json
import logging
import os
import pickle
import re
import sys
import zlib
from collections.abc import Iterator
from itertools import repeat
from operator import attrgetter, itemgetter
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

if TYPE_CHECKING:
    import pandas as pd

from profiler_core.trace.gunzip import ERRORS as GUNZIP_ERRORS
from profiler_core.trace.gunzip import GZIP_MAGIC, TruncatedGzip, gunzip_blocks, uncompressed_size_hint
from profiler_core.trace.malloc_tuning import release_memory, tune_for_parsing
from profiler_core.trace.malloc_tuning import tune_for_views as tune_memory_for_views
from profiler_core.trace.model import (
    EVENT_CATEGORY, EVENT_COLUMNS, EVENT_FLOAT, EVENT_INT32, TraceData,
    constant_column,
)

CHUNK = 4096  # events per chunk on the whole-file path (small: the decoded chunk stays in cache)
#: refuse traces whose uncompressed JSON is larger than this (bytes); env GPUSCOPE_MAX_TRACE_BYTES
MAX_TRACE_BYTES = int(os.environ.get("GPUSCOPE_MAX_TRACE_BYTES", str(16 << 30)))


class TraceReadError(ValueError):
    """A file that is not a readable Kineto trace; the message names the file and the problem."""


# --------------------------------------------------------------------------- decoding structs
_ARG_NAMES = {
    "ext_id": "External id", "ext_id_lc": "external id", "registers": "registers per thread",
    "shared_memory": "shared memory", "blocks_per_sm": "blocks per SM",
    "warps_per_sm": "warps per SM", "occupancy": "est. achieved occupancy %", "nbytes": "bytes",
    "input_dims": "Input Dims", "input_type": "Input type", "call_stack": "Call stack",
    "python_id": "Python id", "python_parent_id": "Python parent id",
    "python_module_id": "Python module id", "sequence_nr": "Sequence number",
    "fwd_thread": "Fwd thread id", "coll_name": "Collective name", "in_nelems": "In msg nelems",
    "out_nelems": "Out msg nelems", "group_size": "Group size", "mem_bytes": "Bytes",
    "addr": "Addr", "total_allocated": "Total Allocated", "total_reserved": "Total Reserved",
    "device_type": "Device Type", "device_id": "Device Id", "m_name": "name",
    "m_labels": "labels", "m_sort_index": "sort_index",
}


class _Args(msgspec.Struct, frozen=True, gc=False, rename=lambda f: _ARG_NAMES.get(f, f)):
    """The args keys the columns need, under Kineto's names; every other key is skipped.

    Fields follow Kineto's key order (cpu_op first): msgspec looks keys up fastest that way."""

    ext_id: Any = None
    sequence_nr: Any = None
    fwd_thread: Any = None
    input_type: msgspec.Raw = msgspec.Raw(b"")
    input_dims: msgspec.Raw = msgspec.Raw(b"")
    call_stack: Any = None
    coll_name: Any = None
    dtype: Any = None
    in_nelems: Any = None
    out_nelems: Any = None
    group_size: Any = None
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
    blocks_per_sm: Any = None
    warps_per_sm: Any = None
    grid: Any = None
    block: Any = None
    occupancy: Any = None
    nbytes: Any = None
    # M metadata events
    m_name: Any = None
    m_labels: Any = None
    m_sort_index: Any = None


_NO_ARGS = _Args()


class _Event(msgspec.Struct, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    id: Any = None
    bp: Any = None
    args: _Args = _NO_ARGS  # shared, read-only: events without args (flows ...) allocate none


class _LooseEvent(msgspec.Struct, gc=False):
    """Fallback when an event's args is not an object: its args are dropped."""

    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    id: Any = None
    bp: Any = None


_CHUNK_DECODER = msgspec.json.Decoder(list[_Event])
_EVENT_DECODER = msgspec.json.Decoder(_Event)
_LOOSE_DECODER = msgspec.json.Decoder(_LooseEvent)
_RAW_LIST_DECODER = msgspec.json.Decoder(list[msgspec.Raw])
_TOP_DECODER = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ANY_DECODER = msgspec.json.Decoder()

# --------------------------------------------------------------------------- normalisation
CATEGORY_MAP = {
    "operator": "cpu_op", "cpu_op": "cpu_op", "user_annotation": "user_annotation",
    "python_function": "python_function", "python": "python_function", "kernel": "kernel",
    "memcpy": "gpu_memcpy", "gpu_memcpy": "gpu_memcpy", "memset": "gpu_memset",
    "gpu_memset": "gpu_memset", "runtime": "cuda_runtime", "cuda_runtime": "cuda_runtime",
    "driver": "cuda_driver", "cuda_driver": "cuda_driver",
    "gpu_user_annotation": "gpu_user_annotation", "cuda_sync": "cuda_sync", "trace": "trace",
}
#: categories whose pid/tid are device/stream
GPU_CATEGORIES = frozenset(
    {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync"})


def normalise_category(cat: Any) -> str:
    """Kineto category of any torch version -> the normalised name used in `events.cat`."""
    if cat is None:
        return ""
    text = str(cat)
    return CATEGORY_MAP.get(text.lower(), text.lower())


_NUMERIC_ID = re.compile(r"^\s*(?:stream\s*)?(-?\d+)\s*$", re.IGNORECASE)


class _Labels:
    """Maps non-numeric pid/tid strings to stable negative codes (crc32-based)."""

    def __init__(self) -> None:
        self.by_text: dict[str, int] = {}
        self.by_code: dict[int, str] = {}

    def code(self, value: Any) -> int:
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value == value and value not in (float("inf"), float("-inf")):
            if value.is_integer():
                return int(value)
        text = _to_text(value)
        m = _NUMERIC_ID.match(text)
        if m:
            return int(m.group(1))
        found = self.by_text.get(text)
        if found is not None:
            return found
        code = -(1 << 32) - zlib.crc32(text.encode("utf-8", "replace"))
        while code in self.by_code:
            code -= 1
        self.by_text[text] = code
        self.by_code[code] = text
        return code

    def column(self, values: list) -> np.ndarray:
        n = len(values)
        try:  # ints and numeric strings ("25738")
            return np.fromiter(values, dtype=np.int64, count=n)
        except (TypeError, ValueError, OverflowError):
            pass
        try:
            mapping = {v: self.code(v) for v in set(values)}
            return np.fromiter(map(mapping.__getitem__, values), dtype=np.int64, count=n)
        except TypeError:  # unhashable values (lists ...)
            return np.fromiter((self.code(_to_text(v)) for v in values), dtype=np.int64, count=n)


class _Interner:
    """Builds one pandas category column across chunks (value -> code)."""

    def __init__(self, convert=None) -> None:
        self.codes: dict[str, int] = {"": 0}   # text -> code
        self.values: list[str] = [""]
        self.raw: dict[Any, int] = {}           # raw decoded value -> code
        self.convert = convert or _to_text

    def intern(self, text: str) -> int:
        """The code of an already converted text."""
        c = self.codes.get(text)
        if c is None:
            c = self.codes[text] = len(self.values)
            self.values.append(text)
        return c

    def remap(self, texts: list[str]) -> np.ndarray:
        """Codes in this interner of another interner's values (for merging)."""
        return np.fromiter((self.intern(t) for t in texts), dtype=np.int32, count=len(texts))

    def add(self, values: list) -> np.ndarray:
        """Codes of `values` (raw decoded values; converted to text once per distinct value)."""
        n = len(values)
        raw = self.raw
        try:
            return np.fromiter(map(raw.__getitem__, values), dtype=np.int32, count=n)
        except KeyError:
            pass
        except TypeError:  # unhashable values: key them by their text
            values = [json.dumps(v) if isinstance(v, (list, dict)) else v for v in values]
        for v in set(values) - raw.keys():
            text = self.convert(v)
            c = self.codes.get(text)
            if c is None:
                c = self.codes[text] = len(self.values)
                self.values.append(text)
            raw[v] = c
        return np.fromiter(map(raw.__getitem__, values), dtype=np.int32, count=n)

    def categorical(self, codes: np.ndarray) -> pd.Categorical:
        """Codes -> a Categorical holding only the values that occur."""
        import pandas as pd

        used = np.bincount(codes, minlength=len(self.values)) > 0  # codes are 0..len-1
        if used.all():
            return pd.Categorical.from_codes(codes, categories=pd.Index(self.values, dtype=object))
        remap = np.cumsum(used) - 1
        cats = pd.Index([v for v, u in zip(self.values, used) if u], dtype=object)
        return pd.Categorical.from_codes(remap[codes].astype(np.int32), categories=cats)


def _to_text(value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return ""
    return value if isinstance(value, str) else str(value)


_COMPACT_CACHE: dict[bytes, str] = {}


def _compact_json(raw: Any) -> str:
    """Raw JSON bytes of an args list -> compact JSON text ("" when missing or null)."""
    raw = bytes(raw)
    if not raw or raw == b"null":
        return ""
    try:
        return msgspec.json.encode(_ANY_DECODER.decode(raw)).decode()
    except (msgspec.DecodeError, UnicodeDecodeError):
        return ""


class _Coerce:
    """Bulk conversion of attribute lists to numpy columns, with a lenient slow path."""

    def __init__(self, warnings: dict) -> None:
        self.bad = warnings  # column -> count of values that were not numbers

    def ints(self, name: str, values: list, missing: int, dtype=np.int64) -> np.ndarray:
        n = len(values)
        try:
            return np.fromiter(values, dtype=dtype, count=n)
        except (TypeError, ValueError, OverflowError):
            pass
        nones = values.count(None)
        if nones == n:
            return np.full(n, missing, dtype=dtype)
        try:
            if nones:  # None -> missing, in C: {None: missing}.get(v, v)
                return np.fromiter(map({None: missing}.get, values, values), dtype=dtype, count=n)
            return np.fromiter(values, dtype=dtype, count=n)
        except (TypeError, ValueError, OverflowError):
            pass
        out = np.empty(n, dtype=dtype)
        info = np.iinfo(dtype)
        bad = 0
        for i, v in enumerate(values):
            if v is None:
                out[i] = missing
                continue
            try:
                if isinstance(v, str):
                    v = v.strip()
                    x = int(v) if re.fullmatch(r"-?\d+", v) else float(v)
                else:
                    x = v
                if isinstance(x, float):
                    if x != x or x in (float("inf"), float("-inf")):
                        raise ValueError
                    x = int(x)
                if not info.min <= int(x) <= info.max:
                    raise OverflowError
                out[i] = int(x)
            except (TypeError, ValueError, OverflowError):
                out[i] = missing
                bad += 1
        if bad:
            self.bad[name] = self.bad.get(name, 0) + bad
        return out

    def floats(self, name: str, values: list) -> np.ndarray:
        n = len(values)
        try:
            return np.fromiter(values, dtype=np.float64, count=n)
        except (TypeError, ValueError, OverflowError):
            pass
        nones = values.count(None)
        if nones == n:
            return np.full(n, np.nan)
        try:
            if nones:
                return np.fromiter(map({None: np.nan}.get, values, values), dtype=np.float64, count=n)
            return np.fromiter(values, dtype=np.float64, count=n)
        except (TypeError, ValueError, OverflowError):
            pass
        out = np.empty(n, dtype=np.float64)
        bad = 0
        for i, v in enumerate(values):
            if v is None:
                out[i] = np.nan
                continue
            try:
                out[i] = float(v)
            except (TypeError, ValueError, OverflowError):
                out[i] = np.nan
                bad += 1
        if bad:
            self.bad[name] = self.bad.get(name, 0) + bad
        return out


#: below this many µs, rint(us * 1000) is the exact ns of a 3-decimal value (error < 1e-3 ns)
_FAST_NS_LIMIT = float(1 << 31)


def _to_ns(us: np.ndarray) -> np.ndarray:
    """µs floats -> exact int64 ns (Kineto writes at most 3 decimals; exact below 2**43 µs)."""
    if len(us) and -_FAST_NS_LIMIT < us.min() and us.max() < _FAST_NS_LIMIT:  # (NaN fails both)
        return np.rint(us * 1000.0).astype(np.int64)
    finite = np.isfinite(us)
    us = np.where(finite, us, 0.0)
    whole = np.floor(us)
    frac = np.rint((us - whole) * 1000.0)
    return whole.astype(np.int64) * 1000 + frac.astype(np.int64)


# --------------------------------------------------------------------------- file access
def read_bytes(path: str | os.PathLike) -> bytes:
    """The file's JSON bytes, gunzipped when it is gzip (by magic number, not by name)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            head = f.read(2)
            f.seek(0)
            if head == GZIP_MAGIC:
                parts, total = [], 0
                for block in gunzip_blocks(f, 1 << 20):
                    parts.append(block)
                    total += len(block)
                    if total > MAX_TRACE_BYTES:
                        break
                data = b"".join(parts)
                del parts
            else:
                data = f.read(MAX_TRACE_BYTES + 1)
    except FileNotFoundError:
        raise TraceReadError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise TraceReadError(f"{path}: is a directory") from None
    except EOFError:
        raise TraceReadError(f"{path}: truncated gzip file (ended before its end marker)") from None
    except (OSError, *GUNZIP_ERRORS) as e:
        raise TraceReadError(f"{path}: corrupt gzip file ({e})") from None
    if len(data) > MAX_TRACE_BYTES:
        raise TraceReadError(
            f"{path}: trace is larger than {MAX_TRACE_BYTES} bytes uncompressed "
            f"(raise GPUSCOPE_MAX_TRACE_BYTES to read it)")
    return data


def _split_top(data: bytes, path: str) -> tuple[dict, msgspec.Raw | bytes]:
    """Top-level keys (decoded) and the raw traceEvents array of a trace document."""
    start = data[:64].lstrip()
    if not start:
        raise TraceReadError(f"{path}: empty file")
    if start[:1] == b"[":
        return {}, data
    if start[:1] != b"{":
        raise TraceReadError(f"{path}: not a JSON trace (starts with {start[:1]!r})")
    try:
        top = _TOP_DECODER.decode(data)
    except msgspec.DecodeError as e:
        raise TraceReadError(f"{path}: invalid or truncated JSON ({e})") from None
    if "traceEvents" not in top:
        raise TraceReadError(f"{path}: no 'traceEvents' key (not a Kineto/chrome trace)")
    meta = {}
    for key, raw in top.items():
        if key != "traceEvents":
            meta[key] = _ANY_DECODER.decode(raw)
    return meta, top["traceEvents"]


def _event_raws(events_raw: Any, path: str) -> list:
    try:
        return _RAW_LIST_DECODER.decode(events_raw)
    except msgspec.ValidationError:
        raise TraceReadError(f"{path}: 'traceEvents' is not a list") from None
    except msgspec.DecodeError as e:
        raise TraceReadError(f"{path}: invalid or truncated JSON in traceEvents ({e})") from None


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
                raws = _RAW_LIST_DECODER.decode(text)
            except msgspec.DecodeError:
                raws = _RAW_LIST_DECODER.decode(repair_json(text) or text)
            if idx - first < len(raws):
                return _ANY_DECODER.decode(raws[idx - first])
            if pos + 1 == len(index):
                raise IndexError(f"event index {idx} out of range "
                                 f"(trace has {first + len(raws)} events)")
            raise TraceReadError(f"{path}: event index does not match the file")
    data = read_bytes(path)
    try:
        _, events_raw = _split_top(data, path)
        raws = _event_raws(events_raw, path)
    except TraceReadError:
        data = repair_json(data) or data
        _, events_raw = _split_top(data, path)
        raws = _event_raws(events_raw, path)
    if not 0 <= idx < len(raws):
        raise IndexError(f"event index {idx} out of range (trace has {len(raws)} events)")
    return _ANY_DECODER.decode(raws[idx])


def _byte_range(path: str, begin: int, end: int) -> bytes:
    """Bytes [begin, end) of the file's decompressed stream (decompressing what comes before)."""
    out = []
    pos = 0
    for block in _blocks(path):
        if pos + len(block) > begin:
            out.append(block[max(0, begin - pos):end - pos])
        pos += len(block)
        if pos >= end:
            break
    return b"".join(out)


# --------------------------------------------------------------------------- parsing
_get_ph = attrgetter("ph")
_get_args = attrgetter("args")
_get_ts = attrgetter("ts")
_get_dur = attrgetter("dur")
_get_cat = attrgetter("cat")
_get_name = attrgetter("name")
_get_pid = attrgetter("pid")
_get_tid = attrgetter("tid")
_get_id = attrgetter("id")
_NOT_EVENT = object()
_UNSUPPORTED = 4
_PHASES = {"X": 0, "i": 1, "I": 1, "s": 2, "f": 2, "t": 2, "M": 3, _NOT_EVENT: 5}
_get_bp = attrgetter("bp")


def _flow_id(v: Any) -> Any:
    """Flow ids may be strings ("0x1f", or any text: hashed)."""
    if isinstance(v, str):
        try:
            return int(v, 0)
        except ValueError:
            return zlib.crc32(v.encode("utf-8", "replace"))
    return v


#: which arg fields each family of (normalised) categories carries; "other" gets all of them
_OP_FIELDS = ("ext_id", "input_dims", "input_type", "call_stack", "sequence_nr", "fwd_thread",
              "coll_name", "dtype", "in_nelems", "out_nelems", "group_size", "nbytes")
_GPU_FIELDS = ("ext_id", "ext_id_lc", "correlation", "device", "stream", "grid", "block",
               "registers", "shared_memory", "blocks_per_sm", "warps_per_sm", "occupancy",
               "nbytes")
_PY_FIELDS = ("python_id", "python_parent_id", "python_module_id")
_FAMILY_FIELDS = {
    "op": _OP_FIELDS,
    "gpu": _GPU_FIELDS,
    "python": _PY_FIELDS + ("ext_id",),
    "trace": (),
    "other": tuple(dict.fromkeys(("ext_id",) + _OP_FIELDS + _GPU_FIELDS + _PY_FIELDS)),
}
_FAMILY = {"cpu_op": "op", "user_annotation": "op", "python_function": "python",
           "kernel": "gpu", "gpu_memcpy": "gpu", "gpu_memset": "gpu", "cuda_runtime": "gpu",
           "cuda_driver": "gpu", "gpu_user_annotation": "gpu", "cuda_sync": "gpu",
           "trace": "trace"}
_FAMILY_NAMES = ("op", "gpu", "python", "trace", "other")
_FIELD_COLUMN = {"nbytes": "bytes"}
#: args that Kineto writes together: when the first is absent from a chunk, so are the others
_TOGETHER = {"coll_name": ("dtype", "in_nelems", "out_nelems", "group_size"),
             "sequence_nr": ("fwd_thread",), "grid": ("block",),
             "blocks_per_sm": ("warps_per_sm",)}
_PLAIN_INT_COLUMNS = frozenset(
    {"correlation", "device", "stream", "registers", "shared_memory", "bytes", "python_id",
     "python_module_id", "sequence_nr", "fwd_thread", "in_nelems", "out_nelems", "group_size"})
_ARG_COLUMNS = tuple(c for c in EVENT_COLUMNS
                     if c not in ("cat", "name", "pid", "tid", "ts", "dur", "idx"))


def _raw_bytes(values: list) -> list:
    """msgspec.Raw values -> bytes, in C: one join and one split (JSON text never holds a NUL byte;
    checked by the count, else one bytes() per value)."""
    out = b"\0".join(values).split(b"\0")
    return out if len(out) == len(values) else list(map(bytes, values))


def _missing_column(column: str, n: int) -> np.ndarray:
    if column in EVENT_CATEGORY:
        return np.zeros(n, np.int32)  # code 0 is "" (interned first)
    if column in EVENT_FLOAT:
        return np.full(n, np.nan)
    if column in EVENT_INT32:
        return np.full(n, EVENT_INT32[column], np.int32)
    return np.full(n, -1, np.int64)


def _decode_chunk(raws: list, counts: dict) -> list:
    """Decode a slice of raw events into `_Event`s; undecodable ones become None (counted)."""
    buf = b"[" + b",".join(raws) + b"]"
    try:
        return _CHUNK_DECODER.decode(buf)
    except (msgspec.ValidationError, msgspec.DecodeError):
        pass
    out: list = []
    for raw in raws:
        try:
            out.append(_EVENT_DECODER.decode(raw))
            continue
        except (msgspec.ValidationError, msgspec.DecodeError):
            pass
        try:
            loose = _LOOSE_DECODER.decode(raw)
            counts["events with unreadable args (args dropped)"] = counts.get(
                "events with unreadable args (args dropped)", 0) + 1
            out.append(_Event(**{f: getattr(loose, f) for f in loose.__struct_fields__}))
        except (msgspec.ValidationError, msgspec.DecodeError):
            counts["entries of traceEvents that are not event objects"] = counts.get(
                "entries of traceEvents that are not event objects", 0) + 1
            out.append(None)
    return out


class _Builder:
    """Accumulates the columns of every chunk; `finish` makes the DataFrames."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.bad: dict[str, int] = {}
        self.co = _Coerce(self.bad)
        self.labels = _Labels()
        self.interners = {c: _Interner() for c in EVENT_CATEGORY}
        self.interners["cat"] = _Interner(normalise_category)
        self.interners["input_dims"] = _Interner(_compact_json)
        self.interners["input_type"] = _Interner(_compact_json)
        self.ev: dict[str, list] = {c: [] for c in EVENT_COLUMNS}  # per chunk; None = missing
        self.ev_len: list[int] = []
        self.mem: list[dict] = []
        self.flows: list[dict] = []
        self.names: list[tuple] = []
        self.flow_cat = _Interner()
        self.flow_name = _Interner()
        self.flow_ph = _Interner()
        self.flow_bp = _Interner()

    # ---- per chunk
    def add_chunk(self, evs: list, first_idx: int) -> None:
        """Add decoded events (None for entries that were not event objects) at first_idx..."""
        n = len(evs)
        if not n:
            return
        phs = [_NOT_EVENT if e is None else e.ph for e in evs] if None in evs \
            else list(map(_get_ph, evs))
        try:
            kinds = np.fromiter(map(_PHASES.get, phs, repeat(_UNSUPPORTED)), np.int8, count=n)
        except TypeError:  # unhashable ph values
            kinds = np.fromiter((_PHASES.get(str(p), _UNSUPPORTED) for p in phs), np.int8, n)
        idx = np.arange(first_idx, first_idx + n, dtype=np.int64)
        for kind in np.flatnonzero(np.bincount(kinds, minlength=1)):  # kinds are 0..5
            where = np.flatnonzero(kinds == kind) if len(kinds) else kinds
            if len(where) == n:
                sel = evs
            elif len(where) == 1:
                sel = [evs[where[0]]]
            else:
                sel = list(itemgetter(*where)(evs))
            if kind == 0:
                self._complete(sel, idx[where])
            elif kind == 1:
                self._instants(sel, idx[where])
            elif kind == 2:
                self._flows(sel, idx[where])
            elif kind == 3:
                self._metadata(sel)
            elif kind == _UNSUPPORTED:
                for ph in sorted({str(phs[i]) for i in where}):
                    k = sum(1 for i in where if str(phs[i]) == ph)
                    self._count(f"events of unsupported phase {ph!r} skipped", k)

    def _complete(self, evs: list, idx: np.ndarray) -> None:
        co, col = self.co, self.ev
        ts_us = co.floats("ts", list(map(_get_ts, evs)))
        dur_us = co.floats("dur", list(map(_get_dur, evs)))
        keep = np.isfinite(ts_us)
        if not keep.all():
            self._count("complete events without a valid ts skipped", int((~keep).sum()))
            where = np.flatnonzero(keep)
            evs = [evs[i] for i in where]
            ts_us, dur_us, idx = ts_us[where], dur_us[where], idx[where]
        n = len(evs)
        no_dur = ~np.isfinite(dur_us)
        if no_dur.any():
            self._count("complete events without a dur (set to 0)", int(no_dur.sum()))
        dur = _to_ns(np.where(no_dur, 0.0, dur_us))
        neg = dur < 0
        if neg.any():
            self._count("negative durations clamped to 0", int(neg.sum()))
            dur[neg] = 0
        col["ts"].append(_to_ns(ts_us))
        col["dur"].append(dur)
        col["idx"].append(idx)
        cat_codes = self.interners["cat"].add(list(map(_get_cat, evs)))
        col["cat"].append(cat_codes)
        col["name"].append(self.interners["name"].add(list(map(_get_name, evs))))
        col["pid"].append(self.labels.column(list(map(_get_pid, evs))))
        col["tid"].append(self.labels.column(list(map(_get_tid, evs))))
        # args: each family of categories carries its own keys; only those are extracted
        out: dict = {c: None for c in _ARG_COLUMNS}
        family_of_code = np.array([_FAMILY_NAMES.index(_FAMILY.get(v, "other"))
                                   for v in self.interners["cat"].values], dtype=np.int8)
        families = family_of_code[cat_codes]
        args_all = list(map(_get_args, evs))
        for code in np.flatnonzero(np.bincount(families, minlength=1)):
            family = _FAMILY_NAMES[code]
            rows = np.flatnonzero(families == code)
            args = args_all if len(rows) == n else [args_all[i] for i in rows]
            self._args_family(family, args, rows, out, n)
        for c in _ARG_COLUMNS:
            col[c].append(out[c])
        self.ev_len.append(n)

    def _args_family(self, family: str, args: list, rows: np.ndarray, out: dict, n: int) -> None:
        """Fill the arg columns of one family of rows (see _FAMILY_FIELDS)."""
        co = self.co
        full = len(rows) == n

        def put(column: str, values: np.ndarray) -> None:
            if full:
                out[column] = values
                return
            if out[column] is None:
                out[column] = _missing_column(column, n)
            out[column][rows] = values

        skip: set = set()
        for field in _FAMILY_FIELDS[family]:
            if field in skip:
                continue
            values = list(map(attrgetter(field), args))
            if field in ("input_dims", "input_type"):
                put(field, self.interners[field].add(_raw_bytes(values)))
                continue
            column = _FIELD_COLUMN.get(field, field)
            if column in _PLAIN_INT_COLUMNS:  # dense ones convert on the first try
                dtype = np.int32 if column in EVENT_INT32 else np.int64
                try:
                    put(column, np.fromiter(values, dtype=dtype, count=len(values)))
                    continue
                except (TypeError, ValueError, OverflowError):
                    pass
            if values.count(None) == len(values):
                skip.update(_TOGETHER.get(field, ()))
                continue  # absent everywhere: the column keeps its missing value
            if field in ("ext_id", "ext_id_lc"):
                ext = co.ints("external_id", values, -1)
                cur = out["external_id"]
                if field == "ext_id_lc" and cur is not None:  # old traces: lower-case key
                    cur = cur if full else cur[rows]
                    ext = np.where(cur == -1, ext, cur)
                put("external_id", ext)
            elif field in ("grid", "block"):
                xyz = self._triples(field, values)
                for j, axis in enumerate("xyz"):
                    put(f"{field}_{axis}", xyz[:, j])
            elif field in ("call_stack", "coll_name", "dtype"):
                put(field, self.interners[field].add(values))
            elif field in EVENT_FLOAT:
                put(field, co.floats(field, values))
            else:
                dtype = np.int32 if column in EVENT_INT32 else np.int64
                put(column, co.ints(column, values, -1, dtype))

    def _count(self, what: str, n: int) -> None:
        self.counts[what] = self.counts.get(what, 0) + n

    def _triples(self, key: str, values: list) -> np.ndarray:
        out = np.zeros((len(values), 3), dtype=np.int32)
        for i, v in enumerate(values):
            if v is None:
                continue
            if isinstance(v, list) and len(v) == 3:
                try:
                    out[i] = [int(x) for x in v]
                    continue
                except (TypeError, ValueError, OverflowError):
                    pass
            self.bad[key] = self.bad.get(key, 0) + 1
        return out

    def _instants(self, evs: list, idx: np.ndarray) -> None:
        names = list(map(_get_name, evs))
        n_mem = names.count("[memory]")
        if not n_mem:
            return
        if n_mem == len(names):
            where = np.arange(len(evs))
        else:
            where = np.flatnonzero(np.asarray(names, dtype=object) == "[memory]")
            evs = [evs[i] for i in where]
        co = self.co
        args = list(map(_get_args, evs))

        def a(name: str) -> list:
            return list(map(attrgetter(name), args))

        ts_us = co.floats("ts", list(map(_get_ts, evs)))
        keep = np.isfinite(ts_us)
        if not keep.all():
            self._count("memory events without a valid ts skipped", int((~keep).sum()))
        self.mem.append({
            "ts": _to_ns(ts_us)[keep],
            "pid": self.labels.column(list(map(_get_pid, evs)))[keep],
            "tid": self.labels.column(list(map(_get_tid, evs)))[keep],
            "device_type": co.ints("Device Type", a("device_type"), -1)[keep],
            "device_id": co.ints("Device Id", a("device_id"), -1)[keep],
            "addr": co.ints("Addr", a("addr"), -1)[keep],
            "bytes": co.ints("Bytes", a("mem_bytes"), -1)[keep],
            "total_allocated": co.ints("Total Allocated", a("total_allocated"), -1)[keep],
            "total_reserved": co.ints("Total Reserved", a("total_reserved"), -1)[keep],
            "idx": idx[where][keep],
        })

    def _flows(self, evs: list, idx: np.ndarray) -> None:
        co = self.co
        ids = list(map(_get_id, evs))
        try:
            id_col = np.fromiter(ids, dtype=np.int64, count=len(ids))
        except (TypeError, ValueError, OverflowError):
            id_col = co.ints("flow id", [_flow_id(v) for v in ids], -1)
        ts_us = co.floats("ts", list(map(_get_ts, evs)))
        keep = np.isfinite(ts_us)
        if not keep.all():
            self._count("flow events without a valid ts skipped", int((~keep).sum()))
        self.flows.append({
            "cat": self.flow_cat.add(list(map(_get_cat, evs)))[keep],
            "name": self.flow_name.add(list(map(_get_name, evs)))[keep],
            "id": id_col[keep],
            "ph": self.flow_ph.add(list(map(_get_ph, evs)))[keep],
            "pid": self.labels.column(list(map(_get_pid, evs)))[keep],
            "tid": self.labels.column(list(map(_get_tid, evs)))[keep],
            "ts": _to_ns(ts_us)[keep],
            "bp": self.flow_bp.add(list(map(_get_bp, evs)))[keep],
            "idx": idx[keep],
        })

    def _metadata(self, evs: list) -> None:
        for e in evs:
            a = e.args
            value = a.m_name if a.m_name is not None else (
                a.m_labels if a.m_labels is not None else a.m_sort_index)
            self.names.append((self.labels.code(e.pid), self.labels.code(e.tid),
                               _to_text(e.name), value))

    # ---- final frames
    # ---- parallel parsing: a worker's builder is exported and merged into the main one
    _FLOW_INTERNERS = ("flow_cat", "flow_name", "flow_ph", "flow_bp")

    def export(self) -> dict:
        """This builder's chunks with the texts behind their codes (picklable, for merge)."""
        return {
            "ev": self.ev, "ev_len": self.ev_len, "mem": self.mem, "flows": self.flows,
            "names": self.names, "counts": self.counts, "bad": self.bad,
            "labels": self.labels.by_code,
            "interners": {c: i.values for c, i in self.interners.items()},
            "flow_interners": {k: getattr(self, k).values for k in self._FLOW_INTERNERS},
        }

    def compact(self) -> None:
        """Join the chunks into one per column (a worker's export then pickles a few big arrays)."""
        total = int(sum(self.ev_len))
        for c, parts in self.ev.items():
            if all(p is None for p in parts):
                self.ev[c] = [None] if parts else []
            else:
                self.ev[c] = [np.concatenate([_missing_column(c, ln) if p is None else p
                                              for p, ln in zip(parts, self.ev_len)])]
        self.ev_len = [total] if self.ev_len else []
        if len(self.mem) > 1:
            self.mem = [_concat_dicts(self.mem, tuple(self.mem[0]))]
        if len(self.flows) > 1:
            self.flows = [_concat_dicts(self.flows, tuple(self.flows[0]))]

    def merge(self, part: dict, offset: int) -> None:
        """Append an exported builder whose events start at traceEvents[offset]."""
        fix = {}
        for code, text in part["labels"].items():
            mine = self.labels.code(text)
            if mine != code:
                fix[code] = mine

        def relabel(arr: np.ndarray) -> np.ndarray:
            for old, new in fix.items():
                arr[arr == old] = new
            return arr

        remaps = {c: self.interners[c].remap(v) for c, v in part["interners"].items()}
        for c, chunks in part["ev"].items():
            for arr in chunks:
                if arr is not None:
                    if c in remaps:
                        arr = remaps[c][arr]
                    elif c == "idx":
                        arr = arr + offset
                    elif c in ("pid", "tid") and fix:
                        arr = relabel(arr)
                self.ev[c].append(arr)
        self.ev_len.extend(part["ev_len"])
        for m in part["mem"]:
            m["idx"] = m["idx"] + offset
            if fix:
                relabel(m["pid"]), relabel(m["tid"])
            self.mem.append(m)
        fremap = {k: getattr(self, k).remap(v) for k, v in part["flow_interners"].items()}
        for f in part["flows"]:
            f["idx"] = f["idx"] + offset
            for col, key in (("cat", "flow_cat"), ("name", "flow_name"), ("ph", "flow_ph"),
                             ("bp", "flow_bp")):
                f[col] = fremap[key][f[col]]
            if fix:
                relabel(f["pid"]), relabel(f["tid"])
            self.flows.append(f)
        for pid, tid, kind, value in part["names"]:
            self.names.append((fix.get(pid, pid), fix.get(tid, tid), kind, value))
        for src, dst in ((part["counts"], self.counts), (part["bad"], self.bad)):
            for k, v in src.items():
                dst[k] = dst.get(k, 0) + v

    def finish(self, path: str, meta: dict, base_ns: int | None) -> TraceData:
        """Concatenate, rebase and sort the chunks into the final frames, a column at a time."""
        import pandas as pd

        col, lens = self.ev, self.ev_len
        total = int(sum(lens))

        def column(c: str) -> np.ndarray | None:
            parts = col.pop(c)
            if all(p is None for p in parts):
                return None
            return np.concatenate([_missing_column(c, ln) if p is None else p
                                   for p, ln in zip(parts, lens)]) if parts else None

        ts, dur, idx = (column(c) for c in ("ts", "dur", "idx"))
        if ts is None:
            ts, dur, idx = (np.empty(0, np.int64) for _ in range(3))
        mem = _concat_dicts(self.mem, ("ts", "pid", "tid", "device_type", "device_id", "addr",
                                       "bytes", "total_allocated", "total_reserved", "idx"))
        flows = _concat_dicts(self.flows, ("cat", "name", "id", "ph", "pid", "tid", "ts", "bp",
                                           "idx"), int32=("cat", "name", "ph", "bp"))
        self.mem, self.flows = [], []
        if base_ns is None:  # old traces: ts is µs since the epoch; rebase on the first event
            firsts = [a.min() for a in (ts, mem["ts"], flows["ts"]) if len(a)]
            base_ns = int(min(firsts)) if firsts else 0
            for arr in (ts, mem["ts"], flows["ts"]):
                arr -= base_ns
        order = _event_order(ts, dur, idx)
        data: dict = {"ts": ts[order], "dur": dur[order], "idx": idx[order]}
        del ts, dur, idx
        for c in EVENT_COLUMNS:
            if c in data:
                continue
            arr = column(c)
            if arr is None:  # absent from the whole trace: one shared read-only value
                arr = constant_column(_missing_column(c, 1)[0], total)
            else:
                arr = arr[order]
            if c in EVENT_CATEGORY:
                data[c] = self.interners[c].categorical(arr.astype(np.int32, copy=False))
            else:
                data[c] = arr
        # GPU activities carry device/stream in pid/tid when their args lack them
        gpu_codes = [i for i, v in enumerate(data["cat"].categories) if v in GPU_CATEGORIES]
        if gpu_codes:
            gpu = np.isin(data["cat"].codes, gpu_codes)
            for c, src in (("device", "pid"), ("stream", "tid")):
                fill = gpu & (data[c] == -1) & (data[src] >= 0)
                if fill.any():
                    if not data[c].flags.writeable:
                        data[c] = data[c].copy()
                    data[c][fill] = data[src][fill]
        events = pd.DataFrame({c: data.pop(c) for c in EVENT_COLUMNS}, copy=False)
        mem_order = np.lexsort((mem["idx"], mem["ts"]))
        memory = pd.DataFrame({k: v[mem_order] for k, v in mem.items()}, copy=False)
        flow_order = np.lexsort((flows["idx"], flows["ts"]))
        fdata = {k: v[flow_order] for k, v in flows.items()}
        for c, interner in (("cat", self.flow_cat), ("name", self.flow_name),
                            ("ph", self.flow_ph), ("bp", self.flow_bp)):
            fdata[c] = interner.categorical(fdata[c].astype(np.int32, copy=False))
        flows_df = pd.DataFrame({c: fdata[c] for c in ("cat", "name", "id", "ph", "pid", "tid",
                                                       "ts", "bp", "idx")}, copy=False)
        names = pd.DataFrame(self.names, columns=["pid", "tid", "kind", "value"])
        names = names.astype({"pid": np.int64, "tid": np.int64, "kind": object,
                              "value": object})
        warnings = [f"{n} {what}" for what, n in sorted(self.counts.items())]
        warnings += [f"{n} non-numeric values of {c!r} treated as missing"
                     for c, n in sorted(self.bad.items())]
        props = meta.get("deviceProperties")
        return TraceData(
            path=path, metadata=meta,
            device_properties=props if isinstance(props, list) else [],
            base_ns=int(base_ns), events=events, memory=memory, flows=flows_df, names=names,
            warnings=warnings, labels=dict(self.labels.by_code),
        )


def _event_order(ts: np.ndarray, dur: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """np.lexsort((idx, -dur, ts)) for idx-ordered arrays, faster: a stable sort by ts (quick on the
    nearly sorted ts of a trace) and a lexsort of the rows whose ts ties only."""
    if len(idx) > 1 and not bool((idx[1:] > idx[:-1]).all()):
        return np.lexsort((idx, -dur, ts))
    order = np.argsort(ts, kind="stable")
    ts_sorted = ts[order]
    tie = ts_sorted[1:] == ts_sorted[:-1]
    if tie.any():
        in_tie = np.zeros(len(order), dtype=bool)
        in_tie[1:] = tie
        in_tie[:-1] |= tie
        sub = order[in_tie]
        order[in_tie] = sub[np.lexsort((idx[sub], -dur[sub], ts[sub]))]
    return order


def _concat_dicts(parts: list, keys: tuple, int32: tuple = ()) -> dict:
    if not parts:
        return {k: np.empty(0, np.int32 if k in int32 else np.int64) for k in keys}
    return {k: np.concatenate([p[k] for p in parts]) for k in keys}


def parse_trace(data: bytes, path: str = "<memory>") -> TraceData:
    """Parse the JSON bytes of a Kineto trace (object with traceEvents, or a bare list)."""
    builder = _Builder()
    try:
        meta, events_raw = _split_top(data, path)
    except TraceReadError:
        fixed = repair_json(data)
        if fixed is None:
            raise
        data = fixed
        meta, events_raw = _split_top(data, path)
        builder.counts[REPAIRED] = 1
    raws = _event_raws(events_raw, path)
    for start in range(0, len(raws), CHUNK):
        chunk = raws[start:start + CHUNK]
        evs = _decode_chunk(chunk, builder.counts)
        builder.add_chunk(evs, start)
    del raws, events_raw
    return builder.finish(path, meta, _base_ns(meta))


def _base_ns(meta: dict) -> int | None:
    base = meta.get("baseTimeNanoseconds")
    return None if isinstance(base, bool) or not isinstance(base, int) else base


# --------------------------------------------------------------------------- streaming path
class _NotStreamable(Exception):
    """The quick splitter could not cut this file safely; the whole-file path reads it."""


_HEAD_RE = re.compile(rb'"traceEvents"\s*:\s*\[')
_SEP_RE = re.compile(rb"\}\s*,\s*\{")
#: bytes of JSON per decoded piece: small enough that a piece's decoded events stay in the CPU
#: cache (L2) while each column is pulled out of them; read_trace of the 2M-event benchmark
#: trace on 2 shared cores (noisy): 4 MB pieces
#: 10-11.5 s, 1 MB 10-11 s, 256 KB 6-8 s, 64 KB 7-7.4 s
BLOCK = 256 << 10
#: bytes of JSON per decompressed block: big enough for few rounds of the piece loop, below
#: malloc_tuning.PARSE_MMAP_THRESHOLD so that its buffers are reused heap memory, not fresh pages
IO_BLOCK = 1 << 20
#: a piece without any event boundary beyond this many bytes goes to the whole-file path
MAX_PIECE = 16 << 20

def _blocks(path: str) -> Iterator[bytes]:
    """The file's (gunzipped) bytes in blocks of about IO_BLOCK bytes or more.

    Inflated in this thread: ISA-L takes 0.2 s for the 592 MB of the 2M-event benchmark trace, less
    than handing blocks over from a helper thread cost, whose freed buffers also faulted in fresh
    pages again and again (another thread's malloc arena)."""
    total = 0
    pending = b""
    try:
        with open(path, "rb") as f:
            gz = f.read(2) == GZIP_MAGIC
            f.seek(0)
            chunk = max(512, min(1 << 20, IO_BLOCK // 8))
            for out in gunzip_blocks(f, chunk) if gz else iter(lambda: f.read(IO_BLOCK), b""):
                total += len(out)
                if total > MAX_TRACE_BYTES:
                    raise TraceReadError(
                        f"{path}: trace is larger than {MAX_TRACE_BYTES} bytes uncompressed "
                        f"(raise GPUSCOPE_MAX_TRACE_BYTES to read it)")
                pending += out
                if len(pending) >= IO_BLOCK:
                    yield pending
                    pending = b""
    except TruncatedGzip:
        raise TraceReadError(f"{path}: truncated gzip file (ended before its end marker)") from None
    except GUNZIP_ERRORS as e:
        raise TraceReadError(f"{path}: corrupt gzip file ({e})") from None
    except OSError as e:
        raise TraceReadError(f"{path}: cannot read file ({e})") from None
    if pending:
        yield pending


_BARE_WORDS = re.compile(rb"([:\[,]\s*)(N/A|NaN|-?Infinity|nan|-?inf)(?=\s*[,}\]])")
_CONTROL = bytes.maketrans(bytes(c for c in range(32) if c not in (10, 13)),
                           b" " * 30)
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
    return _decode_chunk(raws, counts)


#: traces at least this big on disk are split across parser processes (smaller: this process)
PARALLEL_MIN_BYTES = 16 << 20
#: share of the decompressed stream this process parses when it splits a trace with one worker
#: (it also merges and sorts, while the worker starts Python and inflates the bytes before its range)
MAIN_SHARE = 0.5


def default_parse_processes() -> int:
    """Parser processes worth adding here: cores - 1, at most 3 (none on one core)."""
    return max(0, min(3, (os.cpu_count() or 1) - 1))


def _parse_processes(requested: int | None) -> int:
    env = os.environ.get("GPUSCOPE_PARSE_PROCESSES")
    if env is not None:  # the environment wins (0 turns parallel parsing off)
        return int(env) if env.strip().isdigit() else 0
    return default_parse_processes() if requested is None else max(0, requested)


def _parse_span_job(path: str, lo: int, hi: int | None) -> bytes:
    """A worker's job: the events between the cuts at `lo` and `hi` (see _parse_span) as one compact
    chunk of columns, pickled for the main process to merge."""
    builder = _Builder()
    n, index, meta = _parse_span(path, builder, lo, hi)
    builder.compact()
    out = builder.export()
    out.update(n=n, index=index, meta=meta)
    del builder
    return pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)


class _SpanProcess:
    """One range of a trace parsed by `python -m profiler_core.trace.span_worker` (see there).

    A plain child process, not a multiprocessing pool: it needs nothing from the caller's main
    module, and it exits with its job, so no idle worker holds memory afterwards."""

    def __init__(self, path: str, lo: int, hi: int | None) -> None:
        import subprocess

        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ, GPUSCOPE_PARSE_PROCESSES="0")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "profiler_core.trace.span_worker", path, str(lo),
             "-" if hi is None else str(hi)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)

    def result(self) -> bytes:
        """The pickled columns; TraceReadError / _NotStreamable as the worker raised them."""
        out, err = self.proc.communicate()
        code = self.proc.returncode
        if code == 0:
            return out
        text = err.decode("utf-8", "replace").strip()
        if code == SPAN_READ_ERROR:
            raise TraceReadError(text)
        if code == SPAN_NOT_STREAMABLE:
            raise _NotStreamable
        raise RuntimeError(f"parser process exited with {code}: {text[-800:]}")

    def cancel(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


#: exit codes of span_worker for the reader's own two outcomes
SPAN_READ_ERROR, SPAN_NOT_STREAMABLE = 3, 4


def _parallel_parse(path: str, workers: int, start: Any = None) -> TraceData | None:
    """Split the decompressed stream into `workers + 1` byte ranges: each worker process inflates
    the file itself and parses its range, this process parses the first and merges the rest.

    Every range boundary is the first `}, {` at or after a target offset, found the same way by
    the two processes that share it; the process on the left decodes its last events up to it, so
    a boundary that is not between two events (inside a string, an event or the metadata after
    the array) fails that decode and raises _NotStreamable (the caller reads serially instead).
    `start(path, lo, hi)` starts a worker (a handle with result() and cancel()), by default a
    _SpanProcess."""
    start = start or _SpanProcess
    total = uncompressed_size_hint(path)
    if total < 2 * BLOCK:
        return None
    first = MAIN_SHARE if workers == 1 else 1.0 / (workers + 1)
    bounds = [int(total * (first + (1 - first) * k / workers)) for k in range(workers)]
    spans: list = []
    try:
        for lo, hi in zip(bounds, bounds[1:] + [None]):
            spans.append(start(path, lo, hi))
        builder = _Builder()
        n, index, meta = _parse_span(path, builder, None, bounds[0])
        for span in spans:
            part = pickle.loads(span.result())
            builder.merge(part, n)
            index.extend((first_idx + n, begin, end) for first_idx, begin, end in part["index"])
            n += part["n"]
            meta = part["meta"] if meta is None else meta
    except BaseException:
        for span in spans:
            span.cancel()
        raise
    if meta is None:
        raise _NotStreamable
    t = builder.finish(path, meta, _base_ns(meta))
    t.event_index = tuple(index)
    return t


def _stream_parse(path: str) -> TraceData:
    """Parse a whole trace while it is decompressed (see _parse_span)."""
    builder = _Builder()
    _, index, meta = _parse_span(path, builder)
    t = builder.finish(path, meta, _base_ns(meta))
    t.event_index = tuple(index)
    return t


def _parse_span(path: str, builder: "_Builder", lo: int | None = None,
                hi: int | None = None) -> tuple[int, list, dict | None]:
    """Parse events into `builder` while the file is decompressed, cutting the event array at
    `}, {` separators; returns (events added, piece index, top-level metadata).

    Every cut is checked by the JSON decoder (a cut inside an event or a string leaves an
    unbalanced piece, which fails to decode), so a file this cannot split raises _NotStreamable
    and goes to the whole-file path instead of being misread.

    With `lo`, events before the first separator at or after decompressed offset `lo` are
    skipped (another process parses them); with `hi`, parsing stops at the first separator at or
    after `hi` (metadata None), or runs to the end when there is none. A span whose `lo` lies
    past the last separator holds no events (0, [], None)."""
    buf = b""
    start = 0  # offset of buf in the decompressed stream
    head: bytes | None = None
    bare = False
    n = 0
    index: list[tuple[int, int, int]] = []  # (first event idx, start, end) of every piece
    counts = builder.counts

    def add(evs: list, begin: int, end: int) -> None:
        nonlocal n
        builder.add_chunk(evs, n)
        index.append((n, begin, end))
        n += len(evs)

    blocks = _blocks(path)
    try:
        for block in blocks:
            buf = buf + block if buf else block
            if head is None:
                stripped = buf.lstrip()
                if not stripped:
                    continue
                if stripped[:1] == b"[":
                    bare, head = True, b""
                    start += len(buf) - len(stripped) + 1
                    buf = stripped[1:]
                elif stripped[:1] == b"{":
                    m = _HEAD_RE.search(buf)
                    if m is None:
                        if len(buf) > max(MAX_PIECE, 4 * IO_BLOCK):
                            raise _NotStreamable
                        continue
                    head, buf = buf[:m.start()], buf[m.end():]
                    start += m.end()
                else:
                    raise TraceReadError(f"{path}: not a JSON trace (starts with {stripped[:1]!r})")
                lo = None if lo is None else max(lo, start)
                hi = None if hi is None else max(hi, start)
            if lo is not None:  # skipping to this span's first event
                if lo - start >= len(buf):
                    start += len(buf)
                    buf = b""
                    continue
                buf, start = buf[lo - start:], lo
                m = _SEP_RE.search(buf)
                if m is None:
                    if len(buf) > MAX_PIECE:
                        raise _NotStreamable
                    continue
                buf, start, lo = buf[m.end() - 1:], start + m.end() - 1, None
            if hi is not None and start + len(buf) > hi:  # this span's end is in buf
                m = _SEP_RE.search(buf, max(0, hi - start))
                if m is None:
                    if len(buf) > max(MAX_PIECE, 4 * IO_BLOCK):
                        raise _NotStreamable
                    continue  # wait for the whole separator
                part = buf[:m.start() + 1]
                pos = _add_pieces(part, 0, start, add, counts)
                evs = _decode_piece(part[pos:], counts)
                add(evs, start + pos, start + len(part))
                return n, index, None
            pos = _add_pieces(buf, 0, start, add, counts)
            if pos:
                buf = buf[pos:]
                start += pos
            elif len(buf) > max(MAX_PIECE, 4 * IO_BLOCK):
                raise _NotStreamable
    finally:
        blocks.close()  # stops the gunzip thread when this span ends early
    if head is None:
        if not buf.strip():
            raise TraceReadError(f"{path}: empty file")
        raise _NotStreamable
    if lo is not None:  # no separator after lo: the span before this one holds every event
        return 0, [], None
    # the last piece: events, "]", then the rest of the top-level object
    for meta, last in _tails(buf, head, bare):
        try:
            evs = _decode_piece(last, counts) if last.strip() else []
            break
        except _NotStreamable:
            continue
    else:
        raise _NotStreamable
    add(evs, start, start + len(last))
    return n, index, meta


def _add_pieces(buf: bytes, pos: int, start: int, add: Any, counts: dict) -> int:
    """Decode and add the whole pieces of buf[pos:] but the last event(s); the new pos."""
    view = memoryview(buf)
    try:
        while True:
            evs, cut = _next_piece(buf, view, pos, counts)
            if evs is None:
                return pos
            add(evs, start + pos, start + cut[0])
            pos = cut[1]
    finally:
        view.release()


def _next_piece(buf: bytes, view: memoryview, pos: int, counts: dict) -> tuple[list | None, Any]:
    """Decode the events of buf[pos:cut] for a separator cut at most BLOCK bytes after pos (twice
    that, and so on, after a longer event); (None, None) when no cut in buf decodes (wait for more
    data)."""
    size = max(BLOCK, 1)
    while True:
        hi = min(pos + size, len(buf))
        for cut in _separators(buf, hi=hi, lo_bound=pos):
            try:
                return _decode_piece(view[pos:cut[0]], counts), cut
            except _NotStreamable:  # cut inside a string: try an earlier separator
                continue
        if hi == len(buf):
            return None, None
        size *= 2


def _separators(buf: bytes, tries: int = 8, hi: int | None = None,
                lo_bound: int = 0) -> Iterator[tuple[int, int]]:
    """(end of a piece, start of the rest) at the last few `}, {` of buf[lo_bound:hi], last first."""
    window = 1 << 12  # a few events first, then 8x that per round
    hi = len(buf) if hi is None else hi
    lo = max(lo_bound, hi - window)
    given = 0
    while given < tries:
        found = [(m.start() + 1, m.end() - 1) for m in _SEP_RE.finditer(buf, lo, hi)]
        for cut in reversed(found):
            yield cut
            given += 1
            if given >= tries:
                return
        if lo <= lo_bound:
            return
        lo, hi = max(lo_bound, lo - 8 * window), lo + 8  # overlap: a separator across the border


def _tails(buf: bytes, head: bytes, bare: bool) -> Iterator[tuple[dict, bytes]]:
    """Candidates (metadata, last events) for the `]` closing the event array, last first."""
    q = len(buf)
    for _ in range(64):
        q = buf.rfind(b"]", 0, q)
        if q < 0:
            break
        tail = buf[q + 1:]
        if bare:
            if not tail.strip():
                yield {}, buf[:q]
            continue
        try:
            meta = _ANY_DECODER.decode(head + b'"traceEvents": []' + tail)
        except msgspec.DecodeError:
            continue
        if isinstance(meta, dict):
            meta.pop("traceEvents", None)
            yield meta, buf[:q]


def read_trace(path: str | os.PathLike, processes: int | None = None) -> TraceData:
    """Read a Kineto trace file (.json or .json.gz, any torch version, ours) into a `TraceData`.

    Big files (>= PARALLEL_MIN_BYTES on disk) are split across `processes` extra parser processes
    (default: `default_parse_processes()`, cores - 1; 0: this process only), each started for the
    read and gone after it; the environment variable GPUSCOPE_PARSE_PROCESSES overrides it.
    """
    path = os.fspath(path)
    workers = _parse_processes(processes)
    tune_for_parsing()
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise TraceReadError(f"{path}: file not found") from None
    if os.path.isdir(path):
        raise TraceReadError(f"{path}: is a directory")
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of short-lived objects, no cycles: collection passes are waste
    try:
        try:
            t = None
            if workers and st.st_size >= PARALLEL_MIN_BYTES and sys.executable:
                try:
                    t = _parallel_parse(path, workers)
                except TraceReadError:  # the file's own fault: reading it here says the same
                    raise
                except _NotStreamable:  # a range boundary that is not between two events
                    t = None
                except Exception as e:  # noqa: BLE001 - a failed worker: parse here instead
                    logging.getLogger(__name__).warning(
                        "gpuscope: parallel parsing failed (%s); parsing in this process", e)
            if t is None:
                t = _stream_parse(path)
        except _NotStreamable:
            t = parse_trace(read_bytes(path), path)
    except TraceReadError:
        raise
    except Exception as e:  # noqa: BLE001 - last resort: a clear message, never a deep traceback
        raise TraceReadError(f"{path}: unreadable trace ({type(e).__name__}: {e})") from e
    finally:
        if gc_was_enabled:
            gc.enable()
    t.source_stat = (st.st_size, st.st_mtime_ns)
    release_memory()
    tune_memory_for_views()
    return t
