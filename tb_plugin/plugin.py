"""The TensorBoard plugin: routes under /data/plugin/gpuscope/ (docs/http-api.md) and the bundle.

Routes only parse the request, look run/worker/span up in the latest scan (names are never
joined into paths), call a view from `tb_plugin.views` (imported lazily) and answer JSON.
Errors are JSON too: 400 bad parameter, 404 unknown name, 422 unreadable trace file, 503 (with
Retry-After) for a CSV whose summaries are still being computed. The run-level routes never wait for
missing per-worker summaries: they start them in the background and answer `pending` at once.
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import mimetypes
import os
import stat
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import msgspec
from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from profiler_core import settings
from profiler_core.identity import file_identity
from profiler_core.trace.read import parallel_plan
from tb_plugin import runs as runs_mod
from tb_plugin.errors import BadRequest, LoadFailed, NotFound, NotReady, RequestError, Unavailable
from tb_plugin.routes import ROUTES, Route
from tb_plugin.summaries.answers import answer

log = logging.getLogger(__name__)

PLUGIN_NAME = "gpuscope"
STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
RESCAN_S = 1.0
#: rescan interval while the (remote) logdir cannot be listed: a refused connection may take
#: seconds of the library's retries per listing
ERROR_RESCAN_S = 10.0
ACTIVE_TTL_S = 10.0
#: least time between two rescans forced by requests naming a run the last scan did not find (a
#: run that just appeared opens at once; a stream of unknown names cannot keep the scan lock)
FORCED_RESCAN_S = 5.0
#: scans never take more than about 1 / SCAN_SHARE of the time: slow listings are spaced out
SCAN_SHARE = 3.0
CONTENT_TYPES = {
    ".js": "application/javascript",
    ".mjs": "application/javascript",
    ".css": "text/css",
    ".html": "text/html",
    ".json": "application/json",
    ".map": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".woff2": "font/woff2",
    ".woff": "font/woff",
    ".ttf": "font/ttf",
    ".wasm": "application/wasm",
    ".txt": "text/plain",
}
#: on every response of the plugin: a JSON answer or a trace opened on its own runs nothing; the
#: bundle is an ES module imported by TensorBoard's page, whose own policy governs it
CONTENT_SECURITY_POLICY = "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'self'"
FALLBACK_INDEX_JS = """// gpuscope: minimal page shown until the frontend bundle is installed
export function render() {
  const root = document.createElement('div');
  root.style.font = '14px sans-serif';
  root.style.padding = '16px';
  const title = document.createElement('h2');
  title.textContent = 'gpuscope';
  const list = document.createElement('ul');
  root.append(title, list);
  document.body.appendChild(root);
  fetch('./runs').then((r) => r.json()).then((d) => {
    for (const run of d.runs) {
      const li = document.createElement('li');
      li.textContent = run;
      list.appendChild(li);
    }
    if (!d.runs.length) list.textContent = 'No traces found in the logdir.';
  });
}
"""

_encoder = msgspec.json.Encoder()


def _default(o: Any) -> Any:
    """JSON fallback for numpy / pandas scalars and arrays."""
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    return str(o)


def _text(s: str) -> str:
    """`s` encodable as UTF-8: the bytes an undecodable file name stands for as `\\xNN`, any
    other lone surrogate as `\\uNNNN`."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        pass
    try:
        return s.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate that surrogateescape does not map to a byte
        return s.encode("utf-8", "backslashreplace").decode("utf-8")


