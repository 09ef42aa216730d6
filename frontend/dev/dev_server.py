"""Development server for the frontend: serves the bundle and the plugin's own routes
(`tb_plugin.routes.ROUTES`, answered by `tb_plugin.plugin.GpuscopePlugin`) for one logdir, without
TensorBoard's page around them.

For frontend work only; the browser tests use real TensorBoard.
    python3 frontend/dev/dev_server.py LOGDIR [PORT]   then open http://127.0.0.1:PORT/
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from werkzeug.serving import run_simple
from werkzeug.wrappers import Request, Response

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tensorboard.plugins import base_plugin  # noqa: E402

from tb_plugin.plugin import GpuscopePlugin  # noqa: E402

PREFIX = "/data/plugin/gpuscope"
ENTRY = (
    '<!doctype html><meta charset="utf-8"><base href="plugin/gpuscope/">'
    '<script type="module" src="/dev_boot.js"></script>'
)


class Backend:
    """The plugin's WSGI apps behind the few TensorBoard pages the bundle needs."""

    def __init__(self, logdir: str) -> None:
        plugin = GpuscopePlugin(base_plugin.TBContext(logdir=logdir))
        self.apps = plugin.get_plugin_apps()

    def __call__(self, environ: dict, start_response) -> object:
        path = environ.get("PATH_INFO", "")
        if path.startswith(PREFIX + "/"):
            app = self.apps.get(path[len(PREFIX) :]) or self.apps["/*"]
            return app(environ, start_response)
        return self._page(environ, start_response)

    @Request.application
    def _page(self, req: Request) -> Response:
        path = req.path
        if path in ("/", "/index.html"):
            return Response(ENTRY.replace('href="plugin', 'href="/data/plugin'), mimetype="text/html")
        if path == "/data/plugin_entry.html":
            return Response(ENTRY, mimetype="text/html")
        if path == "/data/plugins_listing":
            return Response(json.dumps({"gpuscope": {"enabled": True}}), mimetype="application/json")
        if path == "/dev_boot.js":
            return Response(
                'import("/data/plugin/gpuscope/index.js").then(m => m.render());', mimetype="text/javascript"
            )
        return Response("not found", 404)


if __name__ == "__main__":
    run_simple("127.0.0.1", int(sys.argv[2]) if len(sys.argv) > 2 else 6007, Backend(sys.argv[1]), threaded=True)
