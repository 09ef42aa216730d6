"""Logdir scanning: runs (directories holding traces), workers and spans from the file names.

A run is any directory under the logdir (recursively) holding trace files, named by its path
relative to the logdir ("." for the logdir itself). File names follow
`{worker}.{ns or ms timestamp}.pt.trace.json[.gz]`; the timestamp may be missing, and plain
`{worker}[.{timestamp}].json[.gz]` files count when their first bytes look like a trace. Spans
are numbered "1".."N" per worker in time order. A file is listed only once it is stable (same
size and mtime on two scans, or untouched for `stable_age_s`), so a trace being written is never
read half-way; hidden and temporary names are ignored.
"""
from __future__ import annotations

import gzip
import os
import re
import time
import zlib
from dataclasses import dataclass, field

TRACE_RE = re.compile(r"^(?P<worker>.+?)(?:\.(?P<stamp>\d+))?\.pt\.trace\.json(?:\.gz)?$")
PLAIN_RE = re.compile(r"^(?P<worker>.+?)(?:\.(?P<stamp>\d+))?\.json(?:\.gz)?$")
_TEMP_PARTS = frozenset({"tmp", "temp", "part", "partial", "swp", "crdownload", "incomplete"})
STABLE_AGE_S = 2.0
#: below this a numeric file-name stamp is milliseconds since the epoch, above it nanoseconds
_MS_LIMIT = 10 ** 14


@dataclass(frozen=True)
class TraceFile:
    """One trace file found by a scan."""

    path: str          # absolute path
    relpath: str       # path relative to the logdir, "/"-separated (for messages)
    run: str
    worker: str
    stamp_ns: int      # the file-name timestamp in ns, or the mtime when the name has none
    size: int
    mtime_ns: int

    @property
    def key(self) -> tuple:
        """Identity of this file's content: it changes when the file is rewritten."""
        return (self.path, self.size, self.mtime_ns)


@dataclass
class Run:
    """A directory of traces: worker -> its files in time order (span "1" first)."""

    name: str
    workers: dict[str, list[TraceFile]] = field(default_factory=dict)

    def spans(self, worker: str) -> list[str]:
        return [str(i + 1) for i in range(len(self.workers.get(worker, [])))]

    def file(self, worker: str, span: str) -> TraceFile | None:
        files = self.workers.get(worker)
        if not files or not span.isdigit():
            return None
        i = int(span) - 1
        return files[i] if 0 <= i < len(files) else None

    def files(self) -> list[TraceFile]:
        return [f for fs in self.workers.values() for f in fs]


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


def looks_like_trace(path: str) -> bool:
    """Cheap sniff of a plain .json file: does its beginning look like a chrome trace?"""
    try:
        with open(path, "rb") as f:
            head = f.read(65536)
        if head[:2] == b"\x1f\x8b":
            head = zlib.decompressobj(31).decompress(head, 65536)
    except (OSError, zlib.error, EOFError, gzip.BadGzipFile):
        return True  # unreadable: let the reader report why
    text = head.lstrip()
    if text[:1] == b"{":
        return b'"traceEvents"' in head or len(head) >= 65536 and b'"ph"' in head
    return text[:1] == b"[" and (b'"ph"' in head or len(text) < 3)


class Scanner:
    """Scans a logdir; remembers the previous scan to tell stable files from growing ones."""

    def __init__(self, logdir: str, stable_age_s: float = STABLE_AGE_S) -> None:
        self.logdir = os.path.abspath(logdir) if logdir else ""
        self.stable_age_s = stable_age_s
        self._seen: dict[str, tuple[int, int]] = {}
        self._sniffed: dict[tuple, bool] = {}
        self.unstable = 0  # files seen but not listed yet because they may still be written

    def _candidates(self):
        if not self.logdir or not os.path.isdir(self.logdir):
            return
        # symlinked run folders are followed (as torch-tb-profiler does); a folder reached twice
        # (a link cycle, or two links to one place) is walked once
        visited: set[tuple[int, int]] = set()
        for root, dirs, names in os.walk(self.logdir, followlinks=True):
            try:
                st = os.stat(root)
            except OSError:
                dirs[:] = []
                continue
            if (st.st_dev, st.st_ino) in visited:
                dirs[:] = []
                continue
            visited.add((st.st_dev, st.st_ino))
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(names):
                parsed = parse_name(name)
                if parsed is not None:
                    yield root, name, parsed

    def scan(self) -> dict[str, Run]:
        """Runs found now (only stable files), sorted by name."""
        now_ns = time.time_ns()
        seen: dict[str, tuple[int, int]] = {}
        found: dict[str, Run] = {}
        unstable = 0
        for root, name, (worker, stamp) in self._candidates():
            path = os.path.join(root, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            if not os.path.isfile(path):
                continue
            sig = (st.st_size, st.st_mtime_ns)
            seen[path] = sig
            old = self._seen.get(path) == sig
            if not old and now_ns - st.st_mtime_ns < self.stable_age_s * 1e9:
                unstable += 1
                continue
            if not TRACE_RE.match(name):
                key = (path,) + sig
                if key not in self._sniffed:
                    self._sniffed[key] = looks_like_trace(path)
                if not self._sniffed[key]:
                    continue
            rel_dir = os.path.relpath(root, self.logdir)
            run_name = "." if rel_dir == "." else rel_dir.replace(os.sep, "/")
            rel = os.path.relpath(path, self.logdir).replace(os.sep, "/")
            f = TraceFile(path=path, relpath=rel, run=run_name, worker=worker,
                          stamp_ns=stamp if stamp is not None else st.st_mtime_ns,
                          size=st.st_size, mtime_ns=st.st_mtime_ns)
            found.setdefault(run_name, Run(run_name)).workers.setdefault(worker, []).append(f)
        for run in found.values():
            for files in run.workers.values():
                files.sort(key=lambda f: (f.stamp_ns, f.relpath))
        self._seen = seen
        self._sniffed = {k: v for k, v in self._sniffed.items() if k[0] in seen}
        self.unstable = unstable
        return dict(sorted(found.items()))

    def has_traces(self) -> bool:
        """Whether any trace-like file name exists under the logdir (stops at the first)."""
        for _ in self._candidates():
            return True
        return False
