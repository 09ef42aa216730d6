"""`gpuscope summarize` on a real Dask cluster (LocalCluster, 2 worker processes): each task reads its
own file and sends back only the summary; the summaries equal the in-process ones. The plugin's
scheduler flag computes missing summaries on the cluster too."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import require_module

require_module("distributed", "Dask is an extra: pip install 'gpuscope[dask]'")

from tb_plugin.runs import Scanner  # noqa: E402
from tb_plugin.summaries import cli, store  # noqa: E402
from tb_plugin.summaries import summary as S  # noqa: E402
from tb_plugin.summaries.engine import Summaries  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from gen_distributed import generate  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OLD = time.time() - 3600


@pytest.fixture(scope="module")
def cluster():
    from distributed import LocalCluster

    # the workers are separate processes: they import tb_plugin from this checkout
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), old or ""])
    c = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    try:
        yield c
    finally:
        c.close()
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


@pytest.fixture
def logdir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "logs"
    for p in generate(str(root / "job"), 4, events=3000, steps=3):
        os.utime(p, (OLD, OLD))
    return root


def _in_process(logdir: Path) -> dict:
    return {f.relpath: S.summarize_path(f.path) for r in Scanner(str(logdir)).scan().values() for f in r.files()}


def test_cluster_summaries_equal_in_process_ones(cluster, logdir):
    from distributed import Client

    with Client(cluster) as c:
        assert len(c.scheduler_info()["workers"]) == 2
        pids = set(c.run(os.getpid).values())
    assert os.getpid() not in pids and len(pids) == 2
    res = cli.summarize_logdir(str(logdir), scheduler=cluster.scheduler_address)
    assert res["done"] == 4 and res["failed"] == []
    expected = _in_process(logdir)
    out = store.default_out(str(logdir))
    for rel, s in expected.items():
        got = store.read(store.out_path(out, rel), None)
        assert got == s, rel
    # up to date now: nothing is sent to the cluster again
    assert cli.summarize_logdir(str(logdir), scheduler=cluster.scheduler_address)["skipped"] == 4


def test_plugin_computes_missing_summaries_on_the_scheduler(cluster, logdir):
    files = [f for r in Scanner(str(logdir)).scan().values() for f in r.files()]
    sums = Summaries(str(logdir), scheduler=cluster.scheduler_address)
    try:
        got = sums.get_many(files)
    finally:
        sums.close()
    assert sums.computed == 4
    expected = _in_process(logdir)
    assert {f.relpath: g for f, g in zip(files, got)} == expected


@pytest.mark.slow
def test_cli_local_cluster_of_two_processes(logdir, tmp_path):
    out = tmp_path / "sums"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run(
        [sys.executable, "-m", "tb_plugin.summaries.cli", "summarize", str(logdir), "--local", "2", "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "4 summarized, 0 up to date, 0 failed, of 4 trace files" in r.stdout
    expected = _in_process(logdir)
    for rel, s in expected.items():
        assert store.read(store.out_path(str(out), rel), None) == s
    r = subprocess.run(
        [sys.executable, "-m", "tb_plugin.summaries.cli", "summarize", str(logdir), "--local", "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert r.returncode == 2 and "--local needs at least 1 worker" in r.stderr


def test_plugin_flag_sends_missing_summaries_to_the_cluster(cluster, logdir, monkeypatch):
    import argparse

    from tensorboard.backend import application
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    import tb_plugin.plugin as plugin_mod
    from tb_plugin import workspace

    def no_read(*a, **k):
        raise AssertionError("TensorBoard's process read a whole trace")

    # this process may not summarize: only the cluster's worker processes can
    monkeypatch.setattr("tb_plugin.summaries.engine.summarize_path", no_read)
    monkeypatch.setattr(workspace, "PREPARE_MAX_WORKERS", 2)
    flags = argparse.Namespace(gpuscope_dask_scheduler=cluster.scheduler_address)
    p = plugin_mod.GpuscopePlugin(base_plugin.TBContext(logdir=str(logdir), flags=flags))
    c = Client(application.TensorBoardWSGI([p]))
    try:
        d = c.get("/data/plugin/gpuscope/distributed?run=job&span=1")
        assert d.status_code == 200, d.json
        assert len(d.json["workers"]) == 4 and p.state().summaries.computed == 4
        assert p.state().loader.loaded_keys() == []
    finally:
        p.state().summaries.close()
