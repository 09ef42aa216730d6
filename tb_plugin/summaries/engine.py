"""The plugin's summaries: found in the logdir's `.gpuscope/summaries/`, else in the cache, else
computed (from an already loaded trace, on a Dask scheduler when one is configured, or on a
background thread reading the file) and kept in the cache.

Nothing here holds a parsed trace longer than one summary's computation.
"""

from __future__ import annotations

import concurrent.futures
import heapq
import itertools
import logging
import multiprocessing
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import msgspec

from profiler_core import child_env, settings
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


#: `loaded(file, asked)`: the parsed trace to summarize `file` from, or None (the file is read alone); `asked`: a
#: request waits for it (then a trace being parsed elsewhere is not waited for)
Loaded = Callable[[Any, bool], Any]

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
    eta_s: float | None = None  # seconds until the last pending one is computed (`Summaries.eta`)


def pending_answer(states: Sequence[Ready | Pending], runs: Sequence[str] | None = None) -> dict:
    """The answer of a run-level route while summaries are missing: `{"pending", "progress": {"done", "total",
    "eta_s"}}` (`eta_s`: seconds until the last of them, None before any was timed here); with `runs` (one per
    state: several runs asked at once) `pending` holds `{"run", "worker"}` objects."""
    pending: list = []
    total = 0
    etas = []
    for i, st in enumerate(states):
        waiting = st.pending if isinstance(st, Pending) else []
        total += len(st.summaries) + len(st.errors) + len(waiting)
        pending += waiting if runs is None else [{"run": runs[i], "worker": w} for w in waiting]
        if isinstance(st, Pending):
            etas.append(st.eta_s)
    eta = None if any(e is None for e in etas) else round(sum(etas), 1)  # type: ignore[arg-type]
    return {"pending": pending, "progress": {"done": total - len(pending), "total": total, "eta_s": eta}}


@dataclass
class _Job:
    """One file's summary on its way: looked for in the stores (`finding`), then waiting for the compute thread
    (`queued`, in the heap by `rank`) and `running`. The future is the one every asker of the file shares."""

    f: Any
    loaded: Loaded | None
    future: Future
    rank: tuple
    state: str = "finding"
    started: float = 0.0


#: summaries computed recently whose (file bytes, seconds, gzip) give the throughput behind the estimates
TIMED_KEPT = 16
#: summaries a request waits for, queued, before the helper processes join the front thread (a small run's few are
#: computed sooner in this process than a process starts)
HELPER_MIN_QUEUE = 8


def helper_processes() -> int:
    """Processes that compute asked summaries beside the front thread (`GPUSCOPE_SUMMARY_PROCESSES`, else the cores
    but one, at most 3)."""
    n = settings.get("GPUSCOPE_SUMMARY_PROCESSES")
    return max(0, min(3, (os.cpu_count() or 1) - 1)) if n is None else int(n)


