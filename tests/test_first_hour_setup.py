"""Issue 39 item 8, the first hour of a user: what is missing is said (a C extension not built, a CUDA backend
that cannot run), and settings print the defaults they really use."""

import logging
import os
import subprocess
import sys
import warnings

import pytest
from tensorboard.plugins import base_plugin

from profiler_core import ProfilerActivity, native_parts, profile, record_function, settings

from .conftest import ROOT

EXTENSIONS = ("profiler_core.trace.read._native", "profiler_core.analysis.stages._tree")


def _version(block: tuple[str, ...] = ()) -> str:
    """`gpuscope --version`'s output in a fresh process where the C extensions `block` cannot be imported."""
    code = (
        "import sys\n"
        f"for m in {list(block)!r}: sys.modules[m] = None  # as if never built\n"
        "from tb_plugin.summaries.cli import main\n"
        "main(['--version'])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_version_says_which_c_extensions_are_built_and_what_runs_without_them():
    out = _version(EXTENSIONS).splitlines()
    assert out[0].startswith("gpuscope ") and len(out[0].split()) == 2  # the version's line stays the first
    assert out[1].startswith("native trace reader: not built") and "Python reader" in out[1], out
    assert out[2].startswith("op tree's C pass: not built") and "numpy" in out[2], out
    assert "C compiler" in out[3], out
    if not native_parts.missing():  # built in this tree: said so, and no advice
        out = _version().splitlines()
        assert out[1:] == ["native trace reader: built", "op tree's C pass: built"], out


def test_the_plugin_says_a_missing_native_reader_once_at_start(tmp_path, monkeypatch, caplog):
    from tb_plugin.plugin import GpuscopePlugin

    monkeypatch.setattr(native_parts, "_said", False)
    monkeypatch.setitem(sys.modules, EXTENSIONS[0], None)
    with caplog.at_level(logging.WARNING, logger="tb_plugin.plugin"):
        for _ in range(2):  # TensorBoard may build the plugin more than once: said once per process
            GpuscopePlugin(base_plugin.TBContext(logdir=str(tmp_path)))
    said = [r.getMessage() for r in caplog.records if "native trace reader" in r.getMessage()]
    assert len(said) == 1 and "is not built" in said[0] and "Python reader" in said[0], said
    assert "C compiler" in said[0] and "op tree" not in said[0]  # only what is missing is named


def test_the_plugin_is_silent_when_both_are_built(tmp_path, monkeypatch, caplog):
    from tb_plugin.plugin import GpuscopePlugin

    monkeypatch.setattr(native_parts, "_said", False)
    monkeypatch.setattr(native_parts, "missing", list)
    with caplog.at_level(logging.WARNING, logger="tb_plugin.plugin"):
        GpuscopePlugin(base_plugin.TBContext(logdir=str(tmp_path)))
    assert not [r for r in caplog.records if "not built" in r.getMessage()]


@pytest.mark.parametrize(
    "value,said",
    [
        ("cuda", "GPUSCOPE_CUDA_BACKEND='cuda' is not a backend either (expected cupti or events)"),
        ("events", "GPUSCOPE_CUDA_BACKEND=events has no GPU to capture from"),
    ],
)
def test_a_cuda_backend_without_a_gpu_is_reported(monkeypatch, value, said):
    import profiler_core.profiler as prof_mod

    monkeypatch.setattr(prof_mod, "_cuda_available", lambda: False)  # this machine, or any without a GPU
    monkeypatch.setenv("GPUSCOPE_CUDA_BACKEND", value)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
            with record_function("x"):
                pass
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1 and "recording CPU activity only" in messages[0] and said in messages[0], messages
    assert p.activities == {ProfilerActivity.CPU}


def test_a_cuda_backend_that_is_not_one_is_reported_where_a_gpu_reads_it(monkeypatch, caplog):
    monkeypatch.setenv("GPUSCOPE_CUDA_BACKEND", "cuda")
    with caplog.at_level(logging.WARNING, logger="profiler_core.settings"):
        assert settings.get("GPUSCOPE_CUDA_BACKEND") == "cupti"
    said = [r.getMessage() for r in caplog.records]
    assert any("GPUSCOPE_CUDA_BACKEND='cuda'" in m and "using the default (cupti)" in m for m in said), said


def test_settings_print_their_real_defaults_never_none(monkeypatch, caplog):
    for s in settings.SETTINGS.values():
        shown = s.shown_default()
        assert shown and "None" not in shown and shown.strip("`"), s.name
    assert "| `GPUSCOPE_PARSE_PROCESSES` | integer >= 0 | cores - 1, at most 3 |" in settings.markdown()
    monkeypatch.setenv("GPUSCOPE_LOAD_THREADS", "many")
    with caplog.at_level(logging.WARNING, logger="profiler_core.settings"):
        settings.get("GPUSCOPE_LOAD_THREADS")
    [said] = [r.getMessage() for r in caplog.records if "GPUSCOPE_LOAD_THREADS" in r.getMessage()]
    assert "(none)" not in said and "using the default (2 from 2 cores where the native reader is built" in said
