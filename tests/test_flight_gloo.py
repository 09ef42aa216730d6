"""The flight recorder's torch path on a real `torch.distributed` job (gloo, CPU, 4 processes, torch 2.13 from the
compat venv; tests/real_jobs/flight_gloo_job.py): rank 2's data loader is 30 ms slower in steps 60-89. The
recorder times torch.distributed's all_reduce through its public functions (or a DDP model's gradient all-reduces
through DDP's public communication hook), exchanges through all_gather, catches rank 2, captures with
torch.profiler on every rank, and the diagnosis of that capture names rank 2's data loading."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest

from tb_plugin import telemetry
from tb_plugin.summaries import cli

from .real_jobs import support

pytestmark = pytest.mark.slow  # two 120-step jobs of 4 processes: ~10-20 s each on 2 shared cores

JOB = support.JOB.parent / "flight_gloo_job.py"
ROOT = JOB.parents[2]


@pytest.fixture(scope="module", params=["all_reduce", "ddp"])
def job(request, tmp_path_factory):
    """The job with explicit all_reduce calls (the wrapped public functions), and with a DDP model (its public
    communication hook, `Recorder.ddp_comm_hook()`)."""
    py = support.compat_python()
    out = tmp_path_factory.mktemp("flight-gloo") / "log"
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    last = None
    for _ in range(2):  # the free port may be taken before the rendezvous: one retry
        cmd = [str(py), str(JOB), "--out", str(out), "--port", str(support.free_port()), "--plant", "2:30:60-90"]
        cmd += ["--ddp"] if request.param == "ddp" else []
        last = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
        if last.returncode == 0:
            return out
    raise AssertionError(f"flight gloo job failed ({last.returncode}): {last.stderr[-4000:]}")


def test_the_torch_path_is_taken(job):
    j = telemetry.load(str(job))
    assert j.ranks == [0, 1, 2, 3]
    for t in j.files:
        assert t.header["comm"] == "torch.distributed" and t.header["capture"] == "torch", t.header
        assert t.header["slow_rank_rule"] == "on" and len(t.steps) == 120 and t.ended
        assert (t.columns["comm_ms"] > 0).all()  # every step's all_reduce (or DDP's bucket all-reduce) was timed
    data = j.matrix("data_ms")
    assert (data[2, 60:90] >= 30).all()  # a plant sleeps at least that long
    assert np.median(data[2, :60]) < 10 and np.median(data[2, 90:]) < 10  # noise on a loaded machine: the median


def test_rank_2_caught_and_captured_with_torch_profiler(job):
    s = telemetry.summary(telemetry.load(str(job)))
    (cap,) = s["captures"]
    assert cap["rule"] == "slow_rank" and cap["ranks"] == [2] and cap["tool"] == "torch", cap
    assert 64 <= cap["step"] <= 80, cap
    traces = sorted((job / cap["dir"]).glob("rank*.pt.trace.json"))
    assert [p.name.split(".")[0] for p in traces] == ["rank0", "rank1", "rank2", "rank3"]
    occ = {o["rank"]: o for o in s["occasional"]}
    # most planted steps (60-89) in bursts; noise may split one, or stretch it by a step at either end
    inside = sum(max(0, min(b["last"], 89) - max(b["first"], 60) + 1) for b in occ[2]["bursts"])
    assert inside >= 20, occ[2]


def test_the_capture_diagnosis_names_rank_2(job, capsys):
    assert cli.main(["telemetry", str(job), "--diagnose", "--json"]) == 0
    diag = json.loads(capsys.readouterr().out)["captures"][0]["diagnosis"]
    assert diag["withheld"] is None and diag["workers"] == 4, diag
    assert diag["straggler"]["rank"] == 2 and diag["straggler"]["why"].startswith("data loading +"), diag
