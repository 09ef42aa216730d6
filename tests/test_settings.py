"""The GPUSCOPE_* settings registry (profiler_core/settings.py): every variable is in it and in
the README, each has one parser, and a bad value is one clear warning, never a crash or silence."""

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from profiler_core import settings

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("profiler_core", "tb_plugin", "tests", "benchmarks", "samples", "frontend/dev", ".ci")


def _names_in_code() -> set:
    found = set()
    for d in SOURCES:
        for f in (ROOT / d).rglob("*"):
            if f.is_file() and f.suffix in (".py", ".sh", "") and f.name != "test_settings.py":
                found |= set(re.findall(r"GPUSCOPE_[A-Z0-9_]*[A-Z0-9]", f.read_text(errors="replace")))
    return found


def test_every_variable_the_code_reads_is_registered_and_every_registered_one_is_read():
    found = _names_in_code()
    registered = set(settings.SETTINGS)
    # a regex in a test may name only a variable's beginning
    assert {n for n in found if not any(r.startswith(n) for r in registered)} == set()
    assert registered <= found


def test_the_readme_lists_exactly_the_registry():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = re.search(r"<!-- settings: python -m profiler_core.settings -->\n(.*?)<!-- end settings -->", readme, re.S)
    assert table, "README.md has no settings table"
    assert table.group(1) == settings.markdown(), "regenerate: python -m profiler_core.settings"


@pytest.mark.parametrize(
    "name,value",
    [
        ("GPUSCOPE_PREPARE_MAX_WORKERS", "eight"),
        ("GPUSCOPE_SUMMARY_MEMORY", "0"),
        ("GPUSCOPE_MAX_LOADED_BYTES", "4GiB"),
        ("GPUSCOPE_CACHE_MAX_BYTES", "-1"),
    ],
)
def test_a_bad_value_read_at_import_is_one_warning_naming_it_not_a_crash(name, value):
    code = (
        "import tb_plugin.plugin, tb_plugin.loader, tb_plugin.summaries.engine, "
        "profiler_core.trace.read.cache; print('imported')"
    )
    env = {**os.environ, name: value, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and "imported" in out.stdout, out.stderr[-1500:]
    warned = [line for line in out.stderr.splitlines() if name in line]
    assert len(warned) == 1 and value in warned[0] and "default" in warned[0], out.stderr


def test_a_bad_value_is_reported_once_and_the_default_used(monkeypatch, caplog):
    from profiler_core.trace.read import stream

    monkeypatch.setenv("GPUSCOPE_PARSE_PROCESSES", "²")  # was silently taken as 0
    with caplog.at_level(logging.WARNING, logger="profiler_core.settings"):
        assert stream.parse_processes_for(3) == 3
        assert stream.parse_processes_for(2) == 2
    assert [r.getMessage() for r in caplog.records if "GPUSCOPE_PARSE_PROCESSES" in r.getMessage()] and len(
        caplog.records
    ) == 1
    monkeypatch.setenv("GPUSCOPE_PARSE_PROCESSES", "0")
    assert stream.parse_processes_for(3) == 0


@pytest.mark.parametrize("raw,value", [("1", True), ("yes", True), ("ON", True), ("0", False), ("off", False)])
def test_flags_have_one_spelling_rule(monkeypatch, raw, value):
    for name in ("GPUSCOPE_DISABLE_CUDA", "GPUSCOPE_NO_MALLOC_TUNING", "GPUSCOPE_CACHE", "GPUSCOPE_KEEP_RAW_RECORDS"):
        monkeypatch.setenv(name, raw)
        assert settings.get(name) is value


@pytest.mark.parametrize("cores,expected", [(1, 0), (2, 1), (3, 2), (4, 3), (64, 3)])
def test_parse_processes_default_is_what_the_readme_says(monkeypatch, cores, expected):
    from profiler_core.trace.read import stream

    assert settings.SETTINGS["GPUSCOPE_PARSE_PROCESSES"].shown_default() == "cores - 1, at most 3"
    monkeypatch.delenv("GPUSCOPE_PARSE_PROCESSES", raising=False)
    monkeypatch.setattr(stream.os, "cpu_count", lambda: cores)
    assert stream.parse_processes_for(None) == expected == max(0, min(3, cores - 1))
