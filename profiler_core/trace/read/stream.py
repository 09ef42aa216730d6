"""Streaming and parallel parsing: the trace is decompressed block by block and cut at `}, {`
separators into pieces that are decoded as they come; big traces are split into byte ranges parsed
by worker processes (`span_worker`). Every cut is checked by the decoder."""

from __future__ import annotations

import os
import pickle
import re
import sys
from collections.abc import Iterator
from typing import Any

import msgspec

from profiler_core import storage
from profiler_core.trace.model import TraceData
from profiler_core.trace.read import parallel_plan
from profiler_core.trace.read.columns import Builder, base_ns_of
from profiler_core.trace.read.decode import (
    ANY_DECODER,
    NotStreamable,
    TraceReadError,
    decode_piece,
    element_bounds,
    max_trace_bytes,
    max_trace_events,
    refuse_nul,
    too_big,
    too_many_events,
)
from profiler_core.trace.read.gunzip import ERRORS as GUNZIP_ERRORS
from profiler_core.trace.read.gunzip import (
    GZIP_MAGIC,
    TruncatedGzip,
    gunzip_blocks,
    trailer_size,
    uncompressed_size_hint,
)

#: the bytes that shape a JSON document's structure (the scan of its head stops at each)
_STRUCTURE = re.compile(rb'["\[\]{},:]')
#: the rest of a string's text from a point between two of its characters (escapes whole): a match
#: that a quote follows ends the string; one that ends the bytes (or a lone last backslash) needs more
_STRING_BODY = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*')
#: JSON's whitespace
_WS = re.compile(rb"[ \t\r\n]*")
SEP_RE = re.compile(rb"\}\s*,\s*\{")
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


def _stream_size(f) -> int:
    """Size in bytes of an open binary file: local or fsspec (no fileno), by seeking to its end."""
    pos = f.tell()
    size = f.seek(0, os.SEEK_END)
    f.seek(pos)
    return int(size)


class EventsHead:
    """Where the top-level `traceEvents` array of a JSON object starts, found by a scan of the text from its
    `{` that skips strings and nested values, so that a `traceEvents` key inside another value (or in a
    string) is never taken, and a key written with escapes (`"trace\\u0045vents"`) is (as JSON decoders
    read it). Fed the growing text block by block (`find(buf)`, buf the text so far, the same first
    bytes each time), it resumes where it stopped: linear in the text however it is cut.

    `find` returns (key start, first byte after the array's `[`) once found; None while the text ends
    first; raises NotStreamable when the first top-level `traceEvents` is not an array or the object
    ends without one (the whole-file path says what is wrong)."""

    def __init__(self, at: int) -> None:
        self.pos = at  # the `{` of the document: the next byte to scan
        self.depth = 0
        self.expect_key = False  # at depth 1, the next string is a key
        self.open_string = -1  # start of a string not closed yet (pos: where its text resumes)
        self.key: tuple[int, int] | None = None  # (start, end) of a top-level key whose value is next

    def find(self, buf: bytes) -> tuple[int, int] | None:
        n = len(buf)
        while True:
            if self.key is not None:  # a top-level key: its ':' and the value's first byte
                at = skip_ws(buf, self.key[1])
                if at >= n:
                    return None
                if buf[at] != 58:  # ':'
                    raise NotStreamable
                at = skip_ws(buf, at + 1)
                if at >= n:
                    return None
                start, end = self.key
                self.key = None
                if _key_text(buf[start:end]) == "traceEvents":
                    if buf[at] != 91:  # '[': not an array
                        raise NotStreamable
                    return start, at + 1
                self.pos, self.expect_key = at, False
            if self.open_string >= 0:
                body = _STRING_BODY.match(buf, self.pos)  # (it matches an empty text too)
                end = self.pos if body is None else body.end()
                if end >= n or buf[end] != 34:
                    self.pos = end
                    return None
                start, self.open_string, self.pos = self.open_string, -1, end + 1
                if self.depth == 1 and self.expect_key:
                    self.key = (start, end + 1)
                continue
            m = _STRUCTURE.search(buf, self.pos)
            if m is None:
                self.pos = n
                return None
            c, self.pos = buf[m.start()], m.end()
            if c == 34:
                self.open_string = m.start()
            elif c in (123, 91):  # '{' '['
                self.depth += 1
                self.expect_key = self.depth == 1 and c == 123
            elif c in (125, 93):  # '}' ']'
                self.depth -= 1
                if self.depth <= 0:
                    raise NotStreamable  # the object ends without a top-level traceEvents
            elif c == 44 and self.depth == 1:  # ','
                self.expect_key = True


