"""Issue 40 item 3: run-level answers are computed once per set of summaries (`tb_plugin/summaries/answers.py`):
repeated and concurrent identical requests compute once, and a summary replaced on disk (`gpuscope summarize
--force`) is read again by a running plugin, which then answers from it."""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

import tb_plugin.plugin as plugin_mod
from tb_plugin import handlers
from tb_plugin.run_level import clock_offsets, job_diff, pipeline, report, run_ledger
from tb_plugin.summaries import answers, store
from tb_plugin.summaries.cli import summarize_logdir
from tb_plugin.summaries.summary import decode, encode

from .summaries_support import ready

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from gen_distributed import generate  # noqa: E402

P = "/data/plugin/gpuscope"
W0, W1 = "node0_rank00000", "node0_rank00001"  # gen_distributed's names
OLD = time.time() - 3600
GUARD_S = 60.0  # a hang guard, never a timing


@pytest.fixture(scope="module")
def logdir(tmp_path_factory) -> Path:
    """Runs a and b (4 ranks each), their summaries stored in LOGDIR/.gpuscope/summaries."""
    d = tmp_path_factory.mktemp("answers")
    for name, seed in (("a", 7), ("b", 11)):
        for p in generate(str(d / name), 4, events=1200, steps=2, seed=seed):
            os.utime(p, (OLD, OLD))
    res = summarize_logdir(str(d), log=lambda m: None)
    assert res["done"] == 8 and not res["failed"]
    return d


def _client(logdir: Path, tmp_path: Path, monkeypatch) -> tuple[Client, plugin_mod.GpuscopePlugin]:
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    flags = argparse.Namespace(gpuscope_dask_scheduler=None)
    p = plugin_mod.GpuscopePlugin(base_plugin.TBContext(logdir=str(logdir), flags=flags))
    return Client(application.TensorBoardWSGI([p])), p


def _counted(monkeypatch, module, name: str, calls: dict, gate: threading.Event | None = None) -> None:
    real = getattr(module, name)

    def fn(*a, **k):
        calls[name] = calls.get(name, 0) + 1
        if gate is not None:
            assert gate.wait(GUARD_S)
        return real(*a, **k)

    monkeypatch.setattr(module, name, fn)


def test_repeated_run_level_requests_compute_once(logdir, tmp_path, monkeypatch):
    calls: dict = {}
    for module, name in (
        (report, "diagnose"),
        (pipeline, "analyse"),
        (clock_offsets, "clock_offsets"),
        (job_diff, "job_diff"),
        (run_ledger, "run_view"),
        (handlers, "distributed_view"),
    ):
        _counted(monkeypatch, module, name, calls)
    c, _ = _client(logdir, tmp_path, monkeypatch)
    urls = [
        f"{P}/diagnosis?run=a&span=1",
        f"{P}/pipeline?run=a&span=1",
        f"{P}/clock_offsets?run=a&span=1",
        f"{P}/jobdiff?run=a&exp_run=b",
        f"{P}/distributed?run=a&worker={W0}&span=1",
    ]
    first = {u: ready(c, u, GUARD_S).json for u in urls}
    assert c.get(f"{P}/jobdiff?run=a&exp_run=b&format=csv").status_code == 200
    counts = dict(calls)
    assert {k: v for k, v in counts.items() if k != "run_view"} == {
        "diagnose": 1,
        "analyse": 1,
        "clock_offsets": 1,
        "job_diff": 1,
        "distributed_view": 1,
    }
    for _ in range(3):
        for u in urls:
            r = c.get(u)
            assert r.status_code == 200 and r.json == first[u], u
    assert calls == counts  # answered from the kept answers
    assert c.get(f"{P}/diagnosis?run=b&span=1").status_code == 200  # another run: another key
    assert calls["diagnose"] == 2
    views = calls.get("run_view", 0)  # the diagnosis calls it too
    ov = [c.get(f"{P}/overview?run=a&worker={W0}&span=1").json for _ in range(3)]
    assert "run_ledger" in ov[0], str(ov[0])[:300]
    assert ov[0] == ov[1] == ov[2] and calls["run_view"] == views + 1


def test_concurrent_identical_requests_compute_once(logdir, tmp_path, monkeypatch):
    calls: dict = {}
    gate = threading.Event()
    _counted(monkeypatch, report, "diagnose", calls, gate)
    c, p = _client(logdir, tmp_path, monkeypatch)
    url = f"{P}/pipeline?run=a&span=1"
    ready(c, url, GUARD_S)  # every summary of run a found
    arrived = threading.Semaphore(0)
    real_answer = answers.answer

    def answer(*a, **k):
        arrived.release()
        return real_answer(*a, **k)

    monkeypatch.setattr(answers, "answer", answer)
    n = 4
    out: list = [None] * n

    def ask(i: int) -> None:
        out[i] = Client(application.TensorBoardWSGI([p])).get(f"{P}/diagnosis?run=a&span=1")

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for _ in range(n):  # every request reached the kept answers before the first computation ends
        assert arrived.acquire(timeout=GUARD_S)
    gate.set()
    for t in threads:
        t.join(GUARD_S)
    assert all(r.status_code == 200 for r in out)
    assert all(r.json == out[0].json for r in out)
    assert calls == {"diagnose": 1}


def test_a_summary_replaced_on_disk_changes_the_answer_without_restart(logdir, tmp_path, monkeypatch):
    c, p = _client(logdir, tmp_path, monkeypatch)
    url = f"{P}/distributed?run=a&worker={W0}&span=1"
    before = ready(c, url, GUARD_S).json
    events = before["devices"][W1]["events"]
    assert isinstance(events, int) and events > 0
    assert c.get(url).json == before
    # `gpuscope summarize --force` writes the file again (here with a changed field, so that it shows)
    f = p.state().refresh()["a"].file(W1, "1")
    where = store.out_path(store.default_out(str(logdir)), f.relpath)
    s = decode(Path(where).read_bytes())
    s.events = events + 12345
    try:
        store.write(where, s)
        after = c.get(url).json
        assert after["devices"][W1]["events"] == events + 12345
        assert after["devices"][W0] == before["devices"][W0]
    finally:
        s.events = events
        Path(where).write_bytes(encode(s))
