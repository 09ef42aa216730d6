"""The profile state machine: torch 2.13's transitions, callbacks, step annotations and errors."""

import pytest

import profiler_core
from profiler_core import ProfilerActivity, profile, record_function, recording, schedule, supported_activities

CPU = [ProfilerActivity.CPU]


def _names(trace, cat=None):
    return [e["name"] for e in trace["traceEvents"] if e.get("ph") == "X" and (cat is None or e.get("cat") == cat)]


def _steps(trace):
    return [n for n in _names(trace, "user_annotation") if n.startswith("ProfilerStep#")]


class Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, prof):
        self.calls.append((prof.step_num, _steps(prof.trace), _names(prof.trace, "user_annotation")))


def test_worked_example_from_torch():
    rec = Recorder()
    with profile(
        activities=CPU, schedule=schedule(wait=1, warmup=1, active=2, repeat=1, skip_first=1), on_trace_ready=rec
    ) as p:
        for i in range(8):
            with record_function(f"work{i}"):
                pass
            p.step()
    assert len(rec.calls) == 1
    step_num, steps, names = rec.calls[0]
    assert step_num == 5
    assert steps == ["ProfilerStep#3", "ProfilerStep#4"]
    assert [n for n in names if n.startswith("work")] == ["work3", "work4"]


def test_repeating_cycles_each_deliver_their_own_events():
    rec = Recorder()
    with pytest.warns(UserWarning, match="clears events"):
        with profile(activities=CPU, schedule=schedule(wait=1, warmup=1, active=2, repeat=2), on_trace_ready=rec) as p:
            for _ in range(10):
                p.step()
    assert [(c[0], c[1]) for c in rec.calls] == [
        (4, ["ProfilerStep#2", "ProfilerStep#3"]),
        (8, ["ProfilerStep#6", "ProfilerStep#7"]),
    ]


def test_no_schedule_no_step_annotations_and_one_callback_at_exit():
    rec = Recorder()
    with profile(activities=CPU, on_trace_ready=rec) as p:
        for _ in range(3):
            with record_function("w"):
                pass
            p.step()
    assert p.step_num == 3
    assert len(rec.calls) == 1 and rec.calls[0][0] == 3
    assert rec.calls[0][1] == [] and rec.calls[0][2] == ["w", "w", "w"]


def test_exit_mid_record_delivers_with_step_count():
    rec = Recorder()
    with profile(activities=CPU, schedule=schedule(wait=0, warmup=1, active=5), on_trace_ready=rec) as p:
        for _ in range(3):
            p.step()
    assert len(rec.calls) == 1
    assert rec.calls[0][0] == 3
    assert rec.calls[0][1] == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]


def test_exit_during_warmup_has_no_callback():
    rec = Recorder()
    with profile(activities=CPU, schedule=schedule(wait=1, warmup=3, active=1), on_trace_ready=rec) as p:
        p.step()
        p.step()
    assert rec.calls == []


@pytest.mark.filterwarnings("ignore:Profiler clears events")
def test_start_step_stop_api():
    rec = Recorder()
    p = profile(activities=CPU, schedule=schedule(wait=0, warmup=1, active=1), on_trace_ready=rec)
    p.start()
    assert not recording.is_recording()  # warmup
    p.step()
    assert recording.is_recording()
    p.step()
    assert not recording.is_recording()
    p.stop()
    assert [c[0] for c in rec.calls] == [2]


def test_exception_in_block_delivers_trace_and_propagates():
    rec = Recorder()
    with pytest.raises(ZeroDivisionError):
        with profile(activities=CPU, on_trace_ready=rec):
            with record_function("boom"):
                _ = 1 / 0
    assert len(rec.calls) == 1 and "boom" in rec.calls[0][2]
    assert not recording.is_recording()


def test_exception_in_on_trace_ready_is_a_warning():
    def bad(prof):
        raise OSError("disk on fire")

    with pytest.warns(RuntimeWarning, match="on_trace_ready.*disk on fire"):
        with profile(activities=CPU, on_trace_ready=bad):
            pass


