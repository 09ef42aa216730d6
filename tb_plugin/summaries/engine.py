"""The plugin's summaries: found in the logdir's `.gpuscope/summaries/`, else in the cache, else
computed (from an already loaded trace, on a Dask scheduler when one is configured, or on a
background thread reading the file) and kept in the cache.

Nothing here holds a parsed trace longer than one summary's computation.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import msgspec

from profiler_core import settings
from profiler_core.identity import portable_identity
from tb_plugin.errors import LoadFailed
from tb_plugin.summaries import fs, store
from tb_plugin.summaries.answers import Answers
from tb_plugin.summaries.schema import Source, Summary
from tb_plugin.summaries.summary import encode, source_fields, summarize, summarize_path

log = logging.getLogger(__name__)

#: summaries kept in memory (each a few hundred KB at most)
MEMORY_ENTRIES = settings.get("GPUSCOPE_SUMMARY_MEMORY")
IO_THREADS = 16
#: a summary read from a stored file is checked against that file's identity again on each look-up (a local file:
#: one stat), a remote one at most every REMOTE_RECHECK_S: a summary replaced on disk (`gpuscope summarize
#: --force`) is read again
REMOTE_RECHECK_S = 10.0


def _file_id(path: str) -> tuple | None:
    """What tells a stored summary file's content apart (None when it is not there or cannot be stat-ed)."""
    try:
        if fs.is_url(path):
            st = fs.stat(path)
            return (st.size, st.mtime_ns, st.etag)
        s = os.stat(path)
        return (s.st_size, s.st_mtime_ns, s.st_ino, s.st_dev, s.st_ctime_ns)
    except (OSError, ValueError):
        return None


def source_of(f: Any) -> fs.Stat:
    """The identity of a scanned trace file (size, mtime, etag when the store gives one)."""
    return fs.Stat(
        int(f.size), int(f.mtime_ns), str(getattr(f, "version", "") or ""), portable_identity(getattr(f, "ident", ()))
    )


def summarize_bytes(path: str) -> bytes:
    """Dask task: read one trace file straight from its storage, return only its summary's file bytes."""
    return encode(summarize_path(path))


#: what a failed file reports in a run-level answer: {"worker", "file", "error"}
Failure = dict[str, str]


@dataclass(frozen=True)
class Ready:
    """Every worker's summary of a run and span exists: worker -> summary, and the workers whose file failed."""

    summaries: dict[str, Summary]
    errors: list[Failure]

    def require(self) -> Ready:
        """Itself; LoadFailed naming each file when every worker failed (nothing to answer from)."""
        if not self.summaries:
            raise LoadFailed("; ".join(f"{e['file']}: {e['error']}" for e in self.errors))
        return self


@dataclass(frozen=True)
class Pending:
    """Some summaries are still being computed (started in the background): those there are now, the failed
    files, and the workers still read."""

    summaries: dict[str, Summary]
    errors: list[Failure]
    pending: list[str]


def pending_answer(states: Sequence[Ready | Pending], runs: Sequence[str] | None = None) -> dict:
    """The answer of a run-level route while summaries are missing: `{"pending", "progress": {"done", "total"}}`;
    with `runs` (one per state: several runs asked at once) `pending` holds `{"run", "worker"}` objects."""
    pending: list = []
    total = 0
    for i, st in enumerate(states):
        waiting = st.pending if isinstance(st, Pending) else []
        total += len(st.summaries) + len(st.errors) + len(waiting)
        pending += waiting if runs is None else [{"run": runs[i], "worker": w} for w in waiting]
    return {"pending": pending, "progress": {"done": total - len(pending), "total": total}}


