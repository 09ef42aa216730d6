"""Issue 23 item 15: the README's distributed example writes into its own logdir, not the quick start's
(whose sample worker would otherwise show up in the Distributed view next to the ranks)."""

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
