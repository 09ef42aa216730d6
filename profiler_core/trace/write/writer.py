"""Write a trace dict as Kineto chrome-trace JSON (``.gz`` suffix: gzip), atomically.

The file is written under a hidden temporary name in the destination directory and renamed over
the final name only when complete (an fsspec URL, `s3://...`: see `profiler_core.storage`,
buffered and published as one object), so a reader never sees half a trace and a failure (unwritable
directory, full disk) leaves no file under the final name. Strings are always escaped correctly
(msgspec's encoder), so any name or metadata value gives valid JSON; values JSON cannot express
(numpy scalars, arbitrary objects) are converted (``.item()`` / ``str``), lone surrogates replaced.
Layout: one top-level key per line, one event per line (readable, diffable, stream-friendly).
"""

from __future__ import annotations

import contextlib
import errno
import os
import zlib
from collections.abc import Iterator
from typing import Any

import msgspec

from profiler_core import storage

GZIP_LEVEL = 6  # zlib default; torch's exporter uses gzip's 9 (slower, ~same size)
_CHUNK = 4096  # events encoded per write


class TraceWriteError(OSError):
    """A trace could not be written (the message names the path and the reason)."""


def _enc_hook(obj: Any) -> Any:
    item = getattr(obj, "item", None)
    if callable(item):
        try:
            return item()
        except Exception:
            pass
    if isinstance(obj, (set, frozenset)):
        return list(obj)
    if isinstance(obj, bytes):
        return obj.decode("utf-8", "replace")
    try:
        return str(obj)
    except Exception:  # an object that cannot print itself must not make the trace unwritable
        return f"<unprintable {type(obj).__name__}>"


_encoder = msgspec.json.Encoder(enc_hook=_enc_hook)


_MAX_DEPTH = 64  # deeper containers (or cycles) in args/metadata are written as a placeholder


def _clean(obj: Any, depth: int = 0, open_ids: set | None = None) -> Any:
    """``obj`` made encodable: lone surrogates replaced in every string, cycles and containers
    nested deeper than _MAX_DEPTH replaced by a placeholder string."""
    if isinstance(obj, str):
        return obj.encode("utf-8", "replace").decode("utf-8")
    if isinstance(obj, (dict, list, tuple)):
        open_ids = set() if open_ids is None else open_ids
        if id(obj) in open_ids:
            return "<recursive reference>"
        if depth >= _MAX_DEPTH:
            return "<nested too deeply>"
        open_ids.add(id(obj))
        try:
            if isinstance(obj, dict):
                return {
                    _clean(k, depth + 1, open_ids) if isinstance(k, str) else k: _clean(v, depth + 1, open_ids)
                    for k, v in obj.items()
                }
            return [_clean(v, depth + 1, open_ids) for v in obj]
        finally:
            open_ids.discard(id(obj))
    return obj


_ENCODE_ERRORS = (UnicodeEncodeError, msgspec.EncodeError, TypeError, ValueError, RecursionError)


def encode(obj: Any) -> bytes:
    """JSON bytes of ``obj``, always valid JSON (see module docstring)."""
    try:
        return _encoder.encode(obj)
    except _ENCODE_ERRORS:
        return _encoder.encode(_clean(obj))


def _encode_events(events: list) -> bytes:
    try:
        return b",\n  ".join(map(_encoder.encode, events))
    except _ENCODE_ERRORS:
        return b",\n  ".join(encode(e) for e in events)


def iter_json(trace: Any, trace_name: str) -> Iterator[bytes]:
    """The file's bytes in pieces: header keys, events in chunks, then traceName."""
    if isinstance(trace, list):  # a bare event list is accepted too
        trace = {"traceEvents": trace}
    if not isinstance(trace, dict):
        raise TypeError(f"write_trace: expected a trace dict, got {type(trace).__name__}")
    head = [b"{"]
    for k, v in trace.items():
        if k in ("traceEvents", "traceName"):
            continue
        head.append(b"\n  " + encode(str(k)) + b": " + encode(v) + b",")
    head.append(b'\n  "traceEvents": [')
    yield b"".join(head)
    events = trace.get("traceEvents") or []
    for i in range(0, len(events), _CHUNK):
        yield (b"\n  " if i == 0 else b",\n  ") + _encode_events(events[i : i + _CHUNK])
    yield b'\n  ],\n  "traceName": ' + encode(trace_name) + b"\n}\n"


