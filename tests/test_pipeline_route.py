"""The pipeline diagnosis at run level: the projection in every per-worker summary (bounded, validated) and the
`/pipeline` route answering from the summaries only.

The job (benchmarks/gen_pipeline.py, as in tests/test_pipeline.py): p = 4 stages, m = 8 micro-batches, forward
F = 40 µs, backward B = 80 µs, no transfer time. By hand: a 1F1B step lasts (m + p - 1)(F + B) = 1320 µs, each
stage idles (p - 1)(F + B) = 360 µs of it (ratio 3/11), stage s idles s B µs after its last backward (true idle).
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from pathlib import Path

import msgspec
import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

import tb_plugin.plugin as plugin_mod
from profiler_core.analysis.worker import pipeline as pp
from profiler_core.trace.read.reader import read_trace
from tb_plugin import workspace
from tb_plugin.run_level import pipeline as run_pp
from tb_plugin.summaries import cli
from tb_plugin.summaries import summary as S
from tb_plugin.summaries.schema import Pipeline, convert

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from gen_distributed import generate  # noqa: E402
from gen_pipeline import generate_pipeline  # noqa: E402

P, M, F, B = 4, 8, 40, 80
US = 1000
OLD = time.time() - 3600
ROUTE = "/data/plugin/gpuscope/pipeline"


def analyse(projections: dict) -> dict:
    """`run_pp.analyse` of the projections as `project` gives them (dicts), typed as the summary holds them."""
    return run_pp.analyse({w: convert(p, Pipeline) for w, p in projections.items()})


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _aged(paths: list[str]) -> list[str]:
    for p in paths:
        os.utime(p, (OLD, OLD))
    return paths


def _client(logdir: Path) -> tuple[Client, plugin_mod.GpuscopePlugin]:
    flags = argparse.Namespace(gpuscope_dask_scheduler=None)
    p = plugin_mod.GpuscopePlugin(base_plugin.TBContext(logdir=str(logdir), flags=flags))
    return Client(application.TensorBoardWSGI([p])), p


def test_pipeline_route_reads_only_summaries(tmp_path, cache, monkeypatch):
    logdir = tmp_path / "logs"
    _aged(generate_pipeline(str(logdir / "pp"), P, M, steps=2, fwd_us=F, bwd_us=B, transfer_us=0))
    _aged(generate(str(logdir / "ddp"), 2, events=2000, steps=2))
    res = cli.summarize_logdir(str(logdir))
    assert res["done"] == 6 and not res["failed"]
    monkeypatch.setattr(workspace, "PREPARE_MAX_WORKERS", 1)  # never parsed in the background

    def no_read(*a, **k):
        raise AssertionError("a whole trace was read")

    monkeypatch.setattr("profiler_core.trace.read.reader.read_trace", no_read)
    monkeypatch.setattr("tb_plugin.summaries.summary.summarize_path", no_read)
    c, plugin = _client(logdir)
    got = c.get(f"{ROUTE}?run=pp&span=1")
    assert got.status_code == 200, got.json
    r = got.json
    assert r["reason"] is None and (r["schedule"], r["stages"], r["microbatches"]) == ("1F1B", P, M)
    assert len(r["steps"]) == 2 and r["steps_dropped"] == 0
    for step in r["steps"]:
        assert step["bubble_ratio"] == pytest.approx(3 / 11) and step["theoretical_ratio"] == pytest.approx(3 / 11)
        assert len(step["chart"]) == P
        for row in step["chart"]:
            assert sorted((x[0], x[1]) for x in row) == sorted((k, i) for k in "FB" for i in range(M))
        for s, st in enumerate(step["stages"]):
            assert st["idle_ns"] == (P - 1) * (F + B) * US and st["true_idle_ns"] == s * B * US
            assert (
                st["true_idle_ns"] + st["p2p_wait_ns"] + st["p2p_transfer_ns"] + st["upstream_wait_ns"]
                == (st["idle_ns"])
            )
    assert plugin.state().summaries.computed == 0 and plugin.state().loader.loaded_keys() == []
    # a data-parallel run has no pipeline, and says why
    ddp = c.get(f"{ROUTE}?run=ddp&span=1")
    assert ddp.status_code == 200 and ddp.json["steps"] == []
    assert "at least two ranks with forward/backward spans" in ddp.json["reason"]
    assert c.get(f"{ROUTE}?run=nope&span=1").status_code == 404
    assert c.get(f"{ROUTE}?run=pp&span=9").status_code == 404
    assert c.get(f"{ROUTE}?run=pp").status_code == 400


def test_summary_holds_the_projection_and_refuses_a_malformed_one(tmp_path):
    paths = generate_pipeline(str(tmp_path / "pp"), P, M, steps=2, fwd_us=F, bwd_us=B, transfer_us=0)
    s = msgspec.json.decode(msgspec.json.encode(S.summarize(read_trace(paths[1], processes=0))))  # lists, not tuples
    proj = s["pipeline"]
    assert proj["version"] == pp.PROJECTION_VERSION and len(proj["steps"]) == 2
    assert len(proj["steps"][0]["spans"]) == 2 * M  # stage 1: 8 forwards and 8 backwards per step
    assert S.decode(S.encode(s)).pipeline == convert(proj, Pipeline)

    def bad(change) -> dict:
        t = copy.deepcopy(s)
        change(t["pipeline"])
        return t

    broken = {
        "span index past the step's spans": lambda p: p["steps"][0]["p2p"][0].__setitem__(3, 2 * M),
        "a span of unknown kind": lambda p: p["steps"][0]["spans"][0].__setitem__(0, "X"),
        "spans out of time order": lambda p: p["steps"][0]["spans"].reverse(),
        "more steps than bounded": lambda p: p.__setitem__("steps", p["steps"] * (pp.MAX_STEPS // 2 + 1)),
        "a step without spans": lambda p: p["steps"][0].__setitem__("spans", []),
        "no projection": lambda p: p.clear(),
    }
    for what, change in broken.items():
        with pytest.raises(S.SummaryError, match=r"malformed summary: (pipeline|.*\$\.pipeline)"):
            S.decode(S.encode(bad(change)))
            pytest.fail(what)


def test_projection_keeps_the_first_steps_and_counts_the_others(tmp_path, monkeypatch):
    paths = generate_pipeline(str(tmp_path / "pp"), P, M, steps=3, fwd_us=F, bwd_us=B, transfer_us=0)
    monkeypatch.setattr(pp, "MAX_STEPS", 2)
    projs = {str(i): pp.project(read_trace(p, processes=0)) for i, p in enumerate(paths)}
    assert all(len(p["steps"]) == 2 and p["steps_dropped"] == 1 for p in projs.values())
    r = analyse(projs)
    assert len(r["steps"]) == 2 and r["steps_dropped"] == 1
