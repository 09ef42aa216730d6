"""Decoded events -> columns: normalised categories, interned texts, coerced numbers, and the
`Builder` that accumulates a trace's pieces and makes its DataFrames (`TraceData`)."""

from __future__ import annotations

import json
import os
import re
import zlib
from concurrent.futures import ThreadPoolExecutor
from itertools import chain, compress, repeat
from operator import attrgetter, is_not, itemgetter
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

if TYPE_CHECKING:
    import pandas as pd

from profiler_core.trace import event_args
from profiler_core.trace.categories import DEVICE_CATS, normalise_category
from profiler_core.trace.event_args import FLOAT, INT32, INT64, JSON, TEXT, TRIPLE, Arg
from profiler_core.trace.model import (
    EVENT_COLUMNS,
    FLOW_COLUMNS,
    FRAME_COLUMNS,
    MEMORY_COLUMNS,
    NAME_COLUMNS,
    SPARSE_COLUMNS,
    TraceData,
    clean_device_properties,
    constant_column,
)
from profiler_core.trace.read.decode import ANY_DECODER, TraceReadError, decoder_fields
from profiler_core.trace.sparse import SparseColumn, share_rows

# --------------------------------------------------------------------------- normalisation
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_NUMERIC_ID = re.compile(r"^\s*(?:stream\s*)?(-?\d+)\s*$", re.IGNORECASE)


class Labels:
    """Maps non-numeric pid/tid strings to stable negative codes (crc32-based)."""

    def __init__(self) -> None:
        self.by_text: dict[str, int] = {}
        self.by_code: dict[int, str] = {}
        self.beyond = 0  # distinct values beyond 64 bits kept as text
        self.streams: set[int] = set()  # the numbers of "stream N" texts (GPU streams, whose number is kept)

    def _number(self, value: int, counted: bool = False) -> int | None:
        if _INT64_MIN <= value <= _INT64_MAX:
            return value
        self.beyond += not counted
        return None

    def code(self, value: Any) -> int:
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, int):
            found = self._number(value)
            if found is not None:
                return found
        if (
            isinstance(value, float)
            and value == value
            and value not in (float("inf"), float("-inf"))
            and value.is_integer()
        ):
            found = self._number(int(value))
            if found is not None:
                return found
        text = to_text(value)
        m = _NUMERIC_ID.match(text)
        if m:
            found = self._number(int(m.group(1)), counted=not isinstance(value, str))
            if found is not None:
                if not text.lstrip()[:1].isdigit() and text.lstrip()[:1] != "-":
                    self.streams.add(found)
                return found
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
            return np.fromiter((self.code(to_text(v)) for v in values), dtype=np.int64, count=n)


class Interner:
    """Builds one pandas category column across chunks (value -> code)."""

    def __init__(self, convert=None, strict: bool = False) -> None:
        self.codes: dict[str, int] = {"": 0}  # text -> code
        self.values: list[str] = [""]
        self.raw: dict[Any, int] = {}  # raw decoded value -> code
        self.convert = convert or to_text
        self.strict = strict  # lists/objects raise TypeError (else: keyed by their JSON text)
        self.by_raw: dict[Any, int] = {}  # (the native reader) raw JSON text of a value -> code

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
            values = self._hashable(values)
        try:
            new = set(values) - raw.keys()
        except TypeError:
            values = self._hashable(values)
            new = set(values) - raw.keys()
        for v in new:
            text = self.convert(v)
            c = self.codes.get(text)
            if c is None:
                c = self.codes[text] = len(self.values)
                self.values.append(text)
            raw[v] = c
        return np.fromiter(map(raw.__getitem__, values), dtype=np.int32, count=n)

    def _hashable(self, values: list) -> list:
        if self.strict:
            raise TypeError("a list or an object where a text belongs")
        return [json.dumps(v) if isinstance(v, (list, dict)) else v for v in values]

    def categorical(self, codes: np.ndarray) -> pd.Categorical:
        """Codes -> a Categorical holding only the values that occur."""
        import pandas as pd

        used = np.bincount(codes, minlength=len(self.values)) > 0  # codes are 0..len-1
        if used.all():
            return pd.Categorical.from_codes(codes, categories=pd.Index(self.values, dtype=object))
        remap = np.cumsum(used) - 1
        cats = pd.Index([v for v, u in zip(self.values, used) if u], dtype=object)
        return pd.Categorical.from_codes(remap[codes].astype(np.int32), categories=cats)


