"""The one place summaries touch storage: reading, writing and stat-ing paths.

Paths are local paths or URLs (`s3://...`); every summary module goes through these functions, so a
storage layer (fsspec) plugs in here alone.
"""
from __future__ import annotations

import os
import tempfile
from typing import NamedTuple


class Stat(NamedTuple):
    """What identifies a file's content: size and modification time (ns); etag when the store has one."""

    size: int
    mtime_ns: int
    etag: str = ""


def is_url(path: str) -> bool:
    """Whether `path` names an object in a remote store (scheme://...) rather than a local file."""
    return "://" in path and not path.startswith("file://")


def _fs(path: str):
    import fsspec  # only for URLs; a local logdir never needs it

    fs, p = fsspec.core.url_to_fs(path)
    return fs, p


def stat(path: str) -> Stat:
    """Size, mtime and etag of `path` (OSError when it is missing)."""
    if not is_url(path):
        st = os.stat(path)
        return Stat(st.st_size, st.st_mtime_ns)
    fs, p = _fs(path)
    try:
        info = fs.info(p)
    except FileNotFoundError:
        raise
    except Exception as e:  # noqa: BLE001 - any store error reads as "cannot stat"
        raise OSError(f"{path}: {e}") from None
    mtime = info.get("LastModified") or info.get("mtime") or info.get("last_modified")
    ns = 0
    if hasattr(mtime, "timestamp"):
        ns = int(mtime.timestamp() * 1e9)
    elif isinstance(mtime, (int, float)):
        ns = int(mtime * 1e9)
    return Stat(int(info.get("size") or 0), ns, str(info.get("ETag") or info.get("etag") or "").strip('"'))


def read_bytes(path: str) -> bytes:
    """The whole content of `path`."""
    if not is_url(path):
        with open(path, "rb") as f:
            return f.read()
    fs, p = _fs(path)
    return fs.cat_file(p)


def write_bytes(path: str, data: bytes) -> None:
    """Writes `data` to `path` atomically (a reader sees the old content or the new, never a part)."""
    if is_url(path):
        fs, p = _fs(path)
        fs.pipe_file(p, data)  # one PUT: object stores publish whole objects only
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


def join(base: str, *parts: str) -> str:
    """`base` / parts, with "/" for URLs and the OS separator for local paths."""
    if is_url(base):
        return "/".join([base.rstrip("/")] + [p.strip("/") for p in parts])
    return os.path.join(base, *parts)
