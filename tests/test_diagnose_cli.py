"""`gpuscope diagnose LOGDIR [RUN] [--json]` in a subprocess (issue 22 item 7): on a generated 4-rank job whose
rank 1 runs every kernel 35 % slower (benchmarks/gen_distributed.py `--straggler 1`, buckets of all_reduce on
the world group), it names rank 1 on every step's path and as the straggler, late at the world all_reduces,
because of compute; it stores the summaries it computed; bad input is one line on stderr and exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tb_plugin.summaries import store

from .summaries_support import gpuscope

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from gen_distributed import generate  # noqa: E402


def _cli(*args: str) -> subprocess.CompletedProcess:
    return gpuscope("diagnose", *args)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("diagnose")
    generate(str(root / "job"), 4, events=2000, steps=3, buckets=4, straggler=1)
    return root


def test_json_names_the_straggler_its_collectives_and_cause(logdir):
    r = _cli(str(logdir), "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["run"] == "job" and rep["span"] == "1" and rep["workers"] == 4
    assert len(rep["steps"]) == 3
    for step in rep["steps"]:
        late = {s["late_rank"] for s in step["segments"] if s["kind"] == "collective" and s["waiters"]}
        assert late == {1}, step["path"]
        colls = [s for s in step["segments"] if s["kind"] == "collective"]
        assert all(c["name"] == "nccl:all_reduce" and c["members"] == 4 and c["waiters"] == 3 for c in colls)
        s = step["straggler"]
        assert s["rank"] == 1 and s["excess_ms"] > 0 and s["phases"][0]["phase"] == "compute"
        # the what-if gives back what rank 1 cost the others, no more than its excess
        assert s["what_if_ms"] == pytest.approx(s["step_ms"] - s["saved_ms"], abs=2e-3)
        assert 0 < s["saved_ms"] <= s["excess_ms"] + 2e-3  # + the 1 µs between a bucket's last kernel and its call
    assert rep["worst"]["rank"] == 1
    # the summaries it computed are stored where `gpuscope summarize` puts them
    assert len(list(Path(store.default_out(str(logdir))).rglob("*" + store.SUFFIX))) == 4


def test_text_names_the_run_and_the_late_rank(logdir):
    r = _cli(str(logdir), "job")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("run job, span 1\n")
    assert "rank 1 late at 4 collectives on group 0 (4 ranks), nccl:all_reduce #1..#4 -> 3 ranks waited" in r.stdout
    assert "Straggler:\n  rank 1 step " in r.stdout


@pytest.mark.parametrize(
    "args,message",
    [
        (("{root}/nope",), "no such directory"),
        (("{root}/empty",), "no trace files"),
        (("{root}/logs", "other"), "no run 'other'"),
        (("{root}/logs", "--span", "7"), "no worker of run 'job' has span '7'"),
        (("{root}/two",), "has 2 runs (a, b): name one"),
        (("{root}/bad",), "no trace of run 'bad' could be read"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(tmp_path, args, message):
    (tmp_path / "empty").mkdir()
    job = tmp_path / "logs" / "job"
    job.mkdir(parents=True)
    (job / "w0.1.pt.trace.json").write_text('{"traceEvents": []}')
    for run in ("a", "b"):
        (tmp_path / "two" / run).mkdir(parents=True)
        (tmp_path / "two" / run / "w0.1.pt.trace.json").write_text('{"traceEvents": []}')
    (tmp_path / "bad" / "bad").mkdir(parents=True)
    (tmp_path / "bad" / "bad" / "w0.1.pt.trace.json").write_text('{"traceEvents": [{"ph": "X", "name": ')
    r = _cli(*(a.format(root=tmp_path) for a in args))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert message in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == ""
