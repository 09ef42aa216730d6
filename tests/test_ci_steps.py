"""The suite's layout as .ci/run relies on it: its test steps run every test the README's command runs (the
`browser` marker on every test under tests/browser/, none elsewhere), each step prints its wall time and a
failing step fails the run."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

from .conftest import ROOT

CI_RUN = ROOT / ".ci" / "run"


def _pytest_steps() -> list[list[str]]:
    """The pytest command lines of .ci/run's steps."""
    steps = []
    for line in CI_RUN.read_text().splitlines():
        if line.startswith("step ") and " -m pytest " in line:
            argv = shlex.split(line)
            steps.append(argv[argv.index("pytest") + 1 :])
    return steps


def test_ci_test_steps_together_run_every_test():
    steps = _pytest_steps()
    markers = sorted(argv[argv.index("-m") + 1] for argv in steps)
    assert markers == ["browser", "not browser"], steps
    assert all(argv[-1] == "tests" for argv in steps), steps


def _collected(marker: str, *paths: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", "-m", marker, *paths],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(ROOT),
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode in (0, 5), proc.stdout[-3000:] + proc.stderr[-3000:]
    return [line for line in proc.stdout.splitlines() if "::" in line]


def test_browser_marker_is_every_test_under_tests_browser_and_no_other():
    paths = ("tests/browser/test_bundle.py", "tests/test_version.py")
    browser, others = _collected("browser", *paths), _collected("not browser", *paths)
    assert browser and all(t.startswith("tests/browser/") for t in browser), browser
    assert others and not any(t.startswith("tests/browser/") for t in others), others


def test_a_step_prints_its_time_and_a_failing_step_fails_the_run(tmp_path):
    """.ci/run's helpers (everything before its first step) with two steps of a probe: the second fails."""
    text = CI_RUN.read_text()
    helpers = text[: text.index("\nstep ")]
    probe = tmp_path / ".ci" / "run"
    probe.parent.mkdir()
    fail = "fail_fn() { echo in-fail; false; echo after-false; }\n"
    probe.write_text(helpers + "\n" + fail + "step first true\nstep second fail_fn\necho after-second\n")
    proc = subprocess.run(["bash", str(probe)], capture_output=True, text=True, timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert re.search(r"^ci: first took \d+ s$", proc.stdout, re.M), out
    assert "in-fail" in out and "after-false" not in out and "after-second" not in out
    assert re.search(r"^ci: second FAILED \(exit 1\) after \d+ s$", proc.stderr, re.M), out


def test_test_files_are_named_after_what_they_test_not_an_issue_number():
    named = sorted(p.name for p in (ROOT / "tests").rglob("test_*.py") if re.match(r"test_issue\d", p.name))
    assert named == []
