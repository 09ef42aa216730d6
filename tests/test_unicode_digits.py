"""Texts that pass str.isdigit() without being ASCII digits ("²" then fails int()) are never
turned into numbers: no ValueError from a setting or from a trace's pid."""

from profiler_core.analysis import events_from_trace
from profiler_core.trace.read import parallel_plan, stream
from tb_plugin import loader


def test_a_superscript_in_a_setting_is_not_a_number(monkeypatch):
    monkeypatch.setenv("GPUSCOPE_PARSE_PROCESSES", "²")
    assert stream.parse_processes_for(3) == 3  # reported and ignored: tests/test_settings.py
    monkeypatch.setenv("GPUSCOPE_LOAD_PROCESSES", "²")
    monkeypatch.setattr(parallel_plan.os, "cpu_count", lambda: 8)
    assert loader.default_processes() == 4


def test_a_superscript_in_a_pid_is_a_label_not_a_number():
    ev = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": "rank ²",
            "tid": "thread ³",
            "ts": 1,
            "dur": 2,
            "args": {},
        }
    ]
    events = events_from_trace({"traceEvents": ev})
    assert [e.name for e in events] == ["aten::mm"]
