"""The reader's speed helpers: Raw -> bytes in bulk, and malloc settings switched between parsing and
views, only when the caller opts in (the plugin's loader); a plain read leaves the process alone."""

import json
import threading

import msgspec
import numpy as np

from profiler_core.trace.read import cache, columns, malloc_tuning, reader


def test_raw_bytes_matches_bytes_including_nul_and_empty():
    raws = [msgspec.Raw(b"[[1,2],[]]"), msgspec.Raw(b""), msgspec.Raw(b'["float"]')]
    assert columns._raw_bytes(raws) == [b"[[1,2],[]]", b"", b'["float"]']
    odd = [msgspec.Raw(b"a\0b"), msgspec.Raw(b"c")]  # a NUL would break the join/split: slow path
    assert columns._raw_bytes(odd) == [b"a\0b", b"c"]
    assert columns._raw_bytes([]) == []


class _FakeLibc:
    """Records the calls of the thread that made it: a reader thread left running by an earlier test of the same
    worker (a plugin's background loads) tunes malloc too, and is not this test's read."""

    def __init__(self):
        self.calls = []
        self.owner = threading.get_ident()

    def mallopt(self, param, value):
        if threading.get_ident() == self.owner:
            self.calls.append((param, value))

    def malloc_trim(self, pad):
        if threading.get_ident() == self.owner:
            self.calls.append(("trim", pad))


def _trace(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(
        json.dumps(
            {
                "traceEvents": [
                    {
                        "ph": "X",
                        "cat": "cpu_op",
                        "name": "aten::mm",
                        "pid": 1,
                        "tid": 1,
                        "ts": 1.0,
                        "dur": 2.0,
                        "args": {"Input Dims": [[2, 2]], "Input type": ["float"]},
                    }
                ]
            }
        )
    )
    return path


def test_read_trace_parses_under_its_settings_then_tunes_for_views(tmp_path, monkeypatch):
    fake = _FakeLibc()
    monkeypatch.setattr(malloc_tuning, "_LIBC", fake)
    monkeypatch.setattr(reader, "TRIM_MIN_EVENTS", 1)  # a big read: its freed heap goes back at once
    for _ in range(2):  # every read switches to the parsing settings first, whatever came before
        fake.calls.clear()
        t = reader.read_trace(_trace(tmp_path), tune_memory=True)
        assert t.events["input_dims"].tolist() == ["[[2,2]]"]
        assert fake.calls == [
            (-3, malloc_tuning.PARSE_MMAP_THRESHOLD),
            (-1, malloc_tuning.KEEP_FREED),
            ("trim", 0),
            (-3, malloc_tuning.VIEWS_MMAP_THRESHOLD),
            (-1, malloc_tuning.KEEP_FREED),
        ]
    assert malloc_tuning.PARSE_MMAP_THRESHOLD < malloc_tuning.VIEWS_MMAP_THRESHOLD


def test_no_malloc_tuning_without_glibc(tmp_path, monkeypatch):
    monkeypatch.setattr(malloc_tuning, "_LIBC", False)
    assert reader.read_trace(_trace(tmp_path)).events["name"].tolist() == ["aten::mm"]
    assert reader.read_trace(_trace(tmp_path), tune_memory=True).events["name"].tolist() == ["aten::mm"]
    malloc_tuning.tune_for_views()  # no glibc: nothing to call, nothing raised
    malloc_tuning.release_memory()


def _huge_page_switch(monkeypatch):
    """Record every call of numpy's huge-page switch (the one tune_for_views turns off)."""
    core = getattr(np, "_core", None) or np.core
    calls = []
    monkeypatch.setattr(core.multiarray, "_set_madvise_hugepage", lambda on: calls.append(on) or True, raising=False)
    return calls


def test_read_trace_leaves_process_settings_alone_unless_asked(tmp_path, monkeypatch):
    fake = _FakeLibc()
    monkeypatch.setattr(malloc_tuning, "_LIBC", fake)
    huge_pages = _huge_page_switch(monkeypatch)
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    path = _trace(tmp_path)
    assert reader.read_trace(path).events["name"].tolist() == ["aten::mm"]
    assert reader.read_trace(path, use_cache=True).events["name"].tolist() == ["aten::mm"]  # parsed, stored
    assert cache.load(path) is not None
    assert reader.read_trace(path, use_cache=True).events["name"].tolist() == ["aten::mm"]  # a cache hit
    assert fake.calls == [] and huge_pages == []  # no mallopt, no trim, numpy's huge pages untouched
    reader.read_trace(path, use_cache=True, tune_memory=True)  # the plugin's loader asks for it
    assert fake.calls == [(-3, malloc_tuning.VIEWS_MMAP_THRESHOLD), (-1, malloc_tuning.KEEP_FREED)]
    assert huge_pages == [False]


def test_tuning_can_be_turned_off(monkeypatch):
    monkeypatch.setattr(malloc_tuning, "_LIBC", None)
    monkeypatch.setenv("GPUSCOPE_NO_MALLOC_TUNING", "1")
    assert malloc_tuning.libc() is False


def test_a_small_read_keeps_its_freed_heap_for_the_views(tmp_path, monkeypatch):
    """Below TRIM_MIN_EVENTS no malloc_trim: the freed parse memory (under KEEP_FREED) is reused by the views."""
    fake = _FakeLibc()
    monkeypatch.setattr(malloc_tuning, "_LIBC", fake)
    assert reader.TRIM_MIN_EVENTS > 1
    reader.read_trace(_trace(tmp_path), tune_memory=True)
    assert ("trim", 0) not in fake.calls
    assert fake.calls[-2:] == [(-3, malloc_tuning.VIEWS_MMAP_THRESHOLD), (-1, malloc_tuning.KEEP_FREED)]


def test_the_loader_shares_one_heap_before_its_threads_start(monkeypatch):
    """The plugin's loader asks glibc for one heap (M_ARENA_MAX 1) before it starts its threads, so the views
    reuse what a read freed; with tuning turned off (no glibc) it asks nothing."""
    from tb_plugin.loader import Loader

    fake = _FakeLibc()
    monkeypatch.setattr(malloc_tuning, "_LIBC", fake)
    loader = Loader(processes=0, use_cache=False)
    try:
        assert fake.calls == [(-8, malloc_tuning.ARENA_MAX)] and malloc_tuning.ARENA_MAX == 1
    finally:
        loader.close()
    monkeypatch.setattr(malloc_tuning, "_LIBC", False)
    Loader(processes=0, use_cache=False).close()  # nothing to call, nothing raised
