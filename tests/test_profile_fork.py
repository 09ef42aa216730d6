"""A fork() child never exports its parent's profiling session (issue 16, item 12)."""

import json
import os
import subprocess
import sys

import pytest

from .conftest import ROOT

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

SCRIPT = r"""
import os, sys
from profiler_core import profile, record_function, ProfilerActivity, tensorboard_trace_handler, schedule
logdir, how = sys.argv[1], sys.argv[2]
kw = {"schedule": schedule(wait=0, warmup=1, active=2)} if how == "steps" else {}
with profile(activities=[ProfilerActivity.CPU], on_trace_ready=tensorboard_trace_handler(logdir, worker_name="w"),
             **kw) as p:
    with record_function("parent_work"):
        pid = os.fork()
        if pid == 0:
            if how == "steps":        # a child that keeps stepping the profiler it inherited, then exits
                for _ in range(4):
                    p.step()
            sys.exit(0)               # leaves the with-blocks: __exit__ runs in the child
    os.waitpid(pid, 0)
    if how == "steps":
        p.step()
        p.step()
print(os.getpid())
"""


@pytest.mark.parametrize("how", ["exit", "steps"])
def test_a_forked_child_leaving_the_profiled_block_writes_no_trace(tmp_path, how):
    logdir = tmp_path / "log"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(logdir), how], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    files = sorted(p.name for p in logdir.iterdir())
    assert len(files) == 1, files  # the parent's one trace, no stray copy from the child
    trace = json.loads((logdir / files[0]).read_text())
    pids = {e.get("pid") for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") != "Trace"}
    assert pids == {int(proc.stdout.split()[-1])}  # and it is the parent's