def check_path(path: Any, what: str) -> str:
    """``path`` as a str file path, or a clear error naming what was wrong with it."""
    try:
        path = os.fspath(path)
    except TypeError:
        raise TypeError(
            f"cannot write {what}: the path must be a str or os.PathLike, got {type(path).__name__} {path!r}"
        ) from None
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not path:
        raise TraceWriteError(errno.ENOENT, f"cannot write {what}: the path is empty")
    if "\0" in path:
        raise ValueError(f"cannot write {what} {path!r}: the path contains a NUL character")
    if not storage.is_remote(path) and os.path.isdir(path):
        raise TraceWriteError(errno.EISDIR, f"cannot write {what} {path!r}: it is a directory (give a file name)")
    return path


def _missing_directory(what: str, path: str, directory: str) -> TraceWriteError:
    """The error for a destination whose directory is missing (or is a file)."""
    if os.path.exists(directory):
        return TraceWriteError(errno.ENOTDIR, f"cannot write {what} {path!r}: {directory!r} is not a directory")
    return TraceWriteError(errno.ENOENT, f"cannot write {what} {path!r}: directory {directory!r} does not exist")


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, what: str = "file") -> Iterator[Any]:
    """Open a temporary file beside ``path`` for writing; rename it over ``path`` on success.

    On any failure the temporary file is removed and nothing appears under ``path``; an OSError
    becomes a ``TraceWriteError`` naming the path and the reason. Yields ``(file, checked_path)``.
    Only a new path or a regular file is replaced (`storage.write_beside`): a symlink, a FIFO,
    a device or a socket at ``path`` is refused with a TraceWriteError, never opened or followed.
    """
    path = check_path(path, what)
    if storage.is_remote(path):  # an fsspec URL: buffered, then published whole
        try:
            with storage.atomic_writer(path) as f:
                yield f, path
        except OSError as e:
            if isinstance(e, TraceWriteError):
                raise
            shown = storage.redact(path)
            reason = storage.redact(str(e)).replace(shown + ": ", "")
            raise TraceWriteError(e.errno or errno.EIO, f"cannot write {what} {shown}: {reason}") from None
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise _missing_directory(what, path, directory)
    try:
        with storage.write_beside(path) as f:
            yield f, path
    except storage.NotAFile as e:
        raise TraceWriteError(e.errno, f"cannot write {what} {path!r}: {e.strerror}") from None
    except OSError as e:
        if isinstance(e, TraceWriteError):
            raise
        raise TraceWriteError(e.errno, f"cannot write {what} {path!r}: {e.strerror or e}") from e


def write_bytes_atomic(data: bytes, path: str | os.PathLike, what: str = "file") -> str:
    """Write ``data`` to ``path`` through a temporary file renamed over it: never a half-written file."""
    with atomic_file(path, what) as (f, checked):
        f.write(data)
    return checked


def write_trace(trace: Any, path: str | os.PathLike, *, gzip_level: int = GZIP_LEVEL) -> str:
    """Write ``trace`` to ``path`` atomically (gzip if it ends in .gz); return the path.

    Raises ``TraceWriteError`` (an OSError) naming the path and the reason when it cannot be
    written; nothing is left under ``path`` (nor the temporary name) in that case.
    """
    with atomic_file(path, "trace") as (f, checked):
        pieces = iter_json(trace, checked)
        if checked.endswith(".gz"):
            _write_gzip(f, pieces, os.path.basename(checked[:-3]), gzip_level)
        else:
            for piece in pieces:
                f.write(piece)
    return checked


def _write_gzip(f, pieces, inner_name: str, level: int) -> None:
    """gzip member with zlib directly (no per-write overhead of the gzip module)."""
    name = inner_name.encode("latin-1", "replace")
    f.write(b"\x1f\x8b\x08\x08\x00\x00\x00\x00\x00\xff" + name + b"\x00")
    comp = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    crc, size = 0, 0
    for piece in pieces:
        crc = zlib.crc32(piece, crc)
        size += len(piece)
        f.write(comp.compress(piece))
    f.write(comp.flush())
    f.write(crc.to_bytes(4, "little") + (size & 0xFFFFFFFF).to_bytes(4, "little"))
