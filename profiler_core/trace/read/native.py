"""The native reader's Python side: the C scan's column buffers (`_native.parse_events`) -> a `TraceData`.

The C extension is optional (built where a compiler is found) and reads only the common shapes of
events; on anything else it declines and the Python reader, the reference, reads the file. What it
returns is turned into the `_Builder`'s state by the same conversions the Python reader applies to
each distinct text (categories, labels, compact JSON), and `_Builder.finish` makes the frames, so both
readers give the same TraceData. GPUSCOPE_NATIVE_READER=0 turns it off.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec
import numpy as np

from profiler_core import settings
from profiler_core.trace.model import EVENT_CATEGORY, EVENT_COLUMNS, EVENT_FLOAT, EVENT_INT32, TraceData
from profiler_core.trace.read import stream
from profiler_core.trace.read.columns import (
    _FAMILY,
    _FAMILY_FIELDS,
    _FAMILY_NAMES,
    _FIELD_COLUMN,
    _base_ns,
    _Builder,
    _Interner,
    _Labels,
    _to_ns,
    _to_text,
)
from profiler_core.trace.read.decode import _ANY_DECODER, max_trace_events

try:
    from profiler_core.trace.read import _native  # type: ignore[attr-defined]
except ImportError:  # not built (no compiler where it was installed): the Python reader reads every trace
    _native = None

log = logging.getLogger(__name__)

#: the name of each reader, as the log line says which one read a trace
NATIVE_READER, PYTHON_READER = "native reader", "Python reader"

#: |µs| below which columns._to_ns takes its fast path (a piece of events takes it when all its values do)
_FAST_NS_LIMIT = float(1 << 31)


def available() -> bool:
    """Whether the C extension is built and importable."""
    return _native is not None


def enabled() -> bool:
    """Whether read_trace tries the native reader first (built, and GPUSCOPE_NATIVE_READER is not 0)."""
    return _native is not None and bool(settings.get("GPUSCOPE_NATIVE_READER"))


class _Decline(Exception):
    """A value the native path cannot convert exactly as the Python reader does: it reads the file."""


def columns_of(meta: dict, events: Any, path: str, events_at: int | None = None) -> TraceData | None:
    """The TraceData of a trace whose top-level keys are `meta` and whose traceEvents array is the
    JSON bytes `events` (any buffer); None when the native reader declines it (or is not built).
    With `events_at`, the offset of `events` in the file's decompressed bytes, its `event_index`
    holds the byte ranges of pieces of about stream.BLOCK bytes, as the streaming reader's."""
    out = scan(events, path)
    return None if out is None else build(out, meta, path, events_at)


def scan(events: Any, path: str) -> dict | None:
    """The C scan of a traceEvents array (JSON bytes, any buffer): its column buffers and texts, which
    no longer refer to `events`; None when it declines (or is not built)."""
    if _native is None:
        return None
    out = _native.parse_events(events, max_trace_events(), stream.BLOCK)
    if isinstance(out, str):
        log.debug("gpuscope: %s: the native reader declined (%s)", path, out)
        return None
    return out


def build(out: dict, meta: dict, path: str, events_at: int | None = None) -> TraceData | None:
    """The TraceData of a `scan` result (see `columns_of`); None when a value cannot be converted exactly."""
    try:
        t = _Build(out).trace(path, meta)
    except _Decline as e:
        log.debug("gpuscope: %s: the native reader declined (%s)", path, e)
        return None
    if events_at is not None:
        pieces = np.frombuffer(out["pieces"]["first_start_end"], dtype=np.int64).reshape(-1, 3)
        t.event_index = tuple((int(i), int(a) + events_at, int(b) + events_at) for i, a, b in pieces.tolist())
    return t


