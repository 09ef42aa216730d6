"""Fast columnar reader of Kineto chrome-trace files (every torch version, ours, bare event lists).

The JSON is decoded by msgspec into small typed structs, piece by piece (`decode`), and each column
is built in bulk with numpy (`columns`); no Python dict is made per event. Big traces are read while
they are decompressed, in byte ranges on several processes (`stream`). Odd values (`N/A`, strings for
numbers, nulls) are coerced to the column's missing value and counted in `TraceData.warnings`.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

import msgspec

from profiler_core import storage
from profiler_core.trace.model import TraceData
from profiler_core.trace.read import cache, fused, native, stream
from profiler_core.trace.read.budget import memory_budget, over_budget
from profiler_core.trace.read.columns import Builder, base_ns_of
from profiler_core.trace.read.decode import (  # noqa: F401 - re-exported
    ANY_DECODER,
    CHUNK,
    RAW_LIST_DECODER,
    REPAIRED,
    TOP_DECODER,
    NotStreamable,
    TraceReadError,
    decode_chunk,
    max_trace_bytes,
    max_trace_events,
    refuse_nul,
    repair_json,
    too_big,
    too_many_events,
)
from profiler_core.trace.read.gunzip import ERRORS as GUNZIP_ERRORS
from profiler_core.trace.read.gunzip import GZIP_MAGIC, gunzip_blocks, trailer_size
from profiler_core.trace.read.malloc_tuning import release_memory, tune_for_parsing, tune_for_views
from profiler_core.trace.read.stream import default_parse_processes  # noqa: F401 - re-exported

log = logging.getLogger(__name__)

#: a read of this many events or more returns its freed heap to the OS at once (malloc_trim); below it the
#: freed parse memory (under malloc_tuning.KEEP_FREED) stays for the views, which would fault it back in
TRIM_MIN_EVENTS = 1_000_000


# --------------------------------------------------------------------------- file access
def read_bytes(path: str | os.PathLike, limit: int | None = None, grow: bool = False) -> bytes:
    """The file's JSON bytes, gunzipped when it is gzip (by magic number, not by name), read block
    by block up to `limit` (default max_trace_bytes(); a gzip file whose trailer says more is
    refused unread). With `grow`, a bytearray grown block by block (never the blocks and their join
    in memory at once)."""
    path = os.fspath(path)
    limit = max_trace_bytes() if limit is None else limit
    parts, total = [], 0
    grown = bytearray() if grow else None
    try:
        with storage.open_read(path) as f:
            head = f.read(2)
            f.seek(0)
            if head == GZIP_MAGIC:
                if (trailer_size(f) or 0) > limit:
                    raise too_big(path, limit)
                blocks = gunzip_blocks(f, 1 << 20)
            else:
                blocks = iter(lambda: f.read(1 << 24), b"")
            for block in blocks:
                refuse_nul(path, block, total)
                total += len(block)
                if total > limit:
                    raise too_big(path, limit)
                if grown is not None:
                    grown += block
                else:
                    parts.append(block)
    except FileNotFoundError:
        raise TraceReadError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise TraceReadError(f"{path}: is a directory") from None
    except EOFError:
        raise TraceReadError(f"{path}: truncated gzip file (ended before its end marker)") from None
    except (OSError, *GUNZIP_ERRORS) as e:
        raise TraceReadError(f"{path}: corrupt gzip file ({e})") from None
    if grown is not None:
        return grown  # type: ignore[return-value]  # a bytes-like buffer
    data = parts[0] if len(parts) == 1 else b"".join(parts)
    del parts
    return data


def split_top(data: bytes, path: str) -> tuple[dict, msgspec.Raw | bytes]:
    """Top-level keys (decoded) and the raw traceEvents array of a trace document."""
    first = stream.skip_ws(data, 0)  # however much whitespace leads (the streaming reader skips it all)
    start = data[first : first + 1]
    if not start:
        raise TraceReadError(f"{path}: empty file")
    if start[:1] == b"[":
        return {}, data
    if start[:1] != b"{":
        raise TraceReadError(f"{path}: not a JSON trace (starts with {start[:1]!r})")
    try:
        top = TOP_DECODER.decode(data)
    except msgspec.DecodeError as e:
        raise TraceReadError(f"{path}: invalid or truncated JSON ({e})") from None
    if "traceEvents" not in top and "nodes" in top and "schema" in top:
        raise TraceReadError(
            f"{path}: a PyTorch execution trace (schema, nodes; no traceEvents), "
            "not a Kineto trace: open the Kineto trace recorded with it"
        )
    if "traceEvents" not in top:
        raise TraceReadError(f"{path}: no 'traceEvents' key (not a Kineto/chrome trace)")
    meta = {}
    for key, raw in top.items():
        if key != "traceEvents":
            try:
                meta[key] = ANY_DECODER.decode(raw)
            except msgspec.DecodeError as e:  # (invalid UTF-8 in a string the top-level pass leaves raw)
                raise TraceReadError(f"{path}: invalid JSON in {key!r} ({e})") from None
    return meta, top["traceEvents"]


def event_raws(events_raw: Any, path: str) -> list:
    try:
        return RAW_LIST_DECODER.decode(events_raw)
    except msgspec.ValidationError:
        raise TraceReadError(f"{path}: 'traceEvents' is not a list") from None
    except msgspec.DecodeError as e:
        raise TraceReadError(f"{path}: invalid or truncated JSON in traceEvents ({e})") from None


def _native_parse(path: str) -> TraceData | None:
    """The native reader's parse of the file at `path` (inflated and scanned piece by piece); None when it
    does not read it (not built or turned off, or a shape it declines): the Python reader then reads it."""
    if not native.enabled():
        return None
    try:
        return native.read_file(path)
    except (TraceReadError, RecursionError):
        return None


def parse_trace_native(data: bytes, path: str = "<memory>", index: bool = False) -> TraceData | None:
    """`parse_trace` by the native reader: the same TraceData, or None when the native reader is not
    built or declines the document (it then raises nothing: `parse_trace` says what is wrong).
    With `index`, its `event_index` locates pieces of events in `data` (for `lookup`)."""
    if not native.available() or not isinstance(data, (bytes, bytearray)):
        return None
    try:
        meta, events = split_top(bytes(data), path)
    except (TraceReadError, RecursionError):
        return None
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return native.columns_of(meta, events, path, _offset_in(events, data) if index else None)
    finally:
        if gc_was_enabled:
            gc.enable()


def _offset_in(part: Any, data: bytes) -> int | None:
    """Where the buffer `part` (a msgspec.Raw of `data`, or `data` itself) starts in `data`."""
    if part is data:
        return 0
    import numpy as np

    view, whole = np.frombuffer(memoryview(part), np.uint8), np.frombuffer(data, np.uint8)
    at = view.ctypes.data - whole.ctypes.data
    if 0 <= at <= len(data) - len(view) and data[at : at + 64] == bytes(view[:64]):
        return at
    return None


def parse_trace(data: bytes, path: str = "<memory>") -> TraceData:
    """Parse the JSON bytes of a Kineto trace (object with traceEvents, or a bare list).

    Raises TraceReadError (a ValueError) with a clear message on anything unreadable."""
    if not isinstance(data, (bytes, bytearray, memoryview, str)):
        raise TypeError(f"parse_trace takes the JSON bytes of a trace, not {type(data).__name__}")
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _parse_bytes(
            data.encode() if isinstance(data, str) else bytes(data) if not isinstance(data, bytes) else data, path
        )
    except TraceReadError:
        raise
    except Exception as e:  # noqa: BLE001 - last resort: a clear message, never a deep traceback
        raise TraceReadError(f"{path}: unreadable trace ({type(e).__name__}: {e})") from e
    finally:
        if gc_was_enabled:
            gc.enable()


def _parse_bytes(data: bytes, path: str) -> TraceData:
    refuse_nul(path, data)
    builder = Builder()
    try:
        meta, events_raw = split_top(data, path)
    except RecursionError:  # an event nesting too deeply for the whole-document decode
        try:
            return stream.stream_parse(path, iter((data,)))
        except (NotStreamable, RecursionError):
            raise TraceReadError(f"{path}: JSON nested too deeply to read") from None
    except TraceReadError:
        fixed = repair_json(data)
        if fixed is None:
            raise
        data = fixed
        meta, events_raw = split_top(data, path)
        builder.counts[REPAIRED] = 1
    raws = event_raws(events_raw, path)
    if len(raws) > max_trace_events():
        raise too_many_events(path, max_trace_events())
    for start in range(0, len(raws), CHUNK):
        chunk = raws[start : start + CHUNK]
        evs = decode_chunk(chunk, builder.counts)
        builder.add_chunk(evs, start)
    del raws, events_raw
    return builder.finish(path, meta, base_ns_of(meta))


#: copies of its JSON the whole-file path (files the streaming reader cannot cut) may hold at once, counted
#: against the memory budget: the blocks read and their join, then the document and a list of one object per
#: entry, and a repaired document's two passes beside it; it reads traces up to the budget / this
WHOLE_FILE_FACTOR = 4


def whole_file_limit() -> int:
    """Largest uncompressed trace the whole-file path reads: the budget over WHOLE_FILE_FACTOR (its copies)."""
    return min(max_trace_bytes(), memory_budget() // WHOLE_FILE_FACTOR)


#: reads of a file that changed while it was read, before giving up on it
READ_ATTEMPTS = 3


def _fingerprint(path: str) -> tuple:
    try:
        return storage.fingerprint(path)
    except FileNotFoundError:
        raise TraceReadError(f"{path}: file not found") from None
    except OSError as e:  # a remote file that cannot be stat'ed: storage says why
        if not storage.is_remote(path):
            raise
        raise TraceReadError(str(e)) from None


#: the read strategies, in the order `choose_strategies` lists them
CACHE, NATIVE, PROCESSES, STREAM, WHOLE_FILE = (
    "parse cache",
    "native reader",
    "parser processes",
    "streaming",
    "whole file",
)


def choose_strategies(size: int, workers: int, use_cache: bool, native_reader: bool = False) -> tuple[str, ...]:
    """The ways to read a trace file of `size` bytes on disk, in the order they are tried; one that
    does not apply to the file falls through to the next:

    1. CACHE, only when `use_cache` (the plugin's loader): the parse an earlier read stored for this
       very version of the file (`cache.load`). No valid entry: the next.
    1b. NATIVE, only when `native_reader` (the C extension is built and GPUSCOPE_NATIVE_READER is not 0):
       the file inflated block by block and scanned by the C reader in pieces of whole events
       (`native.read_file`). A shape of event it does not read exactly: the next.
    2. PROCESSES, when `workers` > 0, the file has at least stream.PARALLEL_MIN_BYTES on disk and
       there is a Python executable to start them: byte ranges parsed by `workers` parser processes
       and this one. A range boundary that is not between two events, or a failed worker: the next.
    3. STREAM: decompressed block by block and decoded piece by piece in this process. A file it
       cannot cut into pieces: the next.
    4. WHOLE_FILE: the whole document decoded at once (it holds the bytes and one object per entry,
       and its copies, so it reads files up to the memory budget / WHOLE_FILE_FACTOR).

    A TraceReadError (the file's own fault) ends the read at any step: the others would say the same.
    """
    plan = [CACHE] if use_cache else []
    if native_reader:
        plan.append(NATIVE)
    if workers > 0 and size >= stream.PARALLEL_MIN_BYTES and sys.executable:
        plan.append(PROCESSES)
    return (*plan, STREAM, WHOLE_FILE)


def read_trace(
    path: str | os.PathLike,
    processes: int | None = None,
    *,
    use_cache: bool = False,
    store: Callable[[str, TraceData], Any] | None = None,
    tune_memory: bool = False,
) -> TraceData:
    """Read a Kineto trace file (.json or .json.gz, any torch version, ours) into a `TraceData`,
    by the first strategy of `choose_strategies` that applies.

    Big files (>= stream.PARALLEL_MIN_BYTES on disk) are split across `processes` extra parser processes
    (default: `default_parse_processes()`, cores - 1, at most 3; 0: this process only), each started for the
    read and gone after it; the environment variable GPUSCOPE_PARSE_PROCESSES overrides it.
    With `use_cache` a valid parse-cache entry is returned as it is, and a fresh parse is handed to
    `store(path, t)` (default `cache.store`: written now).
    A file whose identity (`storage.fingerprint`) changes while it is read (rewritten in place) is
    read again, up to READ_ATTEMPTS times, then refused: a torn parse is never returned.
    Process-wide settings (glibc malloc, numpy's huge pages: `malloc_tuning`) are changed only with
    `tune_memory`, which the plugin's loader passes: for parsing while it reads, then for views.
    A file of several ranks fused together (pid = rank * 1e8 + pid) is refused; `PATH@rankR` reads rank R's part
    of it (`fused.py`).
    """
    path = os.fspath(path)
    base, rank = fused.split_path(path)
    if rank is not None:  # one rank's part of a fused file (trace/read/fused.py)
        return fused.read_part(
            base,
            rank,
            _fingerprint(base),
            lambda: _read_file(base, processes, use_cache=use_cache, store=store, tune_memory=tune_memory),
        )
    t = _read_file(path, processes, use_cache=use_cache, store=store, tune_memory=tune_memory)
    fused.refuse_fused(t, path)
    return t


def fused_ranks(path: str | os.PathLike, use_cache: bool = False) -> list[int]:
    """The ranks of a file of several ranks fused together, [] for any other trace (one whole read, kept in
    memory for the reads of its parts, `fused.py`); TraceReadError when it cannot be read."""
    path = os.fspath(path)
    return fused.file_ranks(
        path,
        _fingerprint(path),
        lambda: _read_file(path, None, use_cache=use_cache, store=None, tune_memory=False),
    )


def _read_file(
    path: str,
    processes: int | None,
    *,
    use_cache: bool,
    store: Callable[[str, TraceData], Any] | None,
    tune_memory: bool,
) -> TraceData:
    """`read_trace` of a whole file, fused ranks and all."""
    workers = stream.parse_processes_for(processes)
    fingerprint = _fingerprint(path)
    if not storage.is_remote(path) and os.path.isdir(path):
        raise TraceReadError(f"{path}: is a directory")
    plan = choose_strategies(fingerprint[0], workers, use_cache, native.enabled())
    t = cache.load(path) if CACHE in plan else None
    if t is None:
        why = over_budget(path)  # before the body is read
        if why is not None:
            raise TraceReadError(why)
        if tune_memory:
            tune_for_parsing()
        t = _read_checked(path, plan, workers, fingerprint)
        if tune_memory and len(t.events) >= TRIM_MIN_EVENTS:
            release_memory()
        if use_cache:
            (store or cache.store)(path, t)
    if tune_memory:
        tune_for_views()
    return t


def _read_checked(path: str, plan: tuple[str, ...], workers: int, fingerprint: tuple) -> TraceData:
    """A parse of `path` by `plan` that the file did not change under (read again if it did)."""
    t: TraceData | None = None
    for _ in range(READ_ATTEMPTS):
        try:
            t = _read_once(path, plan, workers)
        except TraceReadError:
            after = _fingerprint(path)
            if after == fingerprint:
                raise  # the file's own fault, not a rewrite under way
            fingerprint = after
            continue
        after = _fingerprint(path)
        if after == fingerprint:
            break
        t = None
        fingerprint = after
    if t is None:
        raise TraceReadError(
            f"{path}: the file changed while it was read ({READ_ATTEMPTS} times); "
            "it is read again once it stays the same"
        )
    t.source_stat = fingerprint
    return t


def _read_once(path: str, plan: tuple[str, ...], workers: int) -> TraceData:
    """One parse of the file at `path` by the first of `plan`'s parsing strategies that applies."""
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of short-lived objects, no cycles: collection passes are waste
    try:
        for strategy in plan:
            t = _parse_by(strategy, path, workers)
            if t is not None:
                log.info(
                    "gpuscope: %s read by the %s",
                    path,
                    native.NATIVE_READER if strategy == NATIVE else native.PYTHON_READER,
                )
                return t
        raise TraceReadError(f"{path}: no read strategy applies ({', '.join(plan)})")
    except TraceReadError:
        raise
    except Exception as e:  # noqa: BLE001 - last resort: a clear message, never a deep traceback
        raise TraceReadError(f"{path}: unreadable trace ({type(e).__name__}: {e})") from e
    finally:
        if gc_was_enabled:
            gc.enable()


def _parse_by(strategy: str, path: str, workers: int) -> TraceData | None:
    """A parse of `path` by one strategy; None when it does not apply to this file."""
    if strategy == NATIVE:
        try:
            return _native_parse(path)
        except Exception as e:  # noqa: BLE001 - a fault of the native reader: the Python reader reads the file
            log.warning(
                "gpuscope: %s: the native reader failed (%s: %s); reading it in Python", path, type(e).__name__, e
            )
            return None
    if strategy == PROCESSES:
        try:
            return stream.parallel_parse(path, workers)
        except TraceReadError:  # the file's own fault: reading it here says the same
            raise
        except NotStreamable:  # a range boundary that is not between two events
            return None
        except Exception as e:  # noqa: BLE001 - a failed worker: parse here instead
            logging.getLogger(__name__).warning("gpuscope: parallel parsing failed (%s); parsing in this process", e)
            return None
    if strategy == STREAM:
        try:
            return stream.stream_parse(path)
        except NotStreamable:
            return None
    if strategy == WHOLE_FILE:
        return parse_trace(read_bytes(path, whole_file_limit()), path)
    return None  # CACHE: looked up before any parse
