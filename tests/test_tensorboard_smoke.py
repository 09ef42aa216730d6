"""One real `tensorboard --logdir` process: the plugin is discovered and serves `runs`."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from importlib.metadata import entry_points

import pytest

from .conftest import missing


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def test_tensorboard_serves_gpuscope(tmp_path):
    if not any(e.name == "gpuscope" for e in entry_points(group="tensorboard_plugins")):
        missing("gpuscope is not installed (pip install -e .)")
    run = tmp_path / "logs" / "myrun"
    run.mkdir(parents=True)
    ev = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 2, "args": {}}]
    p = run / "host_1.1796207156519141535.pt.trace.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    os.utime(p, (time.time() - 60, time.time() - 60))
    port = _free_port()
    env = dict(os.environ, GPUSCOPE_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tensorboard.main",
            "--logdir",
            str(tmp_path / "logs"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        listing = None
        while time.time() < deadline:
            if proc.poll() is not None:
                pytest.fail("tensorboard exited: " + proc.stderr.read().decode()[-2000:])
            try:
                listing = _get(f"{base}/data/plugins_listing")
                break
            except OSError:
                time.sleep(0.5)
        assert listing is not None, "tensorboard did not answer"
        assert listing["gpuscope"]["enabled"] is True
        assert listing["gpuscope"]["loading_mechanism"]["type"] == "IFRAME"
        runs = _get(f"{base}/data/plugin/gpuscope/runs")
        assert runs["runs"] == ["myrun"]
        workers = _get(f"{base}/data/plugin/gpuscope/workers?run=myrun")
        assert workers == {"workers": ["host_1"]}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
