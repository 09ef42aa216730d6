"""The README's examples as written: the distributed example writes into its own logdir, not the quick start's
(whose sample worker would otherwise show up in the Distributed view next to the ranks); the profiling example's
table covers a whole profiling cycle."""

import re
from pathlib import Path

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def _logdir(command_start: str) -> str:
    m = re.search(re.escape(command_start) + r"[^`\n]*--logdir (\S+)", README)
    assert m, f"no `{command_start} ... --logdir` in the README"
    return m.group(1)


def test_distributed_example_has_its_own_logdir():
    quick = _logdir("python3 samples/cpu_train.py")
    dist = _logdir("mpiexec -n 4 python3 samples/distributed_train.py")
    assert dist != quick
    assert f"tensorboard --logdir {dist}" in README


def test_profiling_example_prints_a_whole_cycle(tmp_path):
    """The quick start's profiling example, run as written: its table covers the schedule's whole active window
    (3 steps: 3 calls of `mylib::matmul`), not the 1 step of a cycle the loop's end cut short, and it writes one
    trace."""
    import os
    import subprocess
    import sys

    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    code = next(b for b in blocks if "with profile(" in b and "key_averages().table(" in b)
    active = int(re.search(r"active=(\d+)", code).group(1))
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "GPUSCOPE_DISABLE_CUDA": "1"}
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    row = next(line for line in r.stdout.splitlines() if line.strip().startswith("mylib::matmul"))
    assert int(row.split()[-1]) == active, r.stdout
    assert "Only events from the current cycle" not in r.stderr
    assert len(list((tmp_path / "log").glob("*.pt.trace.json*"))) == 1


def test_operators_self_time_difference_with_stack_is_named():
    """The README's Operators entry names why an annotation's self time differs from torch's key_averages() with
    with_stack=True (torch counts the Python frames as children; the view, as torch-tb-profiler, only operators)."""
    entry = README[README.index("- **Operators**") : README.index("- **Kernels**")]
    assert "with_stack=True" in entry and "python_function" in entry and "key_averages()" in entry, entry
