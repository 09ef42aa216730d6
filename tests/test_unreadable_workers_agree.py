"""Issue 39 item 8: `gpuscope diagnose` and the TensorBoard tab agree on which files are workers. An empty trace
(plain or gzipped) beside good ones is unreadable in both: not a worker of the diagnosis nor of the Distributed
view, named with the same reason by the CLI (text and JSON) and by the routes (/runs, /workers, /diagnosis,
/distributed)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

from .summaries_support import gpuscope

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from gen_distributed import generate  # noqa: E402

P = "/data/plugin/gpuscope"
GOOD = ["node0_rank00000", "node0_rank00001", "node0_rank00002"]
EMPTY = {"host_rank00003": "host_rank00003.pt.trace.json", "host_rank00004": "host_rank00004.pt.trace.json.gz"}


@pytest.fixture(scope="module")
def logdir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("empty_worker")
    generate(str(root / "job"), 3, events=500, steps=2, buckets=2, straggler=1)
    for name in EMPTY.values():
        (root / "job" / name).write_bytes(b"")
    old = time.time() - 3600  # older than the scanner's stable age: every file is listed at once, however fast
    for p in (root / "job").iterdir():
        os.utime(p, (old, old))
    return root


def _errors() -> list[dict]:
    return [{"worker": w, "file": f"job/{name}", "error": "empty file"} for w, name in sorted(EMPTY.items())]


def test_the_cli_and_the_tab_name_the_same_workers_and_the_same_unreadable_files(logdir, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    r = gpuscope("diagnose", str(logdir), "job", "--json")
    assert r.returncode == 0, r.stderr
    cli = json.loads(r.stdout)
    assert cli["workers"] == len(GOOD) and sorted(cli["ranks"]) == GOOD
    assert sorted(cli["errors"], key=lambda e: e["worker"]) == _errors()
    text = gpuscope("diagnose", str(logdir), "job")
    assert text.returncode == 0, text.stderr
    for name in EMPTY.values():
        assert f"unreadable, not a worker here: job/{name} (empty file)" in text.stdout

    from tb_plugin.plugin import GpuscopePlugin

    c = Client(application.TensorBoardWSGI([GpuscopePlugin(base_plugin.TBContext(logdir=str(logdir)))]))
    # known from the listing, whether the loader has reached the empty files yet or not (the page picks its
    # first worker from this answer)
    assert c.get(f"{P}/workers?run=job").json["unreadable"] == dict.fromkeys(EMPTY, "empty file")
    end = time.monotonic() + 120
    while (runs := c.get(f"{P}/runs").json)["loading"]:
        assert time.monotonic() < end, runs
        time.sleep(0.1)
    assert sorted((e["file"], e["error"]) for e in runs["errors"]) == [(e["file"], e["error"]) for e in _errors()]
    listed = c.get(f"{P}/workers?run=job").json
    assert listed["workers"] == sorted([*GOOD, *EMPTY])  # every file is listed, its state said
    assert listed["unreadable"] == dict.fromkeys(EMPTY, "empty file")
    assert c.get(f"{P}/overview?run=job&worker=host_rank00003&span=1").status_code == 422
    end = time.monotonic() + 120
    while "pending" in (diag := c.get(f"{P}/diagnosis?run=job&span=1").json):
        assert time.monotonic() < end, diag
        time.sleep(0.1)
    # the tab's diagnosis is the CLI's: the same workers, the same unreadable files
    assert diag["workers"] == cli["workers"] and diag["ranks"] == cli["ranks"]
    assert sorted(diag["errors"], key=lambda e: e["worker"]) == _errors()
    dist = c.get(f"{P}/distributed?run=job&span=1").json
    assert sorted(dist["workers"]) == GOOD and sorted(dist["errors"], key=lambda e: e["worker"]) == _errors()
