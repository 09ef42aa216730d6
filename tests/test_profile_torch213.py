"""The profiler's own API where torch 2.13 has more than gpuscope had: acc_events, DEVICE_STOPPED,
experimental_config / execution_trace_observer / post_processing_timeout_s, and the package's __all__."""

import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

import profiler_core
from profiler_core import ProfilerAction, ProfilerActivity, profile, record_function, schedule

from .conftest import COMPAT_VENV, ROOT, missing

CPU = [ProfilerActivity.CPU]

# The same program for torch.profiler and for profiler_core: 3 cycles of (warmup 1, active 1) over 6 steps.
PROGRAM = r"""
import json, sys, warnings
if sys.argv[1] == "torch":
    from torch.profiler import profile, schedule, ProfilerActivity, record_function
else:
    from profiler_core import profile, schedule, ProfilerActivity, record_function
out = {}
for acc in (False, True):
    seen = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with profile(activities=[ProfilerActivity.CPU], acc_events=acc,
                     schedule=schedule(wait=0, warmup=1, active=1, repeat=3),
                     on_trace_ready=lambda p: seen.append([e.name for e in p.events() if e.name.startswith("c")])) as p:
            for i in range(6):
                with record_function(f"c{i}"):
                    pass
                p.step()
    out[str(acc)] = {"cycles": seen, "final": [(k.key, k.count) for k in p.key_averages() if k.key.startswith("c")],
                     "clears_warning": sum("clears events" in str(w.message) for w in caught)}
print(json.dumps(out))
"""


def _run_program(which: str, python: str = sys.executable) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [python, "-c", PROGRAM, which], capture_output=True, text=True, env=env, timeout=300, check=True, cwd=str(ROOT)
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_acc_events_accumulates_across_cycles_as_torch_does():
    ours = _run_program("gpuscope")
    assert ours["True"]["cycles"] == [["c1"], ["c3", "c1"], ["c5", "c3", "c1"]]  # newest cycle first
    assert ours["True"]["final"] == [["c5", 1], ["c3", 1], ["c1", 1]]
    assert ours["False"]["cycles"] == [["c1"], ["c3"], ["c5"]] and ours["False"]["final"] == [["c5", 1]]
    assert (ours["True"]["clears_warning"], ours["False"]["clears_warning"]) == (0, 1)


def test_acc_events_matches_torch_2_13():
    python = COMPAT_VENV / "bin" / "python"
    if not python.exists():
        missing(f"no venv with torch at {COMPAT_VENV} (.ci/run builds it; or set GPUSCOPE_COMPAT_VENV)")
    assert _run_program("gpuscope") == _run_program("torch", str(python))


def test_acc_events_trace_export_is_the_last_cycle_only(tmp_path):
    with pytest.warns(UserWarning, match="won't be using warmup"):
        sched = schedule(wait=0, warmup=0, active=1)
    with profile(activities=CPU, acc_events=True, schedule=sched) as p:
        for i in range(2):
            with record_function(f"c{i}"):
                pass
            if i == 0:
                p.step()
    names = [
        e["name"]
        for e in json.loads(Path(p.export_chrome_trace(tmp_path / "t.json")).read_text())["traceEvents"]
        if e.get("ph") == "X"
    ]
    assert "c1" in names and "c0" not in names
    assert [e.name for e in p.events() if e.name.startswith("c")] == ["c1", "c0"]


def test_device_stopped_is_torchs_action_and_no_schedule_may_return_it():
    assert ProfilerAction.DEVICE_STOPPED.value == 4
    with pytest.raises(ValueError, match="DEVICE_STOPPED is set internally"):
        profile(activities=CPU, schedule=lambda step: ProfilerAction.DEVICE_STOPPED)
    p = profile(
        activities=CPU, schedule=lambda step: ProfilerAction.RECORD if step == 0 else ProfilerAction.DEVICE_STOPPED
    )
    p.start()
    with pytest.raises(ValueError, match="must not be returned"):
        p.step()
    p.stop()


class StoppingCollector:
    """A CUDA collector (hardware stand-in) whose collection stops early in the cycles listed."""

    def __init__(self, log, stop_in_cycle):
        self.log, self.stop_in_cycle = log, stop_in_cycle

    def prepare(self):
        self.log.append("prepare")

    def start(self):
        self.log.append("start")
        self.started = True

    def stopped_early(self):
        return self.stop_in_cycle and getattr(self, "started", False)

    def stop(self):
        from profiler_core.trace.write.schema import CollectorResult

        self.log.append("stop")
        return CollectorResult()


def test_device_stopped_absorbs_the_cycle_delivers_it_and_resumes_next_cycle(monkeypatch):
    from profiler_core import profiler as prof_mod

    log, cycles = [], iter([True, False])

    class Cuda:
        @staticmethod
        def make_collector(config):
            return StoppingCollector(log, next(cycles))

    monkeypatch.setattr(prof_mod, "_cuda_module", lambda: Cuda)
    monkeypatch.setattr(prof_mod, "_cuda_available", lambda: True)
    delivered, actions = [], []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with profile(
            activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
            schedule=schedule(wait=0, warmup=1, active=3, repeat=2),
            on_trace_ready=lambda p: delivered.append(
                [e["name"] for e in p.trace["traceEvents"] if e.get("name", "").startswith("s")]
            ),
        ) as p:
            for i in range(8):
                actions.append(p.current_action.name)
                with record_function(f"s{i}"):
                    pass
                p.step()
    W, R, RS, D = "WARMUP", "RECORD", "RECORD_AND_SAVE", "DEVICE_STOPPED"
    # cycle 1: collection stopped early -> DEVICE_STOPPED until the cycle ends; cycle 2 runs normally
    assert actions == [W, R, D, D, W, R, R, RS]
    assert delivered == [["s1"], ["s5", "s6", "s7"]]
    stopped = [str(w.message) for w in caught if "stopped early" in str(w.message)]
    assert stopped == [
        "Device profiling activity collection was stopped early at step 2. Profiler schedule "
        "is proceeding until next cycle without actual profiler activity collection."
    ]
    assert log == ["prepare", "start", "stop", "prepare", "start", "stop"]


