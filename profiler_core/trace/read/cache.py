"""On-disk cache of parsed traces, so that a second open of a big trace takes well under a second.

Entries live in `$GPUSCOPE_CACHE_DIR` (default `~/.cache/gpuscope`), never next to the user's
files, keyed by the trace's absolute path, its `storage.fingerprint` (a local file: size, mtime,
inode, device, ctime from `identity.file_identity`; a remote trace: its URL, size and ETag, or
mtime where the store has no ETag) and `FORMAT_VERSION`. They are data only (`cache_format`:
numpy buffers and a msgpack header), so reading an entry, even one planted by someone else, never
runs code. The directory is created 0700; one owned by another user is refused (a warning, no
cache). A corrupt or stale entry is ignored, removed and rewritten; files of the old pickle
format (`*.trace.pkl`) are never opened, only removed by `trim`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import stat
import time
from pathlib import Path

from profiler_core import safe_open, settings, storage
from profiler_core.trace.model import TraceData
from profiler_core.trace.read import cache_format

log = logging.getLogger(__name__)

#: bump when TraceData's columns or the reader's semantics change
#: (2: pg_name column, torch 1.8 `Input dims`; 3: data-only entries keyed on the file's identity;
#: 5: pre-Kineto exports' events as cpu_op/kernel; 6: graph_id, graph_node_id; 7: the columns and
#: spellings of trace/event_args.py: `external id` on ops, columns in Kineto's key order; 8: the sparse args
#: (`TraceData.sparse`, trace/sparse.py) stored as row positions and values)
FORMAT_VERSION = 8
SUFFIX = ".trace.gpc"
#: entries of the old format (pickles): never read, removed by trim
_OLD_SUFFIX = ".trace.pkl"
#: total size the cache directory may grow to before old entries are removed
MAX_BYTES = settings.get("GPUSCOPE_CACHE_MAX_BYTES")
#: a temporary entry file older than this was left by a killed process
STALE_TEMPORARY_S = 3600
_warned: set = set()


def cache_dir() -> Path:
    """The cache directory ($GPUSCOPE_CACHE_DIR or ~/.cache/gpuscope)."""
    env = settings.get("GPUSCOPE_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "gpuscope"


def _key(path: str, st: storage.FileInfo) -> list:
    """The entry's key: what the trace is and which version of it (one place: the fingerprint)."""
    if storage.is_remote(path):  # a remote object: its URL, size and ETag (or mtime)
        return [path, st.size, st.version, FORMAT_VERSION]
    return [_key_path(os.path.abspath(path)), *st.fingerprint, FORMAT_VERSION]


def _key_path(path: str) -> str | bytes:
    """`path` as stored in a key: its bytes when it is not valid UTF-8 (an undecodable name)."""
    try:
        path.encode("utf-8")
        return path
    except UnicodeEncodeError:
        return os.fsencode(path)


def _stat(path: str) -> storage.FileInfo:
    """Size, mtime and identity (a local file) or version (a remote one) of the trace."""
    return storage.stat(path)


def entry_path(path: str | os.PathLike, st: storage.FileInfo | None = None) -> Path:
    """Where the cache entry of the trace at `path` (as it is now on disk) lives."""
    path = os.fspath(path)
    st = st or _stat(path)
    digest = hashlib.sha256(repr(_key(path, st)).encode()).hexdigest()[:32]
    return cache_dir() / f"{digest}{SUFFIX}"


def _uid() -> int | None:
    return os.getuid() if hasattr(os, "getuid") else None


def _refuse(d: Path, why: str) -> None:
    if str(d) not in _warned:
        _warned.add(str(d))
        log.warning(
            "gpuscope: not using the trace cache %s: %s (set GPUSCOPE_CACHE_DIR to a "
            "directory of your own, or GPUSCOPE_CACHE=0)",
            d,
            why,
        )


def usable_dir(create: bool = False) -> Path | None:
    """The cache directory if it is ours to use (created 0700 when `create`), else None.

    A directory owned by another user, or one others may write into, is refused with a warning:
    its entries could have been put there by someone else."""
    d = cache_dir()
    try:
        if create and not d.exists():
            d.parent.mkdir(parents=True, exist_ok=True)
            try:
                d.mkdir(mode=0o700)
            except FileExistsError:
                pass
        st = d.stat()
    except FileNotFoundError:
        return None
    except OSError as e:
        _refuse(d, e.strerror or str(e))
        return None
    if not stat.S_ISDIR(st.st_mode):
        _refuse(d, "not a directory")
        return None
    uid = _uid()
    if uid is not None:
        if st.st_uid != uid:
            _refuse(d, f"it is owned by another user (uid {st.st_uid})")
            return None
        if st.st_mode & 0o077:
            try:  # ours, but open to others (made 0755 by an older version, or 0777)
                os.chmod(d, 0o700)
            except OSError as e:
                if st.st_mode & 0o022:  # others may plant entries: refuse
                    _refuse(d, f"others may write into it and it cannot be made private ({e})")
                    return None
    return d


