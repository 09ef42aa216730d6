"""The plugin over TensorBoardWSGI + werkzeug's test client (no TensorBoard process)."""

import gzip
import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

import tb_plugin.plugin as plugin_mod
from tb_plugin import workspace
from tb_plugin.loader import Loader
from tb_plugin.plugin import GpuscopePlugin
from tb_plugin.runs import Scanner

OLD = time.time() - 3600
P = "/data/plugin/gpuscope"


def _events(n: int, name: str = "op") -> list:
    ev = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 10 * n + 10,
            "args": {"External id": 1},
        }
    ]
    ev += [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"{name}{i % 3}",
            "pid": 1,
            "tid": 1,
            "ts": 1 + 10 * i,
            "dur": 5,
            "args": {"External id": i + 2, "Input Dims": [[i]]},
        }
        for i in range(n)
    ]
    return ev


def _put(path: Path, doc, gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    os.utime(path, (OLD, OLD))
    return path


@pytest.fixture
def logdir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    return make_logdir(tmp_path / "logs")


def make_logdir(root: Path) -> Path:
    """Runs run1 (w0 twice, w1), run2/nested and bad (unreadable files) under `root`."""
    doc = {"schemaVersion": 1, "baseTimeNanoseconds": 10**18, "traceEvents": _events(6)}
    _put(root / "run1" / "w0.1000.pt.trace.json.gz", doc, gz=True)
    _put(root / "run1" / "w0.2000.pt.trace.json", doc)
    _put(root / "run1" / "w1.1500.pt.trace.json", doc)
    _put(root / "run2" / "nested" / "host_1.pt.trace.json", doc)
    _put(root / "bad" / "corrupt.pt.trace.json.gz", b"\x1f\x8b\x08\x00garbage-not-gzip")
    _put(root / "bad" / "trunc.pt.trace.json", b'{"traceEvents": [{"ph": "X", "ts": 1')
    _put(root / "bad" / "schema.pt.trace.json", {"hello": 1})
    _put(root / "bad" / "good.pt.trace.json", doc)
    return root


def _client(logdir: Path) -> tuple[Client, GpuscopePlugin]:
    p = GpuscopePlugin(base_plugin.TBContext(logdir=str(logdir)))
    return Client(application.TensorBoardWSGI([p])), p


def _wait_loaded(c: Client, timeout: float = 60) -> dict:
    end = time.time() + timeout
    while True:
        d = c.get(f"{P}/runs").json
        if not d["loading"] or time.time() > end:
            return d
        time.sleep(0.05)


def test_listing_and_frontend_metadata(logdir):
    c, p = _client(logdir)
    assert p.is_active()
    meta = c.get("/data/plugins_listing").json["gpuscope"]
    assert meta["enabled"] is True
    assert meta["loading_mechanism"] == {"type": "IFRAME", "module_path": f"{P}/index.js"}


def test_is_active_is_false_without_traces_and_cached(tmp_path, monkeypatch):
    p = GpuscopePlugin(base_plugin.TBContext(logdir=str(tmp_path)))
    assert not p.is_active()
    calls = []
    monkeypatch.setattr(Scanner, "has_traces", lambda self: calls.append(1) or True)
    assert not p.is_active() and not calls  # cached for ACTIVE_TTL_S
    monkeypatch.setattr(plugin_mod, "ACTIVE_TTL_S", 0.0)
    assert p.is_active() and calls == [1]
    assert p.is_active() and calls == [1]  # once active, no more scans


def test_runs_progress_and_bad_files(logdir):
    c, _ = _client(logdir)
    d = _wait_loaded(c)
    assert d["runs"] == ["bad", "run1", "run2/nested"]
    assert d["loading"] is False
    pr = d["progress"]
    assert pr["files_done"] == pr["files_total"] == 8
    assert pr["bytes_done"] == pr["bytes_total"] > 0
    errs = {e["file"]: e["error"] for e in d["errors"]}
    assert set(errs) == {"bad/corrupt.pt.trace.json.gz", "bad/trunc.pt.trace.json", "bad/schema.pt.trace.json"}
    assert "gzip" in errs["bad/corrupt.pt.trace.json.gz"]
    assert "truncated" in errs["bad/trunc.pt.trace.json"]
    assert "traceEvents" in errs["bad/schema.pt.trace.json"]
    assert all(str(logdir) not in e for e in errs.values())  # no absolute paths leak
    assert all(e["run"] == "bad" for e in d["errors"])
    # the good file beside the bad ones is served; the bad ones answer a JSON error
    ok = c.get(f"{P}/operators?run=bad&worker=good&span=1")
    assert ok.status_code == 200 and ok.json["rows"]
    bad = c.get(f"{P}/operators?run=bad&worker=trunc&span=1")
    assert bad.status_code == 422 and "truncated" in bad.json["error"]


def test_runs_long_poll_answers_once_the_files_are_loaded(logdir, monkeypatch):
    """/runs?wait=S: while files load, the answer comes when the last one is read (not at the deadline, and
    without asking again), or at the deadline while it is still loading; bad waits are 400s."""
    import tb_plugin.loader as loader_mod

    gate = threading.Event()
    real = loader_mod.read_trace

    def slow(path, *a, **k):
        gate.wait(30)
        return real(path, *a, **k)

    monkeypatch.setattr(loader_mod, "read_trace", slow)
    c, p = _client(logdir)
    t0 = time.monotonic()
    d = c.get(f"{P}/runs?wait=0.3").json
    assert d["loading"] is True and time.monotonic() - t0 >= 0.3  # the deadline: still loading
    threading.Timer(0.4, gate.set).start()
    calls = []
    real_progress = p.state().loader.progress
    monkeypatch.setattr(p.state().loader, "progress", lambda: calls.append(1) or real_progress())
    t0 = time.monotonic()
    d = c.get(f"{P}/runs?wait=30").json
    took = time.monotonic() - t0
    assert d["loading"] is False and d["progress"]["files_done"] == d["progress"]["files_total"] == 8
    assert 0.3 < took < 10  # answered once loaded, long before the 30 s
    assert len(calls) < 10  # woken by the reads' ends, not a poll every few ms
    assert c.get(f"{P}/runs?wait=0").json["loading"] is False  # loaded: no wait
    for bad in ("-1", "61", "soon", "nan"):
        r = c.get(f"{P}/runs?wait={bad}")
        assert r.status_code == 400 and "wait" in r.json["error"], bad


def test_workers_spans_and_not_found(logdir):
    c, _ = _client(logdir)
    assert c.get(f"{P}/workers?run=run1").json == {"workers": ["w0", "w1"]}
    assert c.get(f"{P}/spans?run=run1&worker=w0").json == {"spans": ["1", "2"]}
    for url in (
        f"{P}/workers?run=nope",
        f"{P}/spans?run=run1&worker=nope",
        f"{P}/overview?run=run1&worker=w0&span=3",
        f"{P}/overview?run=../run1&worker=w0&span=1",
        f"{P}/kernels?run=run1&worker=../../etc&span=1",
    ):
        r = c.get(url)
        assert r.status_code == 404, url
        assert "unknown" in r.json["error"]
    r = c.get(f"{P}/workers")
    assert r.status_code == 400 and r.json == {"error": "missing parameter 'run'"}


#: the view functions the routes call (module of tb_plugin.views, function)
VIEW_FUNCTIONS = (
    ("overview", "overview"),
    ("operators", "operators"),
    ("operators", "operator_stacks"),
    ("kernels", "kernels"),
    ("memory", "memory_curve"),
    ("memory", "memory_events"),
    ("memory", "memory_stats"),
    ("modules", "modules"),
    ("timeline", "timeline"),
    ("timeline", "search"),
    ("diff", "diff"),
    ("distributed", "from_summaries"),
)


def _spy_views(monkeypatch, make) -> None:
    """Replace each view function by `make(module, function, real)` (the handlers look them up when called)."""
    import importlib

    for module, function in VIEW_FUNCTIONS:
        mod = importlib.import_module(f"tb_plugin.views.{module}")
        monkeypatch.setattr(mod, function, make(module, function, getattr(mod, function)))


def test_routes_call_views_with_contract_signatures(logdir, monkeypatch):
    from tb_plugin import handlers

    calls = []

    def fake_view(module, function, real):
        def fn(*args, **kwargs):
            if threading.current_thread() is threading.main_thread():  # not earlier tests' warming threads
                calls.append((module, function, args, kwargs))
            return {"ok": f"{module}.{function}"}

        return fn

    _spy_views(monkeypatch, fake_view)
    monkeypatch.setattr(handlers, "warm_views", lambda t: None)  # each view computed by its request here
    c, _ = _client(logdir)
    q = "run=run1&worker=w0&span=2"
    expect = {
        f"overview?{q}": ("overview", "overview", 1, {}),
        f"operators?{q}&group_by=name_shape": ("operators", "operators", 1, {"group_by": "name_shape"}),
        f"operators?{q}": ("operators", "operators", 1, {"group_by": "name"}),
        f"operators/stack?{q}&name=op1&input_shape=[[1]]": (
            "operators",
            "operator_stacks",
            2,
            {"input_shape": "[[1]]"},
        ),
        f"kernels?{q}&group_by=name_op": ("kernels", "kernels", 1, {"group_by": "name_op"}),
        f"memory/curve?{q}&start_us=1.5&end_us=20": ("memory", "memory_curve", 3, {"max_points": 2000}),
        f"memory/events?{q}": ("memory", "memory_events", 3, {}),
        f"memory/stats?{q}&start_us=2": ("memory", "memory_stats", 3, {}),
        f"modules?{q}": ("modules", "modules", 1, {}),
        f"timeline?{q}&start_us=0&end_us=50&width_px=300": ("timeline", "timeline", 3, {"width_px": 300}),
        f"timeline/search?{q}&query=op&limit=5": ("timeline", "search", 2, {"limit": 5}),
        f"diff?{q}&exp_run=run1&exp_worker=w1&exp_span=1": ("diff", "diff", 2, {}),
    }
    for url, (module, function, nargs, kwargs) in expect.items():
        calls.clear()
        r = c.get(f"{P}/{url}")
        assert r.status_code == 200, (url, r.get_data())
        got = dict(r.json)
        if function == "overview":  # the route adds the run's ledger (two workers)
            assert "run_ledger" in got
            got.pop("run_ledger")
        assert got == {"ok": f"{module}.{function}"}
        ((m, f, args, kw),) = calls
        assert (m, f, len(args), kw) == (module, function, nargs, kwargs), url
        assert len(args[0].events) == 7  # the TraceData of run1/w0 span 2
    calls.clear()
    c.get(f"{P}/memory/curve?{q}&start_us=1.5&end_us=20")
    assert calls[0][2][1:] == (1.5, 20.0)
    calls.clear()
    c.get(f"{P}/operators/stack?{q}&name=op1")
    assert calls[0][2][1] == "op1" and calls[0][3] == {"input_shape": None}
    # distributed: every worker's span
    calls.clear()
    r = c.get(f"{P}/distributed?run=run1&span=1")
    assert r.status_code == 200
    assert sorted(calls[0][2][0]) == ["w0", "w1"]
    r = c.get(f"{P}/distributed?run=run1&span=9")
    assert r.status_code == 404


def test_bad_parameters_give_400(logdir):
    c, _ = _client(logdir)
    q = "run=run1&worker=w0&span=1"
    for url in (
        f"memory/curve?{q}&start_us=abc",
        f"memory/curve?{q}&max_points=1",
        f"timeline?{q}&width_px=wide",
        f"timeline/search?{q}",
        f"operators/stack?{q}",
        f"event?{q}",
        f"event?{q}&idx=-1",
        f"diff?{q}&exp_run=run1",
        "overview?run=run1&worker=w0",
        f"memory/events?{q}&end_us=inf",
    ):
        r = c.get(f"{P}/{url}")
        assert r.status_code == 400, url
        assert isinstance(r.json["error"], str) and r.json["error"]


def test_real_views_answer_json(logdir):
    c, _ = _client(logdir)
    q = "run=run1&worker=w0&span=1"
    for route in ("overview", "operators", "kernels", "memory/curve", "modules", "timeline"):
        r = c.get(f"{P}/{route}?{q}")
        assert r.status_code in (200, 501), (route, r.get_data())
        assert r.headers["Content-Type"].startswith("application/json")
    r = c.get(f"{P}/operators?{q}&group_by=nonsense")
    assert r.status_code in (400, 501)


def test_trace_route_serves_the_raw_file_gzipped(logdir):
    c, _ = _client(logdir)
    for span, path in (("1", "w0.1000.pt.trace.json.gz"), ("2", "w0.2000.pt.trace.json")):
        r = c.get(f"{P}/trace?run=run1&worker=w0&span={span}")
        assert r.status_code == 200
        assert r.headers["Content-Encoding"] == "gzip"
        raw = (logdir / "run1" / path).read_bytes()
        expect = gzip.decompress(raw) if path.endswith(".gz") else raw
        assert gzip.decompress(r.get_data()) == expect
    assert c.get(f"{P}/trace?run=run1&worker=w0&span=5").status_code == 404


def test_event_details(logdir):
    c, _ = _client(logdir)
    r = c.get(f"{P}/event?run=run1&worker=w0&span=1&idx=3")
    assert r.status_code == 200
    assert r.json["args"] == {"External id": 4, "Input Dims": [[2]]}
    assert r.json["event"]["name"] == "op2" and "args" not in r.json["event"]
    assert c.get(f"{P}/event?run=run1&worker=w0&span=1&idx=99").status_code == 404


def test_static_files(logdir, tmp_path, monkeypatch):
    static = tmp_path / "static"
    (static / "assets").mkdir(parents=True)
    (static / "index.js").write_text("export function render() {}")
    (static / "assets" / "app.css").write_text("body{}")
    (tmp_path / "secret.txt").write_text("no")
    monkeypatch.setattr(plugin_mod, "STATIC_DIR", str(static))
    c, _ = _client(logdir)
    r = c.get(f"{P}/index.js")
    assert r.status_code == 200 and r.get_data() == b"export function render() {}"
    assert r.headers["Content-Type"].startswith("application/javascript")
    r = c.get(f"{P}/assets/app.css")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/css")
    for bad in ("../secret.txt", "assets/../../secret.txt", "missing.js", "assets", "%2e%2e/secret.txt"):
        assert c.get(f"{P}/{bad}").status_code == 404, bad
    (static / "index.js").unlink()
    r = c.get(f"{P}/index.js")
    assert r.status_code == 200 and b"export function render" in r.get_data()


def test_rescan_without_restart(logdir, monkeypatch):
    c, _ = _client(logdir)
    monkeypatch.setattr(workspace, "RESCAN_S", 0.0)
    monkeypatch.setattr(workspace, "SCAN_SHARE", 0.0)  # else a slow scan under load spaces the next one out
    assert "run3" not in c.get(f"{P}/runs").json["runs"]
    doc = {"traceEvents": _events(2)}
    _put(logdir / "run3" / "w9.pt.trace.json", doc)
    _put(logdir / "run1" / "w0.3000.pt.trace.json", doc)
    d = c.get(f"{P}/runs").json
    assert "run3" in d["runs"]
    assert c.get(f"{P}/spans?run=run1&worker=w0").json == {"spans": ["1", "2", "3"]}
    (logdir / "run1" / "w0.1000.pt.trace.json.gz").unlink()
    shutil.rmtree(logdir / "run2")
    d = _wait_loaded(c)
    assert "run2/nested" not in d["runs"]
    assert c.get(f"{P}/spans?run=run1&worker=w0").json == {"spans": ["1", "2"]}
    assert d["progress"]["files_total"] == 8


def test_loader_lru_keeps_memory_bounded(logdir):
    files = [f for r in Scanner(str(logdir)).scan().values() for f in r.files() if f.run != "bad"]
    loader = Loader(workers=1, processes=0, max_bytes=1)
    try:
        loader.prepare(files)
        for f in files:
            assert len(loader.get(f).events) == 7
        assert len(loader.loaded_keys()) == 1  # only the most recently used one stays
        assert loader.get(files[0]) is not None
        assert loader.loaded_keys() == [files[0].key]
    finally:
        loader.close()


def test_loader_worker_processes_hand_over_through_the_cache(logdir):
    files = {f.relpath: f for r in Scanner(str(logdir)).scan().values() for f in r.files()}
    loader = Loader(processes=1)
    try:
        good, bad = files["run1/w1.1500.pt.trace.json"], files["bad/trunc.pt.trace.json"]
        loader.prepare([good, bad])
        t = loader.get(good)
        assert len(t.events) == 7
        with pytest.raises(Exception) as e:
            loader.get(bad)
        assert "truncated" in str(e.value)
        assert loader.progress()["files_done"] == 2
        assert [f.relpath for f, _ in loader.errors()] == ["bad/trunc.pt.trace.json"]
    finally:
        loader.close()


def test_a_trace_replaced_with_same_size_and_mtime_is_not_served_from_the_old_parse(logdir):
    path = logdir / "run1" / "w1.1500.pt.trace.json"
    scanner = Scanner(str(logdir))
    loader = Loader(workers=1, processes=0)
    try:
        f = scanner.scan()["run1"].file("w1", "1")
        assert set(loader.get(f).events["name"]) == {"ProfilerStep#1", "op0", "op1", "op2"}
        st = path.stat()
        new = path.with_name("new.json")  # same size: op -> xy
        _put(new, {"schemaVersion": 1, "baseTimeNanoseconds": 10**18, "traceEvents": _events(6, name="xy")})
        os.replace(new, path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert (path.stat().st_size, path.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
        files = [g for r in scanner.scan().values() for g in r.files()]
        loader.prepare(files)
        f2 = next(g for g in files if g.path == f.path)
        assert set(loader.get(f2).events["name"]) == {"ProfilerStep#1", "xy0", "xy1", "xy2"}
    finally:
        loader.close()


def test_timeline_tool_routes_and_file_status(logdir):
    """The timeline tools answer through their routes (bad parameters: 400); /file_status says a
    loaded file is done and counts all files."""
    c, _ = _client(logdir)
    q = "run=run1&worker=w0&span=1"
    for route in ("timeline/summary", "timeline/counters", "timeline/occurrences?name=op1&", "timeline/locate?idx=0&"):
        path, _, extra = route.partition("?")
        r = c.get(f"{P}/{path}?{extra}{q}")
        assert r.status_code == 200, (route, r.get_data())
    assert c.get(f"{P}/timeline/summary?{q}&tracks=0").json["events"] >= 1
    for url in (
        f"timeline/summary?{q}&start_us=5&end_us=1",
        f"timeline/summary?{q}&tracks=x",
        f"timeline/counters?{q}&width_px=0",
        f"timeline/occurrences?{q}",
        f"timeline/locate?{q}&idx=-3",
        f"timeline/locate?{q}",
    ):
        r = c.get(f"{P}/{url}")
        assert r.status_code == 400, (url, r.get_data())
    st = c.get(f"{P}/file_status?{q}").json
    assert st["state"] == "done" and st["file"].startswith("run1/w0.") and st["all"]["files_total"] >= 2
    assert c.get(f"{P}/file_status?run=run1&worker=w0&span=9").status_code == 404


def _warm_logdir(root: Path) -> Path:
    doc = {"schemaVersion": 1, "baseTimeNanoseconds": 10**18, "traceEvents": _events(40)}
    _put(root / "run1" / "w0.1000.pt.trace.json", doc)
    _put(root / "run1" / "w1.1000.pt.trace.json", doc)
    return root


def _answers(c: Client) -> dict:
    out = {}
    for worker in ("w0", "w1"):
        for route in ("overview", "operators", "kernels", "operators?group_by=name_shape"):
            sep = "&" if "?" in route else "?"
            r = c.get(f"{P}/{route}{sep}run=run1&worker={worker}&span=1")
            assert r.status_code == 200, (route, r.get_data()[:300])
            out[(worker, route)] = r.json
            out[(worker, route)].pop("run_ledger", None)  # from the summaries there are now (not warmed)
    return out


def test_a_big_trace_is_warmed_on_two_threads_alike(tmp_path, monkeypatch):
    """A trace of WARM_TWO_THREADS_EVENTS events or more is warmed with its Overview on a second thread beside
    the operators and kernels: the same answers as one thread's, each computed once."""
    from profiler_core.trace.read.reader import read_trace
    from tb_plugin.params import KERNELS_GROUP_BY, OPERATORS_GROUP_BY

    doc = {"schemaVersion": 1, "baseTimeNanoseconds": 10**18, "traceEvents": _events(40)}
    path = tmp_path / "w0.1000.pt.trace.json"
    _put(path, doc)
    threads: list = []

    def recording(module, function, fn):
        def wrap(*args, **kwargs):
            if args and args[0] is current[0]:  # this test's trace (not another test's loader still warming)
                threads.append((function, threading.current_thread().name))
            return fn(*args, **kwargs)

        return wrap

    from profiler_core.trace.read import parallel_plan
    from tb_plugin import handlers

    _spy_views(monkeypatch, recording)
    monkeypatch.setattr(parallel_plan.os, "cpu_count", lambda: 2)
    answers, current = {}, [None]
    for label, at_least in (("one", 10**9), ("two", 1)):
        monkeypatch.setattr(handlers, "WARM_TWO_THREADS_EVENTS", at_least)
        t = current[0] = read_trace(path, use_cache=False)
        threads.clear()
        handlers.warm_views(t)
        names = dict(threads)
        assert sorted(names) == ["kernels", "operators", "overview"] and len(threads) == 3, threads
        beside = names["overview"] != names["operators"]
        assert beside == (label == "two"), names
        answers[label] = (
            handlers.overview_answer(t),
            handlers.operators_answer(t, OPERATORS_GROUP_BY.default_value()),
            handlers.kernels_answer(t, KERNELS_GROUP_BY.default_value()),
        )
        assert len(threads) == 3  # the answers were ready: nothing computed again
    assert json.dumps(answers["one"], sort_keys=True, default=str) == json.dumps(
        answers["two"], sort_keys=True, default=str
    )


def test_files_read_in_the_background_are_warmed_and_served_as_computed(tmp_path, monkeypatch):
    """Once the loader is idle, a file's Overview, operators and kernels (default grouping) answers
    are ready: their requests compute no view; another grouping is computed by its request; and the
    answers equal those of a plugin that warms nothing."""
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    root = _warm_logdir(tmp_path / "logs")
    c, p = _client(root)
    _wait_loaded(c)
    loader = p.state().loader
    end = time.time() + 60
    while loader.busy() and time.time() < end:
        time.sleep(0.02)
    computed: list = []

    def counting(module, function, fn):
        def wrap(*args, **kwargs):
            if threading.current_thread() is threading.main_thread():  # the requests, not background work
                computed.append((module, function))
            return fn(*args, **kwargs)

        return wrap

    from tb_plugin import handlers

    _spy_views(monkeypatch, counting)
    warmed = _answers(c)
    assert sorted(set(computed)) == [("operators", "operators")]  # only the name_shape grouping
    assert len(computed) == 2  # once per worker

    monkeypatch.setattr(handlers, "warm_views", lambda t: None)
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache2"))
    c2, _ = _client(_warm_logdir(tmp_path / "logs2"))
    _wait_loaded(c2)
    computed.clear()
    assert _answers(c2) == warmed
    assert ("overview", "overview") in computed  # nothing warmed there: computed on request
