"""Background loading of trace files on a bounded pool, with progress and an LRU of parsed traces.

Every file a scan finds is prepared in the background (parsed once, then kept in the on-disk
cache of `profiler_core.trace.read.cache`); the most recently used parsed traces stay in memory up
to a byte budget. With `processes > 0` files are parsed in worker processes that hand their
result over through the disk cache; otherwise on threads (`default_threads`): two from 2 cores where
the native reader is built, whose scan lets go of the GIL (the shared V100 run's two files: load
0.20 s one after the other, 0.15 s two at once), else one: the Python reader holds the GIL, so two
threads only slow each other down (1.2 s on two threads, 0.95 s one after the other). Bad files are
remembered with their reason and logged; requests for them raise `LoadFailed`.

Files wait in a queue and only as many as the pool has slots are handed to it, so a request for
a file still queued takes it out of the queue and loads it at once, and no other queued file
starts until it is ready (the files already being read go on). `file_status` says how far one
file is: queued (and where), being read (bytes by the throughput measured on earlier files, as
an estimate, and the time left), done, or failed.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass

from profiler_core import child_env, settings, storage
from profiler_core.storage import redact
from profiler_core.trace.model import TraceData
from profiler_core.trace.read import cache, malloc_tuning, parallel_plan
from profiler_core.trace.read.budget import memory_budget
from profiler_core.trace.read.fused import split_path
from profiler_core.trace.read.reader import TraceReadError, default_parse_processes, read_trace
from profiler_core.trace.sparse import nbytes_of
from tb_plugin.errors import LoadFailed
from tb_plugin.runs import TraceFile

log = logging.getLogger(__name__)

#: memory budget for parsed traces kept in memory (bytes); env GPUSCOPE_MAX_LOADED_BYTES
DEFAULT_MAX_BYTES = memory_budget()


def default_processes() -> int:
    """Worker processes for parsing: env GPUSCOPE_LOAD_PROCESSES, else some when cores allow."""
    return parallel_plan.here(native=False).load_processes


def default_threads() -> int:
    """Files read at once in threads when there are no load processes: env GPUSCOPE_LOAD_THREADS, else 2 from 2
    cores where the native reader is built (its scan lets go of the GIL, so one file's scan overlaps the other's
    conversion), else 1."""
    from profiler_core.trace.read import native

    return parallel_plan.here(native=native.enabled()).load_threads


def _exiting() -> bool:
    """True once the interpreter's exit began stopping thread pools (concurrent.futures' flag)."""
    import concurrent.futures.thread as pools

    return bool(getattr(pools, "_shutdown", False))


def trace_nbytes(t: TraceData) -> int:
    """Approximate memory held by a parsed trace (its frames and its sparse arg columns)."""
    frames = sum(df.memory_usage(index=False, deep=False).sum() for df in (t.events, t.memory, t.flows, t.names))
    return int(frames) + nbytes_of(t.sparse.values())


def check_is_trace(path: str, t: TraceData) -> TraceData:
    """`t` if the file held a trace: some event, or a Kineto document's metadata. A JSON array of
    anything else (`[]`, `["a token"]`) parses without error yet is no trace: it is never served."""
    if len(t.events) or len(t.memory) or len(t.flows) or len(t.names) or t.metadata:
        return t
    skipped = "; ".join(t.warnings)
    raise TraceReadError(f"{path}: no trace events (not a trace{': ' + skipped if skipped else ''})")


def _prepare_in_process(path: str) -> TraceData | list:
    """Worker-process job: parse and store in the disk cache; return the data only if that failed,
    else the trace's warnings (what the reader skipped or repaired)."""
    if split_path(path)[1] is not None:  # a fused file's rank: the cache keeps the whole file, read here
        t = check_is_trace(path, read_trace(path, processes=0, use_cache=True, tune_memory=True))
        return list(t.warnings)
    t = check_is_trace(path, read_trace(path, processes=0, tune_memory=True))
    return list(t.warnings) if cache.store(path, t) is not None else t


