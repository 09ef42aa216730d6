"""The native reader's Python side: the C scan's column buffers (`_native.parse_events`) -> a `TraceData`.

The C extension is optional (built where a compiler is found) and reads only the common shapes of
events; on anything else it declines and the Python reader, the reference, reads the file. What it
returns is turned into the `Builder`'s state by the same conversions the Python reader applies to
each distinct text (categories, labels, compact JSON), and `Builder.finish` makes the frames, so both
readers give the same TraceData. The C scan knows a fixed set of args keys (`_native.KEYS`, in columns
`args.{key}`); which of them fill which column, as what kind, missing as what, on which events, all
follow `event_args.ARGS`, and a table the scan cannot honour (a key it does not know, another kind or
missing value) makes it decline every file. GPUSCOPE_NATIVE_READER=0 turns it off.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NamedTuple

import msgspec
import numpy as np

from profiler_core import settings
from profiler_core.trace import event_args
from profiler_core.trace.event_args import FLOAT, INT32, INT64, JSON, TEXT, TRIPLE, VALUE, Arg
from profiler_core.trace.model import EVENT_COLUMNS, TraceData
from profiler_core.trace.read import parallel_plan, stream
from profiler_core.trace.read.columns import Builder, Interner, Labels, base_ns_of, to_ns, to_text
from profiler_core.trace.read.decode import ANY_DECODER, max_trace_events

try:
    from profiler_core.trace.read import _native  # type: ignore[attr-defined]
except ImportError:  # not built (no compiler where it was installed): the Python reader reads every trace
    _native = None

log = logging.getLogger(__name__)

#: the name of each reader, as the log line says which one read a trace
NATIVE_READER, PYTHON_READER = "native reader", "Python reader"

#: |µs| below which columns.to_ns takes its fast path (a piece of events takes it when all its values do)
_FAST_NS_LIMIT = float(1 << 31)


def available() -> bool:
    """Whether the C extension is built and importable."""
    return _native is not None


def enabled() -> bool:
    """Whether read_trace tries the native reader first (built, and GPUSCOPE_NATIVE_READER is not 0)."""
    return _native is not None and bool(settings.get("GPUSCOPE_NATIVE_READER"))


#: event_args kind -> how the C scan must keep its keys (`_native.KEYS`), and the missing value it writes
_SCAN_KIND: dict[str, tuple[str, Any]] = {
    INT64.name: ("int64", -1),
    INT32.name: ("int32", -1),
    FLOAT.name: ("float", math.nan),
    TEXT.name: ("text", ""),
    JSON.name: ("raw", ""),
    TRIPLE.name: ("triple", 0),
    VALUE.name: ("raw", None),
}


def _same_missing(a: Any, b: Any) -> bool:
    return (a is b) or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)) or a == b


def scan_mismatch(args: tuple[Arg, ...] | None = None, keys: Any = None) -> str | None:
    """Why the C scan cannot read the args table `args` (default event_args.ARGS) exactly, or None: a key
    it does not know, kept as another kind, for another frame, or missing as another value."""
    args = event_args.ARGS if args is None else args
    if keys is None:
        keys = () if _native is None else _native.KEYS
    known = {k: (how, table) for k, how, table in keys}
    for a in args:
        if a.column is None:
            continue
        how, missing = _SCAN_KIND.get(a.kind.name, (None, None))
        if how is None or not _same_missing(a.missing, missing):
            return f"the {a.kind.name} arg {a.keys[0]!r} missing as {a.missing!r}"
        if len(a.keys) > 2:
            return f"the arg {a.keys[0]!r} with more than one older spelling"
        if a.table == "memory" and a.kind is not INT64:
            return f"the memory arg {a.keys[0]!r} of kind {a.kind.name}"
        for key in a.keys:
            if key not in known:
                return f"the arg {key!r}, which the scan does not know"
            if known[key] != (how, a.table):
                return f"the arg {key!r}, kept by the scan as {known[key]} and by the table as {(how, a.table)}"
    return None


def scan_pairs(args: tuple[Arg, ...] | None = None) -> tuple[tuple[str, str], ...]:
    """(lead key, follower key) of the args read only where the arg Kineto writes them with is present
    (event_args' `written_with`): an event with a follower and without its lead makes the scan decline."""
    args = event_args.ARGS if args is None else args
    by_field = {a.field: a for a in args}
    return tuple((by_field[a.written_with].keys[0], key) for a in args if a.written_with is not None for key in a.keys)


class _Decline(Exception):
    """A value the native path cannot convert exactly as the Python reader does: it reads the file."""


def columns_of(meta: dict, events: Any, path: str, events_at: int | None = None) -> TraceData | None:
    """The TraceData of a trace whose top-level keys are `meta` and whose traceEvents array is the
    JSON bytes `events` (any buffer); None when the native reader declines it (or is not built).
    With `events_at`, the offset of `events` in the file's decompressed bytes, its `event_index`
    holds the byte ranges of pieces of about stream.BLOCK bytes, as the streaming reader's."""
    out = scan(events, path)
    return None if out is None else build(out, meta, path, events_at)


def scan(events: Any, path: str, max_events: int | None = None) -> dict | None:
    """The C scan of a traceEvents array (JSON bytes, any buffer): its column buffers and texts, which
    no longer refer to `events`; None when it declines (or is not built)."""
    if _native is None:
        return None
    why = scan_mismatch()
    if why is not None:
        log.debug("gpuscope: %s: the native reader declined (the args table has %s)", path, why)
        return None
    limit = max_trace_events() if max_events is None else max_events
    out = _native.parse_events(events, limit, stream.BLOCK, scan_pairs())
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


#: inflated bytes of events scanned at a time by `read_file` (the JSON it holds at once, about). One read of
#: the 220k-event trace (83 MB of JSON), peak RSS above imports / CPU: 1 MB pieces 47 MB / 0.51 s, 2 MB
#: 50 MB / 0.49 s, 4 MB 57 MB / 0.47 s, 8 MB 75 MB / 0.47 s; the streaming reader 44 MB / 0.69 s
SCAN_PIECE = 2 << 20

#: most inflated bytes of one block that `_pieces` gathers into a piece: small blocks are reused heap memory and
#: inflate faster (V100 trace, 33 MB of JSON: 2 MB blocks 11.5 ms and 6 MB of fresh pages, 256 KB 8.8 ms and 0.9 MB)
INFLATE_BLOCK = 256 << 10

#: `}` tried from the end of a piece for its last `}, {` separator before the piece is searched as a whole
_SEP_TRIES = 64


#: pieces scanned ahead of the reading thread, at least (one scan thread: the next piece is scanned while this
#: one is converted)
MIN_AHEAD = 2


def scan_threads() -> int:
    """Threads that scan pieces beside the reading thread (GPUSCOPE_NATIVE_THREADS; default: the cores but the
    reading thread's, at most 4: on 2 cores one scan thread reads the 11M-event trace in 6.7-6.8 s, two in
    7.6-8.0 s, as three busy threads share two cores); 0 when the reading thread scans them itself (one core,
    or the setting 0)."""
    return parallel_plan.plan(os.cpu_count() or 1, 0, True).scan_threads


def _last_sep(buf: bytes) -> re.Match | None:
    """The last `}, {` separator of `buf` within its last stream.MAX_EVENT_SCAN bytes (None: none there):
    found from the end, `}` by `}`, the way the window's last regex match would be."""
    lo, hi = max(0, len(buf) - stream.MAX_EVENT_SCAN), len(buf)
    for _ in range(_SEP_TRIES):
        j = buf.rfind(b"}", lo, hi)
        if j < 0:
            return None
        m = stream.SEP_RE.match(buf, j)
        if m is not None:
            return m
        hi = j
    last = None
    for last in stream.SEP_RE.finditer(buf, lo, hi):  # noqa: B007 - keeps the last match
        pass
    return last


class _Text(NamedTuple):
    """What `_pieces` yields: a piece of whole events to scan, or the head / rest of the document."""

    kind: str  # "head": text before the array's events; "piece"; "rest": the text after the last piece
    text: Any  # bytes or a memoryview of them
    at: int  # offset of `text` in the inflated stream (pieces and rest)
    bare: bool = False  # (head) the document is the bare array


def _pieces(path: str) -> Iterator[_Text]:
    """The file at `path` inflated block by block (`stream.read_blocks`): its head, once (the text before the
    traceEvents array's first event), then the array's text in pieces of about SCAN_PIECE bytes of whole
    events cut at `}, {` separators (without brackets), then the rest (last events, `]`, the keys after
    the array). Ends early, without the rest, when the text cannot be cut so (the native reader then
    declines the file)."""
    head: bytes | None = None
    scan: stream.EventsHead | None = None
    buf, start = b"", 0
    blocks: list[bytes] = []
    size = 0
    for block in stream.read_blocks(path, INFLATE_BLOCK, gather=False):
        if head is None:
            buf = buf + block if buf else block
            stripped = buf.lstrip()
            if not stripped:
                start += len(buf)
                buf = b""
                continue
            if stripped[:1] == b"[":
                head = b""
                start += len(buf) - len(stripped) + 1
                buf = stripped[1:]
                yield _Text("head", head, 0, True)
            elif stripped[:1] == b"{":
                if scan is None:
                    scan = stream.EventsHead(len(buf) - len(stripped))
                try:
                    found = scan.find(buf)
                except stream.NotStreamable:
                    return
                if found is None:
                    if len(buf) > stream.MAX_PIECE:
                        return
                    continue
                head, buf = buf[: found[0]], buf[found[1] :]
                start += found[1]
                yield _Text("head", head, 0, False)
            else:
                return
            blocks, size = [buf], len(buf)
        else:
            blocks.append(block)
            size += len(block)
        if size < SCAN_PIECE:
            continue
        buf = blocks[0] if len(blocks) == 1 else b"".join(blocks)
        last = _last_sep(buf)
        if last is None:
            if len(buf) > stream.MAX_PIECE:
                return
            blocks, size = [buf], len(buf)
            continue
        yield _Text("piece", memoryview(buf)[: last.start() + 1], start)
        start += last.end() - 1
        rest = buf[last.end() - 1 :]
        blocks, size = [rest], len(rest)
    if head is not None:
        yield _Text("rest", blocks[0] if len(blocks) == 1 else b"".join(blocks), start)


def read_file(path: str) -> TraceData | None:
    """The TraceData of the trace file at `path`, inflated block by block and scanned in pieces of about
    SCAN_PIECE bytes of whole events (`_pieces`), the rows of each added in order to one `Builder`: memory
    stays near the streaming reader's. The scans run without the GIL on `scan_threads()` threads, up to
    that many pieces ahead of the reading thread, which inflates, cuts and converts. None when the native
    reader declines the file (or a cut falls inside a string, which the scan then finds invalid): the
    Python reader reads it."""
    if _native is None or scan_mismatch() is not None:
        return None
    threads = scan_threads()
    if not threads:
        return _read_pieces(path, None, 0)
    with ThreadPoolExecutor(threads, thread_name_prefix="gpuscope-scan") as pool:
        try:
            return _read_pieces(path, pool, max(threads, MIN_AHEAD))
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def _read_pieces(path: str, pool: ThreadPoolExecutor | None, ahead: int) -> TraceData | None:
    """`read_file` with its scans on `pool` (`ahead` pieces in flight), or in this thread (None)."""
    b = Builder()
    index: list[tuple[int, int, int]] = []
    limit = max_trace_events()
    pairs = scan_pairs()
    n = 0
    pending: deque[tuple[Any, int]] = deque()  # (scan result or its future, the piece's offset)

    def scan_piece(text: Any) -> dict | str:
        return _native.parse_events(text, limit, stream.BLOCK, pairs, True)

    def add(out: dict | str, at: int) -> bool:
        """The rows of one piece's scan result (its text at `at` in the inflated stream) added to `b`."""
        nonlocal n
        if isinstance(out, str):
            log.debug("gpuscope: %s: the native reader declined (%s)", path, out)
            return False
        entries = int(out["entries"])
        if n + entries > limit:
            log.debug("gpuscope: %s: the native reader declined (more events than the memory budget holds)", path)
            return False
        for group in ("complete", "memory", "flows"):
            np.frombuffer(out[group]["idx"], dtype=np.int64)[:] += n  # (a writable buffer)
        try:
            _Build(out, b).add()
            b.join_pending()
        except _Decline as e:
            log.debug("gpuscope: %s: the native reader declined (%s)", path, e)
            return False
        pieces = np.frombuffer(out["pieces"]["first_start_end"], dtype=np.int64).reshape(-1, 3)
        index.extend((int(i) + n, int(lo) + at, int(hi) + at) for i, lo, hi in pieces.tolist())
        n += entries
        return True

    def drain(keep: int) -> bool:
        """Add the oldest scans' rows until `keep` are in flight; False when one declines."""
        while len(pending) > keep:
            job, at = pending.popleft()
            if not add(job.result() if isinstance(job, Future) else job, at):
                return False
        return True

    head: _Text | None = None
    for text in _pieces(path):
        if text.kind == "head":
            head = text
        elif text.kind == "piece":
            pending.append((pool.submit(scan_piece, text.text) if pool is not None else scan_piece(text.text), text.at))
            if not drain(ahead):
                return None
        elif head is not None and drain(0):
            for meta, tail, repeated in stream.tails(text.text, head.text, head.bare):
                if repeated:  # a later top-level traceEvents, the one JSON decoders read: the Python reader's
                    log.debug("gpuscope: %s: the native reader declined (a repeated top-level traceEvents)", path)
                    return None
                if tail.strip() and not add(scan_piece(tail), text.at):
                    return None
                try:
                    t = b.finish(path, meta, base_ns_of(meta))
                except _Decline:
                    return None
                t.event_index = tuple(index)
                return t
    return None


_ARG_PLAN: list[tuple[Arg, tuple[str, ...], np.ndarray]] = []


def _arg_plan() -> list[tuple[Arg, tuple[str, ...], np.ndarray]]:
    """The events args with a column, each with the scan's columns that say whether a key of it has a value (a
    triple's first axis) and which extraction groups (EVENT_GROUPS order) carry it: made once."""
    if not _ARG_PLAN:
        groups = event_args.EVENT_GROUPS
        plan = []
        for a in event_args.ARGS:
            if a.table == "events" and a.column is not None:
                in_groups = np.zeros(len(groups), dtype=bool)
                in_groups[[groups.index(g) for g in a.groups | {"other"}]] = True
                stored = tuple(f"args.{k}_x" if a.kind is TRIPLE else f"args.{k}" for k in a.keys)
                plan.append((a, stored, in_groups))
        _ARG_PLAN[:] = plan
    return _ARG_PLAN


class _Build:
    """One native result -> rows added to a `Builder` (a new one by default) -> its TraceData."""

    def __init__(self, out: dict, builder: Builder | None = None) -> None:
        self.out = out
        self.raws: list[bytes] = out["texts"]
        self.strings: dict[int, Any] = {}
        self.b = Builder() if builder is None else builder

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
        return None if i < 0 else ANY_DECODER.decode(self.raws[i])

    def codes(self, interner: Interner, idx: np.ndarray, value_of) -> np.ndarray:
        """Codes in `interner` of the texts at table indexes `idx` (-1: absent), each distinct one
        converted once, as `Interner.add` converts the decoded values."""
        if not len(idx):
            return np.empty(0, np.int32)
        shifted = idx + 1  # (table position: 0 for -1)
        used1 = np.flatnonzero(np.bincount(shifted))
        table = np.zeros(len(self.raws) + 1, dtype=np.int32)
        raws, known = self.raws, interner.by_raw  # (a text met in an earlier piece: no decode, no conversion)
        at = (used1 - 1).tolist()
        absent = at[0] < 0  # (sorted: -1 first)
        keys = ([None] if absent else []) + list(map(raws.__getitem__, at[1:] if absent else at))
        try:
            table[used1] = np.fromiter(map(known.__getitem__, keys), dtype=np.int32, count=len(keys))
        except KeyError:
            new = [(u, k) for u, k in zip(at, keys) if k not in known]
            for (_, k), c in zip(new, interner.add([value_of(u) for u, _ in new]).tolist()):
                known[k] = c
            table[used1] = np.fromiter(map(known.__getitem__, keys), dtype=np.int32, count=len(keys))
        return table[shifted]

    def labels(self, values: np.ndarray, label_idx: np.ndarray) -> np.ndarray:
        """pid or tid values with text labels coded by `Labels` (a text that int() reads differently
        from `Labels.code` would depend on the piece it is read in: declined)."""
        if not len(label_idx) or int(label_idx.max()) < 0:  # (no text: no count of each)
            return values
        texts = np.flatnonzero(np.bincount(label_idx + 1, minlength=1)[1:])
        labels: Labels = self.b.labels
        out = values.copy()
        for u in texts:
            s = self.string(int(u)) or ""
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
        """columns.to_ns of the whole array, as of each piece: all in its fast range, or none."""
        if len(us) and us.min() > -_FAST_NS_LIMIT and us.max() < _FAST_NS_LIMIT:  # all (NaN fails both)
            return np.rint(us * 1000.0).astype(np.int64)  # (to_ns's fast path)
        fast = (us > -_FAST_NS_LIMIT) & (us < _FAST_NS_LIMIT)
        if len(us) and not (fast.all() or not fast.any()):
            raise _Decline("timestamps both within and beyond 2**31 us")
        return to_ns(us)

    # ---- the groups of events
    def trace(self, path: str, meta: dict) -> TraceData:
        """The TraceData of this one result."""
        self.add()
        return self.b.finish(path, meta, base_ns_of(meta))

    def add(self) -> None:
        """This result's rows, counts and names added to the builder."""
        b = self.b
        entries = int(self.out["entries"])
        b.entries += entries
        b.with_phase += entries  # every entry had a text ph (else declined)
        self.complete()
        self.memory()
        self.flows()
        self.metadata()
        phs = np.frombuffer(self.out["unsupported"]["ph"], dtype=np.int32)
        if len(phs):
            for u, k in zip(*np.unique(phs, return_counts=True)):
                b._count(f"events of unsupported phase {self.string(int(u))!r} skipped", int(k))

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
        # which rows carry each arg: those of the extraction groups of categories that read it
        groups = event_args.EVENT_GROUPS
        group_of_code = np.array(
            [groups.index(event_args.CATEGORY_GROUP.get(v, "other")) for v in b.interners["cat"].values],
            dtype=np.int8,
        )
        row_groups = group_of_code[cat]
        keeps: dict[frozenset, np.ndarray | None] = {}  # rows of each set of groups (args share them)
        for a, stored, in_groups in _arg_plan():
            col = None
            if any(len(x[c]) for c in stored):  # (else the scan stored no value of any of its keys)
                if a.groups in keeps:
                    keep = keeps[a.groups]
                else:
                    keep = in_groups[row_groups]
                    keep = keeps[a.groups] = None if keep.all() else keep  # None: every row
                col = self.arg_column(a, x, keep)
            if a.kind is TRIPLE:  # (3, rows): each axis a contiguous row
                for j, column in enumerate(a.columns):
                    cols[column] = None if col is None else col[j]
            else:
                cols[a.column] = col
        for c in EVENT_COLUMNS:
            arr = cols[c]
            b.ev[c].append(arr)
        b.ev_len.append(n)

    def arg_column(self, a: Arg, x: dict, keep: np.ndarray | None) -> np.ndarray | None:
        """The column of one events arg on the rows `keep` (its missing value elsewhere): its key's value,
        else its older spelling's (as `Builder._arg_column`); None when no row has a value."""
        col = None
        for key in a.keys:
            value = self.key_column(a, key, x, keep)
            if value is None:
                continue
            if col is None:
                col = value
            else:
                gap = _missing_rows(a, col)
                if a.kind is TRIPLE:
                    col[:, gap] = value[:, gap]
                else:
                    col[gap] = value[gap]
        if col is None or _missing_rows(a, col).all():
            return None  # absent from every row: the shared read-only missing column, as the Python reader
        return col

    def key_column(self, a: Arg, key: str, x: dict, keep: np.ndarray | None) -> np.ndarray | None:
        """One key's scanned column converted to `a`'s kind (codes for texts, (3, n) for a triple);
        None when the scan stored no value of it (see put_opt in _native.c)."""
        if a.kind is TRIPLE:
            axes = [x[f"args.{key}_{axis}"] for axis in "xyz"]
            if not len(axes[0]):
                return None
            stacked = np.stack(axes)
            return (stacked if keep is None else np.where(keep, stacked, 0)).astype(np.int32, copy=False)
        raw = x[f"args.{key}"]
        if not len(raw):
            return None
        if a.kind is TEXT or a.kind is JSON:
            idx = raw.astype(np.int32) if keep is None else np.where(keep, raw, -1).astype(np.int32)
            return self.codes(self.b.interners[str(a.column)], idx, self.raw if a.kind is JSON else self.string)
        if a.kind is FLOAT:
            return raw.astype(np.float64) if keep is None else np.where(keep, raw, np.nan)
        dtype = np.int32 if a.kind is INT32 else np.int64
        return raw.astype(dtype) if keep is None else np.where(keep, raw, a.missing).astype(dtype)

    def memory(self) -> None:
        m = self.group("memory", {"ts": np.float64, "pid_label": np.int32, "tid_label": np.int32})
        if not len(m["idx"]):
            return
        self.b.mem.append(
            {
                "ts": self.ns(m["ts"]),
                "pid": self.labels(m["pid"], m["pid_label"]),
                "tid": self.labels(m["tid"], m["tid_label"]),
                **{a.column: m[f"args.{a.keys[0]}"] for a in event_args.ARGS if a.table == "memory"},
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
        value_keys = [f"args.{a.keys[0]}" for a in event_args.ARGS if a.table == "names"]
        pid, tid = md["pid"].tolist(), md["tid"].tolist()
        pid_label, tid_label = md["pid_label"].tolist(), md["tid_label"].tolist()
        for i, name in enumerate(md["name"].tolist()):
            value = None
            for key in value_keys:
                value = self.value(int(md[key][i]))
                if value is not None:
                    break
            p = pid[i] if pid_label[i] < 0 else labels.code(self.string(pid_label[i]))
            t = tid[i] if tid_label[i] < 0 else labels.code(self.string(tid_label[i]))
            self.b.names.append((p, t, to_text(self.string(name)), value))


def _missing_rows(a: Arg, col: np.ndarray) -> np.ndarray:
    """Which rows of an arg's converted column hold its missing value."""
    if a.kind is TEXT or a.kind is JSON:
        return np.asarray(col == 0)  # code 0 is ""
    if a.kind is FLOAT:
        return np.asarray(np.isnan(col))
    if a.kind is TRIPLE:
        return np.asarray(~col.any(axis=0))  # (3, rows)
    return np.asarray(col == a.missing)


_I32 = np.int32
_SCAN_DTYPE = {"int64": np.int64, "int32": _I32, "float": np.float64, "text": _I32, "raw": _I32, "triple": _I32}
#: the complete events' scanned columns and their dtypes (an arg's by the kind the scan keeps it as)
_X_TYPES: dict[str, Any] = {"ts": np.float64, "dur": np.float64, "cat": _I32, "name": _I32, "pid_label": _I32}
_X_TYPES["tid_label"] = _I32
if _native is not None:
    for _key, _how, _table in _native.KEYS:
        if _table == "events":
            for _c in (f"args.{_key}_{axis}" for axis in "xyz") if _how == "triple" else (f"args.{_key}",):
                _X_TYPES[_c] = _SCAN_DTYPE[_how]
_FLOW_TYPES = {
    "ts": np.float64,
    "cat": _I32,
    "name": _I32,
    "ph": _I32,
    "bp": _I32,
    "pid_label": _I32,
    "tid_label": _I32,
}
_MD_TYPES: dict[str, Any] = {"pid_label": _I32, "tid_label": _I32, "name": _I32}
if _native is not None:
    _MD_TYPES.update((f"args.{k}", _I32) for k, _, table in _native.KEYS if table == "names")
