"""`gpuscope summarize` on the command line: a bad scheduler is one line, --local is capped at the
work and the cores, and Ctrl-C stops it with one line instead of every process's traceback."""

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tb_plugin.summaries import cli

ROOT = Path(__file__).resolve().parents[1]


def _logdir(root: Path, files: int, ops: int = 20) -> Path:
    ev = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 10 * ops + 10,
            "args": {},
        }
    ]
    ev += [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"op{i % 7}",
            "pid": 1,
            "tid": 1,
            "ts": 1 + 10 * i,
            "dur": 5,
            "args": {"External id": i + 2},
        }
        for i in range(ops)
    ]
    data = gzip.compress(json.dumps({"schemaVersion": 1, "traceEvents": ev}).encode())
    for i in range(files):
        f = root / "run" / f"w{i}.{1000 + i}.pt.trace.json.gz"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(data)
    return root


def _cli(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tb_plugin.summaries.cli", "summarize", *args],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def test_a_bad_scheduler_is_one_clear_line(tmp_path):
    p = _cli(str(_logdir(tmp_path, 1)), "--scheduler", "nonsense")
    out, err = p.communicate(timeout=120)
    assert p.returncode == 2
    assert err.strip().splitlines() == [
        "gpuscope summarize: cannot connect to the Dask scheduler 'nonsense': missing port number in address 'nonsense'"
    ]


@pytest.mark.parametrize(
    "asked,files,cores,expected", [(6, 1, 2, 1), (6, 10, 2, 2), (1, 10, 8, 1), (16, 10, 8, 8), (3, 10, 8, 3)]
)
def test_local_workers_are_capped_at_the_files_and_the_cores(monkeypatch, asked, files, cores, expected):
    monkeypatch.setattr(cli.os, "cpu_count", lambda: cores)
    assert cli.local_workers(asked, files) == expected


@pytest.mark.slow
def test_ctrl_c_during_a_local_run_is_one_line_and_a_clean_exit(tmp_path):
    pytest.importorskip("distributed")
    logdir = _logdir(tmp_path, 40, ops=3000)
    # its own session, as a terminal's foreground job: Ctrl-C goes to the whole process group; SIGINT as in a
    # terminal also where the tests run with it ignored (a shell's background job, `cmd &`: an ignored signal
    # stays ignored in children, and the run would never see the Ctrl-C)
    p = _cli(
        str(logdir),
        "--local",
        "6",
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines = []
    for line in p.stderr:  # interrupt once the cluster works (after its start)
        lines.append(line)
        if " of 40 files" in line:
            break
    else:
        pytest.fail("the run ended before it could be interrupted: " + "".join(lines))
    os.killpg(p.pid, signal.SIGINT)
    err = "".join(lines) + p.communicate(timeout=120)[1]
    assert p.returncode == 130, err
    assert "Traceback" not in err and "WARNING" not in err, err
    assert err.strip().splitlines()[-1] == "gpuscope summarize: interrupted"
    assert lines[0].startswith("gpuscope summarize: 40 files on ") and "6 asked" in lines[0]
    deadline = time.monotonic() + 60  # no worker process left behind in its group
    while time.monotonic() < deadline:
        try:
            os.killpg(p.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    left = subprocess.run(["ps", "-o", "pid,args", "-g", str(p.pid)], capture_output=True, text=True)
    os.killpg(p.pid, signal.SIGKILL)
    pytest.fail("processes left behind: " + left.stdout)