class Summaries:
    """Summaries of the trace files of one logdir, for the run-level views."""

    def __init__(self, logdir: str, scheduler: str | None = None, threads: int = 1) -> None:
        self.logdir = logdir
        self.scheduler = scheduler or None
        self._pool = ThreadPoolExecutor(max(1, threads), thread_name_prefix="gpuscope-summary")
        # finding stored summaries is I/O (one or two small reads each, remote ones slow): in parallel
        self._io = ThreadPoolExecutor(IO_THREADS, thread_name_prefix="gpuscope-summary-io")
        self._lock = threading.Lock()
        self._memory: OrderedDict[tuple, Summary] = OrderedDict()
        # per file key in memory read from a stored summary: (its path, its identity then, when it was checked)
        self._origin: dict[tuple, tuple[str, tuple, float]] = {}
        # id() of each summary in memory -> its identity (`token`); entries leave with their summary
        self._tokens: dict[int, tuple] = {}
        self._serial = itertools.count()
        self.answers = Answers()  # the run-level answers of these summaries (`answers.answer`)
        self._pending: dict[tuple, Future] = {}
        self._failed: dict[tuple, BaseException] = {}  # files whose summary failed (until they change)
        self._client: Any = None
        self.computed = 0  # how many summaries this process computed (tests, benchmarks)

    # ------------------------------------------------------------------ look-ups
    def find(self, f: Any) -> Summary | None:
        """A stored valid summary of `f` (memory, logdir's hidden folder, cache), or None."""
        s = self._recall(f)
        if s is not None:
            return s
        src = source_of(f)
        found = self._stored(f, src)
        if found is None:
            return None
        s, origin = found
        return self._remember(f.key, s, origin)

    def _recall(self, f: Any) -> Summary | None:
        """The summary of `f` in memory, unless the stored file it was read from changed since (then forgotten)."""
        with self._lock:
            s = self._memory.get(f.key)
            if s is None:
                return None
            self._memory.move_to_end(f.key)
            origin = self._origin.get(f.key)
        if origin is None:
            return s
        path, ident, checked = origin
        now = time.monotonic()
        if fs.is_url(path) and now - checked < REMOTE_RECHECK_S:
            return s
        same = _file_id(path) == ident
        with self._lock:
            if self._memory.get(f.key) is not s:  # replaced meanwhile: look again
                return self._memory.get(f.key)
            if same:
                self._origin[f.key] = (path, ident, now)
                return s
            self._drop(f.key)
        return None

    def token(self, s: Any) -> tuple | None:
        """The identity of the summary `s` (held by the caller) while it is in memory: the stored file it was read
        from (path and file identity), or the computation that made it; None once it left memory."""
        with self._lock:
            return self._tokens.get(id(s))

    def _stored(self, f: Any, src: fs.Stat) -> tuple[Summary, tuple] | None:
        """The summary of `f` from the logdir's hidden folder (only where it and its folders belong
        to this user or to the trace's owner), else from the cache (only where it is ours), and
        (its path, that file's identity before it was read)."""
        hidden = store.out_path(store.default_out(self.logdir), f.relpath)
        ident = _file_id(hidden)
        if ident is None:
            s = None
        elif fs.is_url(hidden):
            s = store.read(hidden, src)
        else:
            owners = {os.getuid()} if hasattr(os, "getuid") else None
            if owners is not None:
                try:
                    owners.add(os.stat(f.path).st_uid)
                except OSError:
                    pass
            s = store.read(hidden, src, trusted_top=fs.join(self.logdir, store.HIDDEN_DIR), owners=owners)
        if s is not None:
            return s, (hidden, ident)
        from profiler_core.trace.read.cache import cache_dir

        cached = store.cache_path(f.path, src)
        ident = _file_id(cached)
        s = None if ident is None else store.read(cached, src, trusted_top=str(cache_dir()))
        return None if s is None else (s, (cached, ident))

    def failure(self, f: Any) -> BaseException | None:
        """Why the summary of `f` failed (until the file changes), or None."""
        with self._lock:
            return self._failed.get(f.key)

    def _remember(self, key: tuple, s: Summary, origin: tuple | None = None) -> Summary:
        """Keeps `s`, the summary of the file `key`, and returns it; `origin`: (the stored file it was read from, its
        identity). One found or computed meanwhile (a background computation beside a request's read) summarizes the
        same file content: it stays, with its identity, so that the run-level answers kept for it stay valid."""
        with self._lock:
            kept = self._memory.get(key)
            if kept is not None:
                return kept
            self._memory[key] = s
            if origin is not None:
                self._origin[key] = (*origin, time.monotonic())
                self._tokens[id(s)] = ("file", *origin)
            else:
                self._tokens[id(s)] = ("computed", next(self._serial))
            while len(self._memory) > MEMORY_ENTRIES:
                self._drop(next(iter(self._memory)))
        return s

    def _drop(self, key: tuple) -> None:
        """Forgets the summary of the file `key` (under the lock)."""
        s = self._memory.pop(key, None)
        if s is not None:
            self._tokens.pop(id(s), None)
        self._origin.pop(key, None)

    # ------------------------------------------------------------------ computing
    def prepare(self, files: list, loaded: Callable[[Any], Any] | None = None, forget_others: bool = True) -> None:
        """Starts finding or computing, in the background, the summaries of `files`; with `forget_others`
        (`files` are all the files there are) the failures of other files are forgotten."""
        keys = {f.key for f in files}
        with self._lock:
            for k in [k for k in self._failed if forget_others and k not in keys]:
                del self._failed[k]
        for f in files:
            with self._lock:
                if f.key in self._memory or f.key in self._failed:
                    continue
            self._future(f, loaded)

    def _future(self, f: Any, loaded: Callable[[Any], Any] | None) -> Future:
        with self._lock:
            fut = self._pending.get(f.key)
            if fut is not None:
                return fut
            fut = self._pending[f.key] = self._io.submit(self._find_or_compute, f, loaded)
        key = f.key
        fut.add_done_callback(lambda fu: self._forget(key, fu))
        return fut

    def _forget(self, key: tuple, fut: Future) -> None:
        with self._lock:
            self._pending.pop(key, None)
            exc = None if fut.cancelled() else fut.exception()
            if exc is not None:
                self._failed[key] = exc

    def get(self, f: Any, loaded: Callable[[Any], Any] | None = None, timeout: float | None = 900) -> Summary:
        """The summary of `f`: found, or computed now (errors of the trace file propagate)."""
        s = self.find(f)
        if s is not None:
            return s
        return self._future(f, loaded).result(timeout=timeout)

    def get_many(self, files: list, loaded: Callable[[Any], Any] | None = None, timeout: float | None = 900) -> list:
        """Summaries of `files` (in order); a file that fails gives its exception in its place."""
        futs: list = []
        for f in files:
            s = self._recall(f)
            futs.append(s if s is not None else self._future(f, loaded))
        out: list[Summary | BaseException] = []
        for x in futs:
            if isinstance(x, Summary):
                out.append(x)
                continue
            try:
                out.append(x.result(timeout=timeout))
            except Exception as e:  # noqa: BLE001 - reported per file by the caller
                out.append(e)
        return out

    def ready(
        self,
        files: Sequence[tuple[str, Any]],
        loaded: Callable[[Any], Any] | None,
        load_error: Callable[[Any], str | None],
        message: Callable[[Any, BaseException], str],
    ) -> Ready | Pending:
        """The one readiness protocol of the run-level routes, without waiting: Ready when every file of
        (worker, file) `files` has a summary or failed, else Pending (the missing ones started in the background;
        the failures of other files stay known, not retried on every request). `load_error(f)`: the loader's
        failure of a file; `message(f, e)`: how a failure reads."""
        summaries: dict[str, Summary] = {}
        errors: list[Failure] = []
        waiting: list[str] = []
        for w, f in files:
            s = self.find(f)
            failed = self.failure(f) or (load_error(f) if s is None else None)
            if s is not None:
                summaries[w] = s
            elif failed is not None:
                text = failed if isinstance(failed, str) else message(f, failed)
                errors.append({"worker": w, "file": f.relpath, "error": text})
            else:
                waiting.append(w)
        if not waiting:
            return Ready(summaries, errors)
        self.prepare([f for w, f in files if w in waiting], loaded=loaded, forget_others=False)
        return Pending(summaries, errors, waiting)

    def collect(
        self,
        files: Sequence[tuple[str, Any]],
        loaded: Callable[[Any], Any] | None,
        message: Callable[[Any, BaseException], str],
    ) -> Ready:
        """Every summary of (worker, file) `files`, waiting for those being computed (`get_many`); LoadFailed
        when every file failed."""
        got = self.get_many([f for _, f in files], loaded=loaded)
        summaries: dict[str, Summary] = {}
        errors: list[Failure] = []
        for (w, f), s in zip(files, got):
            if isinstance(s, BaseException):
                errors.append({"worker": w, "file": f.relpath, "error": message(f, s)})
            else:
                summaries[w] = s
        return Ready(summaries, errors).require()

    def _find_or_compute(self, f: Any, loaded: Callable[[Any], Any] | None) -> Summary:
        s = self.find(f)
        if s is not None:
            return s
        return self._pool.submit(self._compute, f, loaded).result()

    def _compute(self, f: Any, loaded: Callable[[Any], Any] | None) -> Summary:
        src = source_of(f)
        t = loaded(f) if loaded is not None else None
        if t is not None:
            s = summarize(t, src)
        elif self.scheduler:
            s = self._on_cluster(f.path)
        else:
            s = summarize_path(f.path)
        s.source = msgspec.convert(source_fields(src), Source)
        store.write(store.cache_path(f.path, src), s)
        kept = self._remember(f.key, s)
        with self._lock:
            self.computed += 1
        return kept

    def _on_cluster(self, path: str) -> Summary:
        from tb_plugin.summaries.summary import decode

        with self._lock:
            if self._client is None:
                from distributed import Client

                self._client = Client(self.scheduler, timeout="30s")
            client = self._client
        return decode(client.submit(summarize_bytes, path, pure=False).result())

    def close(self) -> None:
        """Stops the background pool and the Dask client."""
        self._io.shutdown(wait=False, cancel_futures=True)
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._client is not None:
            try:
                self._client.close()
            except Exception:  # noqa: BLE001
                pass
