"""The flight recorder on a real job (4 MPI processes of samples/distributed_train.py): rank 2's data loader is
40 ms slower in steps 300-399 only. The recorder's cross-rank rule catches it from the exchanged numbers, every
rank captures the steps after it with the reason recorded, `gpuscope telemetry` names rank 2 an occasional (not a
chronic) straggler over those steps, and the diagnosis of the capture names rank 2 and its data loading."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tb_plugin import telemetry
from tb_plugin.summaries import cli

from .test_distributed_e2e import MPIEXEC, _run_sample, needs_mpi

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    if MPIEXEC is None:
        pytest.skip("mpiexec or mpi4py absent (pip install mpi4py mpich)")
    logdir = tmp_path_factory.mktemp("flight") / "log"
    out = _run_sample(
        4,
        logdir,
        "--recorder",
        "--steps",
        "440",
        "--batch-size",
        "64",
        "--hidden",
        "128",
        "--plant",
        "2:data:40:300-400",
        "--trigger-k",
        "0",  # the slow-step rule off: the cross-rank rule is the one under test
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return logdir


@needs_mpi
def test_every_rank_recorded_every_step(planted):
    job = telemetry.load(str(planted))
    assert job.ranks == [0, 1, 2, 3] and len(job.steps) == 440
    for t in job.files:
        assert t.steps.tolist() == list(range(440)) and t.ended and t.header["comm"] == "mpi4py"
        assert t.header["slow_rank_rule"] == "on"
    data = job.matrix("data_ms")
    assert (data[2, 300:400] >= 40).all()  # a plant sleeps at least that long
    assert np.median(data[2, :300]) < 10 and np.median(data[2, 400:]) < 10  # noise on a loaded machine: the median


@needs_mpi
def test_the_slow_rank_rule_captured_after_the_plant(planted):
    s = telemetry.summary(telemetry.load(str(planted)))
    (cap,) = s["captures"]
    assert cap["rule"] == "slow_rank" and cap["ranks"] == [2], cap
    assert 304 <= cap["step"] <= 320, cap  # decided at the first exchange after 5 slow steps
    assert sorted(c["rank"] for c in cap["captured"]) == [0, 1, 2, 3]
    assert {c["role"] for c in cap["captured"] if c["rank"] == 2} == {"affected"}
    assert cap["why"].startswith("rank 2 +") and "for 5 steps" in cap["why"]
    assert len(list((planted / cap["dir"]).glob("*.pt.trace.json"))) == 4


@needs_mpi
def test_rank_2_is_an_occasional_straggler_over_the_planted_steps(planted):
    s = telemetry.summary(telemetry.load(str(planted)))
    assert s["chronic"] == []
    occ = {o["rank"]: o for o in s["occasional"]}
    assert 2 in occ, s["occasional"]
    # the planted steps in bursts (a loaded machine may break one in two: another rank late in one step)
    inside = [b for b in occ[2]["bursts"] if b["first"] >= 300 and b["last"] <= 399]
    assert inside and min(b["first"] for b in inside) <= 305 and max(b["last"] for b in inside) >= 395, inside
    assert sum(b["steps"] for b in inside) >= 90 and all(b["excess_ms"] >= 35 for b in inside), inside


@needs_mpi
def test_the_capture_diagnosis_names_rank_2_and_its_data_loading(planted, capsys):
    assert cli.main(["telemetry", str(planted), "--diagnose", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    diag = d["captures"][0]["diagnosis"]
    assert diag["withheld"] is None and diag["workers"] == 4, diag
    assert diag["straggler"]["rank"] == 2 and diag["straggler"]["why"].startswith("data loading +"), diag
    assert set(diag["stragglers_by_rank"]) == {"2"}, diag
