"""On-disk cache of parsed traces, so that a second open of a big trace takes well under a second.

Entries live in `$GPUSCOPE_CACHE_DIR` (default `~/.cache/gpuscope`), never next to the user's
files, keyed by the trace's absolute path, size, mtime and `FORMAT_VERSION` (a remote trace: its
URL, size and ETag, or mtime where the store has no ETag; see `profiler_core.storage`); they are pickles
(protocol 5) of `TraceData`. A corrupt or stale entry is ignored, removed and rewritten.
"""
from __future__ import annotations

import hashlib
import logging
import os
import pickle
import tempfile
from pathlib import Path

from profiler_core import storage
from profiler_core.trace.malloc_tuning import tune_for_views
from profiler_core.trace.model import TraceData

log = logging.getLogger(__name__)

#: bump when TraceData's columns or the reader's semantics change
FORMAT_VERSION = 1
_MAGIC = b"GPUSCOPE-TRACE-CACHE\n"
#: total size the cache directory may grow to before old entries are removed
MAX_BYTES = int(os.environ.get("GPUSCOPE_CACHE_MAX_BYTES", str(8 << 30)))


def cache_dir() -> Path:
    """The cache directory ($GPUSCOPE_CACHE_DIR or ~/.cache/gpuscope)."""
    env = os.environ.get("GPUSCOPE_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "gpuscope"


def _key(path: str, st: "os.stat_result | storage.FileInfo") -> tuple:
    if isinstance(st, storage.FileInfo):  # a remote object: its URL, size and ETag (or mtime)
        return (path, st.size, st.version, FORMAT_VERSION)
    return (os.path.abspath(path), st.st_size, st.st_mtime_ns, FORMAT_VERSION)


def _stat(path: str) -> "os.stat_result | storage.FileInfo":
    """os.stat of a local file; storage.stat (size, mtime, version) of a remote one."""
    return storage.stat(path) if storage.is_remote(path) else os.stat(path)


def _fingerprint(st: "os.stat_result | storage.FileInfo") -> tuple:
    return st.fingerprint if isinstance(st, storage.FileInfo) else (st.st_size, st.st_mtime_ns)


def entry_path(path: str | os.PathLike, st: "os.stat_result | storage.FileInfo | None" = None) -> Path:
    """Where the cache entry of the trace at `path` (as it is now on disk) lives."""
    path = os.fspath(path)
    st = st or _stat(path)
    digest = hashlib.sha256(repr(_key(path, st)).encode()).hexdigest()[:32]
    return cache_dir() / f"{digest}.trace.pkl"


def load(path: str | os.PathLike) -> TraceData | None:
    """The cached TraceData of `path` if a valid entry for its current size and mtime exists."""
    path = os.fspath(path)
    try:
        st = _stat(path)
    except OSError:
        return None
    entry = entry_path(path, st)
    try:
        with open(entry, "rb") as f:
            if f.read(len(_MAGIC)) != _MAGIC:
                raise ValueError("bad magic")
            key = pickle.load(f)
            if key != _key(path, st):
                raise ValueError("key mismatch")
            t = pickle.load(f)
        if not isinstance(t, TraceData):
            raise ValueError("not a TraceData")
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
    tune_for_views()  # as after a parse: the views' temporaries reuse kept heap memory
    return t


def store(path: str | os.PathLike, t: TraceData) -> Path | None:
    """Write `t` as the cache entry of `path` (atomically); returns the entry or None on failure."""
    path = os.fspath(path)
    try:
        st = _stat(path)
        if t.source_stat not in ((-1, -1), _fingerprint(st)):
            return None  # the file changed while it was parsed: don't cache stale data
        entry = entry_path(path, st)
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".tmp-", suffix=".pkl")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_MAGIC)
                pickle.dump(_key(path, st), f, protocol=5)
                pickle.dump(t, f, protocol=5)
            os.replace(tmp, entry)
        except BaseException:
            _remove(Path(tmp))
            raise
    except Exception as e:  # noqa: BLE001 - a cache that cannot be written is not an error
        log.warning("gpuscope: cannot write trace cache for %s (%s)", storage.redact(path),
                    storage.redact(str(e)))
        return None
    trim()
    return entry


def read_trace_cached(path: str | os.PathLike) -> TraceData:
    """`read_trace` through the cache: a cached parse when valid, else parse and store."""
    from profiler_core.trace.reader import read_trace

    t = load(path)
    if t is None:
        t = read_trace(path)
        store(path, t)
    return t


def trim(max_bytes: int | None = None) -> int:
    """Drop entries of traces that no longer exist, then least recently used entries until the
    cache is under `max_bytes`; returns how many entries were removed."""
    limit = MAX_BYTES if max_bytes is None else max_bytes
    entries = []
    removed = 0
    try:
        paths = list(cache_dir().glob("*.trace.pkl"))
    except OSError:
        return 0
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
        with open(entry, "rb") as f:
            if f.read(len(_MAGIC)) != _MAGIC:
                return None
            key = pickle.load(f)
        return key[0] if isinstance(key, tuple) and key and isinstance(key[0], str) else None
    except Exception:  # noqa: BLE001 - unreadable header: leave it to the size limit
        return None


def _remove(p: Path) -> None:
    try:
        p.unlink()
    except OSError:
        pass
