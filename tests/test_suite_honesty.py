"""The suite cannot go quietly green: a missing oracle fails under CI=true, and skips always say why."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from .conftest import ROOT

TEST_FILE = """
from tests.conftest import missing, requires

def test_needs_an_oracle():
    missing("the frobnicator oracle is not installed")

@requires("the widget tool is absent")
def test_marked():
    raise AssertionError("never runs")

@requires(None)
def test_present():
    pass
"""


def _pytest(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess:
    (tmp_path / "test_probe.py").write_text(TEST_FILE)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = str(ROOT)
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-c",
            str(ROOT / "pyproject.toml"),
            "--rootdir",
            str(tmp_path),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=str(tmp_path),
    )


def test_missing_oracle_skips_locally_with_its_reason_printed(tmp_path):
    proc = _pytest(tmp_path, None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed, 2 skipped" in proc.stdout
    assert "the frobnicator oracle is not installed" in proc.stdout  # -rs from pyproject.toml, even with -q
    assert "the widget tool is absent" in proc.stdout


def test_missing_oracle_fails_under_ci(tmp_path):
    proc = _pytest(tmp_path, "true")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "2 failed, 1 passed" in proc.stdout
    assert "required under CI=true (.ci/run installs it): the frobnicator oracle is not installed" in proc.stdout
    assert "the widget tool is absent" in proc.stdout


def _oracle_install(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess:
    """.ci/install_gpu_oracles.sh in an empty checkout where every python3 call fails (nothing installs)."""
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / ".ci" / "install_gpu_oracles.sh", repo / ".ci")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python3").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "python3").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        ["bash", str(repo / ".ci" / "install_gpu_oracles.sh")],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=str(repo),
    )


def test_oracle_install_failures_are_named_and_tolerated_locally(tmp_path):
    proc = _oracle_install(tmp_path, None)
    assert proc.returncode == 0, proc.stderr
    for what in (
        "nvidia-cuda-runtime-cu12 not downloadable",
        "cupti-python>=13,<14 not installable",
        "no PyCUDA wheel",
    ):
        assert what in proc.stderr


def test_oracle_install_failures_fail_under_ci(tmp_path):
    proc = _oracle_install(tmp_path, "true")
    assert proc.returncode == 1
    assert "cupti-python>=12,<13 not installable" in proc.stderr
    assert "GPU oracles missing under CI=true" in proc.stderr