def failure_message(f: TraceFile, err: BaseException) -> str:
    """How the failure `err` of the trace file `f` reads in an answer: relative to the logdir, without credentials,
    the exception's type named unless it is a reading error."""
    text = err.message if isinstance(err, LoadFailed) else str(err)
    if not isinstance(err, (TraceReadError, LoadFailed)):
        text = f"{type(err).__name__}: {text}"
    text = text.replace(f.path, f.relpath)
    if text.startswith(f.relpath + ": "):
        text = text[len(f.relpath) + 2 :]
    return redact(text)


def skip_message(warnings: list) -> str | None:
    """One line for a file's reader warnings: "N events skipped (reason: n; ...)" first, then the
    other warnings (values treated as missing, repaired JSON); None when there are none."""
    skipped, total, other = [], 0, []
    for w in warnings:
        head, _, rest = str(w).partition(" ")
        if head.isdigit() and rest.endswith((" skipped", "not event objects")):
            total += int(head)
            skipped.append(f"{rest.removesuffix(' skipped')}: {head}")
        else:
            other.append(str(w))
    parts = ([f"{total} events skipped ({'; '.join(skipped)})"] if skipped else []) + other
    return "; ".join(parts) or None


#: files are warmed (see `Loader`) only while the loader knows at most this many: a logdir of many files
#: is not computed ahead for views that may never be asked for
WARM_MAX_FILES = 8
#: nor once the other traces in memory hold more events than this together: what warming keeps (the views'
#: stages) stays small beside the memory budget. The first file read is always warmed, however big: it is
#: the one a user opens (an 11M-event trace's first view: its Overview beside its operators, two threads).
WARM_MAX_EVENTS = 2_000_000

#: a cache write waits (at most this many seconds after the read) until no file is being read or warmed
#: and no view is computed: on a few cores it would slow them down
STORE_WAIT_S = 5.0

#: parse throughput (file bytes per second) assumed before any file was timed here; `cache`: a file whose parse cache
#: entry exists (read from it, not parsed: a 177 MB gzipped trace in about 2 s, which the gzip rate called 159 s)
DEFAULT_RATE = {"gz": 3e6, "json": 40e6, "cache": 80e6}


@dataclass
class _Entry:
    file: TraceFile
    future: Future | None = None
    error: str | None = None
    done: bool = False
    started: float | None = None  # time.monotonic() when its read began
    seconds: float | None = None  # how long the read took
    shown: int = 0  # the largest bytes-parsed estimate given (estimates never go back)
    warnings: tuple = ()  # the reader's warnings for the file (events skipped, ...)
    warm: Future | None = None  # the warming of its parsed trace (see Loader)
    kind: str | None = None  # how it is read, once started: "cache" (its parse cache entry exists), "gz" or "json"


def _warming(e: _Entry) -> bool:
    """True while `e`'s trace is being warmed (or waits for the warming thread)."""
    return e.warm is not None and not e.warm.done()