def to_text(value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return ""
    return value if isinstance(value, str) else str(value)


def _compact_json(raw: Any) -> str:
    """Raw JSON bytes of an args list -> compact JSON text ("" when missing or null)."""
    raw = bytes(raw)
    if not raw or raw == b"null":
        return ""
    try:
        return msgspec.json.encode(ANY_DECODER.decode(raw)).decode()
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


#: |ts| and |dur| at or beyond this many µs (146 years) do not fit int64 ns once rebased: invalid
_MAX_US = float(1 << 62) / 1000.0


def _valid_ts(ts_us: np.ndarray) -> np.ndarray:
    """Which µs timestamps are finite and within int64 ns (the others are skipped, counted)."""
    return np.abs(ts_us) < _MAX_US  # NaN and ±inf compare False


#: below this many µs, rint(us * 1000) is the exact ns of a 3-decimal value (error < 1e-3 ns)
_FAST_NS_LIMIT = float(1 << 31)


def to_ns(us: np.ndarray) -> np.ndarray:
    """µs floats -> exact int64 ns (Kineto writes at most 3 decimals; exact below 2**43 µs)."""
    if len(us) and us.min() > -_FAST_NS_LIMIT and us.max() < _FAST_NS_LIMIT:  # (NaN fails both)
        return np.rint(us * 1000.0).astype(np.int64)
    finite = np.isfinite(us)
    us = np.where(finite, us, 0.0)
    whole = np.floor(us)
    frac = np.rint((us - whole) * 1000.0)
    return whole.astype(np.int64) * 1000 + frac.astype(np.int64)


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


# --------------------------------------------------------------------------- the args schema, derived
#: event column -> (kind, missing value): the complete events' own fields, then event_args.ARGS's columns
_COLUMN_KIND: dict[str, tuple[Any, Any]] = {"cat": (TEXT, ""), "name": (TEXT, ""), **event_args.column_kinds("events")}
_CATEGORY_COLUMNS = tuple(c for c, (k, _) in _COLUMN_KIND.items() if k.dtype == "category")
_ARG_COLUMNS = tuple(c for c in EVENT_COLUMNS if c not in event_args.EVENT_HEAD + event_args.EVENT_TAIL)
#: decoder field -> the decoder's default for it (what "absent" decodes to)
_DEFAULT = {f: d for f, _, d, _ in decoder_fields()}


class _Row:
    """One `events` arg of event_args.ARGS as the builder extracts it."""

    def __init__(self, arg: Arg) -> None:
        self.arg, self.field, self.kind, self.missing = arg, arg.field, arg.kind, arg.missing
        #: names the arg in warnings: its column for events, its key for the memory table's
        self.label = arg.column if arg.table == "events" else arg.keys[0]
        self.get = attrgetter(arg.field)
        self.default = _DEFAULT[arg.field]
        #: the decoder fields of its older spellings (None when absent), and a getter of all of them
        self.olds = tuple(f"{arg.field}__{i}" for i in range(1, len(arg.keys)))
        self.get_olds: Any = attrgetter(*self.olds) if self.olds else None
        self.no_olds: Any = (None,) * len(self.olds) if len(self.olds) > 1 else None
        self.column = arg.column or ""
        self.followers: tuple[str, ...] = ()


def _group_rows(group: str) -> tuple[_Row, ...]:
    """The rows extracted from a group's events ("other": all of them), in table order."""
    rows = [_Row(a) for a in event_args.ARGS if a.table == "events" and a.column is not None]
    rows = [r for r in rows if group == "other" or group in r.arg.groups]
    for r in rows:
        r.followers = tuple(f.field for f in rows if f.arg.written_with == r.field)
    return tuple(rows)


#: extraction group -> its rows
_GROUP_PLAN = {g: _group_rows(g) for g in event_args.EVENT_GROUPS}
_MEMORY_ROWS = tuple(_Row(a) for a in event_args.ARGS if a.table == "memory")
_NAME_FIELDS = tuple(a.field for a in event_args.ARGS if a.table == "names")


def _missing_rows(row: _Row, col: np.ndarray) -> np.ndarray:
    """Which rows of an arg's column hold its missing value."""
    if row.kind is JSON or row.kind is TEXT:
        return col == 0  # code 0 is ""
    if row.kind is FLOAT:
        return np.isnan(col)
    if row.kind is TRIPLE:
        return ~col.any(axis=1)
    return col == row.missing


def _all_missing(row: _Row, col: np.ndarray) -> bool:
    """Whether every row of an arg's column holds its missing value (one numpy pass)."""
    if row.kind is FLOAT:
        return bool(np.isnan(col).all())
    if row.kind is INT64 or row.kind is INT32:
        return not bool((col != row.missing).any())
    return not bool(col.any())  # codes (0 is ""), triples (0 is missing)


def _take(items: list, where: np.ndarray) -> list:
    """items[i] for i in where (ascending)."""
    if len(where) == len(items):
        return items
    if len(where) == 1:
        return [items[int(where[0])]]
    return list(itemgetter(*where)(items))


def _raw_bytes(values: list) -> list:
    """msgspec.Raw values -> bytes, in C: one join and one split (JSON text never holds a NUL byte;
    checked by the count, else one bytes() per value)."""
    out = b"\0".join(values).split(b"\0")
    return out if len(out) == len(values) else list(map(bytes, values))


def _missing_column(column: str, n: int) -> np.ndarray:
    kind, missing = _COLUMN_KIND.get(column, (INT64, -1))
    if kind.dtype == "category":
        return np.zeros(n, np.int32)  # code 0 is "" (interned first)
    return np.full(n, missing, np.dtype(kind.dtype))


#: rows of the blocks the chunks of a `Builder` are joined into as they are added (`join_pending`): 4 MB
#: of an int32 column, 8 MB of an int64 one
BLOCK_ROWS = 1 << 20


#: threads that put the columns in the events' order in `finish` (each column's blocks joined, gathered,
#: made categorical or sparse), for traces of at least FINISH_THREADS_ROWS events (11M-event trace, 2
#: cores: finish 2.2 s -> 1.4 s of wall time)
FINISH_THREADS, FINISH_THREADS_ROWS = 2, 1 << 20


class Builder:
    """Accumulates the columns of every chunk; `finish` makes the DataFrames."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.bad: dict[str, int] = {}
        self.co = _Coerce(self.bad)
        self.labels = Labels()
        self.interners = {c: Interner(_compact_json if _COLUMN_KIND[c][0] is JSON else None) for c in _CATEGORY_COLUMNS}
        self.interners["cat"] = Interner(normalise_category, strict=True)
        self.interners["name"] = Interner(strict=True)
        self.ev: dict[str, list] = {c: [] for c in EVENT_COLUMNS}  # per chunk; None = missing
        self.ev_len: list[int] = []
        self.joined = 0  # leading chunks of `ev` that are blocks joined by join_pending
        self.mem: list[dict] = []
        self.flows: list[dict] = []
        self.names: list[tuple] = []
        self.flow_cat = Interner(strict=True)
        self.flow_name = Interner(strict=True)
        self.flow_ph = Interner()
        self.flow_bp = Interner()
        self.entries = 0  # entries of traceEvents seen
        self.with_phase = 0  # of which event objects with a string "ph" (chrome-trace events)

    # ---- per chunk
    def add_chunk(self, evs: list, first_idx: int) -> None:
        """Add decoded events (None for entries that were not event objects) at first_idx..."""
        n = len(evs)
        if not n:
            return
        phs = [_NOT_EVENT if e is None else e.ph for e in evs] if None in evs else list(map(_get_ph, evs))
        try:
            kinds = np.fromiter(map(_PHASES.get, phs, repeat(_UNSUPPORTED)), np.int8, count=n)
        except TypeError:  # unhashable ph values
            kinds = np.fromiter((_PHASES.get(str(p), _UNSUPPORTED) for p in phs), np.int8, n)
        idx = np.arange(first_idx, first_idx + n, dtype=np.int64)
        self.entries += n
        self.with_phase += int(np.count_nonzero(kinds < _UNSUPPORTED))
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
                self.with_phase += sum(1 for i in where if isinstance(phs[i], str))
                for ph in sorted({str(phs[i]) for i in where}):
                    k = sum(1 for i in where if str(phs[i]) == ph)
                    self._count(f"events of unsupported phase {ph!r} skipped", k)

    def _complete(self, evs: list, idx: np.ndarray) -> None:
        co, col = self.co, self.ev
        cats, names = list(map(_get_cat, evs)), list(map(_get_name, evs))
        try:
            cat_codes = self.interners["cat"].add(cats)
            name_codes = self.interners["name"].add(names)
        except TypeError:  # a list or an object as name or cat: that event goes
            self._complete(*self._without_unhashable(evs, idx, cats, names, "complete"))
            return
        ts_us = co.floats("ts", list(map(_get_ts, evs)))
        dur_us = co.floats("dur", list(map(_get_dur, evs)))
        keep = _valid_ts(ts_us)
        huge_dur = np.abs(dur_us) >= _MAX_US  # (NaN: False)
        if not keep.all() or huge_dur.any():
            if not keep.all():
                self._count("complete events without a valid ts skipped", int((~keep).sum()))
            if huge_dur.any():
                self._count(f"complete events with a dur beyond {_MAX_US:.0e} us skipped", int((huge_dur & keep).sum()))
                keep &= ~huge_dur
            where = np.flatnonzero(keep)
            evs = [evs[i] for i in where]
            ts_us, dur_us, idx = ts_us[where], dur_us[where], idx[where]
            cat_codes, name_codes = cat_codes[where], name_codes[where]
        n = len(evs)
        no_dur = ~np.isfinite(dur_us)
        if no_dur.any():
            self._count("complete events without a dur (set to 0)", int(no_dur.sum()))
        dur = to_ns(np.where(no_dur, 0.0, dur_us))
        neg = dur < 0
        if neg.any():
            self._count("negative durations clamped to 0", int(neg.sum()))
            dur[neg] = 0
        col["ts"].append(to_ns(ts_us))
        col["dur"].append(dur)
        col["idx"].append(idx)
        col["cat"].append(cat_codes)
        col["name"].append(name_codes)
        col["pid"].append(self.labels.column(list(map(_get_pid, evs))))
        col["tid"].append(self.labels.column(list(map(_get_tid, evs))))
        # args: each family of categories carries its own keys; only those are extracted
        out: dict = dict.fromkeys(_ARG_COLUMNS)
        groups = event_args.EVENT_GROUPS
        family_of_code = np.array(
            [groups.index(event_args.CATEGORY_GROUP.get(v, "other")) for v in self.interners["cat"].values],
            dtype=np.int8,
        )
        families = family_of_code[cat_codes]
        args_all = list(map(_get_args, evs))
        for code in np.flatnonzero(np.bincount(families, minlength=1)):
            family = groups[code]
            rows = np.flatnonzero(families == code)
            args = args_all if len(rows) == n else [args_all[i] for i in rows]
            self._args_family(family, args, rows, out, n)
        for c in _ARG_COLUMNS:
            col[c].append(out[c])
        self.ev_len.append(n)

    def _args_family(self, family: str, args: list, rows: np.ndarray, out: dict, n: int) -> None:
        """Fill the arg columns of one group of rows (event_args.CATEGORY_GROUP): each column stays None
        (its missing value, stored as a constant) where the chunk's rows lack its arg."""
        full = len(rows) == n

        def put(column: str, values: np.ndarray) -> None:
            if full:
                out[column] = values
                return
            if out[column] is None:
                out[column] = _missing_column(column, n)
            out[column][rows] = values

        skip: set = set()
        for row in _GROUP_PLAN[family]:
            if row.field in skip:
                continue
            values = list(map(row.get, args))
            kind = row.kind
            if (kind is TEXT or kind is TRIPLE) and not row.olds and values.count(None) == len(values):
                skip.update(row.followers)
                continue  # absent everywhere: the column keeps its missing value
            col = self._arg_column(row, values, args) if row.olds else self._convert(row, values)
            if _all_missing(row, col):
                if kind is INT64 or kind is INT32:
                    skip.update(row.followers)
                continue  # absent everywhere (or its missing value everywhere)
            if kind is TRIPLE:
                for j, name in enumerate(row.arg.columns):
                    put(name, col[:, j])
            else:
                put(row.column, col)

    def _convert(self, row: _Row, values: list) -> np.ndarray:
        """One arg's decoded values -> its column (codes for texts, an (n, 3) array for a triple)."""
        kind = row.kind
        if kind is JSON:
            return self.interners[row.column].add(_raw_bytes(values))
        if kind is TEXT:
            return self.interners[row.column].add(values)
        if kind is TRIPLE:
            return self._triples(row.label, values)
        if kind is FLOAT:
            return self.co.floats(row.label, values)
        dtype = np.int32 if kind is INT32 else np.int64
        try:  # dense ones convert on the first try
            return np.fromiter(values, dtype=dtype, count=len(values))
        except (TypeError, ValueError, OverflowError):
            return self.co.ints(row.label, values, row.missing, dtype)

    def _arg_column(self, row: _Row, values: list, args: list) -> np.ndarray:
        """The column of one arg: where its key is absent, the value of its first older spelling present
        (looked up on those rows only)."""
        col = self._convert(row, values)
        where = np.flatnonzero(_missing_rows(row, col))
        if not len(where):
            return col
        olds = list(map(row.get_olds, _take(args, where)))
        if olds.count(row.no_olds) == len(olds):
            return col
        merged = list(values)
        for i, o in zip(where.tolist(), olds):
            for v in o if len(row.olds) > 1 else (o,):
                if v is not None:
                    merged[i] = v
                    break
        return self._convert(row, merged)

    def _without_unhashable(
        self, evs: list, idx: np.ndarray, cats: list, names: list, kind: str
    ) -> tuple[list, np.ndarray]:
        """The events whose name and cat are not lists or objects (the others are counted)."""
        good = [
            i
            for i, (c, nm) in enumerate(zip(cats, names))
            if not isinstance(c, (list, dict)) and not isinstance(nm, (list, dict))
        ]
        self._count(f"{kind} events with a list or an object as name or cat skipped", len(evs) - len(good))
        return [evs[i] for i in good], idx[np.asarray(good, dtype=np.int64)]

    def _count(self, what: str, n: int) -> None:
        self.counts[what] = self.counts.get(what, 0) + n

    def _triples(self, key: str, values: list) -> np.ndarray:
        """[x, y, z] lists -> an (n, 3) int32 array (zeros where missing); in bulk when every
        present value is a list of 3 ints, else value by value (bad ones counted)."""
        n = len(values)
        flags = list(map(is_not, values, repeat(None)))
        present = np.array(flags, dtype=bool)
        some = values if all(flags) else list(compress(values, flags))
        arr = None
        # lists of 3 ints (type and length checked in C, one pass each): flattened by one fromiter,
        # far quicker than np.array's discovery of nested sequences
        if set(map(type, some)) <= {list} and set(map(len, some)) <= {3}:
            try:
                arr = np.fromiter(chain.from_iterable(some), dtype=np.int64, count=3 * len(some))
            except (TypeError, ValueError, OverflowError):  # floats, texts, big numbers ...
                arr = None
        if arr is not None and (not len(arr) or (arr.min() >= _INT32_MIN and arr.max() <= _INT32_MAX)):
            arr = arr.astype(np.int32).reshape(len(some), 3)
            if len(some) == n:
                return arr
            out = np.zeros((n, 3), dtype=np.int32)
            out[present] = arr
            return out
        return self._triples_slow(key, values)

    def _triples_slow(self, key: str, values: list) -> np.ndarray:
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
        ts_us = co.floats("ts", list(map(_get_ts, evs)))
        keep = _valid_ts(ts_us)
        if not keep.all():
            self._count("memory events without a valid ts skipped", int((~keep).sum()))
        rec = {
            "ts": to_ns(ts_us)[keep],
            "pid": self.labels.column(list(map(_get_pid, evs)))[keep],
            "tid": self.labels.column(list(map(_get_tid, evs)))[keep],
        }
        for row in _MEMORY_ROWS:
            values = list(map(row.get, args))
            col = self._arg_column(row, values, args) if row.olds else self._convert(row, values)
            rec[row.column] = col[keep]
        rec["idx"] = idx[where][keep]
        self.mem.append(rec)

    def _flows(self, evs: list, idx: np.ndarray) -> None:
        co = self.co
        cats, names = list(map(_get_cat, evs)), list(map(_get_name, evs))
        try:
            cat_codes, name_codes = self.flow_cat.add(cats), self.flow_name.add(names)
        except TypeError:
            self._flows(*self._without_unhashable(evs, idx, cats, names, "flow"))
            return
        ids = list(map(_get_id, evs))
        try:
            id_col = np.fromiter(ids, dtype=np.int64, count=len(ids))
        except (TypeError, ValueError, OverflowError):
            id_col = co.ints("flow id", [_flow_id(v) for v in ids], -1)
        ts_us = co.floats("ts", list(map(_get_ts, evs)))
        keep = _valid_ts(ts_us)
        if not keep.all():
            self._count("flow events without a valid ts skipped", int((~keep).sum()))
        self.flows.append(
            {
                "cat": cat_codes[keep],
                "name": name_codes[keep],
                "id": id_col[keep],
                "ph": self.flow_ph.add(list(map(_get_ph, evs)))[keep],
                "pid": self.labels.column(list(map(_get_pid, evs)))[keep],
                "tid": self.labels.column(list(map(_get_tid, evs)))[keep],
                "ts": to_ns(ts_us)[keep],
                "bp": self.flow_bp.add(list(map(_get_bp, evs)))[keep],
                "idx": idx[keep],
            }
        )

    def _metadata(self, evs: list) -> None:
        for e in evs:
            value = next((v for v in map(getattr, repeat(e.args), _NAME_FIELDS) if v is not None), None)
            self.names.append((self.labels.code(e.pid), self.labels.code(e.tid), to_text(e.name), value))

    # ---- final frames
    # ---- parallel parsing: a worker's builder is exported and merged into the main one
    _FLOW_INTERNERS = ("flow_cat", "flow_name", "flow_ph", "flow_bp")

    def export(self) -> dict:
        """This builder's chunks with the texts behind their codes (picklable, for merge)."""
        return {
            "ev": self.ev,
            "ev_len": self.ev_len,
            "mem": self.mem,
            "flows": self.flows,
            "names": self.names,
            "counts": self.counts,
            "bad": self.bad,
            "entries": self.entries,
            "with_phase": self.with_phase,
            "labels": self.labels.by_code,
            "labels_beyond": self.labels.beyond,
            "interners": {c: i.values for c, i in self.interners.items()},
            "flow_interners": {k: getattr(self, k).values for k in self._FLOW_INTERNERS},
        }

    def join_pending(self, min_rows: int | None = None) -> None:
        """Join the chunks added since the last block into one block per column, once they hold `min_rows`
        rows. Blocks of BLOCK_ROWS rows are mmapped while parsing (malloc_tuning.PARSE_MMAP_THRESHOLD) and
        the small chunks go back to the heap for the next ones, so that `finish`, whose whole-trace
        columns are mmapped too, does not hold the chunks' heap as well (11M-event trace: read peak
        1.7 GB -> 1.2 GB)."""
        k = self.joined
        lens = self.ev_len[k:]
        rows = int(sum(lens))
        if rows < (BLOCK_ROWS if min_rows is None else min_rows) or len(lens) < 2:
            return
        for c, parts in self.ev.items():
            tail = parts[k:]
            del parts[k:]
            if all(p is None for p in tail):
                parts.append(None)
            else:
                parts.append(np.concatenate([_missing_column(c, ln) if p is None else p for p, ln in zip(tail, lens)]))
            del tail
        del self.ev_len[k:]
        self.ev_len.append(rows)
        self.joined = k + 1

    def compact(self) -> None:
        """Join the chunks into one per column (a worker's export then pickles a few big arrays)."""
        total = int(sum(self.ev_len))
        for c, parts in self.ev.items():
            if all(p is None for p in parts):
                self.ev[c] = [None] if parts else []
            else:
                self.ev[c] = [
                    np.concatenate([_missing_column(c, ln) if p is None else p for p, ln in zip(parts, self.ev_len)])
                ]
        self.ev_len = [total] if self.ev_len else []
        self.joined = len(self.ev_len)
        if len(self.mem) > 1:
            self.mem = [_concat_dicts(self.mem, tuple(self.mem[0]))]
        if len(self.flows) > 1:
            self.flows = [_concat_dicts(self.flows, tuple(self.flows[0]))]

    def merge(self, part: dict, offset: int) -> None:
        """Append an exported builder whose events start at traceEvents[offset]."""
        fix = {}
        beyond = self.labels.beyond
        for code, text in part["labels"].items():
            mine = self.labels.code(text)
            if mine != code:
                fix[code] = mine
        self.labels.beyond = beyond + part.get("labels_beyond", 0)

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
            for col, key in (("cat", "flow_cat"), ("name", "flow_name"), ("ph", "flow_ph"), ("bp", "flow_bp")):
                f[col] = fremap[key][f[col]]
            if fix:
                relabel(f["pid"]), relabel(f["tid"])
            self.flows.append(f)
        for pid, tid, kind, value in part["names"]:
            self.names.append((fix.get(pid, pid), fix.get(tid, tid), kind, value))
        self.entries += part["entries"]
        self.with_phase += part["with_phase"]
        for src, dst in ((part["counts"], self.counts), (part["bad"], self.bad)):
            for k, v in src.items():
                dst[k] = dst.get(k, 0) + v

    def finish(self, path: str, meta: dict, base_ns: int | None) -> TraceData:
        """Concatenate, rebase and sort the chunks into the final frames, a column at a time.

        A document none of whose entries is a chrome-trace event (an object with a "ph") is not a
        trace: TraceReadError, so that it is listed as unreadable instead of served as an empty run."""
        import pandas as pd

        if self.entries and not self.with_phase:
            raise TraceReadError(
                f"{path}: no trace events (not a trace: none of its {self.entries} entries is "
                'a chrome-trace event, an object with a "ph" phase)'
            )

        col, lens = self.ev, self.ev_len
        total = int(sum(lens))

        def column(c: str) -> np.ndarray | None:
            parts = col.pop(c)
            if all(p is None for p in parts):
                return None
            return (
                np.concatenate([_missing_column(c, ln) if p is None else p for p, ln in zip(parts, lens)])
                if parts
                else None
            )

        ts, dur, idx = (column(c) for c in ("ts", "dur", "idx"))
        if ts is None:
            ts, dur, idx = (np.empty(0, np.int64) for _ in range(3))
        mem = _concat_dicts(self.mem, MEMORY_COLUMNS)
        flows = _concat_dicts(self.flows, FLOW_COLUMNS, int32=("cat", "name", "ph", "bp"))
        self.mem, self.flows = [], []
        if base_ns is None:  # old traces: ts is µs since the epoch; rebase on the first event
            firsts = [a.min() for a in (ts, mem["ts"], flows["ts"]) if len(a)]
            base_ns = int(min(firsts)) if firsts else 0
            for arr in (ts, mem["ts"], flows["ts"]):
                arr -= base_ns
        order, sorted_ts, sorted_dur = _sorted_order(ts, dur, idx)
        # one whole-trace column at a time: the 11M-event trace's peak is here, with the blocks of the rest
        data: dict = {"ts": ts[order] if sorted_ts is None else sorted_ts}
        del ts, sorted_ts
        data["dur"] = dur[order] if sorted_dur is None else sorted_dur
        del dur, sorted_dur
        data["idx"] = idx[order]
        del idx
        sparse: dict = {}

        def final(c: str) -> Any:
            """Column c in the events' order: an array, a Categorical, or (a sparse arg) a SparseColumn."""
            arr = column(c)
            if c in SPARSE_COLUMNS:  # kept as its rows with a value (trace/sparse.py)
                kind, missing = _COLUMN_KIND[c]
                if arr is None:
                    return SparseColumn.empty(total, kind.dtype, missing)
                arr = arr[order]
                values = self.interners[c].categorical(arr.astype(np.int32, copy=False)) if c in self.interners else arr
                return SparseColumn.from_dense(values, missing)
            # absent from the whole trace: one shared read-only value
            arr = constant_column(_missing_column(c, 1)[0], total) if arr is None else arr[order]
            return self.interners[c].categorical(arr.astype(np.int32, copy=False)) if c in self.interners else arr

        rest = [c for c in EVENT_COLUMNS if c not in data]
        threads = min(FINISH_THREADS, os.cpu_count() or 1)
        if total >= FINISH_THREADS_ROWS and threads > 1:  # numpy's copies and gathers release the GIL
            with ThreadPoolExecutor(threads, thread_name_prefix="gpuscope-finish") as pool:
                done = list(zip(rest, pool.map(final, rest)))
        else:
            done = [(c, final(c)) for c in rest]
        for c, value in done:
            (sparse if c in SPARSE_COLUMNS else data)[c] = value
        del done
        gpu_only = other_tool_gpu_categories(data, sparse, self.labels.by_code, self.labels.streams)
        if gpu_only:
            self._count(
                "events of a chrome trace without categories that is no torch.autograd.profiler export read as "
                "kernels (their stream or device args, kernel names or GPU-stream threads say GPU work)",
                gpu_only,
            )
        elif legacy_export_categories(data, self.labels.by_text.get(LEGACY_DEVICE_PID)):
            self._count(
                "events of a pre-Kineto torch.autograd.profiler export (no categories) read as CPU "
                'ops, and those of its "CUDA functions" process as kernels',
                len(data["cat"]),
            )
        # GPU activities carry device/stream in pid/tid when their args lack them
        gpu_codes = [i for i, v in enumerate(data["cat"].categories) if v in DEVICE_CATS]
        if gpu_codes:
            gpu = np.isin(data["cat"].codes, gpu_codes)
            for c, src in (("device", "pid"), ("stream", "tid")):
                fill = gpu & (data[c] == -1) & (data[src] >= 0)
                if fill.any():
                    if not data[c].flags.writeable:
                        data[c] = data[c].copy()
                    data[c][fill] = data[src][fill]
        events = pd.DataFrame({c: data.pop(c) for c in FRAME_COLUMNS}, copy=False)
        mem_order = np.lexsort((mem["idx"], mem["ts"]))
        memory = pd.DataFrame({k: v[mem_order] for k, v in mem.items()}, copy=False)
        flow_order = np.lexsort((flows["idx"], flows["ts"]))
        fdata = {k: v[flow_order] for k, v in flows.items()}
        for c, interner in (
            ("cat", self.flow_cat),
            ("name", self.flow_name),
            ("ph", self.flow_ph),
            ("bp", self.flow_bp),
        ):
            fdata[c] = interner.categorical(fdata[c].astype(np.int32, copy=False))
        flows_df = pd.DataFrame({c: fdata[c] for c in FLOW_COLUMNS}, copy=False)
        names = names_frame(self.names)
        warnings = [f"{n} {what}" for what, n in sorted(self.counts.items())]
        warnings += [f"{n} non-numeric values of {c!r} treated as missing" for c, n in sorted(self.bad.items())]
        if self.labels.beyond:
            warnings.append(f"{self.labels.beyond} pid/tid values beyond 64 bits kept as text labels")
        props, dropped = clean_device_properties(meta.get("deviceProperties"))
        if dropped:
            warnings.append(f"{dropped} deviceProperties values of the wrong type ignored")
        return TraceData(
            path=path,
            metadata=meta,
            device_properties=props,
            base_ns=int(base_ns),
            events=events,
            memory=memory,
            flows=flows_df,
            names=names,
            warnings=warnings,
            labels=dict(self.labels.by_code),
            sparse=share_rows(sparse),
        )


def names_frame(rows: list[tuple]) -> pd.DataFrame:
    """The names frame of (pid, tid, kind, value) rows: pid and tid int64, kind and value objects."""
    import pandas as pd

    if all(type(r[2]) is str and type(r[3]) is str for r in rows):  # the usual: texts (no inference, no astype)
        pid, tid, kind, value = zip(*rows) if rows else ((), (), (), ())
        return pd.DataFrame(
            {
                "pid": np.array(pid, np.int64),
                "tid": np.array(tid, np.int64),
                "kind": pd.Series(kind, dtype=object),
                "value": pd.Series(value, dtype=object),
            },
            copy=False,
        )
    names = pd.DataFrame(rows, columns=list(NAME_COLUMNS))
    return names.astype({"pid": np.int64, "tid": np.int64, "kind": object, "value": object})


#: the pid label of the device events in torch.autograd.profiler's pre-Kineto chrome export
LEGACY_DEVICE_PID = "CUDA functions"


#: the process names torch.autograd.profiler's pre-Kineto export gives its events
LEGACY_PIDS = ("CPU functions", LEGACY_DEVICE_PID)
#: a thread or process label that names GPU work ("stream 7", "GPU 0", "cuda:1", "Device 2 ...")
_GPU_LABEL_RE = re.compile(r"^\s*(?:stream|gpu|cuda|device|hip|rocm)\b[\s:#]*\d*", re.IGNORECASE)
_STREAM_NUMBER_RE = re.compile(r"(\d+)")
#: names of GPU kernels and copies as CUDA and ROCm tools write them
_KERNEL_NAME_RE = re.compile(
    r"^(?:void\s|memcpy|memset|ncclDevKernel|ncclKernel|Cijk_|triton_)|kernel|\bsm\d\d_|(?:volta|turing|ampere|hopper)_"
    r"|cutlass|cudnn|cublas|gemm",
    re.IGNORECASE,
)


def other_tool_gpu_categories(data: dict, sparse: dict, labels: dict, streams: set | frozenset = frozenset()) -> int:
    """A chrome trace of another tool whose events are GPU activity, without `cat` on any complete event and not
    torch.autograd.profiler's export (no "CPU functions" / "CUDA functions" process): each (pid, tid) track one
    of whose events looks like GPU work (a `stream` or `device` arg, a grid/block launch arg, a kernel-like name,
    a thread or process label such as "stream 7" or "GPU 0": `streams`, the numbers of "stream N" texts) is read
    as kernels, its device from the `device` arg
    (else a small numeric pid, else 0) and its stream from the `stream` arg (else the thread's number). Rewrites
    `data["cat"]`, `device` and `stream` in place; returns how many events became kernels (0: nothing changed, the
    pre-Kineto rule applies)."""
    import pandas as pd

    cat = data["cat"]
    if len(cat) == 0 or any(cat.categories[c] != "" for c in np.unique(cat.codes) if c >= 0):
        return 0
    if any(labels.get(int(p)) in LEGACY_PIDS for p in np.unique(data["pid"][data["pid"] < 0])):
        return 0
    names = data["name"]
    kernel_name = np.array(  # a namespaced name ("aten::cudnn_convolution") is a CPU op's
        [bool(_KERNEL_NAME_RE.search(str(n))) and "::" not in str(n) for n in names.categories] + [False]
    )
    gpu = kernel_name[np.asarray(names.codes)] | (np.asarray(data["stream"]) >= 0) | (np.asarray(data["device"]) >= 0)
    for c in ("grid_x", "block_x"):
        col = sparse.get(c)
        if col is not None and len(col.rows):
            gpu[col.rows] = True
    for c in ("pid", "tid"):
        codes = np.unique(data[c][data[c] < 0])
        named = [int(x) for x in codes if _GPU_LABEL_RE.match(labels.get(int(x), ""))]
        if named:
            gpu |= np.isin(data[c], named)
    if streams:  # threads written "stream N" (read as the number N)
        gpu |= np.isin(data["tid"], list(streams))
    if not gpu.any():
        return 0
    # every event of a track with GPU work is GPU work
    _, track = np.unique(np.stack([data["pid"], data["tid"]], axis=1), axis=0, return_inverse=True)
    track = track.ravel()
    gpu_track = np.zeros(int(track.max()) + 1, dtype=bool)
    gpu_track[track[gpu]] = True
    gpu = gpu_track[track]
    data["cat"] = pd.Categorical.from_codes((~gpu).astype(np.int8), categories=["kernel", "cpu_op"])
    device = np.array(data["device"], dtype=np.int64, copy=True)
    pid = np.asarray(data["pid"])
    device[gpu & (device < 0)] = np.where((pid >= 0) & (pid < 1024), pid, 0)[gpu & (device < 0)]
    stream = np.array(data["stream"], dtype=np.int64, copy=True)
    tid = np.asarray(data["tid"])
    from_tid = tid.copy()
    for code in np.unique(tid[tid < 0]):
        m = _STREAM_NUMBER_RE.search(labels.get(int(code), ""))
        from_tid[tid == code] = int(m.group(1)) if m else 0
    stream[gpu & (stream < 0)] = from_tid[gpu & (stream < 0)]
    data["device"], data["stream"] = device, stream
    return int(gpu.sum())


def legacy_export_categories(data: dict, device_pid: int | None) -> bool:
    """Categories for torch.autograd.profiler's pre-Kineto `export_chrome_trace` (complete events without a
    `cat`, CPU ops under pid "CPU functions", kernels under pid "CUDA functions" with the device as tid):
    when no complete event has a category, each becomes a cpu_op, or a kernel on device `tid` when its pid
    is `device_pid`. Rewrites `data["cat"]` (and `device`) in place; False when the events have categories."""
    import pandas as pd

    cat = data["cat"]
    if len(cat) == 0 or any(cat.categories[c] != "" for c in np.unique(cat.codes) if c >= 0):
        return False
    kernel = data["pid"] == device_pid if device_pid is not None else np.zeros(len(cat), dtype=bool)
    data["cat"] = pd.Categorical.from_codes(kernel.astype(np.int8), categories=["cpu_op", "kernel"])
    if kernel.any():
        device = np.array(data["device"], dtype=np.int64, copy=True)
        device[kernel] = np.where(data["tid"][kernel] >= 0, data["tid"][kernel], 0)
        data["device"] = device
    return True


def _event_order(ts: np.ndarray, dur: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """np.lexsort((idx, -dur, ts)): the order of the events' rows (see `_sorted_order`)."""
    return _sorted_order(ts, dur, idx)[0]


def _sorted_order(
    ts: np.ndarray, dur: np.ndarray, idx: np.ndarray
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """np.lexsort((idx, -dur, ts)), and ts and dur in that order when it made them (else None). Faster for
    idx-ordered arrays: a stable sort by ts (quick on the nearly sorted ts of a trace), then, where rows
    whose ts ties are not by non-increasing dur already, one stable sort of a key of the ts's rank and
    -dur (3.9 s -> 0.4 s on the 11M-event benchmark trace, whose ties are many short runs); where the wrong
    ties are few (under one row in 8), over the rows of their runs of equal ts only (V100: 1.4 -> 0.9 ms)."""
    if len(idx) > 1 and not bool((idx[1:] > idx[:-1]).all()):
        return np.lexsort((idx, -dur, ts)), None, None
    order = np.argsort(ts, kind="stable")
    if len(order) < 2:
        return order, None, None
    ts_sorted, dur_sorted = ts[order], dur[order]
    same = ts_sorted[1:] == ts_sorted[:-1]
    wrong = same & (dur_sorted[1:] > dur_sorted[:-1])
    wrongs = int(np.count_nonzero(wrong))
    if not wrongs:
        return order, ts_sorted, dur_sorted
    if wrongs * 8 > len(order):  # many: every row's key sorted
        del ts_sorted, wrong
        lo, hi = int(dur_sorted.min()), int(dur_sorted.max())
        shift = (hi - lo).bit_length()
        if int(np.count_nonzero(~same)).bit_length() + shift > 62:
            return np.lexsort((idx, -dur, ts)), None, None
        key = np.zeros(len(order), dtype=np.int64)  # the ts's rank among the distinct ts, then hi - dur
        np.cumsum(~same, out=key[1:])
        del same
        key <<= shift
        key |= hi - dur_sorted
        del dur_sorted
        return order[np.argsort(key, kind="stable")], None, None
    # few: only the runs of equal ts that hold a wrong pair are sorted again (ts stays sorted: one per run)
    run = np.zeros(len(order), dtype=np.int64)  # the ts's rank among the distinct ts
    np.cumsum(~same, out=run[1:])
    del same
    bad = np.zeros(int(run[-1]) + 1, dtype=bool)
    bad[run[1:][wrong]] = True
    at = np.flatnonzero(bad[run])
    del bad, wrong
    d = dur_sorted[at]
    lo, hi = int(d.min()), int(d.max())
    shift = (hi - lo).bit_length()
    rank = run[at]
    del run
    if int(rank[-1]).bit_length() + shift > 62:
        return np.lexsort((idx, -dur, ts)), None, None
    rank <<= shift  # then hi - dur
    rank |= hi - d
    sub = np.argsort(rank, kind="stable")
    order[at] = order[at[sub]]
    dur_sorted[at] = d[sub]
    return order, ts_sorted, dur_sorted


def _concat_dicts(parts: list, keys: tuple, int32: tuple = ()) -> dict:
    if not parts:
        return {k: np.empty(0, np.int32 if k in int32 else np.int64) for k in keys}
    return {k: np.concatenate([p[k] for p in parts]) for k in keys}


def base_ns_of(meta: dict) -> int | None:
    base = meta.get("baseTimeNanoseconds")
    return None if isinstance(base, bool) or not isinstance(base, int) else base
