"""Logdir scanning: runs (directories holding traces), workers and spans from the file names.

A run is any directory under the logdir (recursively) holding trace files, named by its path
relative to the logdir; the logdir's own traces form the run named after the logdir's folder (`root_run_name`:
"job" for `--logdir runs/job`; "." only where the logdir has no name or a sub-folder's run already has it). File
names follow
`{worker}.{ns or ms timestamp}.pt.trace.json[.gz]`; the timestamp may be missing, and plain
`{worker}[.{timestamp}].json[.gz]` files count when their first bytes look like a trace. Spans
are numbered "1".."N" per worker in time order. A file is listed only once it is stable (same
size and mtime on two scans, or untouched for `stable_age_s`), so a trace being written is never
read half-way (on object stores, where an object appears only once whole, at once); hidden and
temporary names are ignored. The logdir may be an fsspec URL (`s3://bucket/prefix`, ...): files are
then listed through `profiler_core.storage` in one recursive listing per scan, and a listing that
fails leaves the previous runs in place and its reason in `Scanner.error`.
"""

from __future__ import annotations

import gzip
import os
import re
import threading
import time
import zlib
from dataclasses import dataclass, field, replace

from profiler_core import storage
from profiler_core.trace.read.fused import maybe_fused, part_path, split_path

TRACE_RE = re.compile(r"^(?P<worker>.+?)(?:\.(?P<stamp>\d+))?\.pt\.trace\.json(?:\.gz)?$")
PLAIN_RE = re.compile(r"^(?P<worker>.+?)(?:\.(?P<stamp>\d+))?\.json(?:\.gz)?$")
_TEMP_PARTS = frozenset({"tmp", "temp", "part", "partial", "swp", "crdownload", "incomplete"})
STABLE_AGE_S = 2.0
#: below this a numeric file-name stamp is milliseconds since the epoch, above it nanoseconds
_MS_LIMIT = 10**14


#: `/runs?wait=` long polls that may wait at once (each holds a server thread); beyond it one answers at once
MAX_WAITERS = 16
_waiters_lock = threading.Lock()
_waiters = 0


def enter_wait() -> bool:
    """Takes one of the MAX_WAITERS places of a long poll; False (answer at once) when all are taken."""
    global _waiters
    with _waiters_lock:
        if _waiters >= MAX_WAITERS:
            return False
        _waiters += 1
        return True


def leave_wait() -> None:
    """Gives back the place `enter_wait` took."""
    global _waiters
    with _waiters_lock:
        _waiters -= 1


def waiting() -> int:
    """How many long polls wait now."""
    return _waiters


@dataclass(frozen=True)
class TraceFile:
    """One trace file found by a scan."""

    path: str  # absolute path, or the URL of a remote file
    relpath: str  # path relative to the logdir, "/"-separated (for messages)
    run: str
    worker: str
    stamp_ns: int  # the file-name timestamp in ns, or the mtime when the name has none
    size: int
    mtime_ns: int
    version: str = ""  # a remote object's ETag (or generation); "" for a local file
    #: a local file's `identity.file_identity` (inode and ctime tell a replaced file apart)
    ident: tuple = ()

    @property
    def file_path(self) -> str:
        """The path of the file itself (a fused file's rank part has a path of its own, `fused.part_path`)."""
        return split_path(self.path)[0]

    @property
    def key(self) -> tuple:
        """Identity of this file's content: it changes when the file is rewritten or replaced."""
        if self.version:
            return (self.path, self.size, self.mtime_ns, self.version) + self.ident
        return (self.path, self.size, self.mtime_ns) + self.ident


@dataclass
class Run:
    """A directory of traces: worker -> its files in time order (span "1" first)."""

    name: str
    workers: dict[str, list[TraceFile]] = field(default_factory=dict)

    def spans(self, worker: str) -> list[str]:
        return [str(i + 1) for i in range(len(self.workers.get(worker, [])))]

    def file(self, worker: str, span: str) -> TraceFile | None:
        files = self.workers.get(worker)
        if not files or not (span.isascii() and span.isdigit()) or len(span) > 18:
            return None  # "²" passes isdigit() alone and then fails int()
        i = int(span) - 1
        return files[i] if 0 <= i < len(files) else None

    def files(self) -> list[TraceFile]:
        return [f for fs in self.workers.values() for f in fs]