def skip_ws(buf: bytes, at: int) -> int:
    m = _WS.match(buf, at)
    return at if m is None else m.end()


def _key_text(raw: bytes) -> str | None:
    """The text of a JSON string (quotes included) as a decoder reads it; None when it is not valid."""
    if b"\\" not in raw:
        try:
            return raw[1:-1].decode()
        except UnicodeDecodeError:
            return None
    try:
        out = ANY_DECODER.decode(raw)
    except msgspec.DecodeError:
        return None
    return out if isinstance(out, str) else None


def read_blocks(path: str, block: int | None = None, gather: bool = True) -> Iterator[bytes]:
    """The file's (gunzipped) bytes in blocks of about `block` bytes (default IO_BLOCK) or more; with
    `gather` False, each block as inflated (at most `block` bytes, or gunzip's MAX_BLOCK_OUT), none joined.

    Inflated in this thread: ISA-L takes 0.2 s for the 592 MB of the 2M-event benchmark trace, less
    than handing blocks over from a helper thread cost, whose freed buffers also faulted in fresh
    pages again and again (another thread's malloc arena)."""
    total = 0
    pending = b""
    limit = max_trace_bytes()
    size = IO_BLOCK if block is None else block
    try:
        with storage.open_read(path) as f:
            gz = f.read(2) == GZIP_MAGIC
            f.seek(0)
            if (trailer_size(f) or 0) > limit if gz else _stream_size(f) > limit:
                raise too_big(path, limit)  # known before inflating anything
            chunk = max(512, min(1 << 20, size // 8))
            outs = gunzip_blocks(f, chunk, max_out=block) if gz else iter(lambda: f.read(size), b"")
            for out in outs:
                refuse_nul(path, out, total)
                total += len(out)
                if total > limit:
                    raise too_big(path, limit)
                if not gather:
                    yield out
                    continue
                pending += out
                if len(pending) >= size:
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


#: traces at least this big on disk are split across parser processes (smaller: this process)
PARALLEL_MIN_BYTES = parallel_plan.PARALLEL_MIN_BYTES
#: share of the decompressed stream this process parses when it splits a trace with one worker
#: (it also merges and sorts, while the worker starts Python and inflates the bytes before its range;
#: on the 2.2M-event real trace, 2 cores, the main process waited 0.55-0.65 s for the worker's half
#: at 0.5, 0.2 s at 0.56)
MAIN_SHARE = 0.55


def default_parse_processes() -> int:
    """Parser processes worth adding here for a big trace: `parallel_plan`'s (cores - 1, at most 3)."""
    return parallel_plan.default_plan(os.cpu_count() or 1, parallel_plan.PARALLEL_MIN_BYTES, False).parse_processes


def parse_processes_for(requested: int | None) -> int:
    p = parallel_plan.plan(os.cpu_count() or 1, parallel_plan.PARALLEL_MIN_BYTES, False)
    if requested is None or "parse_processes" in p.overridden:  # the setting wins (0 turns parallel parsing off)
        return p.parse_processes
    return max(0, requested)


def file_version(path: str) -> tuple[int, ...]:
    """`storage.fingerprint` of the file (size, mtime, inode, device, ctime; size and ETag number
    of a remote one): parser processes check that they read the same file."""
    return storage.fingerprint(path)


def parse_span_job(path: str, lo: int, hi: int | None, version: tuple | None = None) -> bytes:
    """A worker's job: the events between the cuts at `lo` and `hi` (see _parse_span) as one compact
    chunk of columns, pickled for the main process to merge. A file whose (size, mtime) is no longer
    `version` (replaced since the main process looked) raises NotStreamable: read it serially."""
    if version is not None:
        try:
            if file_version(path) != tuple(version):
                raise NotStreamable
        except OSError:
            raise NotStreamable from None
    builder = Builder()
    n, index, meta = _parse_span(path, builder, lo, hi)
    builder.compact()
    out = builder.export()
    out.update(n=n, index=index, meta=meta)
    del builder
    return pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)


class SpanProcess:
    """One range of a trace parsed by `python -m profiler_core.trace.read.span_worker` (see there).

    A plain child process, not a multiprocessing pool: it needs nothing from the caller's main
    module, and it exits with its job, so no idle worker holds memory afterwards."""

    def __init__(self, path: str, lo: int, hi: int | None, version: tuple) -> None:
        import subprocess

        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
        env = dict(os.environ)
        env["PYTHONPATH"] = _worker_pythonpath(root, env.get("PYTHONPATH"))
        # never import from the caller's working directory (a downloaded logdir may hold a
        # msgspec.py): -P keeps it off sys.path (3.11+), and the worker runs in the package's
        # own root, which is what `-m` puts first on 3.10
        safe = ["-P"] if sys.version_info >= (3, 11) else []
        self.proc = subprocess.Popen(
            [
                sys.executable,
                *safe,
                "-m",
                "profiler_core.trace.read.span_worker",
                path if storage.is_remote(path) else os.path.abspath(path),
                str(lo),
                "-" if hi is None else str(hi),
                ":".join(str(int(v)) for v in version),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=root,
        )

    def result(self) -> bytes:
        """The pickled columns; TraceReadError / NotStreamable as the worker raised them."""
        out, err = self.proc.communicate()
        code = self.proc.returncode
        if code == 0:
            return out
        text = err.decode("utf-8", "replace").strip()
        if code == SPAN_READ_ERROR:
            raise TraceReadError(text)
        if code == SPAN_NOT_STREAMABLE:
            raise NotStreamable
        raise RuntimeError(f"parser process exited with {code}: {text[-800:]}")

    def cancel(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


def _worker_pythonpath(root: str, current: str | None) -> str:
    """PYTHONPATH for a worker: the package's root, then the caller's entries made absolute
    (the worker runs elsewhere); empty entries, which mean the working directory, are dropped."""
    entries = [root] + [os.path.abspath(p) for p in (current or "").split(os.pathsep) if p]
    return os.pathsep.join(entries)


#: exit codes of span_worker for the reader's own two outcomes
SPAN_READ_ERROR, SPAN_NOT_STREAMABLE = 3, 4


def parallel_parse(path: str, workers: int, start: Any = None) -> TraceData | None:
    """Split the decompressed stream into `workers + 1` byte ranges: each worker process inflates
    the file itself and parses its range, this process parses the first and merges the rest.

    Every range boundary is the first `}, {` at or after a target offset, found the same way by
    the two processes that share it; the process on the left decodes its last events up to it, so
    a boundary that is not between two events (inside a string, an event or the metadata after
    the array) fails that decode and raises NotStreamable (the caller reads serially instead).
    `start(path, lo, hi, version)` starts a worker (a handle with result() and cancel()), by default a
    SpanProcess."""
    start = start or SpanProcess
    version = file_version(path)
    total = uncompressed_size_hint(path)
    if total < 2 * BLOCK:
        return None
    first = MAIN_SHARE if workers == 1 else 1.0 / (workers + 1)
    bounds = [int(total * (first + (1 - first) * k / workers)) for k in range(workers)]
    spans: list = []
    try:
        for lo, hi in zip(bounds, bounds[1:] + [None]):
            spans.append(start(path, lo, hi, version))
        builder = Builder()
        n, index, meta = _parse_span(path, builder, None, bounds[0])
        for span in spans:
            part = pickle.loads(span.result())
            if n + part["n"] > max_trace_events():
                raise too_many_events(path, max_trace_events())
            builder.merge(part, n)
            index.extend((first_idx + n, begin, end) for first_idx, begin, end in part["index"])
            n += part["n"]
            meta = part["meta"] if meta is None else meta
            del part  # its arrays that merge replaced (remapped codes, shifted idx) go now
    except BaseException:
        for span in spans:
            span.cancel()
        raise
    if meta is None:
        raise NotStreamable
    t = builder.finish(path, meta, base_ns_of(meta))
    t.event_index = tuple(index)
    return t


def stream_parse(path: str, blocks: Iterator[bytes] | None = None) -> TraceData:
    """Parse a whole trace while it is decompressed (see _parse_span); `blocks`: its bytes, when
    they are not to be read from `path`."""
    builder = Builder()
    _, index, meta = _parse_span(path, builder, blocks=blocks)
    t = builder.finish(path, meta, base_ns_of(meta))
    t.event_index = tuple(index)
    return t


def _parse_span(
    path: str,
    builder: Builder,
    lo: int | None = None,
    hi: int | None = None,
    blocks: Iterator[bytes] | None = None,
) -> tuple[int, list, dict | None]:
    """Parse events into `builder` while the file is decompressed, cutting the event array at
    `}, {` separators; returns (events added, piece index, top-level metadata).

    Every cut is checked by the JSON decoder (a cut inside an event or a string leaves an
    unbalanced piece, which fails to decode), so a file this cannot split raises NotStreamable
    and goes to the whole-file path instead of being misread.

    With `lo`, events before the first separator at or after decompressed offset `lo` are
    skipped (another process parses them); with `hi`, parsing stops at the first separator at or
    after `hi` (metadata None), or runs to the end when there is none. A span whose `lo` lies
    past the last separator holds no events (0, [], None)."""
    buf = b""
    start = 0  # offset of buf in the decompressed stream
    head: bytes | None = None
    scan: EventsHead | None = None
    bare = False
    n = 0
    index: list[tuple[int, int, int]] = []  # (first event idx, start, end) of every piece
    counts = builder.counts

    limit = max_trace_events()

    def add(evs: list, begin: int, end: int) -> None:
        nonlocal n
        if n + len(evs) > limit:
            raise too_many_events(path, limit)
        builder.add_chunk(evs, n)
        index.append((n, begin, end))
        n += len(evs)

    blocks = read_blocks(path) if blocks is None else blocks
    try:
        for block in blocks:
            buf = buf + block if buf else block
            if head is None:
                stripped = buf.lstrip()
                if not stripped:  # leading whitespace: counted, never kept
                    start += len(buf)
                    buf = b""
                    continue
                if stripped[:1] == b"[":
                    bare, head = True, b""
                    start += len(buf) - len(stripped) + 1
                    buf = stripped[1:]
                elif stripped[:1] == b"{":
                    if scan is None:
                        scan = EventsHead(len(buf) - len(stripped))
                    found = scan.find(buf)
                    if found is None:
                        if len(buf) > max(MAX_PIECE, 4 * IO_BLOCK):
                            raise NotStreamable
                        continue
                    head, buf = buf[: found[0]], buf[found[1] :]
                    start += found[1]
                else:
                    raise TraceReadError(f"{path}: not a JSON trace (starts with {stripped[:1]!r})")
                lo = None if lo is None else max(lo, start)
                hi = None if hi is None else max(hi, start)
            if lo is not None:  # skipping to this span's first event
                if lo - start >= len(buf):
                    start += len(buf)
                    buf = b""
                    continue
                buf, start = buf[lo - start :], lo
                m = SEP_RE.search(buf)
                if m is None:
                    if len(buf) > MAX_PIECE:
                        raise NotStreamable
                    continue
                buf, start, lo = buf[m.end() - 1 :], start + m.end() - 1, None
            if hi is not None and start + len(buf) > hi:  # this span's end is in buf
                m = SEP_RE.search(buf, max(0, hi - start))
                if m is None:
                    if len(buf) > max(MAX_PIECE, 4 * IO_BLOCK):
                        raise NotStreamable
                    continue  # wait for the whole separator
                part = buf[: m.start() + 1]
                pos = _add_pieces(part, 0, start, add, counts)
                evs = decode_piece(part[pos:], counts)
                add(evs, start + pos, start + len(part))
                return n, index, None
            pos = _add_pieces(buf, 0, start, add, counts)
            if pos:
                buf = buf[pos:]
                start += pos
            elif len(buf) > max(MAX_PIECE, 4 * IO_BLOCK):
                raise NotStreamable
    finally:
        if hasattr(blocks, "close"):
            blocks.close()  # closes the file when this span ends early
    if head is None:
        if not buf.strip():
            raise TraceReadError(f"{path}: empty file")
        raise NotStreamable
    if lo is not None:  # no separator after lo: the span before this one holds every event
        return 0, [], None
    # the last piece: events, "]", then the rest of the top-level object
    for meta, last, repeated in tails(buf, head, bare):  # noqa: B007 - meta of the tail that decodes is returned
        try:
            evs = decode_piece(last, counts) if last.strip() else []
            break
        except NotStreamable:
            continue
    else:
        raise NotStreamable
    if repeated:  # the events read are not the ones JSON decoders read: the whole-file path reads those
        raise NotStreamable
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
    """Decode the events of buf[pos:cut] for a cut about BLOCK bytes after pos (or after the
    first event, when it is longer); (None, None) when buf holds no whole event yet.

    The quick cut is the last `}, {` before pos + BLOCK; when that piece does not decode (the
    separator was inside a string), the exact cut comes from a scan of the bytes that skips
    strings (`element_bounds`), and a piece that fails even then is invalid JSON: NotStreamable,
    at once (the whole-file path says what is wrong). No byte is decoded more than a few times."""
    hi = min(pos + max(BLOCK, 1), len(buf))
    m = None
    for m in SEP_RE.finditer(buf, max(pos, hi - 4 * _QUICK_WINDOW), hi):  # noqa: B007 - keeps the last match
        pass
    if m is None:
        m = SEP_RE.search(buf, hi)  # an event longer than the window: the first cut after it
    if m is not None:
        cut = (m.start() + 1, m.end() - 1)
        try:
            return decode_piece(view[pos : cut[0]], counts), cut
        except NotStreamable:
            pass
    end = min(len(buf), hi + max(BLOCK, MAX_EVENT_SCAN))  # a bounded scan: never the whole buffer
    bounds, _ = element_bounds(buf, pos, end, stop_after=hi)
    if not bounds:
        if end < len(buf):  # no event ends within the scan: the whole-file path reads it
            raise NotStreamable
        return None, None
    end = bounds[-1][1]
    return decode_piece(view[pos:end], counts), (end, end + 1)


#: bytes before the window's end searched for the quick cut (a few events)
_QUICK_WINDOW = 1 << 12
#: bytes past the window the exact scan reads at most for the end of an event
MAX_EVENT_SCAN = 1 << 20


#: what the traceEvents array stands for while the text after it is decoded: a later top-level `traceEvents`
#: (a repeated key, which JSON decoders read as the last one) replaces it
_EVENTS_STANDIN = b'"traceEvents": "gpuscope: the events array read in pieces"'


def tails(buf: bytes, head: bytes, bare: bool) -> Iterator[tuple[dict, bytes, bool]]:
    """Candidates (metadata, last events, repeated) for the `]` closing the event array, last first;
    `repeated`: the text after it holds another top-level `traceEvents` (the one JSON decoders read)."""
    q = len(buf)
    standin = ANY_DECODER.decode(_EVENTS_STANDIN.partition(b":")[2])
    for _ in range(64):
        q = buf.rfind(b"]", 0, q)
        if q < 0:
            break
        tail = buf[q + 1 :]
        if bare:
            if not tail.strip():
                yield {}, buf[:q], False
            continue
        try:
            meta = ANY_DECODER.decode(head + _EVENTS_STANDIN + tail)
        except (msgspec.DecodeError, RecursionError):
            continue
        if isinstance(meta, dict):
            yield meta, buf[:q], meta.pop("traceEvents", None) != standin