class Summaries:
    """Summaries of the trace files of one logdir, for the run-level views. Missing ones are computed one at a
    time, those a request waits for first (the latest request's first, small files before big ones), the rest
    (prepared in the background at each scan) after, smallest first."""

    def __init__(
        self,
        logdir: str,
        scheduler: str | None = None,
        threads: int = 1,
        quiet: Callable[[], Any] | None = None,
    ) -> None:
        """`quiet()`: a context manager held while a summary a request waits for is computed (the loader's
        `hold`: no background file read starts meanwhile)."""
        self.logdir = logdir
        self.scheduler = scheduler or None
        self._quiet = quiet
        # two compute threads: one for the summaries requests wait for, one for the rest (started lazily); a long
        # background summary never holds a request's back (they share the GIL meanwhile, the loader holds off)
        self._threads = max(1, threads)
        self._computers: list[threading.Thread] = []
        self._helpers = 0 if self.scheduler else helper_processes()
        self._processes: ProcessPoolExecutor | None = None  # the helpers' processes, started on first use
        self._closed = False
        self._front_busy = False  # the front thread is computing (the background ones start nothing meanwhile)
        # finding stored summaries is I/O (one or two small reads each, remote ones slow): in parallel
        self._io = ThreadPoolExecutor(IO_THREADS, thread_name_prefix="gpuscope-summary-io")
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)  # a job was queued, or closing
        self._memory: OrderedDict[tuple, Summary] = OrderedDict()
        # per file key in memory read from a stored summary: (its path, its identity then, when it was checked)
        self._origin: dict[tuple, tuple[str, tuple, float]] = {}
        # id() of each summary in memory -> its identity (`token`); entries leave with their summary
        self._tokens: dict[int, tuple] = {}
        self._serial = itertools.count()
        self.answers = Answers()  # the run-level answers of these summaries (`answers.answer`)
        self._jobs: dict[tuple, _Job] = {}  # files whose summary is on its way
        # (rank, order, key) of queued jobs, asked ones in the front heap; an entry whose job moved on is skipped
        self._heaps: dict[bool, list[tuple[tuple, int, tuple]]] = {True: [], False: []}
        self._order = itertools.count()
        self._asks = itertools.count(1)
        self._timed: deque[tuple[int, float, bool]] = deque(maxlen=TIMED_KEPT)
        self._failed: dict[tuple, BaseException] = {}  # files whose summary failed (until they change)
        self._client: Any = None
        self.computed = 0  # how many summaries this process computed (tests, benchmarks)
        self.helped = 0  # how many of them a helper process computed
        self.computed_order: deque[str] = deque(maxlen=4096)  # their paths in the order computed (tests)

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
    def prepare(
        self,
        files: list,
        loaded: Loaded | None = None,
        forget_others: bool = True,
        asked: bool = False,
    ) -> None:
        """Starts finding or computing, in the background, the summaries of `files`; `asked`: a request waits for
        them (computed before the background ones); with `forget_others` (`files` are all the files there are) the
        failures of other files are forgotten."""
        keys = {f.key for f in files}
        with self._lock:
            for k in [k for k in self._failed if forget_others and k not in keys]:
                del self._failed[k]
            ask = next(self._asks) if asked else None
        for f in files:
            with self._lock:
                if f.key in self._memory or f.key in self._failed:
                    continue
            self._future(f, loaded, ask)

    def on_their_way(self) -> list[Future]:
        """The futures of the summaries being found or computed now."""
        with self._lock:
            return [j.future for j in self._jobs.values()]

    def _rank(self, f: Any, ask: int | None) -> tuple:
        """Where `f` goes in the compute queue: asked ones first (the latest request's first), small files first."""
        return (0, -ask, int(f.size)) if ask is not None else (1, 0, int(f.size))

    def _future(self, f: Any, loaded: Loaded | None, ask: int | None) -> Future:
        """The future of `f`'s summary, started (looked for, then queued) unless on its way; `ask` moves it ahead."""
        key = f.key
        with self._lock:
            job = self._jobs.get(key)
            if job is not None:
                rank = self._rank(f, ask)
                if rank < job.rank and job.state in ("finding", "queued"):
                    job.rank = rank
                    if job.state == "queued":
                        self._queue(job)
                return job.future
            fut: Future = Future()
            job = self._jobs[key] = _Job(f, loaded, fut, self._rank(f, ask))
        fut.add_done_callback(lambda fu: self._forget(key, fu))
        self._io.submit(self._find, job)
        return fut

    def _forget(self, key: tuple, fut: Future) -> None:
        with self._lock:
            if self._jobs.get(key) is not None and self._jobs[key].future is fut:
                del self._jobs[key]
            exc = None if fut.cancelled() else fut.exception()
            if exc is not None:
                self._failed[key] = exc

    def _find(self, job: _Job) -> None:
        """I/O thread: a stored summary ends the job, else it is queued for the compute thread."""
        try:
            s = self.find(job.f)
        except BaseException as e:  # noqa: BLE001 - the file's failure, for its askers
            job.future.set_exception(e)
            return
        if s is not None:
            job.future.set_result(s)
            return
        with self._lock:
            job.state = "queued"
            self._queue(job)

    def _queue(self, job: _Job) -> None:
        """Puts `job` in its heap (under the lock) and wakes the compute threads (started on first use)."""
        heapq.heappush(self._heaps[job.rank[0] == 0], (job.rank, next(self._order), job.f.key))
        if not self._computers and not self._closed:
            for front in [True] + [False] * self._threads:
                t = threading.Thread(target=self._computer, args=(front,), daemon=True, name="gpuscope-summary")
                t.start()
                self._computers.append(t)
            for _ in range(self._helpers):
                t = threading.Thread(target=self._helper, daemon=True, name="gpuscope-summary-helper")
                t.start()
                self._computers.append(t)
        self._wake.notify_all()

    def _helper(self) -> None:
        """A helper thread: while at least HELPER_MIN_QUEUE asked jobs wait, the best of them, computed in a helper
        process (the GIL is this process's: the front thread computes beside it)."""
        heap = self._heaps[True]
        while True:
            with self._lock:
                job = None
                while job is None:
                    if self._closed:
                        return
                    job = self._take(heap, lambda: len(heap) >= HELPER_MIN_QUEUE)
                    if job is None:
                        self._wake.wait()
            self._run(job, in_process=False)

    def _take(self, heap: list, may: Callable[[], bool]) -> _Job | None:
        """The best queued job of `heap`, marked running, while `may()` (under the lock); entries of jobs that moved
        on are dropped."""
        while heap and may():
            rank, _, key = heapq.heappop(heap)
            job = self._jobs.get(key)
            if job is not None and job.state == "queued" and job.rank == rank:
                job.state, job.started = "running", time.monotonic()
                return job
        return None

    def _computer(self, front: bool) -> None:
        """A compute thread: the best job of its heap, one after another. The front one (asked jobs) holds the
        loader's background reads off (`quiet`) while it has work; a background one starts no job meanwhile."""
        heap = self._heaps[front]
        quiet = None
        while True:
            with self._lock:
                job = None
                while job is None:
                    if self._closed:
                        break
                    job = self._take(heap, lambda: front or not self._front_busy)
                    if front:
                        self._front_busy = job is not None
                        if job is None:
                            self._wake.notify_all()  # the background threads go on
                    if job is None:
                        if front and quiet is not None:
                            break  # let the loader go before waiting
                        self._wake.wait()
            if front and (job is not None) != (quiet is not None):
                if quiet is None and self._quiet is not None:
                    quiet = self._quiet()
                    quiet.__enter__()
                elif quiet is not None:
                    quiet.__exit__(None, None, None)
                    quiet = None
            if job is not None:
                self._run(job)
            elif self._closed:
                return

    def _run(self, job: _Job, in_process: bool = True) -> None:
        try:
            s = self._compute(job.f, job.loaded, job.rank[0] == 0, in_process)
        except BaseException as e:  # noqa: BLE001 - the file's failure, for its askers
            job.future.set_exception(e)
        else:
            job.future.set_result(s)

    def eta(self, files: Sequence[Any]) -> float | None:
        """Seconds until the summaries of `files` not found yet are computed, by the throughput of the last ones
        computed here (per kind: gzip or not), shared by the asked ones computed at once; None before any of that
        kind was timed."""
        now = time.monotonic()
        with self._lock:
            timed = list(self._timed)
            jobs = [self._jobs.get(f.key) for f in files]
            # asked jobs computed at once (the front thread and the helper processes working): they share the rest
            at_once = max(1, sum(1 for j in self._jobs.values() if j.state == "running" and j.rank[0] == 0))
        left = 0.0
        for f, job in zip(files, jobs):
            if job is None:
                continue
            gz = f.path.endswith(".gz")
            same = [(b, t) for b, t, z in timed if z == gz]
            if not same or sum(t for _, t in same) <= 0:
                return None
            rate = sum(b for b, _ in same) / sum(t for _, t in same)
            need = int(f.size) / rate
            left += max(0.0, need - (now - job.started)) if job.state == "running" else need
        return left / at_once

    def wait(self, files: Sequence[Any], timeout: float) -> None:
        """Returns once the summaries of `files` on their way are done, or after `timeout` seconds."""
        with self._lock:
            futs = [j.future for f in files if (j := self._jobs.get(f.key)) is not None]
        if futs:
            concurrent.futures.wait(futs, timeout=max(0.0, timeout))

    def get(self, f: Any, loaded: Loaded | None = None, timeout: float | None = 900) -> Summary:
        """The summary of `f`: found, or computed now (errors of the trace file propagate)."""
        s = self.find(f)
        if s is not None:
            return s
        return self._future(f, loaded, next(self._asks)).result(timeout=timeout)

    def get_many(self, files: list, loaded: Loaded | None = None, timeout: float | None = 900) -> list:
        """Summaries of `files` (in order); a file that fails gives its exception in its place."""
        futs: list = []
        ask = next(self._asks)
        for f in files:
            s = self._recall(f)
            futs.append(s if s is not None else self._future(f, loaded, ask))
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
        loaded: Loaded | None,
        load_error: Callable[[Any], str | None],
        message: Callable[[Any, BaseException], str],
    ) -> Ready | Pending:
        """The one readiness protocol of the run-level routes, without waiting: Ready when every file of
        (worker, file) `files` has a summary or failed, else Pending (the missing ones started, ahead of the
        background ones; the failures of other files stay known, not retried on every request). `load_error(f)`:
        the loader's failure of a file; `message(f, e)`: how a failure reads."""
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
        missing = [f for w, f in files if w in set(waiting)]
        self.prepare(missing, loaded=loaded, forget_others=False, asked=True)
        eta = self.eta(missing)
        return Pending(summaries, errors, waiting, None if eta is None else round(eta, 1))

    def collect(
        self,
        files: Sequence[tuple[str, Any]],
        loaded: Loaded | None,
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

    def _compute(self, f: Any, loaded: Loaded | None, asked: bool, in_process: bool = True) -> Summary:
        t0 = time.monotonic()
        src = source_of(f)
        t = loaded(f, asked) if loaded is not None and in_process else None
        if t is not None:
            s = summarize(t, src)
        elif self.scheduler:
            s = self._on_cluster(f.path)
        elif not in_process:
            s = self._in_helper(f.path)
        else:
            s = summarize_path(f.path)
        s.source = msgspec.convert(source_fields(src), Source)
        store.write(store.cache_path(f.path, src), s)
        kept = self._remember(f.key, s)
        with self._lock:
            self.computed += 1
            self.helped += not in_process
            self.computed_order.append(f.path)
            self._timed.append((int(f.size), time.monotonic() - t0, f.path.endswith(".gz")))
        return kept

    def _in_helper(self, path: str) -> Summary:
        """The summary of the file at `path` computed in a helper process (`summarize_bytes`)."""
        from tb_plugin.summaries.summary import decode

        with self._lock:
            if self._processes is None:
                self._processes = ProcessPoolExecutor(self._helpers, mp_context=multiprocessing.get_context("spawn"))
            pool = self._processes
        with child_env.safe_path():  # the pool starts its processes here, on demand
            fut = pool.submit(summarize_bytes, path)
        return decode(fut.result())

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
        with self._lock:
            self._closed = True
            self._wake.notify_all()
            processes, self._processes = self._processes, None
        if processes is not None:
            processes.shutdown(wait=False, cancel_futures=True)
        if self._client is not None:
            try:
                self._client.close()
            except Exception:  # noqa: BLE001
                pass
