"""Job diff (issue 24 item 1): job B, a planted regression of job A (benchmarks/gen_distributed.py: A with
`--plant-layout`, B the same job with `--plant`), compared from the per-worker summaries only. The planted cause
comes first with its rank and ms; different rank counts compare; the /jobdiff route (JSON and CSV) and
`gpuscope jobdiff` give the same answer; bad input is a clear error (404 / exit code 2)."""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

import tb_plugin.plugin as plugin_mod
from profiler_core.analysis.worker.buckets import BUCKETS, COMPUTE, DATA_LOADING, SYNC_SKEW
from tb_plugin import workspace
from tb_plugin.run_level import job_diff as J
from tb_plugin.summaries import cli
from tb_plugin.summaries.summary import summarize_path

from .summaries_support import gpuscope, ready

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from gen_distributed import SLOW_KERNEL, Plant, generate  # noqa: E402

P = "/data/plugin/gpuscope"
OLD = time.time() - 3600
KERNEL_MS, DATA_MS, LINK_MS = 4.0, 3.0, 4.0
JOBS = {
    "a": (8, (), False),
    "b": (8, (Plant(3, "kernel", KERNEL_MS),), False),  # rank 3's SLOW_KERNEL runs 4 ms longer every step
    "c": (16, (Plant(2, "data", DATA_MS),), False),  # 16 ranks; rank 2's data loading 3 ms longer
    "a2d": (8, (), True),
    "b2d": (8, (Plant(5, "link", LINK_MS),), True),  # a slow link on rank 5: its node and rail groups slower
}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> tuple[Path, dict]:
    logdir = tmp_path_factory.mktemp("jobdiff")
    out = {}
    for name, (ranks, plants, two_d) in JOBS.items():
        paths = generate(str(logdir / name), ranks, events=2000, steps=3, plants=plants, layout=True, two_d=two_d)
        for p in paths:
            os.utime(p, (OLD, OLD))
        out[name] = {Path(p).name.split(".")[0]: summarize_path(p) for p in paths}
    return logdir, out


def test_planted_kernel_comes_first_with_its_rank_kernel_and_ms(jobs):
    _, s = jobs
    r = J.job_diff(s["a"], s["b"])
    first = r["lines"][0]
    assert first["bucket"] == COMPUTE and first["kind"] == "kernel" and first["name"] == SLOW_KERNEL
    assert first["ranks"] == [3]
    assert first["delta_ms"] == pytest.approx(KERNEL_MS, rel=0.1)
    assert first["text"].startswith("Compute (kernels) +4.0") and "on rank 3: kernel ampere_sgemm" in first["text"]
    # every other rank waits for rank 3 at the all-reduces: one sync-skew line after the cause, on ranks 0-2, 4-7
    waits = [ln for ln in r["lines"] if ln["bucket"] == SYNC_SKEW and ln["delta_ms"] > 0]
    assert waits[0]["ranks"] == [0, 1, 2, 4, 5, 6, 7] and waits[0]["ranks_text"] == "ranks 0-2, 4-7"
    assert waits[0]["delta_ms"] == pytest.approx(KERNEL_MS, rel=0.1)
    assert r["lines"].index(waits[0]) > 0
    # the step grows by the planted ms; the job's buckets add up to it (exclusive buckets, module docstring)
    assert r["step_delta_ms"] == pytest.approx(KERNEL_MS, rel=0.1)
    assert sum(b["delta_ms"] for b in r["buckets"]) == pytest.approx(r["step_delta_ms"], abs=1e-3)
    # per rank: rank 3's compute +4 ms, and each rank's buckets add up to its step delta
    rank3 = next(x for x in r["per_rank"] if x["rank"] == 3)
    assert rank3["buckets"][COMPUTE] == pytest.approx(KERNEL_MS, rel=0.1)
    for x in r["per_rank"]:
        assert sum(x["buckets"][b] for b in BUCKETS) == pytest.approx(x["step_delta_ms"], abs=1e-3)
    # kernel drill-down: on the mean rank the slow kernel is 4 ms / 8 ranks longer per step, the others unchanged
    # (rows are per op path and name: the generator's CPU ops may nest a backward op under another call in one job
    # and not in the other, which moves a few µs between two rows of one name; a name's rows add up)
    assert r["kernels"][0]["name"] == SLOW_KERNEL and r["kernels"][0]["align"] == "name"
    assert r["kernels"][0]["delta_ms"] == pytest.approx(KERNEL_MS / 8, rel=0.1)
    by_name: dict[str, float] = {}
    for k in r["kernels"][1:]:
        by_name[k["name"]] = by_name.get(k["name"], 0.0) + k["delta_ms"]
    assert len(by_name) >= 4 and all(abs(d) < 1e-3 for d in by_name.values())
    assert len(r["steps"]) == 3 and all(x["delta_ms"] == pytest.approx(KERNEL_MS, rel=0.1) for x in r["steps"])
    # the world group's members, from each trace's distributedInfo.pg_config (a list of ranks, as torch writes it)
    world = [g for g in r["groups"] if g["group"] == "0"]
    assert world and all(g["ranks"] == "0-7" for g in world)


