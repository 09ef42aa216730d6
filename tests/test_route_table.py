"""The route table (tb_plugin/routes.py): every route is served with its typed, bounded
parameters, never answers a 5xx to any value, and is what docs/http-api.md and the frontend use."""

import re
from pathlib import Path
from urllib.parse import urlencode

import pytest

from profiler_core.flight import format
from tb_plugin import errors, params, routes
from tb_plugin.routes import ROUTES

from .test_plugin import P, _client, make_logdir

ROOT = Path(__file__).resolve().parents[1]
#: valid values of the identity parameters for the make_logdir fixture
NAMES = {
    "start_us": "0",
    "end_us": "50",
    "run": "run1",
    "worker": "w0",
    "span": "1",
    "exp_run": "run1",
    "exp_worker": "w1",
    "exp_span": "1",
    "step": "1",
    "name": "op1",
    "query": "op",
    "idx": "1",
    "match": "run*",
}
GARBAGE = [
    "abc",
    "-1",
    "0",
    "1.5",
    "99999999999999999999",
    "-99999999999999999999",
    "9" * 5000,
    "1e999",
    "-1e308",
    "1e308",
    "nan",
    "inf",
    "\x00",
    "²",
    "日本",
    ",",
    ",,,",
    "1,2,3",
    "0,99999999999999999999",
    "-5,1",
    "%",
    "[[",
    " ",
    "x" * 70000,
]


def valid(p: params.Param) -> str:
    """A value of `p` the fixture's trace accepts."""
    if p.name in NAMES:
        return NAMES[p.name]
    if isinstance(p, params.Text):
        return p.choices[0] if p.choices else "x"
    if isinstance(p, params.Int):
        return str(max(p.lo, min(p.hi, 10)))
    if isinstance(p, params.IntList):
        return "0"
    return "1"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    root = tmp_path_factory.mktemp("route-table")
    mp = pytest.MonkeyPatch()
    mp.setenv("GPUSCOPE_CACHE_DIR", str(root / "cache"))
    logdir = make_logdir(root / "logs")
    for rank in (0, 1):  # flight-recorder telemetry beside run1's traces, for the /telemetry routes
        lines = [format.encode_event({"k": "start", "v": format.VERSION, "rank": rank, "world": 2})]
        lines += [format.encode_step(s, 1.0 + s, 10.0 + rank, 1.0, 9.0, 100.0, 2.0) for s in range(20)]
        (logdir / "run1" / f"w{rank}{format.SUFFIX}").write_bytes(b"".join(lines))
    c, _ = _client(logdir)
    yield c
    mp.undo()


def _get(client, path: str, query: dict):
    return client.get(f"{P}{path}?{urlencode(query)}")


def test_the_plugin_serves_exactly_the_table(tmp_path):
    _, plugin = _client(tmp_path)
    served = set(plugin.get_plugin_apps()) - {"/index.js", "/*"}
    assert served == {r.path for r in ROUTES}
    assert len(ROUTES) == len(served)  # no path twice


def test_every_route_answers_its_valid_parameters(client):
    for r in ROUTES:
        resp = _get(client, r.path, {p.name: valid(p) for p in r.params})
        assert resp.status_code == 200, (r.path, resp.get_data()[:300])


CASES = [(r.path, p.name, v) for r in ROUTES for p in r.params for v in GARBAGE]


@pytest.mark.parametrize("path,name,value", CASES, ids=[f"{r}-{n}-{ascii(v)[:12]}" for r, n, v in CASES])
def test_no_value_of_any_parameter_is_a_5xx(client, path, name, value):
    route = next(r for r in ROUTES if r.path == path)
    query = {p.name: valid(p) for p in route.params}
    query[name] = value
    resp = _get(client, path, query)
    assert resp.status_code < 500, (resp.status_code, resp.get_data()[:300])
    if resp.status_code >= 400:
        assert resp.headers["Content-Type"].startswith("application/json")
        error = resp.json["error"]
        assert isinstance(error, str) and error
        assert len(error) < 1000  # a huge value is never echoed back whole