def _open_entry(entry: Path):
    """Open a cache file for reading only if it is a regular file of ours (never a link, and
    never waiting on a FIFO or device planted at its name)."""
    uid = _uid()
    f, st = safe_open.open_regular(entry, follow=False, owners=None if uid is None else (uid,))
    return f, st.st_size


def load(path: str | os.PathLike) -> TraceData | None:
    """The cached TraceData of `path` if a valid entry for its current version exists."""
    path = os.fspath(path)
    try:
        st = _stat(path)
    except OSError:
        return None
    if usable_dir() is None:
        return None
    entry = entry_path(path, st)
    try:
        f, size = _open_entry(entry)
        with f:
            t = cache_format.load(f, size, _key(path, st))
    except FileNotFoundError:
        return None
    except Exception as e:  # noqa: BLE001 - any damage means: drop the entry and re-parse
        log.warning("gpuscope: ignoring corrupt cache entry %s (%s)", entry, e)
        _remove(entry)
        return None
    t.path = path
    try:
        os.utime(entry)  # recently used: keep it when trimming
    except OSError:
        pass
    return t


def store(path: str | os.PathLike, t: TraceData) -> Path | None:
    """Write `t` as the cache entry of `path` (atomically); returns the entry or None on failure."""
    path = os.fspath(path)
    try:
        st = _stat(path)
        if tuple(t.source_stat) not in ((-1, -1), st.fingerprint):
            return None  # the file changed while it was parsed: don't cache stale data
        if usable_dir(create=True) is None:
            return None
        entry = entry_path(path, st)
        if isinstance(_key_path(t.path), bytes):  # the entry's copy of the path is text
            t = dataclasses.replace(t, path=os.fsencode(t.path).decode("utf-8", "replace"))
        with storage.write_beside(str(entry), mode=0o600) as f:
            cache_format.dump(f, _key(path, st), t)
    except Exception as e:  # noqa: BLE001 - a cache that cannot be written is not an error
        log.warning("gpuscope: cannot write trace cache for %s (%s)", storage.redact(path), storage.redact(str(e)))
        return None
    trim()
    return entry


def trim(max_bytes: int | None = None) -> int:
    """Drop entries of traces that no longer exist, then least recently used entries until the
    cache is under `max_bytes`; returns how many entries were removed."""
    limit = MAX_BYTES if max_bytes is None else max_bytes
    entries = []
    removed = 0
    d = usable_dir()
    if d is None:
        return 0
    try:
        paths = list(d.glob("*" + SUFFIX))
        old = list(d.glob("*" + _OLD_SUFFIX))
        temporary = list(d.glob(f".*{SUFFIX}.*.tmp"))
    except OSError:
        return 0
    for p in old:  # the old pickle format: never opened, only removed
        _remove(p)
        removed += 1
    for p in temporary:  # left by a process killed while it wrote (storage.write_beside)
        with contextlib.suppress(OSError):
            if time.time() - p.stat().st_mtime > STALE_TEMPORARY_S:
                _remove(p)
    for p in paths:
        try:
            st = p.stat()
        except OSError:
            continue
        source = _source_of(p)
        if source is not None and not storage.is_remote(source) and not os.path.exists(source):
            _remove(p)
            removed += 1
            continue
        entries.append((st.st_mtime, st.st_size, p))
    total = sum(size for _, size, _ in entries)
    for _, size, p in sorted(entries):
        if total <= limit:
            break
        _remove(p)
        total -= size
        removed += 1
    return removed


def _source_of(entry: Path) -> str | None:
    """The trace path an entry was made from (read from its small header), or None."""
    try:
        f, _ = _open_entry(entry)
        with f:
            key = cache_format.read_key(f)
        return key[0] if isinstance(key, list) and key and isinstance(key[0], str) else None
    except Exception:  # noqa: BLE001 - unreadable header: leave it to the size limit
        return None


def _remove(p: Path) -> None:
    try:
        p.unlink()
    except OSError:
        pass
