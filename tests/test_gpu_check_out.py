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
