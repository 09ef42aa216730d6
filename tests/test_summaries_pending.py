"""The run-level routes never compute missing per-worker summaries inside a request (tb_plugin/plugin.py,
`_ready_summaries`): on generated runs without stored summaries (benchmarks/gen_distributed.py, 8 and 4 ranks)
/diagnosis, /pipeline, /clock_offsets and /jobdiff answer `pending` with their `progress` at once while every
summary computation is held on an Event (the CSV of /jobdiff: a 503 with Retry-After); once the summaries are
computed in the background they answer what the views give for summaries computed directly."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

import tb_plugin.plugin as plugin_mod
from tb_plugin import handlers
from tb_plugin.run_level import clock_offsets, pipeline, report
from tb_plugin.run_level import job_diff as J
from tb_plugin.summaries import engine
from tb_plugin.summaries.summary import summarize_path

from .summaries_support import ready

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from gen_distributed import generate  # noqa: E402

P = "/data/plugin/gpuscope"
OLD = time.time() - 3600
#: how long a held summary computation waits for the test (the old code's request waited for it all along)
HOLD_S = 60.0


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, dict]:
    """Runs a (8 ranks) and b (4 ranks, another seed) without stored summaries, and their summaries computed here."""
    logdir = tmp_path_factory.mktemp("pending")
    out = {}
    for name, ranks, seed in (("a", 8, 7), ("b", 4, 11)):
        paths = generate(str(logdir / name), ranks, events=1500, steps=2, seed=seed)
        for p in paths:
            os.utime(p, (OLD, OLD))
        out[name] = {Path(p).name.split(".")[0]: summarize_path(p) for p in paths}
    return logdir, out


def _json(obj: object) -> object:
    """`obj` as the routes encode it."""
    return json.loads(plugin_mod.to_json(obj))


def _no_trace(worker: str) -> None:
    raise AssertionError("a run of several workers never reads a trace for its diagnosis")


def test_routes_answer_pending_at_once_then_the_same_answer(runs, tmp_path, monkeypatch):
    logdir, s = runs
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    release, held = threading.Event(), []
    real, real_path = engine.summarize, engine.summarize_path

    def hold() -> None:
        held.append(1)
        if not release.wait(HOLD_S):  # never released while a request waits: the request computed them
            release.set()

    monkeypatch.setattr(engine, "summarize", lambda t, source=None: (hold(), real(t, source))[1])
    monkeypatch.setattr(engine, "summarize_path", lambda path: (hold(), real_path(path))[1])
    flags = argparse.Namespace(gpuscope_dask_scheduler=None)
    p = plugin_mod.GpuscopePlugin(base_plugin.TBContext(logdir=str(logdir), flags=flags))
    c = Client(application.TensorBoardWSGI([p]))
    urls = {
        "diagnosis": f"{P}/diagnosis?run=a&span=1",
        "pipeline": f"{P}/pipeline?run=a&span=1",
        "clock_offsets": f"{P}/clock_offsets?run=a&span=1",
        "jobdiff": f"{P}/jobdiff?run=a&exp_run=b",
    }
    a_workers = sorted(s["a"])
    for route, url in urls.items():
        got = c.get(url)
        assert got.status_code == 200, (route, got.get_data()[:300])
        assert not release.is_set(), f"{route} answered only once the summaries were computed"
        if route == "jobdiff":
            assert got.json["progress"] == {"done": 0, "total": 12, "eta_s": None}  # nothing timed yet: no estimate
            want = [{"run": "a", "worker": w} for w in a_workers] + [{"run": "b", "worker": w} for w in sorted(s["b"])]
            assert got.json["pending"] == want
        else:
            assert got.json == {"pending": a_workers, "progress": {"done": 0, "total": 8, "eta_s": None}}, route
    csv = c.get(f"{urls['jobdiff']}&format=csv")
    assert csv.status_code == 503 and csv.headers["Retry-After"] == str(handlers.RETRY_AFTER_S)
    assert csv.headers["Content-Type"].startswith("application/json") and "0 of 12 done" in csv.json["error"]
    assert not release.is_set() and p.state().summaries.computed == 0
    # an unknown run or span is still a 404 while the others are pending
    assert c.get(f"{P}/diagnosis?run=nope&span=1").status_code == 404
    assert c.get(f"{P}/jobdiff?run=a&exp_run=b&exp_span=9").status_code == 404
    release.set()
    want = {
        "diagnosis": report.diagnose(s["a"], trace=_no_trace),
        "pipeline": pipeline.analyse({w: x.pipeline for w, x in s["a"].items()}),
        "clock_offsets": clock_offsets.clock_offsets(s["a"]),
        "jobdiff": J.job_diff(s["a"], s["b"]),
    }
    for route, url in urls.items():
        got = ready(c, url)
        assert got.status_code == 200, (route, got.get_data()[:300])
        assert got.json == _json(want[route]), route
    assert p.state().summaries.computed == 12 and len(held) == 12
    csv = c.get(f"{urls['jobdiff']}&format=csv")
    assert csv.status_code == 200 and csv.get_data(as_text=True) == J.to_csv(want["jobdiff"])


def _scanned(path: Path) -> SimpleNamespace:
    """A trace file as the scanner describes it (what the summaries engine reads of it)."""
    st = path.stat()
    return SimpleNamespace(
        path=str(path), relpath=path.name, size=st.st_size, mtime_ns=st.st_mtime_ns, key=(str(path),), ident=()
    )


def test_a_failed_summary_stays_failed_while_other_files_are_prepared(runs, tmp_path, monkeypatch):
    """A pending answer prepares only the missing files: the failure of another worker stays known (not computed
    again on every poll); a rescan's prepare of all the files there are still forgets the files gone."""
    logdir, _ = runs
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    bad = tmp_path / "bad.pt.trace.json"
    bad.write_text("{not a trace")
    good = _scanned(sorted((logdir / "b").iterdir())[0])
    s = engine.Summaries(str(tmp_path))
    try:
        [failed] = s.get_many([_scanned(bad)])
        assert isinstance(failed, Exception)
        end = time.monotonic() + 60  # the failure is recorded by the future's callback, just after its result
        while s.failure(_scanned(bad)) is None and time.monotonic() < end:
            time.sleep(0.01)
        assert s.failure(_scanned(bad)) is not None
        s.prepare([good], forget_others=False)
        assert s.failure(_scanned(bad)) is not None
        s.prepare([good])
        assert s.failure(_scanned(bad)) is None
    finally:
        s.close()
