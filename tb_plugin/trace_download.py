"""The /trace route's body: the raw file that was parsed, streamed gzip-encoded, and the download's file name.

A file is served only while it is still the regular file whose parse the route answers from (never a device or
FIFO swapped in, never another file); a plain JSON file is gzipped on the fly, a gzip file sent as it is.
"""

from __future__ import annotations

import os
import stat
import zlib
from collections.abc import Iterator
from typing import IO, Any
from urllib.parse import quote

from profiler_core.identity import file_identity
from tb_plugin.errors import NotFound


def open_parsed(f: Any, source: tuple) -> IO[bytes]:
    """The trace file `f`, opened only if it is still the regular file that was parsed (`source`
    is its `storage.fingerprint` then): never a device or FIFO swapped in, never another file."""
    from profiler_core import storage

    path = getattr(f, "file_path", f.path)  # a fused file's rank: the file itself
    if storage.is_remote(path):
        try:
            changed = source != (-1, -1) and storage.fingerprint(path) != source
            fh = None if changed else storage.open_read(path)
        except OSError as e:
            raise NotFound(f"{f.relpath}: cannot read ({e})") from None
        if fh is None:
            raise NotFound(f"{f.relpath} changed since it was loaded; reload the page")
        return fh
    try:  # non-blocking: opening a FIFO for reading must not wait for a writer
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        raise NotFound(f"{f.relpath}: cannot read ({e.strerror})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or (source != (-1, -1) and file_identity(st) != source):
        os.close(fd)
        raise NotFound(f"{f.relpath} changed on disk since it was loaded; reload the page")
    return os.fdopen(fd, "rb")


def download_name(path: str) -> str:
    """The name a downloaded trace is saved under: the browser undoes the gzip Content-Encoding,
    so the bytes saved are JSON even when the file on disk is `.json.gz`."""
    name = os.path.basename(path)
    return name[:-3] if name.lower().endswith(".gz") and len(name) > 3 else name


def content_disposition(name: str) -> str:
    """`inline` with the file name: an ASCII fallback and the exact name as RFC 5987 `filename*`."""
    fallback = "".join(c if " " <= c <= "~" and c not in '"\\' else "_" for c in name)
    exact = quote(name.encode("utf-8", "surrogateescape"), safe="")
    return f"inline; filename=\"{fallback}\"; filename*=UTF-8''{exact}"


def file_chunks(fh: IO[bytes], size: int = 1 << 20) -> Iterator[bytes]:
    """The bytes of `fh` in blocks of `size`, closing it at the end."""
    with fh:
        while True:
            block = fh.read(size)
            if not block:
                return
            yield block


def gzip_chunks(fh: IO[bytes], size: int = 1 << 20) -> Iterator[bytes]:
    """The bytes of `fh` gzip-compressed, a block at a time."""
    comp = zlib.compressobj(6, zlib.DEFLATED, 31)
    for block in file_chunks(fh, size):
        out = comp.compress(block)
        if out:
            yield out
    yield comp.flush()