class Loader:
    """Loads trace files in the background and serves parsed `TraceData` (LRU in memory).

    `warm(t)`, when given, runs on a thread of its own after each file is read (while the next one
    is read): it computes what the file's first view will ask for. A request for the file waits
    for its warming under way rather than compute the same again; one not started yet is
    cancelled, and the request computes what it needs itself."""

    def __init__(
        self,
        workers: int | None = None,
        processes: int | None = None,
        max_bytes: int | None = None,
        use_cache: bool = True,
        warm: Callable[[TraceData], object] | None = None,
    ) -> None:
        self.max_bytes = DEFAULT_MAX_BYTES if max_bytes is None else max_bytes
        self.use_cache = use_cache and settings.get("GPUSCOPE_CACHE")
        processes = default_processes() if processes is None else processes
        self.processes = processes if self.use_cache else 0
        workers = default_threads() if workers is None else workers
        malloc_tuning.share_heap()  # before its threads start: they then reuse the memory each other frees
        self._pool: Executor
        if self.processes:
            import multiprocessing

            with child_env.safe_path():  # its queues start multiprocessing's resource tracker
                self._pool = ProcessPoolExecutor(self.processes, mp_context=multiprocessing.get_context("spawn"))
        else:
            self._pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="gpuscope-load")
        self._lock = threading.RLock()
        self._read_ended = threading.Condition(self._lock)  # notified whenever a file's read ends (`wait_loaded`)
        self._slots = max(1, self.processes or workers)
        self._queue: deque[_Entry] = deque()  # waiting for a pool slot, in scan order
        self._running = 0  # entries handed to the pool and not finished
        self._urgent = 0  # requested files being read now: the queue waits
        self._entries: dict[tuple, _Entry] = {}
        self._lru: OrderedDict[tuple, TraceData] = OrderedDict()
        self._lru_bytes: dict[tuple, int] = {}
        self._storer: ThreadPoolExecutor | None = None  # cache writes (see _store_later)
        self._warm = warm
        self._warmer: ThreadPoolExecutor | None = None
        self._stores: list[Future] = []
        self._closed = False

    # ------------------------------------------------------------------ background preparation
    def prepare(self, files: list[TraceFile], lazy: Callable[[TraceFile], bool] | None = None) -> None:
        """Start loading every file not seen before (except those `lazy` picks: they load when asked
        for); forget files that vanished or changed."""
        keys = {f.key for f in files}
        with self._lock:
            for key in [k for k in self._entries if k not in keys]:
                entry = self._entries.pop(key)
                if entry in self._queue:
                    self._queue.remove(entry)
                if entry.future is not None:
                    entry.future.cancel()
                if entry.warm is not None:
                    entry.warm.cancel()
                self._drop(key)
            for f in files:
                if f.key not in self._entries and not (lazy is not None and lazy(f)):
                    entry = self._entries[f.key] = _Entry(f)
                    self._queue.append(entry)
            self._pump()

    def _pump(self) -> None:
        """Hands queued files to the pool while it has free slots and no requested file is being read."""
        with self._lock:
            while self._queue and self._running < self._slots and not self._urgent and not self._closed:
                self._submit(self._queue.popleft())

    def _kind(self, f: TraceFile) -> str:
        """How `f` will be read: from its parse cache entry when one exists (a local file), else parsed (gz, json)."""
        if self.use_cache and not storage.is_remote(f.file_path):
            try:
                if cache.entry_path(f.path).is_file():
                    return "cache"
            except (OSError, ValueError):
                pass
        return "gz" if f.file_path.endswith(".gz") else "json"

    def _submit(self, entry: _Entry) -> None:
        f = entry.file
        self._running += 1
        entry.started = time.monotonic()
        entry.kind = self._kind(f)
        try:
            if self.processes:
                with child_env.safe_path():  # the pool starts its processes here, on demand
                    fut = self._pool.submit(_prepare_in_process, f.path)
            else:
                fut = self._pool.submit(self._load_here, f)
        except RuntimeError:  # the interpreter is exiting: its pools take no more work
            self._running -= 1
            entry.started = None
            self._queue.appendleft(entry)
            self._closed = True
            return
        entry.future = fut
        fut.add_done_callback(lambda fu, e=entry: self._finished(e, fu))

    def _load_here(self, f: TraceFile) -> TraceData:
        self._make_room(f)
        t = read_trace(
            f.path,
            processes=default_parse_processes(),
            use_cache=self.use_cache,
            store=lambda path, t: self._store_later(path, check_is_trace(path, t)),
            tune_memory=True,
        )
        return check_is_trace(f.path, t)

    def _store_later(self, path: str, t: TraceData) -> None:
        """Write `t` to the disk cache on a thread of its own: the trace is served meanwhile (the
        writes release the GIL; 0.3 s for the 2.2M-event trace, which views no longer wait for),
        once the loader is quiet (see `_store_when_quiet`)."""
        with self._lock:
            if self._storer is None:
                self._storer = ThreadPoolExecutor(1, thread_name_prefix="gpuscope-cache")
            try:
                deadline = time.monotonic() + STORE_WAIT_S
                self._stores.append(self._storer.submit(self._store_when_quiet, path, t, deadline))
                self._stores = [s for s in self._stores if not s.done()]
                return
            except RuntimeError:  # the interpreter is exiting: its pools take no more work
                pass
        cache.store(path, t)  # written here, as read_trace would, without holding the loader's lock

    def _store_when_quiet(self, path: str, t: TraceData, deadline: float) -> None:
        """`cache.store(path, t)` once no file is being read or warmed and no view is computed (or at
        `deadline`, or when the loader is closed)."""
        while time.monotonic() < deadline and not self._closed and self._active():
            time.sleep(0.02)
        cache.store(path, t)

    def _active(self) -> bool:
        """True while a file is being read, a view computed (`hold`) or a trace warmed."""
        with self._lock:
            return bool(self._running or self._urgent) or any(map(_warming, self._entries.values()))

    def flush(self, timeout: float | None = None) -> None:
        """Wait until the cache writes started so far are done."""
        with self._lock:
            pending = list(self._stores)
        for fut in pending:
            fut.exception(timeout=timeout)

    def _finished(self, entry: _Entry, fut: Future) -> None:
        try:
            self._file_finished(entry, fut)
        finally:
            with self._lock:
                self._read_ended.notify_all()

    def wait_loaded(self, timeout: float) -> bool:
        """Block until no known file is queued or being read (or the loader is closed), at most `timeout`
        seconds: True when none is. A client's long poll (`/runs?wait=`) instead of asking again and again."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not self._closed and any(not e.done for e in self._entries.values()):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._read_ended.wait(left)
            return True

    def _file_finished(self, entry: _Entry, fut: Future) -> None:
        with self._lock:
            if not getattr(fut, "_gpuscope_counted", False):
                fut._gpuscope_counted = True  # type: ignore[attr-defined]
                self._running -= 1
        self._pump()
        if fut.cancelled():
            return
        err = fut.exception()
        with self._lock:
            if self._entries.get(entry.file.key) is not entry:
                return  # forgotten meanwhile
            if not entry.done and entry.started is not None:
                entry.seconds = time.monotonic() - entry.started
            entry.done = True
            if err is not None:
                entry.error = failure_message(entry.file, err)
                log.warning("gpuscope: cannot load %s: %s", entry.file.relpath, entry.error)
                return
            result = fut.result()
            if isinstance(result, TraceData):
                entry.warnings = tuple(result.warnings)
                self._keep(entry.file.key, result)
                self._start_warming(entry, result)
            elif isinstance(result, list):
                entry.warnings = tuple(result)

    def _start_warming(self, entry: _Entry, t: TraceData) -> None:
        """Hands `t` to the warming thread (called with the lock held)."""
        if (
            self._warm is None
            or entry.warm is not None
            or self._closed
            or len(self._entries) > WARM_MAX_FILES
            or sum(len(x.events) for k, x in self._lru.items() if k != entry.file.key) > WARM_MAX_EVENTS
        ):
            return
        if self._warmer is None:
            self._warmer = ThreadPoolExecutor(1, thread_name_prefix="gpuscope-warm")
        try:
            entry.warm = self._warmer.submit(self._warm_now, t)
        except RuntimeError:  # the interpreter is exiting: its pools take no more work
            pass

    def _warm_now(self, t: TraceData) -> None:
        # warmings still queued when the interpreter exits are skipped: its exit waits for the pool
        if self._warm is not None and not self._closed and not _exiting():
            self._warm(t)

    def _wait_warming(self, entry: _Entry, cancel: bool = True) -> None:
        """Before a request computes from `entry`'s trace: its warming under way finishes first (the
        request then finds it done); one not started yet is cancelled (with `cancel`; else waited for)."""
        fut = entry.warm
        if fut is None or fut.done() or (cancel and fut.cancel()):
            return
        try:
            fut.result(timeout=900)
        except Exception:  # noqa: BLE001 - warming failures are the request's to find
            pass

    # ------------------------------------------------------------------ LRU
    def _keep(self, key: tuple, t: TraceData) -> None:
        self._lru[key] = t
        self._lru.move_to_end(key)
        self._lru_bytes[key] = trace_nbytes(t)
        while len(self._lru) > 1 and sum(self._lru_bytes.values()) > self.max_bytes:
            old, _ = self._lru.popitem(last=False)
            self._lru_bytes.pop(old, None)

    def _make_room(self, f: TraceFile) -> None:
        """Before `f` is read: drop the least recently used traces until those kept and `f` (about
        its JSON size, at most the whole budget) fit in the budget together."""
        gz = f.file_path.endswith(".gz")  # no I/O here: gzip traces inflate about 8 times
        need = min(self.max_bytes, f.size * (8 if gz else 1))
        with self._lock:
            while self._lru and sum(self._lru_bytes.values()) + need > self.max_bytes:
                old, _ = self._lru.popitem(last=False)
                self._lru_bytes.pop(old, None)

    def _drop(self, key: tuple) -> None:
        self._lru.pop(key, None)
        self._lru_bytes.pop(key, None)

    def peek(self, f: TraceFile) -> TraceData | None:
        """The parsed trace of `f` if it is in memory now (never loads)."""
        with self._lock:
            return self._lru.get(f.key)

    def loaded_keys(self) -> list[tuple]:
        with self._lock:
            return list(self._lru)

    # ------------------------------------------------------------------ requests
    def get(self, f: TraceFile, timeout: float | None = 900, cancel_warming: bool = True) -> TraceData:
        """The parsed trace of `f`, waiting for its load (and its warming under way: one not started
        yet is cancelled, unless `cancel_warming` is False, as for background work, which waits for it);
        raises LoadFailed for a bad file."""
        with self._lock:
            t = self._lru.get(f.key)
            entry = self._entries.get(f.key)
            if t is not None:
                self._lru.move_to_end(f.key)
        if t is not None:
            if entry is not None:
                self._wait_warming(entry, cancel_warming)
            return t
        with self._lock:
            entry = self._entries.get(f.key)
            if entry is None:
                entry = self._entries[f.key] = _Entry(f)
            elif entry.error is not None:
                raise LoadFailed(entry.error)
            queued = entry.future is None and not entry.done
            if queued:  # not started: read it now, in this thread, ahead of the queue
                if entry in self._queue:
                    self._queue.remove(entry)
                entry.started = time.monotonic()
                entry.kind = self._kind(f)
                self._urgent += 1
            fut = entry.future
        if queued:
            try:
                return self._load_now(entry, warm=not cancel_warming)
            finally:
                with self._lock:
                    self._urgent -= 1
                self._pump()
        if fut is not None and fut.cancel():  # handed to the pool but not started there
            with self._lock:
                entry.future = None
                entry.started = time.monotonic()
                entry.kind = self._kind(f)
                self._urgent += 1
            try:
                return self._load_now(entry, warm=not cancel_warming)
            finally:
                with self._lock:
                    self._urgent -= 1
                self._finished(entry, fut)
        if fut is not None:
            try:
                fut.result(timeout=timeout)
            except Exception:  # noqa: BLE001 - recorded by _finished
                pass
            self._finished(entry, fut)
        with self._lock:
            if entry.error is not None:
                raise LoadFailed(entry.error)
            t = self._lru.get(f.key)
            if t is not None:
                self._lru.move_to_end(f.key)
        if t is not None:
            self._wait_warming(entry, cancel_warming)
            return t
        return self._load_now(entry, warm=not cancel_warming)  # prepared in the disk cache, or evicted since

    def _load_now(self, entry: _Entry, warm: bool = False) -> TraceData:
        """Reads `entry`'s file in this thread; with `warm` (background work, not a request, read it
        ahead of the queue) its trace is warmed as a file read by the pool is."""
        try:
            t = self._load_here(entry.file)
        except Exception as e:  # noqa: BLE001 - any failure is this file's error
            with self._lock:
                entry.done, entry.error = True, failure_message(entry.file, e)
            log.warning("gpuscope: cannot load %s: %s", entry.file.relpath, entry.error)
            raise LoadFailed(entry.error) from None
        with self._lock:
            if not entry.done and entry.started is not None:
                entry.seconds = time.monotonic() - entry.started
            entry.done = True
            entry.warnings = tuple(t.warnings)
            if self._entries.get(entry.file.key) is entry:
                self._keep(entry.file.key, t)
                if warm:
                    self._start_warming(entry, t)
        return t

    # ------------------------------------------------------------------ status
    def progress(self) -> dict:
        """Files and bytes done of the files known now; `loading` while any is pending."""
        with self._lock:
            entries = list(self._entries.values())
        done = [e for e in entries if e.done]
        now = time.monotonic()
        reading = sum(
            min(e.file.size * 0.99, (now - e.started) * self.rate(e.file))
            for e in entries
            if not e.done and e.started is not None
        )
        return {
            "loading": len(done) < len(entries),
            "files_done": len(done),
            "files_total": len(entries),
            "bytes_done": sum(e.file.size for e in done),
            "bytes_total": sum(e.file.size for e in entries),
            # plus an estimate of the files being read (by the throughput measured so far)
            "bytes_done_est": int(sum(e.file.size for e in done) + reading),
        }

    def busy(self) -> bool:
        """True while a file is queued or being read, or a trace is being warmed."""
        with self._lock:
            return any(not e.done or _warming(e) for e in self._entries.values())

    @contextlib.contextmanager
    def hold(self):
        """While a request computes a view, no queued file starts (it would slow the answer down)."""
        with self._lock:
            self._urgent += 1
        try:
            yield
        finally:
            with self._lock:
                self._urgent -= 1
            self._pump()

    def rate(self, f: TraceFile) -> float:
        """Read throughput in file bytes per second for files like `f`: measured on the files read here so far the
        way it is read (from its parse cache entry, else parsed gzip or plain JSON), else a default."""
        with self._lock:
            e = self._entries.get(f.key)
            kind = e.kind if e is not None and e.kind is not None else None
        kind = kind or self._kind(f)
        with self._lock:
            timed = [
                (e.file.size, e.seconds)
                for e in self._entries.values()
                if e.seconds and e.error is None and e.kind == kind
            ]
        size, secs = sum(x for x, _ in timed), sum(y for _, y in timed)
        return size / secs if secs > 0.05 and size > 0 else DEFAULT_RATE[kind]

    def file_status(self, f: TraceFile) -> dict:
        """How far `f` is: state (queued, reading, done, failed, unknown), its size, and while it is
        read the estimated bytes parsed, the throughput and the seconds left; queued: its place."""
        with self._lock:
            e = self._entries.get(f.key)
            loaded = f.key in self._lru
            queue = list(self._queue)
        out: dict = {"file": f.relpath, "bytes_total": f.size}
        if e is None:
            out["state"] = "done" if loaded else "unknown"
            return out
        if e.error is not None:
            out.update(state="failed", error=e.error)
        elif e.done:
            out.update(state="done", seconds=e.seconds)
        elif e.started is None:
            out.update(state="queued", position=queue.index(e) + 1 if e in queue else None, rate_bps=self.rate(f))
        else:
            rate = self.rate(f)
            elapsed = time.monotonic() - e.started
            done = e.shown = max(e.shown, int(min(f.size * 0.99, elapsed * rate)))
            out.update(
                state="reading",
                elapsed_s=round(elapsed, 2),
                bytes_done_est=int(done),
                rate_bps=rate,
                eta_s=round(max(0.0, (f.size - done) / rate), 1),
            )
        return out

    def errors(self) -> list[tuple[TraceFile, str]]:
        """(file, reason) for every known file that could not be read."""
        with self._lock:
            return [(e.file, e.error) for e in self._entries.values() if e.error is not None]

    def warnings(self) -> list[tuple[TraceFile, str]]:
        """(file, "N events skipped (reason: n)...") for every loaded file the reader warned about."""
        with self._lock:
            entries = [(e.file, e.warnings) for e in self._entries.values() if e.warnings and e.error is None]
        return [(f, msg) for f, w in entries if (msg := skip_message(list(w)))]

    def error(self, f: TraceFile) -> str | None:
        with self._lock:
            e = self._entries.get(f.key)
            return None if e is None else e.error

    def close(self) -> None:
        """Stop the pool (pending loads are cancelled); cache writes under way finish. Closed first:
        a cancelled load's callback must not hand the next queued file to the pool while it shuts
        down (that deadlocks)."""
        with self._lock:
            self._closed = True
            self._queue.clear()
            self._read_ended.notify_all()
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._warmer is not None:
            self._warmer.shutdown(wait=False, cancel_futures=True)
        if self._storer is not None:
            self._storer.shutdown(wait=True)
