"""Issue 36, item 4: one parallelism plan, `parallel_plan.plan(cores, size, native)`, and its settings as overrides.

The expected values follow the documented rules (README's settings table), not the code that computes them."""

import pytest

from profiler_core.trace.read import native, parallel_plan, stream
from profiler_core.trace.read.parallel_plan import PARALLEL_MIN_BYTES, plan

BIG, SMALL = PARALLEL_MIN_BYTES, PARALLEL_MIN_BYTES - 1
SETTINGS = ("GPUSCOPE_LOAD_THREADS", "GPUSCOPE_LOAD_PROCESSES", "GPUSCOPE_PARSE_PROCESSES", "GPUSCOPE_NATIVE_THREADS")

# cores -> (load threads with / without the native reader, load processes, parse processes, scan threads, warm 2)
EXPECTED = {
    1: (1, 1, 0, 0, 0, False),
    2: (2, 1, 0, 1, 1, True),
    3: (2, 1, 0, 2, 2, True),
    4: (2, 1, 2, 3, 3, True),
    5: (2, 1, 2, 3, 4, True),
    8: (2, 1, 4, 3, 4, True),
    10: (2, 1, 4, 3, 4, True),
    64: (2, 1, 4, 3, 4, True),
}


@pytest.fixture(autouse=True)
def _no_settings(monkeypatch):
    for name in SETTINGS:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("cores", sorted(EXPECTED))
def test_the_plan_over_cores_and_sizes_is_today_s_defaults(cores):
    threads_native, threads, processes, parse, scan, warm = EXPECTED[cores]
    for size in (0, SMALL, BIG, 4 << 30):
        for nat in (True, False):
            p = plan(cores, size, nat)
            assert p.load_threads == (threads_native if nat else threads)
            assert p.load_processes == processes
            assert p.parse_processes == (parse if size >= BIG else 0)
            assert p.scan_threads == scan
            assert p.warm_two_threads is warm
            assert p.overridden == frozenset()


@pytest.mark.parametrize(
    "name,field", [(s, f) for f, s in parallel_plan.OVERRIDES.items()], ids=list(parallel_plan.OVERRIDES)
)
def test_each_setting_overrides_its_field_only(monkeypatch, name, field):
    monkeypatch.setenv(name, "3")
    for cores in (1, 2, 16):
        p, base = plan(cores, SMALL, True), parallel_plan.default_plan(cores, SMALL, True)
        assert getattr(p, field) == 3 and p.overridden == {field}
        others = {f: getattr(base, f) for f in parallel_plan.OVERRIDES if f != field}
        assert {f: getattr(p, f) for f in others} == others


def test_the_readers_and_the_loader_ask_the_plan(monkeypatch):
    from tb_plugin import loader

    monkeypatch.setattr(parallel_plan.os, "cpu_count", lambda: 8)
    monkeypatch.setattr(stream.os, "cpu_count", lambda: 8)
    monkeypatch.setattr(native.os, "cpu_count", lambda: 8)
    assert stream.default_parse_processes() == 3 and stream.parse_processes_for(None) == 3
    assert stream.parse_processes_for(1) == 1  # an explicit request beats the default
    assert native.scan_threads() == 4
    assert loader.default_processes() == 4
    monkeypatch.setenv("GPUSCOPE_PARSE_PROCESSES", "0")
    assert stream.parse_processes_for(2) == 0  # ... but not the setting
    monkeypatch.setenv("GPUSCOPE_NATIVE_THREADS", "0")
    assert native.scan_threads() == 0
    monkeypatch.setenv("GPUSCOPE_LOAD_THREADS", "5")
    assert loader.default_threads() == 5