def test_different_rank_counts(jobs):
    _, s = jobs
    r = J.job_diff(s["a"], s["c"])
    assert (r["a"]["ranks"], r["b"]["ranks"]) == (8, 16)
    first = r["lines"][0]
    assert (first["bucket"], first["ranks"]) == (DATA_LOADING, [2])
    assert first["delta_ms"] == pytest.approx(DATA_MS, rel=0.1)
    assert first["text"] == f"Data loading (GPU idle) +{first['delta_ms']:.2f} ms per step on rank 2"
    assert [x["rank"] for x in r["per_rank"]] == list(range(16))
    assert r["notes"][0] == "ranks 8-15 are only in B: compared with A's mean rank"
    assert sum(b["delta_ms"] for b in r["buckets"]) == pytest.approx(r["step_delta_ms"], abs=1e-3)
    # the other way round: B smaller than A, ranks 8-15 only in A
    back = J.job_diff(s["c"], s["a"])
    assert back["only_a"] == list(range(8, 16)) and len(back["per_rank"]) == 8
    assert back["step_delta_ms"] < 0  # B faster: its gains come first
    assert (back["lines"][0]["bucket"], back["lines"][0]["ranks"]) == (DATA_LOADING, [2])
    assert back["lines"][0]["delta_ms"] == pytest.approx(-DATA_MS, rel=0.1)


def test_slow_link_per_group_drill_down(jobs):
    """8 ranks in nodes of 2 (gen_distributed.subgroups): rank 5's node group is ranks 4-5, its rail group
    1, 3, 5, 7; a slow link makes every collective of both groups LINK_MS / 2 longer on all their members."""
    _, s = jobs
    r = J.job_diff(s["a2d"], s["b2d"])
    by_ranks = {g["ranks"]: g for g in r["groups"]}
    node = by_ranks["4-5"]
    assert node["delta_ms"] == pytest.approx(LINK_MS / 2, rel=0.1)
    for other in ("0-1", "2-3", "6-7"):
        assert abs(by_ranks[other]["delta_ms"]) < 0.1 * LINK_MS
    rail = by_ranks["1, 3, ..., 7 (stride 2)"]
    assert rail["delta_ms"] >= LINK_MS / 2 * 0.9  # its transfer, and waiting for rank 5, late by LINK_MS / 2
    assert {r["groups"][0]["ranks"], r["groups"][1]["ranks"]} >= {"1, 3, ..., 7 (stride 2)"}
    assert r["step_delta_ms"] == pytest.approx(LINK_MS, rel=0.1)


def test_ranges_and_csv(jobs):
    assert J.ranges([9, 0, 1, 2, 5, 8]) == "0-2, 5, 8-9"
    assert J.ranges([]) == ""
    assert J.ranges([5, 13, 21, 29]) == "5, 13, ..., 29 (stride 8)"
    assert J.ranges([1, 3, 5, 8, 10, 20], most=2) == "1, 3, ... (6 ranks)"
    _, s = jobs
    r = J.job_diff(s["a"], s["b"])
    rows = list(csv.DictReader(io.StringIO(J.to_csv(r))))
    lines = [x for x in rows if x["order"]]
    assert len(lines) == len(r["lines"])
    assert (lines[0]["kind"], lines[0]["name"], lines[0]["ranks"], lines[0]["n_ranks"]) == (
        "kernel",
        SLOW_KERNEL,
        "3",
        "1",
    )
    assert float(lines[0]["delta_ms"]) == r["lines"][0]["delta_ms"]
    assert sorted(x["bucket"] for x in rows if x["kind"] == "job_bucket") == sorted(BUCKETS)


def test_no_summaries_is_an_error():
    with pytest.raises(J.JobDiffError, match="run A: no worker summaries"):
        J.job_diff({}, {"w": {}})


def _plugin(logdir: Path) -> Client:
    flags = argparse.Namespace(gpuscope_dask_scheduler=None)
    p = plugin_mod.GpuscopePlugin(base_plugin.TBContext(logdir=str(logdir), flags=flags))
    return Client(application.TensorBoardWSGI([p]))


