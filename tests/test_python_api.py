"""The Python API (`import gpuscope`, tb_plugin/api.py) answers what the routes and the CLI answer: the same tables
from the same code, on a shared real trace and on generated jobs; it reads nothing before a question needs it and
keeps what it computed; it opens a logdir, a run folder, one trace file or an fsspec URL."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import fsspec
import pandas as pd
import pytest

import gpuscope
from tb_plugin.routes import ROUTES
from tb_plugin.workspace import Workspace

from . import api_support
from .conftest import TRACES, missing

ROUTE = {r.path: r for r in ROUTES}
DDP = TRACES / "torch_cpu_cnn" / "ddp_gloo"


def _route(ws: Workspace, path: str, **params: str):
    """What the HTTP layer answers: the route's parse, then its handler (the plugin's own workspace: eager)."""
    r = ROUTE[path]
    return r.handler(ws, r.parse(params))


@pytest.fixture(scope="module")
def ddp() -> Path:
    if not DDP.is_dir():
        missing(f"the shared traces are not at {TRACES} (set GPUSCOPE_SHARED to the folder holding traces/)")
    return DDP


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> Path:
    """A logdir of two runs of one 2-rank job: `base`, and `slow` with rank 1's SLOW_KERNEL planted."""
    root = tmp_path_factory.mktemp("api_jobs")
    api_support.job(root / "base", planted=False)
    api_support.job(root / "slow", planted=True)
    return root


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True), check_dtype=False)


def test_per_file_tables_equal_the_routes_answers(ddp):
    ws = Workspace(str(ddp.parent))
    f = {"run": "ddp_gloo", "worker": "worker1", "span": "1"}
    with gpuscope.open(ddp.parent) as prof:
        _same(prof.operators(**f), pd.DataFrame(_route(ws, "/operators", **f, group_by="name")["rows"]))
        _same(
            prof.operators(**f, group_by="name_shape"),
            pd.DataFrame(_route(ws, "/operators", **f, group_by="name_shape")["rows"]),
        )
        overview = _route(ws, "/overview", **f)
        _same(prof.steps(**f), pd.DataFrame(overview["steps"]))
        led = prof.ledger(**f)
        assert list(led["step"]) == [s["step"] for s in overview["ledger"]["steps"]]
        for s, (_, row) in zip(overview["ledger"]["steps"], led.iterrows()):
            for k, v in s["buckets"].items():
                assert (pd.isna(row[k]) and v is None) or row[k] == v
        assert list(prof.ledger_buckets(**f)["key"]) == [b["key"] for b in overview["ledger"]["buckets"]]
        mem = _route(ws, "/memory/stats", **f)
        assert len(prof.memory(**f)) == sum(len(r) for r in mem["rows"].values())
        curve = _route(ws, "/memory/curve", **f, max_points="500")
        points = prof.memory_curve(**f, max_points=500)
        for dev, c in curve["curves"].items():
            assert list(points[points["device"] == dev]["allocated_bytes"]) == c["allocated_bytes"]
        tree = _route(ws, "/modules", **f)["tree"]
        mods = prof.modules(**f)
        assert list(mods[mods["depth"] == 0]["path"]) == [n["path"] for n in tree]
    ws.loader.close()
    ws.summaries.close()


