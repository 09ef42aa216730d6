"""Issue 23 item 15: samples/gpu_check.py writes to $OUT or a temp folder, never into the clone."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHOW_OUT = "import runpy, sys; g = runpy.run_path(sys.argv[1], run_name='gpu_check'); print(g['OUT'].resolve())"


def _out(env_out):
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    if env_out is not None:
        env["OUT"] = env_out
    r = subprocess.run(
        [sys.executable, "-c", SHOW_OUT, str(ROOT / "samples" / "gpu_check.py")],
        cwd=str(ROOT),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return Path(r.stdout.strip().splitlines()[-1])


def test_default_output_is_outside_the_clone():
    out = _out(None)
    assert ROOT.resolve() not in out.parents and out != ROOT.resolve(), out


def test_out_is_honoured(tmp_path):
    assert _out(str(tmp_path / "o")) == (tmp_path / "o").resolve()


def test_the_old_output_folder_is_ignored_by_git():
    assert "/gpu_check_out/" in (ROOT / ".gitignore").read_text().splitlines()


def test_every_check_says_what_it_expected_and_what_it_found():
    """Issue 39 item 8: a failed check of gpu_check.py names what was expected and what was found."""
    import ast

    tree = ast.parse((ROOT / "samples" / "gpu_check.py").read_text())
    calls = [
        n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "check"
    ]
    assert len(calls) >= 25
    for call in calls:  # check(name, ok, found, expected=...)
        line = f"gpu_check.py:{call.lineno}"
        assert len(call.args) == 3, f"{line}: no value found given"
        assert [k.arg for k in call.keywords] == ["expected"], f"{line}: no expected value given"


def test_a_failed_check_prints_expected_and_found(capsys):
    import runpy

    g = runpy.run_path(str(ROOT / "samples" / "gpu_check.py"), run_name="gpu_check")
    assert g["check"]("trace source is CUPTI", False, "cuda_events", expected="'cupti'") is False
    assert capsys.readouterr().out.strip() == "[FAIL] trace source is CUPTI: expected 'cupti'; found 'cuda_events'"
    assert g["RESULTS"]["checks"]["trace source is CUPTI"] == {
        "ok": False,
        "expected": "'cupti'",
        "found": "cuda_events",
    }
    assert g["check"]("passes", True, 1, expected="1") is True
    assert capsys.readouterr().out.strip() == "[PASS] passes"