def test_non_callable_on_trace_ready_rejected():
    with pytest.raises(TypeError, match="on_trace_ready must be callable"):
        profile(activities=CPU, on_trace_ready="./log")


def test_use_cuda_is_deprecated():
    with pytest.warns(FutureWarning, match="use_cuda"):
        p = profile(activities=CPU, use_cuda=False)
    assert p.activities == {ProfilerActivity.CPU}


def test_unknown_activity_rejected():
    with pytest.raises(ValueError, match="unsupported profiler activity"):
        profile(activities=["GPU9000"])


def test_cuda_requested_but_unavailable_warns_once_and_records_cpu(monkeypatch):
    from profiler_core import profiler as prof_mod

    monkeypatch.setattr(prof_mod, "_cuda_available", lambda: False)
    with pytest.warns(RuntimeWarning, match="CUDA activity was requested") as record:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
            with record_function("cpu work"):
                pass
    assert len([w for w in record if "CUDA" in str(w.message)]) == 1
    assert "cpu work" in _names(p.trace)
    assert p.trace["deviceProperties"] == []


def test_supported_activities_has_cpu(monkeypatch):
    from profiler_core import profiler as prof_mod

    assert ProfilerActivity.CPU in supported_activities()
    monkeypatch.setattr(prof_mod, "_cuda_available", lambda: True)
    assert supported_activities() == {ProfilerActivity.CPU, ProfilerActivity.CUDA}


class FakeCollector:
    def __init__(self, log):
        self.log = log

    def prepare(self):
        self.log.append("prepare")

    def start(self):
        self.log.append("start")
        self.t0 = recording.now_ns()

    def stop(self):
        from profiler_core.trace.write.schema import CollectorResult

        self.log.append("stop")
        return CollectorResult(
            events=[
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": "k",
                    "pid": 0,
                    "tid": 7,
                    "ts": self.t0 + 1,
                    "dur": 500,
                    "args": {"correlation": 1, "device": 0, "stream": 7},
                },
                {"ph": "M", "name": "process_name", "ts": self.t0, "pid": 0, "tid": 0, "args": {"name": "python"}},
            ],
            device_properties=[{"id": 0, "name": "Fake GPU"}],
            metadata={"cupti_version": 24},
            warnings=["fake warning"],
        )


def test_cuda_collector_is_driven_and_merged(monkeypatch):
    from profiler_core import profiler as prof_mod

    log = []

    class FakeCuda:
        @staticmethod
        def is_available():
            return True

        @staticmethod
        def make_collector(config):
            log.append(("config", config["record_shapes"]))
            return FakeCollector(log)

    monkeypatch.setattr(prof_mod, "_cuda_module", lambda: FakeCuda)
    monkeypatch.setattr(prof_mod, "_cuda_available", lambda: True)
    with pytest.warns(RuntimeWarning, match="fake warning"):
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as p:
            with record_function("launch"):
                pass
    assert log == [("config", True), "prepare", "start", "stop"]
    t = p.trace
    assert t["deviceProperties"] == [{"id": 0, "name": "Fake GPU"}] and t["cupti_version"] == 24
    kernel = [e for e in t["traceEvents"] if e.get("cat") == "kernel"][0]
    assert kernel["dur"] == 0.5
    span = [e for e in t["traceEvents"] if e.get("cat") == "Trace"][0]
    assert span["ts"] <= kernel["ts"] <= span["ts"] + span["dur"]
    phases = [e["ph"] for e in t["traceEvents"]]
    gpu_meta = [i for i, e in enumerate(t["traceEvents"]) if e["ph"] == "M" and e["pid"] == 0]
    assert gpu_meta and max(gpu_meta) < phases.index("X")  # all M events come first