class _Build:
    """One native result -> a filled `_Builder` -> its TraceData."""

    def __init__(self, out: dict) -> None:
        self.out = out
        self.raws: list[bytes] = out["texts"]
        self.strings: dict[int, Any] = {}
        self.b = _Builder()

    # ---- texts
    def string(self, i: int) -> str | None:
        """The decoded string literal at table index i (None for -1: absent or null)."""
        if i < 0:
            return None
        s = self.strings.get(i)
        if s is None:
            s = msgspec.json.decode(self.raws[i])
            if not isinstance(s, str):
                raise _Decline("a text that does not decode to a string")
            self.strings[i] = s
        return s

    def raw(self, i: int) -> bytes:
        """The raw JSON text at table index i (b"" for -1)."""
        return b"" if i < 0 else self.raws[i]

    def value(self, i: int) -> Any:
        """The decoded JSON value at table index i (None for -1)."""
        return None if i < 0 else _ANY_DECODER.decode(self.raws[i])

    def codes(self, interner: _Interner, idx: np.ndarray, value_of) -> np.ndarray:
        """Codes in `interner` of the texts at table indexes `idx` (-1: absent), each distinct one
        converted once, as `_Interner.add` converts the decoded values."""
        if not len(idx):
            return np.empty(0, np.int32)
        used = np.flatnonzero(np.bincount(idx + 1, minlength=1)) - 1
        table = np.zeros(len(self.raws) + 1, dtype=np.int32)
        table[used + 1] = interner.add([value_of(int(u)) for u in used])
        return table[idx + 1]

    def labels(self, values: np.ndarray, label_idx: np.ndarray) -> np.ndarray:
        """pid or tid values with text labels coded by `_Labels` (a text that int() reads differently
        from `_Labels.code` would depend on the piece it is read in: declined)."""
        texts = np.flatnonzero(np.bincount(label_idx + 1, minlength=1)[1:])
        if not len(texts):
            return values
        labels: _Labels = self.b.labels
        out = values.copy()
        for u in texts:
            s = self.string(int(u))
            code = labels.code(s)
            try:
                as_int = int(s)  # what numpy makes of a text in an int64 column
            except ValueError:
                as_int = None
            if as_int is not None and as_int != code:
                raise _Decline(f"a pid or tid text {s!r} read two ways")
            out[label_idx == u] = code
        return out

    # ---- helpers
    def group(self, name: str, types: dict) -> dict:
        cols = self.out[name]
        return {c: np.frombuffer(cols[c], dtype=types.get(c, np.int64)) for c in cols}

    @staticmethod
    def ns(us: np.ndarray) -> np.ndarray:
        """columns._to_ns of the whole array, as of each piece: all in its fast range, or none."""
        fast = (us > -_FAST_NS_LIMIT) & (us < _FAST_NS_LIMIT)
        if len(us) and not (fast.all() or not fast.any()):
            raise _Decline("timestamps both within and beyond 2**31 us")
        return _to_ns(us)

    # ---- the groups of events
    def trace(self, path: str, meta: dict) -> TraceData:
        b = self.b
        b.entries = b.with_phase = int(self.out["entries"])  # every entry had a text ph (else declined)
        self.complete()
        self.memory()
        self.flows()
        self.metadata()
        phs = np.frombuffer(self.out["unsupported"]["ph"], dtype=np.int32)
        if len(phs):
            for u, k in zip(*np.unique(phs, return_counts=True)):
                b._count(f"events of unsupported phase {self.string(int(u))!r} skipped", int(k))
        return b.finish(path, meta, _base_ns(meta))

    def complete(self) -> None:
        x = self.group("complete", _X_TYPES)
        n = len(x["idx"])
        if not n:
            return
        b = self.b
        cat = self.codes(b.interners["cat"], x["cat"], self.string)
        name = self.codes(b.interners["name"], x["name"], self.string)
        dur_us = x["dur"]
        no_dur = ~np.isfinite(dur_us)
        if no_dur.any():
            b._count("complete events without a dur (set to 0)", int(no_dur.sum()))
        dur = self.ns(np.where(no_dur, 0.0, dur_us))
        neg = dur < 0
        if neg.any():
            b._count("negative durations clamped to 0", int(neg.sum()))
            dur[neg] = 0
        cols: dict[str, np.ndarray | None] = {
            "ts": self.ns(x["ts"]),
            "dur": dur,
            "idx": x["idx"],
            "cat": cat,
            "name": name,
            "pid": self.labels(x["pid"], x["pid_label"]),
            "tid": self.labels(x["tid"], x["tid_label"]),
        }
        # which rows carry each arg field: those of the families of categories that read it
        family_of_code = np.array(
            [_FAMILY_NAMES.index(_FAMILY.get(v, "other")) for v in b.interners["cat"].values], dtype=np.int8
        )
        families = family_of_code[cat]

        def rows(field: str) -> np.ndarray:
            return np.isin(families, [i for i, f in enumerate(_FAMILY_NAMES) if field in _FAMILY_FIELDS[f]])

        unknown = [f for f in _FAMILY_FIELDS["other"] if _FIELD_COLUMN.get(f, f) not in x and f not in _PAIRED]
        if unknown:  # an arg the Python reader reads and the scan does not know
            raise _Decline(f"args the native reader does not read: {', '.join(unknown)}")

        # an arg column the scan never stored has no value in any row (see put_opt in _native.c)
        def arg(c: str) -> np.ndarray | None:
            return x[c] if len(x[c]) else None

        ext, lc = arg("ext_id"), arg("ext_id_lc")
        ext = None if ext is None else np.where(rows("ext_id"), ext, -1)
        lc = None if lc is None else np.where(rows("ext_id_lc"), lc, -1)
        cols["external_id"] = lc if ext is None else (ext if lc is None else np.where(ext == -1, lc, ext))
        for field in ("grid", "block"):
            keep = rows(field)
            for axis in "xyz":
                values = arg(f"{field}_{axis}")
                cols[f"{field}_{axis}"] = None if values is None else np.where(keep, values, 0).astype(np.int32)
        for field in dict.fromkeys(_FAMILY_FIELDS["other"]):
            column = _FIELD_COLUMN.get(field, field)
            if field in _PAIRED:
                continue
            if arg(column) is None:
                cols[column] = None
                continue
            keep = rows(field)
            if column in EVENT_CATEGORY:
                idx = np.where(keep, x[column], -1).astype(np.int32)
                interner = b.interners[column]
                value_of = self.raw if column in ("input_dims", "input_type") else self.string
                cols[column] = self.codes(interner, idx, value_of)
            elif column in EVENT_FLOAT:
                cols[column] = np.where(keep, x[column], np.nan)
            else:
                dtype = np.int32 if column in EVENT_INT32 else np.int64
                cols[column] = np.where(keep, x[column], EVENT_INT32.get(column, -1)).astype(dtype)
        for c in EVENT_COLUMNS:
            arr = cols[c]
            if arr is not None and c not in ("ts", "dur", "idx", "pid", "tid", "cat", "name") and _all_missing(c, arr):
                arr = None  # absent from every row: the shared read-only missing column, as the Python reader
            b.ev[c].append(arr)
        b.ev_len.append(n)

    def memory(self) -> None:
        m = self.group("memory", {"ts": np.float64, "pid_label": np.int32, "tid_label": np.int32})
        if not len(m["idx"]):
            return
        self.b.mem.append(
            {
                "ts": self.ns(m["ts"]),
                "pid": self.labels(m["pid"], m["pid_label"]),
                "tid": self.labels(m["tid"], m["tid_label"]),
                **{k: m[k] for k in _MEM_INTS},
                "idx": m["idx"],
            }
        )

    def flows(self) -> None:
        f = self.group("flows", _FLOW_TYPES)
        if not len(f["idx"]):
            return
        b = self.b
        b.flows.append(
            {
                "cat": self.codes(b.flow_cat, f["cat"], self.string),
                "name": self.codes(b.flow_name, f["name"], self.string),
                "id": f["id"],
                "ph": self.codes(b.flow_ph, f["ph"], self.string),
                "pid": self.labels(f["pid"], f["pid_label"]),
                "tid": self.labels(f["tid"], f["tid_label"]),
                "ts": self.ns(f["ts"]),
                "bp": self.codes(b.flow_bp, f["bp"], self.string),
                "idx": f["idx"],
            }
        )

    def metadata(self) -> None:
        md = self.group("metadata", _MD_TYPES)
        if not len(md["pid"]):
            return
        labels = self.b.labels
        pid, tid = md["pid"].tolist(), md["tid"].tolist()
        pid_label, tid_label = md["pid_label"].tolist(), md["tid_label"].tolist()
        for i, name in enumerate(md["name"].tolist()):
            value = self.value(int(md["value_name"][i]))
            if value is None:
                value = self.value(int(md["value_labels"][i]))
            if value is None:
                value = self.value(int(md["value_sort_index"][i]))
            p = pid[i] if pid_label[i] < 0 else labels.code(self.string(pid_label[i]))
            t = tid[i] if tid_label[i] < 0 else labels.code(self.string(tid_label[i]))
            self.b.names.append((p, t, _to_text(self.string(name)), value))


