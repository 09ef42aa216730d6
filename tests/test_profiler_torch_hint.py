"""Issue 23 item 15: gpuscope's profiler inside a PyTorch program says once that it records only its
own ranges and points to torch.profiler, whose traces the plugin reads."""

import types
import warnings

import profiler_core
from profiler_core import profiler as prof_mod


def _profile_twice() -> list:
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        for _ in range(2):
            with profiler_core.profile(activities=[profiler_core.ProfilerActivity.CPU]):
                with profiler_core.record_function("step"):
                    pass
    return [w for w in got if "torch.profiler" in str(w.message)]


def test_warns_once_when_torch_is_imported(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "torch", types.ModuleType("torch"))
    monkeypatch.setattr(prof_mod, "_torch_warned", False)
    hints = _profile_twice()
    assert len(hints) == 1
    msg = str(hints[0].message)
    assert "record_function" in msg and "tensorboard_trace_handler" in msg
    assert hints[0].filename == __file__  # points at the user's `with profile()` line


def test_start_points_at_the_caller(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "torch", types.ModuleType("torch"))
    monkeypatch.setattr(prof_mod, "_torch_warned", False)
    p = profiler_core.profile(activities=[profiler_core.ProfilerActivity.CPU])
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        p.start()
        p.stop()
    hints = [w for w in got if "torch.profiler" in str(w.message)]
    assert len(hints) == 1 and hints[0].filename == __file__


def test_silent_without_torch(monkeypatch):
    monkeypatch.delitem(__import__("sys").modules, "torch", raising=False)
    monkeypatch.setattr(prof_mod, "_torch_warned", False)
    assert _profile_twice() == []
