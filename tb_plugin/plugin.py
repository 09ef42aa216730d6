"""The TensorBoard plugin, HTTP only: the routes of `tb_plugin.routes` under /data/plugin/gpuscope/
(docs/http-api.md) and the bundle.

A request's parameters are parsed by its route, its handler (`tb_plugin.handlers`) answers from the workspace
(`tb_plugin.workspace`), and the answer is JSON. Errors are JSON too: 400 bad parameter, 404 unknown name, 422
unreadable trace file, 503 (with Retry-After) for a CSV whose summaries are still being computed; anything else
a JSON 500. Every response carries CONTENT_SECURITY_POLICY.
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import mimetypes
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import msgspec
from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from profiler_core import native_parts, settings
from tb_plugin.errors import RequestError
from tb_plugin.routes import ROUTES, Route
from tb_plugin.workspace import Workspace

log = logging.getLogger(__name__)

PLUGIN_NAME = "gpuscope"
STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
ACTIVE_TTL_S = 10.0
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


def _route(route: Route, answer: Callable[[dict], Any]) -> Callable:
    """The WSGI app of `route`: parse the request's parameters with it, then `answer(args)`; a RequestError
    answers its status with `{"error": message}`, anything else a JSON 500."""

    @wrappers.Request.application
    def app(request: wrappers.Request) -> wrappers.Response:
        try:
            result = answer(route.parse(request.args))
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

    app.__name__ = route.handler.__name__
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


# ------------------------------------------------------------------------ the plugin


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
    from tb_plugin.handlers import WARM_MODULES

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
        self._state: Workspace | None = None
        self._state_lock = threading.Lock()
        self._active: tuple[float, bool] = (0.0, False)
        native_parts.say_once(log)  # a C extension not built (no compiler at install): said once, in the log
        # the run-level views' imports (pandas, the diagnosis) take a second or more: done while TensorBoard
        # starts and the page loads, not on the first request (nor while the first files are read)
        threading.Thread(target=_warm_up, args=(self,), name="gpuscope-warm-up", daemon=True).start()

    # -------------------------------------------------------------- TBPlugin API
    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        # TensorBoard's reload (button and auto-reload) calls the frame's reload(), which index.js defines
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="gpuscope", disable_reload=False)

    def is_active(self) -> bool:
        """True when the logdir holds trace files; cached for ACTIVE_TTL_S, True once found."""
        if self._state is not None and self._state.found_runs:  # a /runs answer listed runs
            self._active = (time.monotonic(), True)
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
        apps = {route.path: _route(route, self._answer(route)) for route in ROUTES}
        apps["/index.js"] = self._static
        apps["/*"] = self._static
        return {path: _with_security_headers(app) for path, app in apps.items()}

    def _answer(self, route: Route) -> Callable[[dict], Any]:
        """`route`'s handler over this plugin's workspace; a held route runs with the loader's queue held: a view
        is computed before the next background file starts (a file it asks for is read first anyway)."""

        def answer(args: dict) -> Any:
            ws = self.state()
            if not route.held:
                return route.handler(ws, args)
            with ws.loader.hold():
                return route.handler(ws, args)

        return answer

    def state(self) -> Workspace:
        """The workspace of the logdir, made on first use."""
        with self._state_lock:
            if self._state is None:
                from tb_plugin.handlers import warm_views

                self._state = Workspace(self._logdir, scheduler=self._scheduler, warm=warm_views)
            return self._state

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