def _clean(o: Any) -> Any:
    if isinstance(o, str):
        return _text(o)
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {_text(str(_default(k)) if not isinstance(k, str) else k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if type(o).__module__ == "numpy" or hasattr(o, "tolist"):
        return _clean(_default(o))
    return o


def to_json(obj: Any) -> bytes:
    """Encode a view's result (NaN/inf become null; numpy values become plain numbers)."""
    try:
        return _encoder.encode(obj)
    except (TypeError, msgspec.EncodeError, OverflowError, UnicodeEncodeError):
        return json.dumps(_clean(obj), allow_nan=False, default=_default).encode()


#: seconds a client is told to wait (Retry-After) before asking again for what is still being computed
RETRY_AFTER_S = 2


def _respond(
    request: wrappers.Request, obj: Any, code: int = 200, headers: dict[str, str] | None = None
) -> wrappers.Response:
    return http_util.Respond(
        request, to_json(obj), "application/json", code=code, headers=list((headers or {}).items()) or None
    )


def _redact(message: str) -> str:
    """An error message without credentials (URLs of remote logdirs may carry some)."""
    from profiler_core.storage import redact

    return redact(message)


def _route(route: Route, fn: Callable) -> Callable:
    """Wrap a handler: parse the request's parameters with `route`, then call `fn(request, args)`;
    a RequestError answers its status with `{"error": message}`, anything else a JSON 500."""

    @wrappers.Request.application
    def app(request: wrappers.Request) -> wrappers.Response:
        try:
            result = fn(request, route.parse(request.args))
            if isinstance(result, wrappers.Response):
                return result
            return _respond(request, result)
        except RequestError as e:
            return _respond(request, {"error": _redact(e.message)}, e.status, e.headers)
        except Exception as e:  # noqa: BLE001 - never a traceback page
            # the traceback only in the log, and only where no message can hold a credential
            log.error(
                "gpuscope: %s failed: %s",
                request.path,
                _redact(f"{type(e).__name__}: {e}"),
                exc_info=_redact(str(e)) == str(e),
            )
            return _respond(request, {"error": _redact(f"internal error: {type(e).__name__}: {e}")}, 500)

    app.__name__ = fn.__name__
    return app


def _with_security_headers(app: Callable) -> Callable:
    """Wrap a WSGI app so that every response carries CONTENT_SECURITY_POLICY."""

    def wrapped(environ: dict, start_response: Callable) -> Any:
        def start(status: str, headers: list, exc_info: Any = None) -> Any:
            headers = [(k, v) for k, v in headers if k.lower() != "content-security-policy"]
            headers.append(("Content-Security-Policy", CONTENT_SECURITY_POLICY))
            return start_response(status, headers, exc_info)

        return app(environ, start)

    wrapped.__name__ = getattr(app, "__name__", "app")
    return wrapped


# ------------------------------------------------------------------------ views
def _view(module: str, function: str) -> Callable:
    try:
        mod = importlib.import_module(f"tb_plugin.views.{module}")
        return getattr(mod, function)
    except (ImportError, AttributeError) as e:
        raise Unavailable(f"view {module}.{function} is not available ({e})") from None


def _answer(t: Any, key: str, fn: Callable[[], Any]) -> Any:
    """A per-file view's answer, computed once per parsed trace (kept with its stages, dropped with it)."""
    from profiler_core.analysis.stages.registry import cached

    return cached(t, "plugin:" + key, fn)


def _overview_answer(t: Any) -> dict:
    """The /overview answer of one file (without the run's ledger)."""

    return _answer(t, "overview", lambda: _view("overview", "overview")(t))


def _operators_answer(t: Any, group_by: str) -> dict:
    return _answer(t, f"operators:{group_by}", lambda: _view("operators", "operators")(t, group_by=group_by))


def _kernels_answer(t: Any, group_by: str) -> dict:
    return _answer(t, f"kernels:{group_by}", lambda: _view("kernels", "kernels")(t, group_by=group_by))


#: a trace of at least this many events is warmed on two threads where there are 2 cores or more: the Overview
#: beside the operators and kernels (they share no stage; numpy and the op tree's C pass let go of the GIL).
#: 11M-event trace: views 2.8 s -> 1.9 s; below this the second thread's start costs more than it saves.
WARM_TWO_THREADS_EVENTS = 1 << 20


def _try(fn: Callable[[Any], object], t: Any) -> None:
    try:
        fn(t)
    except Exception:  # noqa: BLE001 - the request computes it again and answers the error
        log.debug("gpuscope: warming a view failed", exc_info=True)


def warm_views(t: Any) -> None:
    """Compute what a file's first page asks for (the Overview, and the operators and kernels with
    their default grouping) once it is read, on the loader's warming thread: the requests then find
    the answers ready. A failure is left for the request to report."""
    from tb_plugin.params import KERNELS_GROUP_BY, OPERATORS_GROUP_BY

    def operators_and_kernels(t: Any) -> None:
        _try(lambda t: _operators_answer(t, OPERATORS_GROUP_BY.default_value()), t)
        _try(lambda t: _kernels_answer(t, KERNELS_GROUP_BY.default_value()), t)

    if len(t.events) >= WARM_TWO_THREADS_EVENTS and parallel_plan.here(native=False).warm_two_threads:
        beside = threading.Thread(target=_try, args=(_overview_answer, t), name="gpuscope-warm-overview", daemon=True)
        beside.start()
        operators_and_kernels(t)
        beside.join()
    else:
        _try(_overview_answer, t)
        operators_and_kernels(t)


# ------------------------------------------------------------------------ the plugin
#: runs with more workers than this are not parsed in the background: their traces load when a
#: per-worker view asks, and the run-level views read only the per-worker summaries
PREPARE_MAX_WORKERS = settings.get("GPUSCOPE_PREPARE_MAX_WORKERS")


class _State:
    """Scanner + loader + summaries + the latest scan, created on first use."""

    def __init__(self, logdir: str, scheduler: str | None = None) -> None:
        from tb_plugin.loader import Loader
        from tb_plugin.runs import Scanner
        from tb_plugin.summaries.engine import Summaries

        self.scanner = Scanner(logdir)
        self.loader = Loader(warm=warm_views)
        self.summaries = Summaries(self.scanner.logdir or logdir, scheduler=scheduler)
        self.big: set = set()  # keys of files of runs with more than PREPARE_MAX_WORKERS workers
        self.runs: dict = {}
        self.scanned_at = -math.inf
        self.scan_s = 0.0  # how long the last scan took
        self.began_at = -math.inf  # when the last scan began
        self.forced_at = -math.inf  # when the last forced rescan began
        self.lock = threading.Lock()

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
                    [f for r in self.runs.values() for f in r.files()], lazy=lambda f: f.key in self.big
                )
                self.summaries.prepare(
                    [f for r in self.runs.values() if len(r.workers) > 1 for f in r.files()],
                    loaded=self.trace_for_summary,
                )
            return self.runs

    def trace_for_summary(self, f: Any) -> Any:
        """The parsed trace to summarize `f` from: the loader's (waiting for it) for files it
        prepares, the one in memory or None (read the file alone) for big runs' files."""
        if f.key in self.big:
            return self.loader.peek(f)
        return self.loader.get(f, cancel_warming=False)  # background work: the warming stays


#: what the routes import on first use: the per-file Overview's ledger, the run-level routes (/distributed,
#: /diagnosis, the Overview's run ledger)
WARM_MODULES = (
    "profiler_core.analysis.worker.ledger",
    "tb_plugin.views.distributed",
    "tb_plugin.summaries.summary",
    "profiler_core.analysis.worker.worker_facts",
    "tb_plugin.run_level.stragglers",
    "tb_plugin.run_level.run_ledger",
    "tb_plugin.run_level.report",
)


#: a /runs long poll looks at the logdir again at least this often (new files, files still being written)
WAIT_STEP_S = 1.0

#: the warm-up's imports wait this long for the first request, then until the loader is idle (at most
#: WARM_UP_WAIT_S): on a few cores they would slow the first files' reading and views down
WARM_UP_DELAY_S = 0.2
WARM_UP_WAIT_S = 30.0


def _warm_up(plugin: GpuscopePlugin | None = None) -> None:
    if plugin is not None:
        time.sleep(WARM_UP_DELAY_S)
        deadline = time.monotonic() + WARM_UP_WAIT_S
        while time.monotonic() < deadline:
            state = plugin._state
            if state is None or not state.loader.busy():
                break
            time.sleep(0.05)
    for name in WARM_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the route reports import errors itself
            pass


class GpuscopePlugin(base_plugin.TBPlugin):
    """gpuscope: views of Kineto traces (ours and PyTorch's) found under the logdir."""

    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext) -> None:
        self._logdir = getattr(context, "logdir", "") or ""
        flags = getattr(context, "flags", None)
        self._scheduler = (
            getattr(flags, "gpuscope_dask_scheduler", None) or settings.get("GPUSCOPE_DASK_SCHEDULER") or None
        )
        self._state: _State | None = None
        self._state_lock = threading.Lock()
        self._active: tuple[float, bool] = (0.0, False)
        # the run-level views' imports (pandas, the diagnosis) take a second or more: done while TensorBoard
        # starts and the page loads, not on the first request (nor while the first files are read)
        threading.Thread(target=_warm_up, args=(self,), name="gpuscope-warm-up", daemon=True).start()

    # -------------------------------------------------------------- TBPlugin API
    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        # TensorBoard's reload (button and auto-reload) calls the frame's reload(), which index.js defines
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="gpuscope", disable_reload=False)

    def is_active(self) -> bool:
        """True when the logdir holds trace files; cached for ACTIVE_TTL_S, True once found."""
        checked_at, active = self._active
        if active or time.monotonic() - checked_at < ACTIVE_TTL_S:
            return active
        try:
            from tb_plugin.runs import Scanner

            active = bool(self._logdir) and Scanner(self._logdir).has_traces()
        except Exception:  # noqa: BLE001 - is_active must never raise
            active = False
        self._active = (time.monotonic(), active)
        return active

    def get_plugin_apps(self) -> dict:
        apps = {}
        for route in ROUTES:
            fn = getattr(self, route.handler)
            apps[route.path] = _route(route, self._held(fn) if route.held else fn)
        apps["/index.js"] = self._static
        apps["/*"] = self._static
        return {path: _with_security_headers(app) for path, app in apps.items()}

    def _held(self, fn: Callable) -> Callable:
        """`fn` with the loader's queue held while it runs: a view is computed before the next
        background file starts (a file it asks for is read first anyway)."""

        def route(request: wrappers.Request, args: dict) -> Any:
            with self.state().loader.hold():
                return fn(request, args)

        route.__name__ = getattr(fn, "__name__", "route")
        return route

    # -------------------------------------------------------------- state and look-ups
    def state(self) -> _State:
        with self._state_lock:
            if self._state is None:
                self._state = _State(self._logdir, scheduler=self._scheduler)
            return self._state

    def _run(self, name: str) -> Any:
        state = self.state()
        run = state.refresh().get(name)
        if run is None:
            run = state.refresh(force=True).get(name)
        if run is None:
            raise NotFound(f"unknown run {name!r}")
        return run

    def _file(self, args: dict, prefix: str = "") -> Any:
        run = self._run(args[prefix + "run"])
        worker, span = args[prefix + "worker"], args[prefix + "span"]
        if worker not in run.workers:
            raise NotFound(f"unknown worker {worker!r} in run {run.name!r}")
        f = run.file(worker, span)
        if f is None:
            raise NotFound(f"unknown span {span!r} of worker {worker!r} in run {run.name!r}")
        return f

    def _trace_data(self, args: dict, prefix: str = "") -> Any:
        return self.state().loader.get(self._file(args, prefix))

    # -------------------------------------------------------------- listing routes
    def _runs(self, request: wrappers.Request, args: dict) -> dict:
        state = self.state()
        runs = state.refresh(force=args["rescan"] == "1")  # a reload: list the logdir now
        progress = state.loader.progress()
        loading = progress.pop("loading") or state.scanner.unstable > 0
        # beyond runs.MAX_WAITERS long polls at once, one answers at once (each holds a server thread)
        waits = bool(loading and args["wait"]) and runs_mod.enter_wait()
        deadline = time.monotonic() + (args["wait"] if waits else 0.0)
        try:
            while loading and time.monotonic() < deadline:  # a long poll: answer once loaded, or at the deadline
                left = deadline - time.monotonic()
                if progress["files_done"] < progress["files_total"]:
                    state.loader.wait_loaded(min(left, WAIT_STEP_S))
                else:  # files still being written: listed again until they are stable
                    time.sleep(min(left, WAIT_STEP_S))
                runs = state.refresh()
                progress = state.loader.progress()
                loading = progress.pop("loading") or state.scanner.unstable > 0
        finally:
            if waits:
                runs_mod.leave_wait()
        errors = [{"run": f.run, "file": f.relpath, "error": msg} for f, msg in state.loader.errors()]
        errors.sort(key=lambda e: (e["run"], e["file"]))
        if state.scanner.error:  # a remote logdir that cannot be listed (bucket, credentials, network)
            where = _redact(state.scanner.logdir)
            reason = state.scanner.error
            errors.insert(
                0,
                {
                    "run": "",
                    "file": where,
                    "error": reason[len(where) + 2 :] if reason.startswith(where + ": ") else reason,
                },
            )
        warnings = sorted(
            ({"run": f.run, "file": f.relpath, "message": msg} for f, msg in state.loader.warnings()),
            key=lambda w: (w["run"], w["file"]),
        )
        if runs:
            self._active = (time.monotonic(), True)
        out = {"runs": list(runs), "loading": loading, "progress": progress, "errors": errors, "warnings": warnings}
        if not runs:  # say where nothing was found (a mistyped --logdir is the usual cause)
            out["logdir"] = _redact(state.scanner.logdir or self._logdir)
            if not state.scanner.remote and state.scanner.logdir and not os.path.isdir(state.scanner.logdir):
                out["logdir_missing"] = True
        return out

    def _file_status(self, request: wrappers.Request, args: dict) -> dict:
        """How far the loading of one run/worker/span's file is, and of all files together."""
        state = self.state()
        out = state.loader.file_status(self._file(args))
        out["all"] = state.loader.progress()
        return out

    def _workers(self, request: wrappers.Request, args: dict) -> dict:
        return {"workers": sorted(self._run(args["run"]).workers)}

    def _spans(self, request: wrappers.Request, args: dict) -> dict:
        run = self._run(args["run"])
        worker = args["worker"]
        if worker not in run.workers:
            raise NotFound(f"unknown worker {worker!r} in run {run.name!r}")
        return {"spans": run.spans(worker)}

    # -------------------------------------------------------------- view routes
    def _call(self, module: str, function: str, *args: Any, **kwargs: Any) -> Any:
        return _view(module, function)(*args, **kwargs)

    def _overview(self, request: wrappers.Request, a: dict) -> Any:
        out = _overview_answer(self._trace_data(a))
        if len(self._run(a["run"]).workers) > 1:  # the run's ledger, from the summaries there are now
            from tb_plugin.run_level.run_ledger import run_view

            summaries, errors, pending = self._summaries_now(a)
            ledger = self._kept(("run_ledger", *pending), [summaries], lambda: run_view(summaries, pending))
            out = {**out, "run_ledger": {**ledger, "errors": errors}}
        return out

    def _modules(self, request: wrappers.Request, a: dict) -> Any:
        return self._call("modules", "modules", self._trace_data(a))

    def _operators(self, request: wrappers.Request, a: dict) -> Any:
        return _operators_answer(self._trace_data(a), a["group_by"])

    def _operator_stack(self, request: wrappers.Request, a: dict) -> Any:
        return self._call("operators", "operator_stacks", self._trace_data(a), a["name"], input_shape=a["input_shape"])

    def _kernels(self, request: wrappers.Request, a: dict) -> Any:
        return _kernels_answer(self._trace_data(a), a["group_by"])

    def _memory_curve(self, request: wrappers.Request, a: dict) -> Any:
        return self._call(
            "memory", "memory_curve", self._trace_data(a), a["start_us"], a["end_us"], max_points=a["max_points"]
        )

    def _memory_events(self, request: wrappers.Request, a: dict) -> Any:
        return self._call("memory", "memory_events", self._trace_data(a), a["start_us"], a["end_us"])

    def _memory_stats(self, request: wrappers.Request, a: dict) -> Any:
        return self._call("memory", "memory_stats", self._trace_data(a), a["start_us"], a["end_us"])

    def _diff(self, request: wrappers.Request, a: dict) -> Any:
        return self._compared(a, "diff", "diff")

    def _kernel_diff(self, request: wrappers.Request, a: dict) -> Any:
        return self._compared(a, "kernel_diff", "kernel_diff")

    def _compared(self, a: dict, module: str, function: str) -> Any:
        """A view of two profiles: the request's and the one exp_* names (or, without exp_*, `_other_profile`'s)."""
        base = self._trace_data(a)
        compared = ("exp_run", "exp_worker", "exp_span")
        if any(a[k] is not None for k in compared):
            missing = [k for k in compared if a[k] is None]
            if missing:
                raise BadRequest(
                    f"missing parameter {missing[0]!r} (give all of exp_run, exp_worker and exp_span, or none)"
                )
            exp, other = self._trace_data(a, prefix="exp_"), None
        else:
            other = self._other_profile(self._run(a["run"]), a["worker"], a["span"])
            exp = self.state().loader.get(other[0].file(other[1], other[2]))
        out = self._call(module, function, base, exp)
        if other is not None and isinstance(out, dict):
            out["compared_with"] = {"run": other[0].name, "worker": other[1], "span": other[2]}
        return out

    def _other_profile(self, run: Any, worker: str, span: str) -> tuple:
        """What a diff without exp_* compares with: the run listed before `run` (else after it), the
        same worker there when it has one, else another worker of `run`, else another span."""
        state = self.state()
        runs = state.refresh()

        def readable(r: Any, w: str) -> str | None:
            spans = [s for s in r.spans(w) if state.loader.error(r.file(w, s)) is None]
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
            if s != span and state.loader.error(run.file(worker, s)) is None:
                return run, worker, s
        raise BadRequest("there is only one profile in the log directory: nothing to compare it with")

    def _span_files(self, a: dict) -> list:
        """(worker, file) of each worker of the requested run that has the requested span, by worker name."""
        run = self._run(a["run"])
        span = a["span"]
        files = [(w, run.file(w, span)) for w in sorted(run.workers)]
        files = [(w, f) for w, f in files if f is not None]
        if not files:
            raise NotFound(f"no worker of run {run.name!r} has span {span!r}")
        return files

    def _worker_summaries(self, a: dict) -> tuple[dict, list]:
        """worker -> summary of the requested run and span, and the files that failed."""
        from tb_plugin.loader import Loader

        state = self.state()
        files = self._span_files(a)
        got = state.summaries.get_many([f for _, f in files], loaded=state.trace_for_summary)
        summaries, errors = {}, []
        for (w, f), s in zip(files, got):
            if isinstance(s, BaseException):
                errors.append({"worker": w, "file": f.relpath, "error": Loader._message(f, s)})
            else:
                summaries[w] = s
        if not summaries:
            raise LoadFailed("; ".join(f"{e['file']}: {e['error']}" for e in errors))
        return summaries, errors

    def _kept(self, what: tuple, parts: list, compute: Callable[[], Any]) -> dict:
        """A run-level answer (a copy: callers add to it), computed once per set of summaries (`answers.answer`)."""
        return dict(answer(self.state().summaries, what, parts, compute))

    def _ready_summaries(self, *queries: dict) -> list[tuple[dict, list]] | dict:
        """Each query's (worker -> summary, failed files) once every summary of its run and span exists;
        else, without waiting, the pending answer `{"pending", "progress": {"done", "total"}}` (the
        missing summaries being computed in the background). `pending` names workers, or with several
        queries `{"run", "worker"}` objects. LoadFailed when a query's workers all failed."""
        for q in queries:  # an unknown run or span is a 404 before anything starts
            self._span_files(q)
        got: list[tuple[dict, list]] = []
        pending: list = []
        total = 0
        for q in queries:
            summaries, errors, waiting = self._summaries_now(q)
            got.append((summaries, errors))
            total += len(summaries) + len(errors) + len(waiting)
            pending += waiting if len(queries) == 1 else [{"run": q["run"], "worker": w} for w in waiting]
        if pending:
            return {"pending": pending, "progress": {"done": total - len(pending), "total": total}}
        for summaries, errors in got:
            if not summaries:
                raise LoadFailed("; ".join(f"{e['file']}: {e['error']}" for e in errors))
        return got

    def _summaries_now(self, a: dict) -> tuple[dict, list, list]:
        """Without waiting: the summaries of the run's workers that exist now, the failed files and
        the workers still being read (their summaries are started in the background)."""
        from tb_plugin.loader import Loader

        state = self.state()
        files = self._span_files(a)
        summaries, errors, pending = {}, [], []
        for w, f in files:
            s = state.summaries.find(f)
            failed = state.summaries.failure(f) or (state.loader.error(f) if s is None else None)
            if s is not None:
                summaries[w] = s
            elif failed is not None:
                errors.append(
                    {
                        "worker": w,
                        "file": f.relpath,
                        "error": failed if isinstance(failed, str) else Loader._message(f, failed),
                    }
                )
            else:
                pending.append(w)
        if pending:  # the failures of other files stay known: they are not retried on every request
            state.summaries.prepare(
                [f for w, f in files if w in pending], loaded=state.trace_for_summary, forget_others=False
            )
        return summaries, errors, pending

    def _distributed(self, request: wrappers.Request, a: dict) -> Any:
        pending: list = []
        # partial: what is known now, `pending` naming the workers still read (one worker: nothing to show early)
        if a["partial"] == "1" and len(self._run(a["run"]).workers) > 1:
            summaries, errors, pending = self._summaries_now(a)
            if not summaries:
                return {
                    "workers": {},
                    "steps": {},
                    "comm_ops": {},
                    "pending": pending,
                    **({"errors": errors} if errors else {}),
                }
        else:
            summaries, errors = self._worker_summaries(a)
        result = self._kept(("distributed",), [summaries], lambda: _distributed_view(summaries))
        if pending:
            result["pending"] = pending
        if errors:
            result["errors"] = errors
        return result

    def _diagnosis(self, request: wrappers.Request, a: dict) -> Any:
        from tb_plugin.run_level import report

        ready = self._ready_summaries(a)
        if isinstance(ready, dict):
            return ready
        [(summaries, errors)] = ready
        run = self._run(a["run"])
        # a one-worker run: its single-rank critical path, from the trace the other views of the run load
        trace = lambda w: self.state().loader.get(run.file(w, a["span"]))  # noqa: E731
        result = self._kept(("diagnosis",), [summaries], lambda: report.diagnose(summaries, trace=trace))
        if errors:
            result["errors"] = errors
        return result

    def _pipeline(self, request: wrappers.Request, a: dict) -> Any:
        from tb_plugin.run_level import pipeline

        ready = self._ready_summaries(a)
        if isinstance(ready, dict):
            return ready
        [(summaries, errors)] = ready
        result = self._kept(
            ("pipeline",), [summaries], lambda: pipeline.analyse({w: s.pipeline for w, s in summaries.items()})
        )
        if errors:
            result["errors"] = errors
        return result

    def _clock_offsets(self, request: wrappers.Request, a: dict) -> Any:
        from tb_plugin.run_level import clock_offsets

        ready = self._ready_summaries(a)
        if isinstance(ready, dict):
            return ready
        [(summaries, errors)] = ready
        result = self._kept(("clock_offsets",), [summaries], lambda: clock_offsets.clock_offsets(summaries))
        if errors:
            result["errors"] = errors
        return result

    def _jobdiff(self, request: wrappers.Request, a: dict) -> Any:
        from tb_plugin.run_level import job_diff

        ready = self._ready_summaries(
            {"run": a["run"], "span": a["span"]}, {"run": a["exp_run"], "span": a["exp_span"]}
        )
        if isinstance(ready, dict):
            if a["format"] == "csv":  # never a partial CSV: a download link asked too early says so
                p = ready["progress"]
                raise NotReady(
                    f"the workers' summaries are still being computed ({p['done']} of {p['total']} done); "
                    f"ask again in a few seconds",
                    headers={"Retry-After": str(RETRY_AFTER_S)},
                )
            return ready
        (sa, ea), (sb, eb) = ready
        try:
            result = self._kept(("jobdiff",), [sa, sb], lambda: job_diff.job_diff(sa, sb))
        except job_diff.JobDiffError as e:
            raise LoadFailed(str(e)) from None
        if a["format"] == "csv":
            name = f"jobdiff_{a['run']}_{a['exp_run']}.csv".replace("/", "_")
            return wrappers.Response(
                job_diff.to_csv(result),
                status=200,
                content_type="text/csv; charset=utf-8",
                headers={"Content-Disposition": content_disposition(name), "X-Content-Type-Options": "nosniff"},
            )
        errors = [{**e, "run": a["run"]} for e in ea] + [{**e, "run": a["exp_run"]} for e in eb]
        if errors:
            result["errors"] = errors
        return result

    def _distributed_step(self, request: wrappers.Request, a: dict) -> Any:
        worker, step = a["worker"], a["step"]
        summaries, _ = self._worker_summaries(a)
        if worker not in summaries:
            raise NotFound(f"unknown worker {worker!r} (or its trace cannot be read)")
        parts = {w: s.distributed for w, s in summaries.items()}
        return self._kept(
            ("distributed/step", worker, step),
            [summaries],
            lambda: self._call("distributed", "step_detail", parts, worker, step),
        )

    def _timeline(self, request: wrappers.Request, a: dict) -> Any:
        return self._call(
            "timeline", "timeline", self._trace_data(a), a["start_us"], a["end_us"], width_px=a["width_px"]
        )

    def _search(self, request: wrappers.Request, a: dict) -> Any:
        return self._call("timeline", "search", self._trace_data(a), a["query"], limit=a["limit"])

    def _range_summary(self, request: wrappers.Request, a: dict) -> Any:
        return self._call(
            "timeline_tools", "range_summary", self._trace_data(a), a["start_us"], a["end_us"], tracks=a["tracks"]
        )

    def _counters(self, request: wrappers.Request, a: dict) -> Any:
        return self._call("timeline_tools", "counters", self._trace_data(a), a["start_us"], a["end_us"], a["width_px"])

    def _occurrences(self, request: wrappers.Request, a: dict) -> Any:
        return self._call("timeline_tools", "occurrences", self._trace_data(a), a["name"], limit=a["limit"])

    def _locate(self, request: wrappers.Request, a: dict) -> Any:
        return self._call("timeline_tools", "locate", self._trace_data(a), a["idx"])

    def _event(self, request: wrappers.Request, a: dict) -> dict:
        idx = a["idx"]
        t = self._trace_data(a)
        try:
            event = _raw_event(t, idx)
        except IndexError as e:
            raise NotFound(str(e)) from None
        except Exception as e:  # noqa: BLE001 - file changed or vanished since it was loaded
            raise NotFound(f"event {idx} cannot be read: {e}") from None
        if not isinstance(event, dict):
            return {"idx": idx, "event": event, "args": {}}
        args = event.get("args")
        return {
            "idx": idx,
            "event": {k: v for k, v in event.items() if k != "args"},
            "args": args if isinstance(args, dict) else {},
        }

    # -------------------------------------------------------------- raw trace and static files
    def _trace(self, request: wrappers.Request, a: dict) -> wrappers.Response:
        f = self._file(a)
        t = self.state().loader.get(f)  # only a file that parsed as a trace (else LoadFailed: 422)
        fh = _open_parsed(f, tuple(t.source_stat))
        try:
            gz = fh.read(2) == b"\x1f\x8b"
            fh.seek(0)
        except OSError as e:
            fh.close()
            raise NotFound(f"{f.relpath}: cannot read ({e.strerror or e})") from None
        body = _file_chunks(fh) if gz else _gzip_chunks(fh)
        headers = {
            "Content-Encoding": "gzip",
            "Cache-Control": "no-cache",
            "X-Content-Type-Options": "nosniff",
            "Content-Disposition": content_disposition(download_name(f.path)),
        }
        if gz:
            headers["Content-Length"] = str(t.source_stat[0] if t.source_stat[0] >= 0 else f.size)
        return wrappers.Response(
            body, status=200, content_type="application/json", headers=headers, direct_passthrough=True
        )

    @wrappers.Request.application  # type: ignore[arg-type]  # typed for functions; binds methods too
    def _static(self, request: wrappers.Request) -> wrappers.Response:
        marker = f"/data/plugin/{PLUGIN_NAME}/"
        path = request.path
        name = path.split(marker, 1)[1] if marker in path else path.rsplit("/", 1)[-1]
        name = name or "index.js"
        resolved = _static_file(name)
        if resolved is None:
            if name == "index.js":
                return http_util.Respond(request, FALLBACK_INDEX_JS, "application/javascript")
            return _respond(request, {"error": f"no such file {name!r}"}, 404)
        with open(resolved, "rb") as fh:
            data = fh.read()
        ext = os.path.splitext(resolved)[1].lower()
        ctype = CONTENT_TYPES.get(ext) or mimetypes.guess_type(resolved)[0] or "application/octet-stream"
        return http_util.Respond(request, data, ctype)