def test_run_level_answers_equal_the_route_and_the_cli(ddp, capsys, tmp_path):
    from tb_plugin.summaries import cli

    ws = Workspace(str(ddp.parent))
    ws.collect({"run": "ddp_gloo", "span": "1"})
    route = _route(ws, "/diagnosis", run="ddp_gloo", span="1")
    dist = _route(ws, "/distributed", run="ddp_gloo", span="1", partial="0")
    with gpuscope.open(ddp) as prof:
        d = prof.diagnosis()
        assert json.loads(json.dumps(d.data)) == json.loads(json.dumps(route))
        assert d.caveats == route["caveats"]
        table = d.to_frame()
        assert list(table["step"]) == [s["step"] for s in route["steps"]]
        assert list(table["what_if_ms"]) == [(s["straggler"] or {}).get("what_if_ms") for s in route["steps"]]
        assert list(prof.stragglers()["saved_ms"]) == [s["saved_ms"] for s in route["stragglers"]]
        segs = prof.critical_path()
        assert len(segs) == sum(len(s["segments"]) for s in route["steps"])
        ov = prof.overlap().set_index("worker")
        for w, v in dist["workers"].items():
            assert ov.loc[w, "wait_us"] == v["wait_us"]
        coll = prof.collectives()
        assert len(coll) == sum(len(rows) for rows in dist["comm_ops"].values())
        assert prof.group_waits()["wait_us"].sum() == pytest.approx(
            sum(v["wait_us"] for per in dist["groups"].values() for v in per.values())
        )
    copy = tmp_path / "ddp_gloo"  # the CLI stores its summaries in the logdir: a copy, never the shared folder
    shutil.copytree(ddp, copy, ignore=shutil.ignore_patterns(".*"))
    assert cli.main(["diagnose", str(copy), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    for k in ("steps", "stragglers", "worst", "ledger", "caveats"):
        assert printed[k] == json.loads(json.dumps(d.data[k])), k
    ws.loader.close()
    ws.summaries.close()


def test_nothing_is_read_before_a_question_needs_it_and_answers_are_kept(ddp):
    with gpuscope.open(ddp) as prof:
        assert prof.runs == [Path(ddp).name] and prof.workers() == ["worker0", "worker1"]
        assert prof.ws.loader.loaded_keys() == [] and prof.ws.summaries.computed == 0
        prof.kernels(worker="worker0")
        assert len(prof.ws.loader.loaded_keys()) == 1 and prof.ws.summaries.computed == 0
        first = prof.overview(worker="worker0")
        assert prof.overview(worker="worker0") == first
        prof.diagnosis()
        done = prof.ws.summaries.computed
        assert done <= 2
        again = prof.diagnosis()
        assert prof.ws.summaries.computed == done and again.data == prof.diagnosis().data


def test_a_file_a_run_folder_and_a_logdir_give_one_answer(ddp):
    [trace] = sorted(ddp.glob("worker1.*"))
    with gpuscope.open(trace) as one, gpuscope.open(ddp) as run, gpuscope.open(ddp.parent) as logdir:
        assert one.workers() == ["worker1"]
        _same(one.steps(), run.steps(worker="worker1"))
        _same(one.kernels(), logdir.kernels(run="ddp_gloo", worker="worker1"))
        with pytest.raises(gpuscope.AnalysisError, match="runs"):
            logdir.steps()  # two runs: name one
        _same(logdir.select("ddp_gloo").operators(worker="worker1"), run.operators(worker="worker1"))
        with pytest.raises(gpuscope.AnalysisError, match="unknown worker"):
            run.steps(worker="worker9")
    with pytest.raises(gpuscope.AnalysisError, match="no such"):
        gpuscope.open(ddp / "absent")


def test_an_fsspec_url_is_a_logdir(ddp):
    mem = fsspec.filesystem("memory")
    for p in ddp.glob("*.pt.trace.json.gz"):
        mem.pipe(f"/api_test_job/{p.name}", p.read_bytes())
    try:
        with gpuscope.open("memory://api_test_job") as remote, gpuscope.open(ddp) as local:
            assert remote.workers() == local.workers()
            _same(remote.steps(worker="worker0"), local.steps(worker="worker0"))
            assert remote.diagnosis().to_frame().equals(local.diagnosis().to_frame())
    finally:
        mem.rm("/api_test_job", recursive=True)


def test_job_diff_names_the_planted_kernel_as_the_route_does(jobs):
    ws = Workspace(str(jobs))
    ws.collect({"run": "base", "span": "1"})
    ws.collect({"run": "slow", "span": "1"})
    route = _route(ws, "/jobdiff", run="base", exp_run="slow")
    with gpuscope.open(jobs) as prof:
        same = prof.select("base").diff(prof.select("slow"))
        assert json.loads(json.dumps(same.data)) == json.loads(json.dumps(route))
        with gpuscope.open(jobs / "base") as a, gpuscope.open(jobs / "slow") as b:
            apart = a.diff(b)
        assert apart.data["lines"] == same.data["lines"]
    top = same.to_frame().iloc[0]
    assert top["name"] == api_support.SLOW_KERNEL and top["ranks"] == [api_support.PLANT_RANK]
    assert same["step_delta_ms"] > 0
    assert api_support.SLOW_KERNEL in (same.cause or "")
    ws.loader.close()
    ws.summaries.close()


def test_gpu_tables_of_a_gpu_job(jobs):
    with gpuscope.open(jobs / "slow") as prof:
        k = prof.kernels(worker=prof.workers()[1])
        assert api_support.SLOW_KERNEL in set(k["name"])
        idle = prof.gpu_idle()
        assert set(idle["worker"]) == set(prof.workers()) and (idle["idle_ns"] >= 0).all()
        launches = prof.launches()
        assert (launches["count"] > 0).all()
        assert not prof.queue_length().empty
        crit = prof.run_ledger()
        assert set(crit["worker"]) == {prof.workers()[api_support.PLANT_RANK]}
        offsets = prof.clock_offsets()
        assert set(offsets["worker"]) == set(prof.workers())


def test_a_run_added_after_opening_is_listed(jobs, tmp_path):
    """A profile's answers follow the files: a run copied in after opening is listed."""
    with gpuscope.open(tmp_path) as prof:
        assert prof.runs == []
        shutil.copytree(jobs / "base", tmp_path / "base")
        prof.ws.scanned_at = float("-inf")  # the next question lists the logdir again
        assert prof.runs == ["base"]


def test_the_pipeline_analysis_is_the_routes(tmp_path):
    from gen_pipeline import generate_pipeline

    generate_pipeline(str(tmp_path / "pp"), 2, 4, steps=2, transfer_us=5)
    ws = Workspace(str(tmp_path))
    ws.collect({"run": "pp", "span": "1"})
    route = _route(ws, "/pipeline", run="pp", span="1")
    with gpuscope.open(tmp_path / "pp") as prof:
        got = prof.pipeline()
    assert json.loads(json.dumps(got.data)) == json.loads(json.dumps(route))
    stages = got.to_frame()
    assert len(stages) == sum(len(s["stages"]) for s in route["steps"]) > 0
    assert set(stages["bubble_ratio"]) == {s["bubble_ratio"] for s in route["steps"]}
    ws.loader.close()
    ws.summaries.close()
