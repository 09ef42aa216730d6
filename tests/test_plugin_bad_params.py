"""Every route, /trace included, answers bad parameters with a JSON 4xx: never a 500 or a hang."""

import pytest

from .test_plugin import P, _client, make_logdir

BASE = {"run": "run1", "worker": "w0", "span": "1"}
#: route -> its valid parameters (the run1/w0/1 trace of the `logdir` fixture)
ROUTES = {
    "runs": {},
    "workers": {"run": "run1"},
    "spans": {"run": "run1", "worker": "w0"},
    "overview": BASE,
    "operators": {**BASE, "group_by": "name"},
    "operators/stack": {**BASE, "name": "op1", "input_shape": "[[1]]"},
    "kernels": {**BASE, "group_by": "name"},
    "memory/curve": {**BASE, "start_us": "0", "end_us": "10", "max_points": "100"},
    "memory/events": {**BASE, "start_us": "0", "end_us": "10"},
    "memory/stats": {**BASE, "start_us": "0", "end_us": "10"},
    "modules": BASE,
    "diff": {**BASE, "exp_run": "run1", "exp_worker": "w1", "exp_span": "1"},
    "diff/kernels": {**BASE, "exp_run": "run1", "exp_worker": "w1", "exp_span": "1"},
    "distributed": {"run": "run1", "span": "1"},
    "diagnosis": {"run": "run1", "span": "1"},
    "timeline": {**BASE, "start_us": "0", "end_us": "50", "width_px": "800"},
    "timeline/search": {**BASE, "query": "op", "limit": "10"},
    "timeline/occurrences": {**BASE, "name": "op1", "limit": "10", "of": "kernels", "input_shape": "[[1]]", "op": "x"},
    "event": {**BASE, "idx": "1"},
    "trace": BASE,
}
BIG = "9" * 5000  # int() refuses more than 4300 digits
#: per kind of parameter: values that must give a 4xx, and odd values that may also be answered
KINDS = {
    "name": (["²", "abc", "\x00", "日本", "../run1", " run1", "run1/"], []),
    "span": (["²", "٣", "0", "-1", "1.5", "abc", BIG, "99999999999999999999", " 1", "1\x00", "日本"], []),
    "float": (["abc", "²", "1e999", "nan", "inf", "-inf", "\x00", "日本", "1,5"], ["-1", "1e300", "-1e300", "٣"]),
    "count": (["abc", "²", "1.5", "1e3", "nan", "0", "-1", BIG, "\x00"], ["99999999999999999999", "1000000000000"]),
    "index": (["abc", "²", "1.5", "-1", BIG, "nan"], ["99999999999999999999"]),
    "choice": (["abc", "²", "\x00", "日本"], []),
    "text": ([], ["²", "\x00", "日本", BIG, "[[", "%"]),
}
KIND_OF = {
    "run": "name",
    "worker": "name",
    "exp_run": "name",
    "exp_worker": "name",
    "span": "span",
    "exp_span": "span",
    "start_us": "float",
    "end_us": "float",
    "max_points": "count",
    "width_px": "count",
    "limit": "count",
    "idx": "index",
    "group_by": "choice",
    "name": "text",
    "input_shape": "text",
    "query": "text",
    "of": "choice",
    "op": "text",
}
OPTIONAL = {"start_us", "end_us", "max_points", "width_px", "limit", "group_by", "input_shape", "of", "op"}
CASES = []
for _route, _params in ROUTES.items():
    for _name in _params:
        _bad, _odd = KINDS[KIND_OF[_name]]
        CASES += [(_route, _name, v, True) for v in _bad]
        CASES += [(_route, _name, v, False) for v in _odd]
        CASES.append((_route, _name, None, _name not in OPTIONAL))  # None: left out


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad-params")
    mp = pytest.MonkeyPatch()
    mp.setenv("GPUSCOPE_CACHE_DIR", str(root / "cache"))
    c, _ = _client(make_logdir(root / "logs"))
    yield c
    mp.undo()


def _get(client, route: str, params: dict):
    from urllib.parse import urlencode

    return client.get(f"{P}/{route}?{urlencode(params)}")


def test_every_route_answers_its_valid_parameters(client):
    for route, params in ROUTES.items():
        r = _get(client, route, params)
        assert r.status_code == 200, (route, r.get_data()[:300])


@pytest.mark.parametrize(
    "route,name,value,must_fail",
    CASES,
    ids=[f"{r}-{n}-{'missing' if v is None else ascii(v)[:14]}" for r, n, v, _ in CASES],
)
def test_bad_parameter_gives_a_json_4xx(client, route, name, value, must_fail):
    params = dict(ROUTES[route])
    if value is None:
        del params[name]
    else:
        params[name] = value
    r = _get(client, route, params)
    if not must_fail and r.status_code == 200:
        return  # an odd but fine question (a search for "日本"), answered
    assert 400 <= r.status_code < 500, (r.status_code, r.get_data()[:300])
    assert r.headers["Content-Type"].startswith("application/json")
    assert isinstance(r.json["error"], str) and r.json["error"]