class Observer:
    def __init__(self):
        self.calls = []

    def start(self):
        self.calls.append("start")

    def stop(self):
        self.calls.append("stop")

    def cleanup(self):
        self.calls.append("cleanup")


def test_torch_213_arguments_are_accepted_with_one_warning_where_ignored():
    obs = Observer()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with profile(
            activities=CPU, experimental_config=object(), post_processing_timeout_s=30.0, execution_trace_observer=obs
        ) as p:
            with record_function("w"):
                pass
    said = [str(w.message) for w in caught]
    assert len(said) == 1 and "experimental_config and post_processing_timeout_s are accepted" in said[0]
    assert obs.calls == ["start", "stop", "cleanup"]  # driven as torch drives an _ITraceObserver
    assert p.acc_events is False and p.post_processing_timeout_s == 30.0
    with pytest.raises(ValueError, match="post_processing_timeout_s"):
        profile(activities=CPU, post_processing_timeout_s=-1)
    with pytest.raises(TypeError, match="execution_trace_observer"):
        profile(activities=CPU, execution_trace_observer="trace.json")


def test_package_namespace_is_its_all():
    assert "Any" not in dir(profiler_core) and "annotations" not in dir(profiler_core)
    ns = {}
    exec("from profiler_core import *", ns)
    assert sorted(k for k in ns if not k.startswith("__")) == sorted(profiler_core.__all__)
    public = {k for k in vars(profiler_core) if not k.startswith("_")} - set(profiler_core.__all__)
    # what remains may only be the package's own submodules (bound as attributes when imported)
    strays = {k for k in public if not getattr(getattr(profiler_core, k), "__name__", "").startswith("profiler_core.")}
    assert not strays, strays


def _busy(n):
    total = 0
    for i in range(n):
        total += i * i
    return total


# The annotation's own time (the loop around the calls) against the ops' time: on a loaded machine a preemption
# between two calls lands in the annotation's self time and can make it the larger row. The second case plants
# that (a 30 ms pause between calls, ~10x the ops' time), so every assertion below must hold in either order.
@pytest.mark.parametrize("pause_s", [0.0, 0.03], ids=["ops_first", "annotation_first"])
def test_with_stack_key_averages_lists_ops_and_annotations_and_stacks_stay_on_the_ops(tmp_path, pause_s):
    @profiler_core.operator("my::busy")
    def busy(n):
        return _busy(n)

    with profile(activities=CPU, with_stack=True) as p:
        with record_function("forward"):
            for _ in range(3):
                busy(20000)
                if pause_s:
                    time.sleep(pause_s)
    rows = {k.key: k for k in p.key_averages()}
    assert set(rows) == {"forward", "my::busy"}, sorted(rows)  # no Python-frame rows
    op = rows["my::busy"]
    assert op.count == 3 and op.self_cpu_time_total == op.cpu_time_total  # the frames it wraps don't take it
    if pause_s:  # the planted case is the one it claims to be
        assert rows["forward"].self_cpu_time_total > op.self_cpu_time_total
    # both rows, whichever has more self time: no assertion on their order
    table = p.key_averages().table(sort_by="self_cpu_time_total", row_limit=2)
    assert "my::busy" in table and "(" not in table.split("my::busy")[0].splitlines()[-1]
    [by_stack] = [k for k in p.key_averages(group_by_stack_n=3) if k.key == "my::busy"]
    assert any("test_with_stack_key_averages" in frame for frame in by_stack.stack), by_stack.stack
    assert any(e.is_python_function for e in p.events())  # events() keeps them, as torch's
    out = tmp_path / "stacks.txt"
    p.export_stacks(str(out))
    lines = out.read_text().splitlines()
    assert lines and all(int(line.rsplit(" ", 1)[1]) > 0 for line in lines)
    assert sum(int(line.rsplit(" ", 1)[1]) for line in lines) >= 0.9 * op.self_cpu_time_total


def test_readme_says_which_files_the_handler_writes(tmp_path):
    import gzip

    readme = (ROOT / "README.md").read_text()
    assert "one gzip file per worker" not in readme
    assert "plain JSON (`*.pt.trace.json`)" in readme and "use_gzip=True" in readme
    for use_gzip, suffix, opener in ((False, ".pt.trace.json", open), (True, ".pt.trace.json.gz", gzip.open)):
        out = tmp_path / str(use_gzip)
        with profile(
            activities=CPU,
            on_trace_ready=profiler_core.tensorboard_trace_handler(str(out), worker_name="w", use_gzip=use_gzip),
        ):
            with record_function("x"):
                pass
        [f] = list(out.iterdir())
        assert f.name.endswith(suffix) and (use_gzip or not f.name.endswith(".gz"))
        with opener(f, "rt") as fh:
            assert "traceEvents" in json.load(fh)
