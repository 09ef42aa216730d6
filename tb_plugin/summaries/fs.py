"""The one place summaries touch storage: reading, writing and stat-ing paths.

Paths are local paths or fsspec URLs (`s3://...`); everything goes through `profiler_core.storage`
(the reader's and scanner's storage layer), so summaries live wherever the traces do.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import NamedTuple

from profiler_core import safe_open, storage
from profiler_core.identity import portable_identity


class Stat(NamedTuple):
    """What identifies a file's content: size and modification time (ns); the ETag (or generation)
    of a remote object, "" for a local file; a local file's `identity.portable_identity` (inode and
    ctime tell a rewrite of the same size and mtime apart), () for a remote one."""

    size: int
    mtime_ns: int
    etag: str = ""
    ident: tuple = ()


def is_url(path: str) -> bool:
    """Whether `path` names an object in a remote store (scheme://...) rather than a local file."""
    return storage.is_remote(path)


def stat(path: str) -> Stat:
    """Size, mtime and version of `path` (OSError when it is missing or unreadable)."""
    info = storage.stat(path)
    return Stat(int(info.size), int(info.mtime_ns), str(info.version or ""), portable_identity(info.ident))


def read_bytes(path: str, max_bytes: int | None = None, owners: Iterable[int] | None = None) -> bytes:
    """The whole content of `path`; with `max_bytes`, ValueError beyond it. A local path is read
    only if it is a regular file (owned by one of `owners` when given), never waiting on a FIFO
    (`safe_open.UnsafeFile` otherwise)."""
    if not is_url(path):
        if max_bytes is None:
            f, _ = safe_open.open_regular(path, owners=owners)
            with f:
                return f.read()
        return safe_open.read_regular(path, max_bytes, owners=owners)
    with storage.open_read(path) as fh:
        data = fh.read() if max_bytes is None else fh.read(max_bytes + 1)
    if max_bytes is not None and len(data) > max_bytes:
        raise ValueError(f"more than {max_bytes} bytes")
    return data


def write_bytes(path: str, data: bytes) -> None:
    """Writes `data` to `path` atomically (a reader sees the old content or the new, never a part)."""
    if is_url(path):
        with storage.atomic_writer(path) as f:
            f.write(data)
        return
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    with storage.write_beside(path) as f:
        f.write(data)


def redact(text: str) -> str:
    """`text` without credentials (user:password@, URL queries, secret values)."""
    return storage.redact(text)


def join(base: str, *parts: str) -> str:
    """`base` / parts, with "/" for URLs and the OS separator for local paths."""
    return storage.join(base, *parts)