def test_route_json_csv_and_errors(jobs, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    logdir, s = jobs
    c = _plugin(logdir)
    got = ready(c, f"{P}/jobdiff?run=a&exp_run=b")  # the summaries are computed meanwhile
    assert got.status_code == 200, got.json
    assert got.json["lines"] == J.job_diff(s["a"], s["b"])["lines"]
    text = c.get(f"{P}/jobdiff?run=a&exp_run=b&format=csv")
    assert text.status_code == 200 and text.headers["Content-Type"].startswith("text/csv")
    assert text.get_data(as_text=True) == J.to_csv(J.job_diff(s["a"], s["b"]))
    assert c.get(f"{P}/jobdiff?run=a&exp_run=nope").status_code == 404
    assert "nope" in c.get(f"{P}/jobdiff?run=a&exp_run=nope").json["error"]
    assert c.get(f"{P}/jobdiff?run=a").status_code == 400
    assert c.get(f"{P}/jobdiff?run=a&exp_run=b&format=xml").status_code == 400
    assert c.get(f"{P}/jobdiff?run=a&exp_run=b&exp_span=9").status_code == 404


def test_route_reads_only_summaries(tmp_path, monkeypatch):
    """/jobdiff answers from the stored summaries: with every way to read a whole trace made to fail, it still
    names the planted rank and kernel."""
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    logdir = tmp_path / "logs"
    for name, plants in (("a", ()), ("b", (Plant(1, "kernel", KERNEL_MS),))):
        for p in generate(str(logdir / name), 2, events=2000, steps=2, plants=plants, layout=True):
            os.utime(p, (OLD, OLD))
    res = cli.summarize_logdir(str(logdir))
    assert res["done"] == 4 and not res["failed"], res
    monkeypatch.setattr(workspace, "PREPARE_MAX_WORKERS", 1)  # no whole-trace parsing in the background

    def no_read(*a, **k):
        raise AssertionError("a whole trace was read")

    monkeypatch.setattr("profiler_core.trace.read.reader.read_trace", no_read)
    monkeypatch.setattr("tb_plugin.summaries.summary.summarize_path", no_read)
    got = _plugin(logdir).get(f"{P}/jobdiff?run=a&exp_run=b")
    assert got.status_code == 200, got.json
    first = got.json["lines"][0]
    assert (first["kind"], first["name"], first["ranks"]) == ("kernel", SLOW_KERNEL, [1])
    assert first["delta_ms"] == pytest.approx(KERNEL_MS, rel=0.1)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return gpuscope("jobdiff", *args)


@pytest.mark.slow
def test_cli(jobs):
    logdir, s = jobs
    r = _cli(f"{logdir}:a", f"{logdir}:b", "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert (got["run"], got["exp_run"]) == ("a", "b")
    assert got["lines"] == J.job_diff(s["a"], s["b"])["lines"]
    r = _cli(f"{logdir}:a", f"{logdir}:b")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[2].startswith("1. Compute (kernels) +4.0")
    r = _cli(f"{logdir}:a", f"{logdir}:c", "--csv")
    assert r.returncode == 0 and r.stdout.startswith(",".join(J.LINE_FIELDS) + "\n")
    for args, message in (
        ((f"{logdir}/nope", f"{logdir}:b"), "job A: " + f"{logdir}/nope: no such directory"),
        ((f"{logdir}:a", f"{logdir}:zz"), "job B: no run 'zz'"),
        ((f"{logdir}:a", str(logdir)), "job B: " + f"{logdir} has 5 runs"),
        ((f"{logdir}:a", f"{logdir}:b", "--exp-span", "4"), "job B: no worker of run 'b' has span '4'"),
    ):
        r = _cli(*args)
        assert r.returncode == 2 and message in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr


def test_split_run(tmp_path):
    (tmp_path / "x:y").mkdir()
    assert cli.split_run(str(tmp_path)) == (str(tmp_path), None)
    assert cli.split_run(f"{tmp_path}:run1") == (str(tmp_path), "run1")
    assert cli.split_run(str(tmp_path / "x:y")) == (str(tmp_path / "x:y"), None)
    assert cli.split_run(f"{tmp_path}/x:y:r") == (f"{tmp_path}/x:y", "r")
    assert cli.split_run("s3://bucket/logs:run") == ("s3://bucket/logs", "run")
    assert cli.split_run("s3://bucket/logs") == ("s3://bucket/logs", None)