def _distributed_view(summaries: dict) -> dict:
    """The /distributed answer of the workers' summaries (without `pending` and `errors`)."""
    result = dict(_view("distributed", "from_summaries")({w: s.distributed for w, s in summaries.items()}))
    if isinstance(result.get("stragglers"), list):  # why, what-if and the Diff pair, from the same summaries
        from tb_plugin.run_level import stragglers

        stragglers.annotate_rows(result["stragglers"], summaries)
    devices = result.get("devices")
    if isinstance(devices, dict):  # the per-worker table: what each summary says of its worker
        for w, d in devices.items():
            s = summaries[w]
            d["events"] = s.events
            d["memory_peak"] = s.memory_peak
            d["step_avg_us"] = s.overview.average.get("total_us") if s.overview is not None else None
    return result


def _static_file(name: str) -> str | None:
    """The regular file `name` inside tb_plugin/static/, or None (never a path outside it)."""
    if "\\" in name or "\x00" in name or name.startswith("/"):
        return None
    parts = name.split("/")
    if any(p in ("", ".", "..") or p.startswith(".") for p in parts):
        return None
    root = os.path.realpath(STATIC_DIR)
    path = os.path.realpath(os.path.join(root, *parts))
    if not path.startswith(root + os.sep) or not os.path.isfile(path):
        return None
    return path


