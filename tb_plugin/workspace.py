"""What the routes answer from: one logdir's scanner, loader and summaries, the latest scan, and the look-ups of a
request's run, worker, span and summaries (names are looked up in the scan, never joined into paths).

The route handlers (`tb_plugin/handlers.py`) receive a Workspace; the plugin (`tb_plugin/plugin.py`) makes one on
first use and does HTTP only.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

from profiler_core import settings
from tb_plugin.errors import BadRequest, NotFound
from tb_plugin.summaries.engine import Pending, Ready, pending_answer

RESCAN_S = 1.0
#: a logdir that cannot be listed (an unreachable bucket) is listed again this often at most
ERROR_RESCAN_S = 10.0
#: a forced rescan (TensorBoard's reload, an unknown name) lists the logdir again this often at most
FORCED_RESCAN_S = 5.0
#: the next scan waits at least this many times the last scan's length (a slow store is not listed non-stop)
SCAN_SHARE = 3.0
#: runs with more workers than this are not parsed in the background: their traces load when a
#: per-worker view asks, and the run-level views read only the per-worker summaries
PREPARE_MAX_WORKERS = settings.get("GPUSCOPE_PREPARE_MAX_WORKERS")


class Workspace:
    """Scanner + loader + summaries + the latest scan of one logdir."""

    def __init__(
        self,
        logdir: str,
        scheduler: str | None = None,
        warm: Callable[[Any], None] | None = None,
        eager: bool = True,
    ) -> None:
        """`eager` (the plugin): each scan queues every file for a background read and the summaries of runs of
        several workers; False (the Python API, `tb_plugin.api`): nothing is read before a question needs it, the
        files are listed as soon as they exist (no stability wait) and read in this process."""
        from tb_plugin.loader import Loader
        from tb_plugin.runs import Scanner
        from tb_plugin.summaries.engine import Summaries

        self.logdir = logdir  # as given (the scanner's is normalised)
        self.eager = eager
        self.scanner = Scanner(logdir) if eager else Scanner(logdir, stable_age_s=0.0)
        self.loader = Loader(warm=warm) if eager else Loader(processes=0, warm=warm)
        self.summaries = Summaries(self.scanner.logdir or logdir, scheduler=scheduler, quiet=self.loader.hold)
        # (run, span) -> (workers, the partial Distributed view of that many) while its summaries are computed
        self.partial_views: dict[tuple, tuple[int, dict]] = {}
        self.big: set = set()  # keys of files of runs with more than PREPARE_MAX_WORKERS workers
        self.runs: dict = {}
        self.found_runs = False  # whether a scan ever found a run (the plugin is active from then on)
        self.scanned_at = -math.inf
        self.scan_s = 0.0  # how long the last scan took
        self.began_at = -math.inf  # when the last scan began
        self.forced_at = -math.inf  # when the last forced rescan began
        self.lock = threading.Lock()

    # -------------------------------------------------------------- the scan
    def refresh(self, force: bool = False) -> dict:
        """The runs of the latest scan; rescans when it is older than the rescan interval (longer
        for slow scans), or with `force` when no scan began since the call and the last forced
        one is FORCED_RESCAN_S old."""
        asked = time.monotonic()
        with self.lock:
            now = time.monotonic()
            interval = max(ERROR_RESCAN_S if self.scanner.error else RESCAN_S, SCAN_SHARE * self.scan_s)
            due = now - self.scanned_at >= interval
            if (
                force
                and not due
                and self.began_at < asked
                and now - self.forced_at >= max(FORCED_RESCAN_S, SCAN_SHARE * self.scan_s)
            ):
                due, self.forced_at = True, now
            if due:
                self.began_at = time.monotonic()
                self.runs = self.scanner.scan()
                self.scanned_at = time.monotonic()
                self.scan_s = self.scanned_at - self.began_at
                self.big = {
                    f.key for r in self.runs.values() if len(r.workers) > PREPARE_MAX_WORKERS for f in r.files()
                }
                self.loader.prepare(
                    [f for r in self.runs.values() for f in r.files()],
                    lazy=(lambda f: f.key in self.big) if self.eager else (lambda f: True),
                )
                if self.eager:
                    self.summaries.prepare(
                        [f for r in self.runs.values() if len(r.workers) > 1 for f in r.files()],
                        loaded=self.trace_for_summary,
                    )
            self.found_runs = self.found_runs or bool(self.runs)
            return self.runs

    def trace_for_summary(self, f: Any, asked: bool = False) -> Any:
        """The parsed trace to summarize `f` from: the loader's (waiting for it) for files it prepares, the one in
        memory or None (read the file alone) for big runs' files and for files a request waits for (reading one
        alone takes what the CLI takes; the loader's trace may wait behind other files and their warming)."""
        if asked or f.key in self.big:
            return self.loader.peek(f)
        return self.loader.get(f, cancel_warming=False)  # background work: the warming stays

    # -------------------------------------------------------------- a request's names
    def run(self, name: str) -> Any:
        """The run `name` of the latest scan (scanned again once when unknown); NotFound."""
        run = self.refresh().get(name)
        if run is None:
            run = self.refresh(force=True).get(name)
        if run is None:
            raise NotFound(f"unknown run {name!r}")
        return run

    def file(self, args: dict, prefix: str = "") -> Any:
        """The trace file of the request's `<prefix>run`, `worker` and `span`; NotFound."""
        run = self.run(args[prefix + "run"])
        worker, span = args[prefix + "worker"], args[prefix + "span"]
        if worker not in run.workers:
            raise NotFound(f"unknown worker {worker!r} in run {run.name!r}")
        f = run.file(worker, span)
        if f is None:
            raise NotFound(f"unknown span {span!r} of worker {worker!r} in run {run.name!r}")
        return f

    def trace(self, args: dict, prefix: str = "") -> Any:
        """The parsed trace of the request's file (read now when it is not yet)."""
        return self.loader.get(self.file(args, prefix))

    def span_files(self, a: dict) -> list:
        """(worker, file) of each worker of the requested run that has the requested span, by worker name."""
        run = self.run(a["run"])
        span = a["span"]
        files = [(w, run.file(w, span)) for w in sorted(run.workers)]
        files = [(w, f) for w, f in files if f is not None]
        if not files:
            raise NotFound(f"no worker of run {run.name!r} has span {span!r}")
        return files

    def other_profile(self, run: Any, worker: str, span: str) -> tuple:
        """What a diff without exp_* compares with: the run listed before `run` (else after it), the
        same worker there when it has one, else another worker of `run`, else another span."""
        runs = self.refresh()

        def readable(r: Any, w: str) -> str | None:
            spans = [s for s in r.spans(w) if self.loader.error(r.file(w, s)) is None]
            return spans[-1] if spans else None

        names = list(runs)
        i = names.index(run.name) if run.name in names else 0
        for name in names[:i][::-1] + names[i + 1 :]:
            other = runs[name]
            for w in ([worker] if worker in other.workers else []) + sorted(other.workers):
                s = readable(other, w)
                if s is not None:
                    return other, w, s
        for w in sorted(run.workers):
            if w != worker and readable(run, w) is not None:
                return run, w, readable(run, w)
        for s in run.spans(worker):
            if s != span and self.loader.error(run.file(worker, s)) is None:
                return run, worker, s
        raise BadRequest("there is only one profile in the log directory: nothing to compare it with")

    # -------------------------------------------------------------- summaries
    def summaries_now(self, a: dict) -> Ready | Pending:
        """The request's run and span: its workers' summaries as they are now (`Summaries.ready`)."""
        from tb_plugin.loader import failure_message

        files = self.span_files(a)
        return self.summaries.ready(files, self.trace_for_summary, self.loader.error, failure_message)

    def ready(self, *queries: dict) -> list[Ready] | dict:
        """Each query's summaries once every one of its run and span exists, else (without waiting) the pending
        answer (`engine.pending_answer`); LoadFailed when a query's workers all failed. An unknown run or span is
        a 404 before anything starts."""
        for q in queries:
            self.span_files(q)
        states = [self.summaries_now(q) for q in queries]
        if any(isinstance(s, Pending) for s in states):
            return pending_answer(states, None if len(queries) == 1 else [q["run"] for q in queries])
        return [Ready(s.summaries, s.errors).require() for s in states]

    def collect(self, a: dict) -> Ready:
        """Every worker's summary of the request's run and span, waiting for those being computed."""
        from tb_plugin.loader import failure_message

        return self.summaries.collect(self.span_files(a), self.trace_for_summary, failure_message)

    def kept(self, what: tuple, parts: list, compute: Callable[[], Any]) -> dict:
        """A run-level answer (a copy: callers add to it), computed once per set of summaries (`answers.answer`)."""
        from tb_plugin.summaries.answers import answer

        return dict(answer(self.summaries, what, parts, compute))
