"""No GPU here: the CUDA entry points answer cheaply, never raise, and import nothing heavy."""

import subprocess
import sys
import warnings

import pytest

import profiler_core
import profiler_core.cuda as cuda
from profiler_core.cuda import clock, device_props
from profiler_core.cuda.collector import CudaCollector


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(cuda, "_available", None)


def test_not_available_without_a_driver(fresh):
    assert cuda.is_available() is False
    assert profiler_core.supported_activities() == {profiler_core.ProfilerActivity.CPU}


def test_is_available_never_raises(fresh, monkeypatch):
    monkeypatch.setattr(cuda, "_has_module", lambda name: True)

    def boom():
        raise OSError("driver exploded")

    monkeypatch.setattr(device_props, "device_count", boom)
    assert cuda.is_available() is False


def test_disable_switch(fresh, monkeypatch):
    monkeypatch.setenv("GPUSCOPE_DISABLE_CUDA", "1")
    monkeypatch.setattr(cuda, "_has_module", lambda name: True)
    monkeypatch.setattr(device_props, "device_count", lambda: 1)
    assert cuda.is_available() is False


def test_importing_is_light():
    code = (
        "import sys, profiler_core, profiler_core.cuda as c; c.is_available(); "
        "import profiler_core.integrations.pycuda_hooks; "
        "print(sorted(m for m in ('cupti', 'pycuda', 'pandas', 'numpy', 'cuda') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_cuda_requested_without_gpu_gives_one_warning_and_a_cpu_trace(fresh):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with profiler_core.profile(
            activities=[profiler_core.ProfilerActivity.CPU, profiler_core.ProfilerActivity.CUDA]
        ) as prof:
            with profiler_core.record_function("work"):
                pass
    cuda_warnings = [w for w in caught if "CUDA" in str(w.message)]
    assert len(cuda_warnings) == 1
    cats = {e.get("cat") for e in prof.trace["traceEvents"]}
    assert "user_annotation" in cats and "kernel" not in cats


def test_collector_without_any_backend_reports_why(monkeypatch):
    monkeypatch.setattr("profiler_core.cuda.collector.query_device_properties", list)
    col = CudaCollector({})
    col.start()
    res = col.stop()
    assert res.events == [] and res.device_properties == []
    assert len(res.warnings) == 1 and "cupti-python is not importable" in res.warnings[0]


def test_device_properties_entry_and_trace_view():
    attrs = {
        "computeMajor": 9,
        "computeMinor": 0,
        "maxThreadsPerBlock": 1024,
        "numSms": 132,
        "maxThreadsPerMultiprocessor": 2048,
        "regsPerBlock": 65536,
        "regsPerMultiprocessor": 65536,
        "warpSize": 32,
        "sharedMemPerBlock": 49152,
        "sharedMemPerMultiprocessor": 233472,
        "sharedMemPerBlockOptin": 232448,
        "reservedSharedMemPerBlock": 1024,
        "maxBlocksPerMultiprocessor": 32,
    }
    p = device_props.props_entry(0, "NVIDIA H200", 150_000_000_000, attrs)
    assert list(p)[:3] == ["id", "name", "totalGlobalMem"]
    view = device_props.kineto_view([p])[0]
    assert list(view) == list(device_props.KINETO_KEYS)
    assert "reservedSharedMemPerBlock" not in view
    assert device_props.query_device_properties() == []  # no driver here


def test_clock_calibration_picks_the_tightest_bracket():
    host = iter([100, 300, 1000, 1010, 5000, 5400])  # brackets of width 200, 10, 400
    dev = iter([50, 900, 4000])
    offset, uncertainty = clock.calibrate(lambda: next(dev), lambda: next(host), rounds=3)
    assert (offset, uncertainty) == (1005 - 900, 5)
    assert clock.combine((100, 0), (130, 0)) == (115, 30)
    assert clock.combine((100, 0), None) == (100, 0)