def _open_parsed(f, source: tuple):
    """The trace file `f`, opened only if it is still the regular file that was parsed (`source`
    is its `storage.fingerprint` then): never a device or FIFO swapped in, never another file."""
    from profiler_core import storage

    if storage.is_remote(f.path):
        try:
            changed = source != (-1, -1) and storage.fingerprint(f.path) != source
            fh = None if changed else storage.open_read(f.path)
        except OSError as e:
            raise NotFound(f"{f.relpath}: cannot read ({e})") from None
        if fh is None:
            raise NotFound(f"{f.relpath} changed since it was loaded; reload the page")
        return fh
    try:  # non-blocking: opening a FIFO for reading must not wait for a writer
        fd = os.open(f.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        raise NotFound(f"{f.relpath}: cannot read ({e.strerror})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or (source != (-1, -1) and file_identity(st) != source):
        os.close(fd)
        raise NotFound(f"{f.relpath} changed on disk since it was loaded; reload the page")
    return os.fdopen(fd, "rb")


def _raw_event(t: Any, idx: int) -> Any:
    """The raw event at position `idx` of the loaded trace `t`'s file (read back on request)."""
    from profiler_core.trace.read.lookup import trace_event

    return trace_event(t, idx)


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


def _file_chunks(fh, size: int = 1 << 20):
    with fh:
        while True:
            block = fh.read(size)
            if not block:
                return
            yield block


def _gzip_chunks(fh, size: int = 1 << 20):
    comp = zlib.compressobj(6, zlib.DEFLATED, 31)
    for block in _file_chunks(fh, size):
        out = comp.compress(block)
        if out:
            yield out
    yield comp.flush()


class GpuscopeLoader(base_plugin.TBLoader):
    """TensorBoard's entry point for gpuscope: adds its flags, then builds the plugin."""

    def define_flags(self, parser) -> None:
        parser.add_argument(
            "--gpuscope_dask_scheduler",
            metavar="ADDRESS",
            default=None,
            help="gpuscope: a Dask scheduler (tcp://host:8786) that computes the per-worker summaries "
            "missing from LOGDIR/.gpuscope/summaries (default: computed in TensorBoard's process)",
        )

    def load(self, context: base_plugin.TBContext) -> GpuscopePlugin:
        return GpuscopePlugin(context)