def display_name(name: str) -> str:
    """`name` as valid text, and never another name's: bytes that are not UTF-8 (kept by the OS as
    surrogates) are written as `\\xNN` escapes, so a folder or file with such a name is listed instead of
    breaking the JSON answers, and a backslash as `\\\\`, so that the folder named `run\\xff` (the text) is
    listed apart from the folder of the byte 0xff (`run\\\\xff` and `run\\xff`). A name with neither is
    itself. The scan maps the escaped name back to the file."""
    if "\\" not in name:
        try:
            name.encode("utf-8")
            return name
        except UnicodeEncodeError:
            pass
    return _ESCAPED.sub(_escape, name)


#: what `display_name` escapes: a backslash and lone surrogates
_ESCAPED = re.compile("[\\\\\ud800-\udfff]")


def _escape(m: re.Match) -> str:
    o = ord(m.group())
    if o == 0x5C:
        return "\\\\"
    return f"\\x{o - 0xDC00:02x}" if 0xDC80 <= o <= 0xDCFF else f"\\u{o:04x}"


def parse_name(name: str) -> tuple[str, int | None] | None:
    """(worker, timestamp in ns or None) for a trace file name, or None if it is not one."""
    if name.startswith(".") or name.endswith("~") or _TEMP_PARTS & set(name.lower().split(".")):
        return None
    m = TRACE_RE.match(name) or PLAIN_RE.match(name)
    if m is None:
        return None
    stamp = m.group("stamp")
    if stamp is None:
        return m.group("worker"), None
    value = int(stamp)
    return m.group("worker"), value * 1_000_000 if value < _MS_LIMIT else value


_EXECUTION_TRACE_RE = re.compile(rb'"nodes"\s*:\s*\[')


def _head(path: str) -> bytes | None:
    """The first 64 KiB of the file's JSON (gunzipped), None when it cannot be read."""
    try:
        if storage.is_remote(path):
            head = storage.read_range(path, 0, 65536)
        else:
            with open(path, "rb") as f:
                head = f.read(65536)
        if head[:2] == b"\x1f\x8b":
            head = zlib.decompressobj(31).decompress(head, 65536)
    except (OSError, zlib.error, EOFError, gzip.BadGzipFile):
        return None
    return head


def looks_like_trace(path: str, head: bytes | None = None) -> bool:
    """Cheap sniff of a plain .json file: does its beginning look like a chrome trace, or like a PyTorch
    execution trace (listed, so that the reader says why it cannot be opened, instead of ignored)?"""
    head = _head(path) if head is None else head
    if head is None:
        return True  # unreadable: let the reader report why
    text = head.lstrip()
    if text[:1] == b"{":
        if _EXECUTION_TRACE_RE.search(head) and b'"schema"' in head:
            return True
        return b'"traceEvents"' in head or len(head) >= 65536 and b'"ph"' in head
    return text[:1] == b"[" and (b'"ph"' in head or len(text) < 3)


def root_run_name(logdir: str) -> str:
    """The name of the run of the traces directly in `logdir`: its last path component, so a run folder opened as
    the logdir is named as it is when its parent is; "." when it has none (the file system's root, a bucket)."""
    if storage.is_remote(logdir):
        rest = logdir[len(storage.protocol(logdir)) + 3 :].rstrip("/")
        name = rest.rpartition("/")[2] if "/" in rest else ""
    else:
        name = os.path.basename(logdir.rstrip(os.sep))
    return display_name(name) if name and name not in (".", "..") else "."


