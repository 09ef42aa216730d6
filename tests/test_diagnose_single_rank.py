"""A run of one worker (issue 22 item 3): `gpuscope diagnose` and `/diagnosis` include its single-rank critical
path per step (`report.single_rank`, computed from the trace: docs/diagnosis.md), on a hand-made trace whose
paths are derived by hand below and on a shared single-rank GPU trace (against `single_rank_path.critical_path`,
which tests/test_single_rank_path.py checks against HTA)."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

import tb_plugin.plugin as plugin_mod
from profiler_core.analysis.worker import single_rank_path as srp
from profiler_core.trace.read.reader import read_trace
from tb_plugin.run_level import report
from tb_plugin.summaries import schema

from .conftest import TRACES, requires
from .summaries_support import ready
from .test_views_common_support import kernel, op, runtime

ROOT = Path(__file__).resolve().parents[1]
SHARED = TRACES / "kineto_resnet50_v100" / "num_workers_0"  # GPUSCOPE_SHARED, default ../shared
P = "/data/plugin/gpuscope"
OLD = time.time() - 3600

# Step 1 [0,100) µs, CPU-bound: A [10,60) launches k1 [40,45) at [20,30). Path: A 10-20, launch 20-30, A 30-60:
# 40 µs of cpu_op and 10 of launch (the kernel route, 10 + launch delay 20-40 + k1 5 = 35 µs, is shorter).
# Step 2 [100,400) µs, GPU-bound: B [110,130) launches k2 [125,325) at [115,120), then cudaDeviceSynchronize
# [130,330) waits for it. Path: B 110-115, launch delay 115-125, k2 125-325, sync wait 325-330: 215 µs of work
# (the CPU route B + launch + B is 20 µs), k2 its largest (kind, name) total.
EVENTS = [
    op("ProfilerStep#1", 0, 100, cat="user_annotation"),
    op("A", 10, 50, ext=1),
    runtime("cudaLaunchKernel", 20, 10, corr=11, ext=1),
    kernel("k1", 40, 5, 11),
    op("ProfilerStep#2", 100, 300, cat="user_annotation"),
    op("B", 110, 20, ext=2),
    runtime("cudaLaunchKernel", 115, 5, corr=12, ext=2),
    kernel("k2", 125, 200, 12),
    runtime("cudaDeviceSynchronize", 130, 200, corr=13),
]


def _us(r: dict) -> dict:
    return {k: v["ns"] / 1000 for k, v in r["by_kind"].items() if v["ns"]}


@pytest.fixture
def handmade(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    run = tmp_path / "logs" / "job"
    run.mkdir(parents=True)
    p = run / "w0.1.pt.trace.json"
    p.write_text(json.dumps({"traceEvents": EVENTS, "deviceProperties": [{"id": 0, "name": "GPU"}]}))
    os.utime(p, (OLD, OLD))
    return tmp_path / "logs"


def _check_handmade(rep: dict) -> None:
    single = rep["single_rank"]
    assert single["worker"] == "w0" and single["steps_total"] == 2 and single["note"] is None
    s1, s2 = single["steps"]
    assert (s1["step"], s1["window_ns"], s1["length_ns"]) == ("1", 100_000, 50_000)
    assert _us(s1) == {"cpu_op": 40, "launch": 10}
    assert (s2["step"], s2["window_ns"], s2["length_ns"]) == ("2", 300_000, 215_000)
    assert _us(s2) == {"cpu_op": 5, "launch_delay": 10, "kernel": 200, "sync_wait": 5}
    assert s2["top"][0] == {"kind": "kernel", "name": "k2", "ns": 200_000}


def test_cli_one_worker_has_its_single_rank_path(handmade):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "tb_plugin.summaries.cli", "diagnose", str(handmade)]
    js = subprocess.run([*cmd, "--json"], env=env, capture_output=True, text=True, timeout=300)
    assert js.returncode == 0, js.stderr
    _check_handmade(json.loads(js.stdout))
    txt = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert txt.returncode == 0, txt.stderr
    lines = txt.stdout.splitlines()
    i = lines.index("Single-rank critical path (from the trace: the chain of CPU and GPU work that set each step):")
    assert lines[i + 1].startswith("  step 1 (100 µs): path 50 µs")
    j = next(k for k in range(i + 2, len(lines)) if lines[k].startswith("  step 2 "))
    assert lines[j].startswith("  step 2 (300 µs): path 215 µs: kernel 200 µs")
    assert lines[j + 1] == "    kernel k2: 200 µs"


def test_route_one_worker_has_its_single_rank_path(handmade):
    flags = argparse.Namespace(gpuscope_dask_scheduler=None)
    p = plugin_mod.GpuscopePlugin(base_plugin.TBContext(logdir=str(handmade), flags=flags))
    c = Client(application.TensorBoardWSGI([p]))
    assert c.get(f"{P}/runs").json["runs"] == ["job"]
    got = ready(c, f"{P}/diagnosis?run=job&span=1")  # its summary is computed meanwhile
    assert got.status_code == 200, got.json
    _check_handmade(got.json)


def test_unreadable_trace_is_a_note_not_a_failure():
    def fails(worker: str):
        raise OSError("gone")

    rep = report.diagnose({"w0": schema.from_dict({"ledger": None, "phases": None})}, trace=fails)
    assert rep["single_rank"] is None
    assert "no single-rank critical path: the trace cannot be read (gone)" in rep["notes"]


@requires(
    None if SHARED.is_dir() else f"the shared trace {SHARED.name} is not in {SHARED.parent} (set GPUSCOPE_SHARED)"
)
def test_shared_single_rank_trace(tmp_path, monkeypatch):
    """ResNet-50 on one V100 (kineto_resnet50_v100/num_workers_0): the JSON's steps are the trace's steps, each
    with the path `critical_path` finds there (length and per-kind totals), bounded to 20 segments."""
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    run = tmp_path / "logs" / "resnet"
    run.mkdir(parents=True)
    src = sorted(SHARED.glob("*.pt.trace.json.gz"))[0]
    shutil.copy(src, run / src.name)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "tb_plugin.summaries.cli", "diagnose", str(tmp_path / "logs"), "--json"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    single = json.loads(r.stdout)["single_rank"]
    with gzip.open(src) as f:
        n_steps = sum(1 for e in json.load(f)["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#"))
    assert single["steps_total"] == n_steps > 0
    t = read_trace(str(src), processes=0)
    assert len(single["steps"]) == min(n_steps, report.SINGLE_STEPS)
    for i, got in enumerate(single["steps"]):
        want = srp.critical_path(t, i)
        assert got["step"] == want["step"] and got["length_ns"] == want["length_ns"] > 0
        assert got["by_kind"] == want["by_kind"] and got["segments_total"] == want["segments_total"]
        assert len(got["segments"]) == min(report.SINGLE_SEGMENTS, want["segments_total"])
        assert got["top"] == want["top"][: report.SINGLE_TOP]
