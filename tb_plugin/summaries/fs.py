"""The one place summaries touch storage: reading, writing and stat-ing paths.

Paths are local paths or fsspec URLs (`s3://...`); everything goes through `profiler_core.storage`
(the reader's and scanner's storage layer), so summaries live wherever the traces do.
"""
from __future__ import annotations

import os
import tempfile
from typing import NamedTuple

from profiler_core import storage


class Stat(NamedTuple):
    """What identifies a file's content: size and modification time (ns); the ETag (or generation)
    of a remote object, "" for a local file."""

    size: int
    mtime_ns: int
    etag: str = ""


def is_url(path: str) -> bool:
    """Whether `path` names an object in a remote store (scheme://...) rather than a local file."""
    return storage.is_remote(path)


def stat(path: str) -> Stat:
    """Size, mtime and version of `path` (OSError when it is missing or unreadable)."""
    info = storage.stat(path)
    return Stat(int(info.size), int(info.mtime_ns), str(info.version or ""))


def read_bytes(path: str) -> bytes:
    """The whole content of `path`."""
    with storage.open_read(path) as f:
        return f.read()


def write_bytes(path: str, data: bytes) -> None:
    """Writes `data` to `path` atomically (a reader sees the old content or the new, never a part)."""
    if is_url(path):
        with storage.atomic_writer(path) as f:
            f.write(data)
        return
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def redact(text: str) -> str:
    """`text` without credentials (user:password@, URL queries, secret values)."""
    return storage.redact(text)


def join(base: str, *parts: str) -> str:
    """`base` / parts, with "/" for URLs and the OS separator for local paths."""
    return storage.join(base, *parts)