class Scanner:
    """Scans a logdir; remembers the previous scan to tell stable files from growing ones."""

    def __init__(self, logdir: str, stable_age_s: float = STABLE_AGE_S) -> None:
        self.logdir = storage.normalize_root(logdir) if logdir else ""
        self.remote = storage.is_remote(self.logdir)
        self.stable_age_s = 0.0 if storage.is_object_store(self.logdir) else stable_age_s
        self._seen: dict[str, tuple] = {}
        self._sniffed: dict[tuple, bool] = {}
        self._ranks: dict[tuple, list[int]] = {}  # per file version: its ranks when it is a fused file, else []
        self._last: dict[str, Run] = {}
        self.unstable = 0  # files seen but not listed yet because they may still be written
        self.error: str | None = None  # why the last listing of a remote logdir failed

    def _candidates(self):
        """(file info, (worker, stamp)) of every trace-like file name under the logdir."""
        if not self.logdir:
            return
        for info in storage.walk_files(self.logdir, accept=lambda n: parse_name(n) is not None):
            yield info, parse_name(storage.split(info.path)[1])

    def scan(self) -> dict[str, Run]:
        """Runs found now (only stable files), sorted by name. A remote listing that fails keeps
        the previous runs and sets `error` (a message without credentials)."""
        try:
            runs = self._scan()
        except OSError as e:
            if not self.remote:
                raise
            self.error = storage.redact(str(e))
            return self._last
        self.error = None
        self._last = runs
        return runs

    def _scan(self) -> dict[str, Run]:
        now_ns = time.time_ns()
        seen: dict[str, tuple] = {}
        found: dict[str, Run] = {}
        unstable = 0
        for st, (worker, stamp) in self._candidates():
            path = st.path
            root, name = storage.split(path)
            sig = (st.size, st.mtime_ns, st.version)
            seen[path] = sig
            old = self._seen.get(path) == sig
            if not old and now_ns - st.mtime_ns < self.stable_age_s * 1e9:
                unstable += 1
                continue
            key = (path,) + sig
            plain = not TRACE_RE.match(name)
            if key not in self._ranks and (plain or not self.remote):
                head = _head(path)
                if plain:
                    self._sniffed[key] = looks_like_trace(path, head)
                self._ranks[key] = self._fused_ranks(path) if head is not None and maybe_fused(head) else []
            if plain and not self._sniffed.get(key, True):
                continue
            run_name = display_name(storage.relpath(root, self.logdir))
            rel = display_name(storage.relpath(path, self.logdir))
            worker = display_name(worker)
            ranks = self._ranks.get(key) or [None]
            for r in ranks:  # a fused file: a worker per rank, its part of the file named by a path of its own
                f = TraceFile(
                    path=path if r is None else part_path(path, r),
                    relpath=rel if r is None else part_path(rel, r),
                    run=run_name,
                    worker=worker if r is None else f"{worker}_rank{r}",
                    stamp_ns=stamp if stamp is not None else st.mtime_ns,
                    size=st.size,
                    mtime_ns=st.mtime_ns,
                    version=st.version,
                    ident=st.ident,
                )
                found.setdefault(run_name, Run(run_name)).workers.setdefault(f.worker, []).append(f)
        root = root_run_name(self.logdir)
        if "." in found and root not in found:
            run = found.pop(".")
            run.name = root
            run.workers = {w: [replace(f, run=root) for f in fs] for w, fs in run.workers.items()}
            found[root] = run
        for run in found.values():
            for files in run.workers.values():
                files.sort(key=lambda f: (f.stamp_ns, f.relpath))
        self._seen = seen
        self._sniffed = {k: v for k, v in self._sniffed.items() if k[0] in seen}
        self._ranks = {k: v for k, v in self._ranks.items() if k[0] in seen}
        self.unstable = unstable
        return dict(sorted(found.items()))

    @staticmethod
    def _fused_ranks(path: str) -> list[int]:
        """The ranks of a file whose first bytes look fused: one read of the whole file (through the parse cache,
        kept for the reads of its parts); [] when it is not fused or cannot be read (the loader says why)."""
        from profiler_core import settings
        from profiler_core.trace.read.reader import fused_ranks

        try:
            return fused_ranks(path, use_cache=bool(settings.get("GPUSCOPE_CACHE")))
        except Exception:  # noqa: BLE001 - listed as one file: its read reports the reason
            return []

    def has_traces(self) -> bool:
        """Whether any trace-like file name exists under the logdir (stops at the first); True for
        a remote logdir that cannot be listed, so that the plugin's page says why."""
        try:
            for _ in self._candidates():
                return True
        except OSError as e:
            if not self.remote:
                raise
            self.error = storage.redact(str(e))
            return True
        return False
