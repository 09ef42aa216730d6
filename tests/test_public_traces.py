"""Every route on every public real trace (../shared/traces/public, see its README): no 5xx anywhere,
every view of a trace answers 200, and the files gpuscope refuses on purpose (an execution trace:
tests/real_traces_support.py's REFUSED) are listed unreadable with their reason and answer 422. A file of several
ranks fused into one (FUSED) is a run of one worker per rank."""

from __future__ import annotations

import time
from urllib.parse import urlencode

import pytest

from .conftest import missing
from .real_traces_support import FUSED, PUBLIC, REFUSED
from .test_plugin import P, _client

#: per-worker routes -> their parameters beyond run/worker/span (optional ones left at their defaults)
WORKER_ROUTES = {
    "overview": {},
    "operators": {"group_by": "name"},
    "operators?name_shape": {"group_by": "name_shape"},
    "kernels": {"group_by": "name"},
    "kernels?name_op": {"group_by": "name_op"},
    "memory/curve": {},
    "memory/events": {},
    "memory/stats": {},
    "modules": {},
    "roofline": {},
    "timeline": {"width_px": "800"},
    "timeline/search": {"query": "a", "limit": "10"},
    "timeline/summary": {},
    "timeline/counters": {"width_px": "200"},
    "timeline/occurrences": {"name": "x", "limit": "5"},
    "event": {"idx": "0"},
    "trace": {},
}


def _runs() -> list[str]:
    if not PUBLIC.is_dir():
        return []
    return sorted(p.name for p in PUBLIC.iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def public(tmp_path_factory):
    """The plugin over a logdir of links to the public run folders, every file loaded."""
    if not PUBLIC.is_dir():
        missing(f"the public real traces are not at {PUBLIC}")
    root = tmp_path_factory.mktemp("public")
    logdir = root / "logs"
    logdir.mkdir()
    for run in _runs():
        (logdir / run).symlink_to(PUBLIC / run, target_is_directory=True)
    mp = pytest.MonkeyPatch()
    mp.setenv("GPUSCOPE_CACHE_DIR", str(root / "cache"))
    c, _ = _client(logdir)
    end = time.monotonic() + 600
    while True:
        listing = c.get(f"{P}/runs").json
        if not listing["loading"] or time.monotonic() > end:
            break
        time.sleep(0.1)
    yield c, listing
    mp.undo()


def _get(c, route: str, params: dict):
    return c.get(f"{P}/{route.split('?')[0]}?{urlencode(params)}")


def test_every_public_run_is_listed_and_only_the_refused_ones_are_unreadable(public):
    _, listing = public
    assert not listing["loading"]
    assert sorted(listing["runs"]) == _runs()
    errors = {e["run"]: e["error"] for e in listing["errors"]}
    assert set(errors) == set(REFUSED), errors
    for run, reason in REFUSED.items():
        assert reason in errors[run]


@pytest.mark.parametrize("run", _runs() or ["<absent>"])
def test_every_route_on_a_public_run(public, run):
    c, _ = public
    workers = c.get(f"{P}/workers?{urlencode({'run': run})}")
    assert workers.status_code == 200, workers.get_data()[:300]
    if run in REFUSED:
        for worker in workers.json["workers"]:
            for route, extra in WORKER_ROUTES.items():
                r = _get(c, route, {"run": run, "worker": worker, "span": "1", **extra})
                assert r.status_code == 422 and REFUSED[run] in r.json["error"], (route, r.get_data()[:300])
        return
    assert workers.json["workers"]
    if run in FUSED:  # one worker per rank of the fused file
        assert [w.rsplit("_rank", 1)[1] for w in workers.json["workers"]] == [str(r) for r in FUSED[run]]
    for worker in workers.json["workers"]:
        spans = c.get(f"{P}/spans?{urlencode({'run': run, 'worker': worker})}")
        assert spans.status_code == 200 and spans.json["spans"], (worker, spans.get_data()[:300])
        for span in spans.json["spans"]:
            base = {"run": run, "worker": worker, "span": span}
            for route, extra in WORKER_ROUTES.items():
                r = _get(c, route, {**base, **extra})
                assert r.status_code == 200, (worker, span, route, r.status_code, r.get_data()[:300])
            rows = c.get(f"{P}/operators?{urlencode(base)}").json["rows"]
            if rows:
                r = _get(c, "operators/stack", {**base, "name": rows[0]["name"]})
                assert r.status_code == 200, (worker, span, r.get_data()[:300])
            r = _get(c, "diff", {**base, "exp_run": run, "exp_worker": worker, "exp_span": span})
            assert r.status_code == 200, (worker, span, "diff", r.get_data()[:300])
    first_span = c.get(f"{P}/spans?{urlencode({'run': run, 'worker': workers.json['workers'][0]})}").json
    for route in ("distributed", "distributed/step", "diagnosis"):
        r = _get(c, route, {"run": run, "span": first_span["spans"][0]})
        assert r.status_code < 500 and r.is_json, (route, r.status_code, r.get_data()[:300])


def test_the_execution_trace_answers_422_with_its_reason(public, tmp_path):
    """Beside a real trace in one run, the execution trace is a worker whose views answer 422."""
    from .test_plugin import _client as client_for

    run = tmp_path / "logs" / "et_and_trace"
    run.mkdir(parents=True)
    (run / "benchmark_simple_add_et.pt.trace.json.gz").symlink_to(
        PUBLIC / "hta_et_file" / "benchmark_simple_add_et.json.gz"
    )
    (run / "benchmark_simple_add.pt.trace.json.gz").symlink_to(
        PUBLIC / "hta_et_trace" / "benchmark_simple_add_trace.json.gz"
    )
    c, _ = client_for(tmp_path / "logs")
    end = time.monotonic() + 120
    while c.get(f"{P}/runs").json["loading"] and time.monotonic() < end:
        time.sleep(0.05)
    errors = c.get(f"{P}/runs").json["errors"]
    assert [e["file"] for e in errors] == ["et_and_trace/benchmark_simple_add_et.pt.trace.json.gz"]
    assert REFUSED["hta_et_file"] in errors[0]["error"]
    for route in ("overview", "operators", "trace"):
        r = c.get(f"{P}/{route}?run=et_and_trace&worker=benchmark_simple_add_et&span=1")
        assert r.status_code == 422 and REFUSED["hta_et_file"] in r.json["error"], (route, r.get_data()[:300])
    ok = c.get(f"{P}/overview?run=et_and_trace&worker=benchmark_simple_add&span=1")
    assert ok.status_code == 200