def test_huge_track_index_is_a_400(client):
    # was a 500: OverflowError converting 1e20 to int64
    resp = _get(
        client,
        "/timeline/summary",
        {**{k: NAMES[k] for k in ("run", "worker", "span")}, "tracks": "99999999999999999999"},
    )
    assert resp.status_code == 400
    assert "tracks" in resp.json["error"]


@pytest.mark.parametrize("name", ["run", "query", "unknown_parameter"])
def test_a_value_longer_than_any_real_one_is_refused_first(client, name):
    query = {"run": "run1", "worker": "w0", "span": "1", "query": "op"}
    query[name] = "a" * (params.MAX_TEXT_LEN + 1)
    resp = _get(client, "/timeline/search", query)
    assert resp.status_code == 400
    assert "longer than" in resp.json["error"] and len(resp.json["error"]) < 300


def test_a_repeated_parameter_is_bounded_too(client):
    resp = client.get(f"{P}/workers?run=run1&run={'a' * (params.MAX_TEXT_LEN + 1)}")
    assert resp.status_code == 400 and "longer than" in resp.json["error"]


def test_max_points_has_one_bound_for_plugin_and_view(client, tmp_path):
    from profiler_core.trace.read.reader import read_trace
    from tb_plugin.views import memory

    base = {"run": "run1", "worker": "w0", "span": "1"}
    lo = params.MAX_POINTS.lo
    assert _get(client, "/memory/curve", {**base, "max_points": str(lo - 1)}).status_code == 400
    assert _get(client, "/memory/curve", {**base, "max_points": str(lo)}).status_code == 200
    t = read_trace(str(make_logdir(tmp_path / "logs") / "run1" / "w1.1500.pt.trace.json"))
    memory.memory_curve(t, max_points=lo)
    with pytest.raises(errors.BadRequest):
        memory.memory_curve(t, max_points=lo - 1)


def test_error_classes_carry_their_status(client, monkeypatch):
    from tb_plugin.views import modules

    base = {"run": "run1", "worker": "w0", "span": "1"}
    for cls, status in (
        (errors.BadRequest, 400),
        (errors.NotFound, 404),
        (errors.LoadFailed, 422),
        (errors.NotReady, 503),
    ):

        def fail(t, cls=cls):
            raise cls("no")

        monkeypatch.setattr(modules, "modules", fail)
        resp = _get(client, "/modules", base)
        assert (resp.status_code, resp.json) == (status, {"error": "no"})

    class BadRequest(Exception):  # only the name of tb_plugin.errors.BadRequest: an internal error
        pass

    def stand_in(t):
        raise BadRequest("not a parameter error")

    monkeypatch.setattr(modules, "modules", stand_in)
    assert _get(client, "/modules", base).status_code == 500


def test_docs_http_api_is_the_table():
    doc = (ROOT / "docs" / "http-api.md").read_text(encoding="utf-8")
    assert doc == routes.markdown(), "regenerate: python -m tb_plugin.routes > docs/http-api.md"


def test_the_frontend_asks_only_for_routes_of_the_table():
    used = set()
    for f in (ROOT / "frontend" / "src").rglob("*.ts"):
        text = f.read_text(encoding="utf-8")
        used |= set(re.findall(r"getJSON(?:<[^>(]*>)?\(\s*[\"'`]([\w/]+)", text))
        used |= set(re.findall(r"url\(\s*[\"'`]([\w/]+)", text))
    assert used, "no route found in the frontend's sources"
    assert {"/" + u for u in used} <= {r.path for r in ROUTES}


def test_the_frontend_dev_server_serves_the_plugins_routes(tmp_path, monkeypatch):
    import importlib.util

    from werkzeug.test import Client

    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    spec = importlib.util.spec_from_file_location("dev_server", ROOT / "frontend" / "dev" / "dev_server.py")
    dev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dev)
    c = Client(dev.Backend(str(make_logdir(tmp_path / "logs"))))
    assert "run1" in c.get(f"{P}/runs").json["runs"]
    for r in ROUTES:  # every route of the table, with the plugin's own parameter checks
        resp = c.get(f"{P}{r.path}?{urlencode({p.name: 'x' * 70000 for p in r.params[:1]})}")
        assert resp.status_code == (200 if not r.params else 400), r.path
    assert c.get("/").status_code == 200
