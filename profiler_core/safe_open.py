"""Opening small files we did not write (cache entries, summaries) without trusting what is there.

A FIFO, a device or a socket planted at the path is never waited on or read: the open does not
block (O_NONBLOCK) and only a regular file is read. The size is bounded before anything is read,
and the owner can be required to be one of a set of users.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from typing import BinaryIO


class UnsafeFile(OSError):
    """A path that is not a regular file we may read (FIFO, device, link, other owner, too big)."""


def _uid() -> int | None:
    return os.getuid() if hasattr(os, "getuid") else None


def open_regular(
    path: str | os.PathLike, *, max_bytes: int | None = None, follow: bool = True, owners: Iterable[int] | None = None
) -> tuple[BinaryIO, os.stat_result]:
    """`path` opened for reading (unbuffered) with its fstat, only if it is a regular file no
    larger than `max_bytes`, owned by one of `owners` (uids; None: anyone), and, unless `follow`,
    not a symbolic link. Raises FileNotFoundError when missing, UnsafeFile otherwise."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    if not follow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise UnsafeFile(e.errno, f"cannot open ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", os.fspath(path))
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(f"not a regular file (mode {stat.filemode(st.st_mode)})")
        if max_bytes is not None and st.st_size > max_bytes:
            raise UnsafeFile(f"{st.st_size} bytes, more than the {max_bytes} allowed")
        if owners is not None and _uid() is not None and st.st_uid not in set(owners):
            raise UnsafeFile(f"owned by another user (uid {st.st_uid})")
        return os.fdopen(fd, "rb", buffering=0), st
    except BaseException:
        os.close(fd)
        raise


def read_regular(
    path: str | os.PathLike, max_bytes: int, *, follow: bool = True, owners: Iterable[int] | None = None
) -> bytes:
    """The whole content of the regular file `path` (see `open_regular`), at most `max_bytes`
    even when the file grows while it is read (UnsafeFile then)."""
    f, _ = open_regular(path, max_bytes=max_bytes, follow=follow, owners=owners)
    with f:
        parts, total = [], 0
        while True:
            block = f.read(min(1 << 20, max_bytes + 1 - total))
            if not block:
                return b"".join(parts)
            parts.append(block)
            total += len(block)
            if total > max_bytes:
                raise UnsafeFile(f"more than the {max_bytes} bytes allowed")


def trusted_dirs(top: str | os.PathLike, leaf: str | os.PathLike, owners: Iterable[int] | None = None) -> str | None:
    """None when every directory from `top` down to `leaf` (both included; `leaf` inside `top`)
    is owned by one of `owners` (default: this user) and writable by nobody else (group or others,
    unless sticky); else why not. A missing directory is fine: nothing is read from it."""
    uid = _uid()
    if uid is None:
        return None
    allowed = {uid} if owners is None else set(owners)
    top, leaf = os.path.abspath(top), os.path.abspath(leaf)
    rel = os.path.relpath(leaf, top)
    if rel.startswith(os.pardir):
        return f"{leaf} is not inside {top}"
    parts = [] if rel == os.curdir else rel.split(os.sep)
    d = top
    for part in [None, *parts]:
        if part is not None:
            d = os.path.join(d, part)
        try:
            st = os.lstat(d)
        except FileNotFoundError:
            return None
        except OSError as e:
            return f"{d}: {e.strerror}"
        if stat.S_ISLNK(st.st_mode):
            try:
                st = os.stat(d)
            except OSError as e:
                return f"{d}: {e.strerror}"
        if not stat.S_ISDIR(st.st_mode):
            return f"{d} is not a directory"
        if st.st_uid not in allowed:
            return f"{d} is owned by another user (uid {st.st_uid})"
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            return f"{d} is writable by other users"
    return None