#: arg fields stored in other columns than their names
_PAIRED = ("ext_id", "ext_id_lc", "grid", "block")


def _all_missing(column: str, arr: np.ndarray) -> bool:
    if column in EVENT_CATEGORY:
        return not arr.any()  # code 0 is ""
    if column in EVENT_FLOAT:
        return bool(np.isnan(arr).all())
    return bool((arr == EVENT_INT32.get(column, -1)).all())


_I32 = np.int32
_X_TYPES = {
    "ts": np.float64,
    "dur": np.float64,
    "blocks_per_sm": np.float64,
    "warps_per_sm": np.float64,
    "occupancy": np.float64,
    **dict.fromkeys(EVENT_INT32, _I32),
    **dict.fromkeys(EVENT_CATEGORY, _I32),
    "pid_label": _I32,
    "tid_label": _I32,
}
_MEM_INTS = ("device_type", "device_id", "addr", "bytes", "total_allocated", "total_reserved")
_FLOW_TYPES = {
    "ts": np.float64,
    "cat": _I32,
    "name": _I32,
    "ph": _I32,
    "bp": _I32,
    "pid_label": _I32,
    "tid_label": _I32,
}
_MD_TYPES = dict.fromkeys(("pid_label", "tid_label", "name", "value_name", "value_labels", "value_sort_index"), _I32)
