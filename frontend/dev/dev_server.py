"""Development stand-in for the plugin backend: serves the bundle and the HTTP API of DESIGN.md §4
from one logdir, calling whichever tb_plugin.views modules exist (canned answers otherwise).

For frontend work before/without the real backend only; the browser tests use real TensorBoard.
    python3 frontend/dev/dev_server.py LOGDIR [PORT]   then open http://127.0.0.1:PORT/
"""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

from werkzeug.serving import run_simple
from werkzeug.wrappers import Request, Response

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "tb_plugin" / "static"
PREFIX = "/data/plugin/gpuscope/"
ENTRY = ('<!doctype html><meta charset="utf-8"><base href="plugin/gpuscope/">'
         '<script type="module" src="/dev_boot.js"></script>')


def scan(logdir: Path) -> dict:
    """run -> worker -> [file, ...] (spans in time order)."""
    runs: dict = {}
    import os
    found = [Path(d) / n for d, _, ns in os.walk(logdir, followlinks=True) for n in ns]
    for f in sorted(found):
        if not (f.name.endswith(".json") or f.name.endswith(".json.gz")):
            continue
        run = str(f.parent.relative_to(logdir)) or "."
        worker = f.name.split(".")[0]
        runs.setdefault(run, {}).setdefault(worker, []).append(f)
    return runs


class Backend:
    def __init__(self, logdir: str):
        self.logdir = Path(logdir)
        self.runs = scan(self.logdir)
        self.cache: dict = {}

    def trace(self, q) -> object:
        from profiler_core.trace.reader import read_trace
        f = self.runs[q["run"]][q["worker"]][int(q.get("span") or 1) - 1]
        if f not in self.cache:
            self.cache[f] = read_trace(str(f))
        return self.cache[f]

    def view(self, mod: str, fn: str, *args, **kw):
        try:
            m = importlib.import_module(f"tb_plugin.views.{mod}")
            return getattr(m, fn)(*args, **kw)
        except (ImportError, AttributeError):
            return None

    def answer(self, route: str, q: dict):
        def num(k):
            return float(q[k]) if q.get(k) not in (None, "") else None
        if route == "runs":
            return {"runs": sorted(self.runs), "loading": False}
        if route == "workers":
            return {"workers": sorted(self.runs[q["run"]])}
        if route == "spans":
            return {"spans": [str(i + 1) for i in range(len(self.runs[q["run"]][q["worker"]]))]}
        if route == "trace":
            return self.runs[q["run"]][q["worker"]][int(q.get("span") or 1) - 1].read_bytes()
        if route == "distributed":
            ts = {w: self.trace({**q, "worker": w}) for w in self.runs[q["run"]]}
            return self.view("distributed", "distributed", ts) or {"workers": {}, "steps": {}, "comm_ops": {}}
        t = self.trace(q)
        table = {
            "overview": lambda: self.view("overview", "overview", t),
            "operators": lambda: self.view("operators", "operators", t, group_by=q.get("group_by", "name")),
            "operators/stack": lambda: self.view("operators", "operator_stacks", t, q.get("name"), q.get("input_shape")),
            "kernels": lambda: self.view("kernels", "kernels", t, group_by=q.get("group_by", "name")),
            "memory/curve": lambda: self.view("memory", "memory_curve", t, num("start_us"), num("end_us")),
            "memory/events": lambda: self.view("memory", "memory_events", t, num("start_us"), num("end_us")),
            "memory/stats": lambda: self.view("memory", "memory_stats", t, num("start_us"), num("end_us")),
            "modules": lambda: self.view("modules", "modules", t),
            "timeline": lambda: self.view("timeline", "timeline", t, num("start_us"), num("end_us"), int(q.get("width_px") or 1000)),
            "timeline/search": lambda: self.view("timeline", "search", t, q.get("query", ""), int(q.get("limit") or 100)),
            "event": lambda: {"args": t.event_args(int(q["idx"]))} if hasattr(t, "event_args") else None,
            "diff": lambda: self.view("diff", "diff", t, self.trace({"run": q["exp_run"], "worker": q["exp_worker"], "span": q["exp_span"]})),
        }
        ans = table[route]() if route in table else None
        if ans is None:
            return {"steps": [], "average": {}, "gpu": None, "recommendations": [], "environment": {}, "rows": [],
                    "note": f"stand-in: tb_plugin.views has no {route} yet"}
        return ans

    @Request.application
    def __call__(self, req: Request) -> Response:
        path = req.path
        if path in ("/", "/index.html"):
            return Response(ENTRY.replace('href="plugin', 'href="/data/plugin'), mimetype="text/html")
        if path == "/data/plugin_entry.html":
            return Response(ENTRY, mimetype="text/html")
        if path == "/data/plugins_listing":
            return Response(json.dumps({"gpuscope": {"enabled": True}}), mimetype="application/json")
        if path == "/dev_boot.js":
            return Response('import("/data/plugin/gpuscope/index.js").then(m => m.render());', mimetype="text/javascript")
        if not path.startswith(PREFIX):
            return Response("not found", 404)
        route = path[len(PREFIX):]
        static = STATIC / route
        if route and static.is_file() and static.resolve().parent == STATIC.resolve():
            return Response(static.read_bytes(), mimetype="text/javascript" if route.endswith(".js") else "application/octet-stream")
        try:
            ans = self.answer(route, dict(req.args))
        except KeyError as e:
            return Response(json.dumps({"error": f"unknown {e}"}), 404, mimetype="application/json")
        except Exception as e:  # noqa: BLE001 - a dev tool: show the message
            return Response(json.dumps({"error": f"{type(e).__name__}: {e}"}), 400, mimetype="application/json")
        if isinstance(ans, bytes):
            return Response(ans, mimetype="application/octet-stream")
        return Response(json.dumps(ans), mimetype="application/json")


if __name__ == "__main__":
    run_simple("127.0.0.1", int(sys.argv[2]) if len(sys.argv) > 2 else 6007, Backend(sys.argv[1]), threaded=True)