def test_failing_collector_falls_back_to_cpu(monkeypatch):
    from profiler_core import profiler as prof_mod

    class BrokenCuda:
        @staticmethod
        def make_collector(config):
            raise RuntimeError("CUPTI_ERROR_INSUFFICIENT_PRIVILEGES")

    monkeypatch.setattr(prof_mod, "_cuda_module", lambda: BrokenCuda)
    monkeypatch.setattr(prof_mod, "_cuda_available", lambda: True)
    with pytest.warns(RuntimeWarning, match="INSUFFICIENT_PRIVILEGES"):
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
            with record_function("still here"):
                pass
    assert "still here" in _names(p.trace)


def test_trace_top_level_keys_and_flags():
    with profile(activities=CPU, record_shapes=True, with_flops=True) as p:
        p.add_metadata("run", 'a "quoted" value')
        p.add_metadata_json("cfg", '{"lr": 0.1, "layers": [1, 2]}')
    t = p.trace
    keys = list(t)
    assert keys[:3] == ["schemaVersion", "deviceProperties", "trace_id"]
    assert keys[-4:] == ["displayTimeUnit", "baseTimeNanoseconds", "traceEvents", "traceName"]
    assert t["record_shapes"] == 1 and t["with_flops"] == 1
    assert "profile_memory" not in t and "with_stack" not in t
    assert t["run"] == 'a "quoted" value' and t["cfg"] == {"lr": 0.1, "layers": [1, 2]}
    assert len(t["trace_id"]) == 32 and t["trace_id"] == t["trace_id"].upper()
    assert t["baseTimeNanoseconds"] % (7_889_238 * 10**9) == 0
    assert t["host_name"]


def test_metadata_outside_a_cycle_is_dropped_and_bad_json_rejected():
    p = profile(activities=CPU, schedule=schedule(wait=1, warmup=1, active=1))
    with p:
        p.add_metadata("during_wait", "x")  # NONE phase: dropped, as torch
        p.step()
        p.add_metadata("during_warmup", "y")
        p.step()
        p.step()
    assert "during_warmup" in p.trace and "during_wait" not in p.trace
    with pytest.raises(ValueError, match="not valid JSON"):
        p.add_metadata_json("k", "{not json")


def test_events_and_key_averages_delegate_to_analysis():
    with profile(activities=CPU) as p:
        for _ in range(3):
            with record_function("thing"):
                pass
    avg = {e.key: e for e in p.key_averages()}
    assert avg["thing"].count == 3
    assert sum(1 for e in p.events() if e.name == "thing") == 3


def test_export_stacks_requires_with_stack(tmp_path):
    with profile(activities=CPU) as p:
        pass
    with pytest.raises(AssertionError, match="requires with_stack=True"):
        p.export_stacks(str(tmp_path / "s.txt"))


def test_results_before_any_cycle_are_a_clear_error(tmp_path):
    p = profile(activities=CPU)
    with pytest.raises(RuntimeError, match="no trace has been collected"):
        p.export_chrome_trace(str(tmp_path / "t.json"))


def test_nested_profiler_takes_over_with_warning():
    with profile(activities=CPU) as outer:
        with record_function("before"):
            pass
        with pytest.warns(RuntimeWarning, match="takes over"):
            with profile(activities=CPU) as inner:
                with record_function("inner work"):
                    pass
    assert "inner work" in _names(inner.trace)
    assert "before" in _names(outer.trace) and "inner work" not in _names(outer.trace)
    assert not recording.is_recording()


def test_public_exports():
    for name in (
        "profile",
        "schedule",
        "ProfilerAction",
        "ProfilerActivity",
        "record_function",
        "tensorboard_trace_handler",
        "supported_activities",
        "record_op",
        "operator",
        "register_flops_formula",
    ):
        assert getattr(profiler_core, name) is not None


def test_import_is_light():
    import subprocess
    import sys

    code = (
        "import sys, profiler_core; from profiler_core import record_function, record_op, operator, schedule; "
        "heavy = [m for m in ('pandas', 'numpy', 'msgspec', 'cupti', 'pycuda', 'mpi4py', "
        "'profiler_core.profiler', 'profiler_core.analysis') if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
