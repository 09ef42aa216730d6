"""The on-disk TraceData cache: hits, invalidation on change, corrupt entries, location."""

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from profiler_core.trace.read import cache
from profiler_core.trace.read.lookup import TraceChangedError, trace_event
from profiler_core.trace.read.reader import read_trace

from .cache_support import read_trace_cached


@pytest.fixture
def cache_env(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(d))
    return d


def _trace(path: Path, n: int = 5, name: str = "op") -> Path:
    ev = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"{name}{i}",
            "pid": 1,
            "tid": 1,
            "ts": i * 10,
            "dur": 5,
            "args": {"External id": i},
        }
        for i in range(n)
    ]
    path.write_text(json.dumps({"baseTimeNanoseconds": 1000, "traceEvents": ev}))
    return path


def test_second_open_comes_from_cache(cache_env, tmp_path, monkeypatch):
    p = _trace(tmp_path / "w.pt.trace.json")
    t1 = read_trace_cached(p)
    entries = list(cache_env.glob("*" + cache.SUFFIX))
    assert len(entries) == 1
    assert not list(tmp_path.glob("*" + cache.SUFFIX))  # nothing written next to the user's files
    import profiler_core.trace.read.reader as reader

    def boom(path):
        raise AssertionError("parsed again")

    monkeypatch.setattr(reader, "read_trace", boom)
    t2 = read_trace_cached(p)
    pd.testing.assert_frame_equal(t1.events, t2.events)
    assert t2.base_ns == 1000 and t2.metadata == t1.metadata


def test_changed_file_is_parsed_again(cache_env, tmp_path):
    p = _trace(tmp_path / "w.pt.trace.json", 5)
    assert len(read_trace_cached(p).events) == 5
    _trace(p, 7)
    os.utime(p, ns=(1, 1))
    assert len(read_trace_cached(p).events) == 7


def test_corrupt_entry_is_ignored_and_rewritten(cache_env, tmp_path):
    p = _trace(tmp_path / "w.pt.trace.json")
    read_trace_cached(p)
    entry = cache.entry_path(p)
    for garbage in (b"junk", entry.read_bytes()[:40], b""):
        entry.write_bytes(garbage)
        assert cache.load(p) is None
        assert not entry.exists()
        t = read_trace_cached(p)
        assert len(t.events) == 5 and entry.exists()


def test_stale_parse_is_not_stored(cache_env, tmp_path):
    p = _trace(tmp_path / "w.pt.trace.json")
    t = read_trace(p)
    _trace(p, 9)
    os.utime(p, ns=(2, 2))
    assert cache.store(p, t) is None
    assert cache.load(p) is None


def test_trim_removes_least_recently_used(cache_env, tmp_path):
    paths = [_trace(tmp_path / f"w{i}.pt.trace.json") for i in range(3)]
    for i, p in enumerate(paths):
        read_trace_cached(p)
        os.utime(cache.entry_path(p), (100 + i, 100 + i))
    size = cache.entry_path(paths[0]).stat().st_size
    assert cache.trim(max_bytes=2 * size + 10) == 1
    assert not cache.entry_path(paths[0]).exists()
    assert cache.entry_path(paths[2]).exists()


def test_default_dir_is_under_home(monkeypatch):
    monkeypatch.delenv("GPUSCOPE_CACHE_DIR", raising=False)
    assert cache.cache_dir() == Path.home() / ".cache" / "gpuscope"


def test_absent_columns_stay_shared_constants_through_the_cache(cache_env, tmp_path):
    p = _trace(tmp_path / "w.pt.trace.json", 50)
    t = read_trace(p)
    stream = t.events["stream"].to_numpy()
    assert stream.strides == (0,) and not stream.flags.writeable and (stream == -1).all()
    assert len(t.sparse["grid_x"].rows) == 0 and (t.arg("grid_x") == 0).all()  # a sparse arg no row holds
    assert t.events["ts"].to_numpy().strides == (8,)
    cache.store(p, t)
    t2 = cache.load(p)
    pd.testing.assert_frame_equal(t.events, t2.events)
    assert t2.sparse.keys() == t.sparse.keys() and all(t2.sparse[c].equals(t.sparse[c]) for c in t.sparse)
    assert t2.events["correlation"].to_numpy().strides == (0,)
    assert list(t2.events.columns) == list(t.events.columns)
    sub = t2.events[t2.events["name"] == "op3"]  # ordinary pandas work on them
    assert len(sub) == 1 and sub["correlation"].iloc[0] == -1
    assert entry_size_kb(cache.entry_path(p)) < 64


def entry_size_kb(path: Path) -> float:
    return path.stat().st_size / 1024


def test_trim_drops_entries_of_vanished_traces(cache_env, tmp_path):
    keep = _trace(tmp_path / "keep.pt.trace.json")
    gone = _trace(tmp_path / "gone.pt.trace.json")
    read_trace_cached(keep)
    read_trace_cached(gone)
    gone_entry = cache.entry_path(gone)
    gone.unlink()
    assert cache.trim() == 1
    assert not gone_entry.exists() and cache.entry_path(keep).exists()


def test_trim_removes_temporaries_a_killed_writer_left(cache_env, tmp_path):
    read_trace_cached(_trace(tmp_path / "t.pt.trace.json"))  # creates the cache directory
    entry = cache.entry_path(tmp_path / "t.pt.trace.json")
    stale = entry.parent / f".{entry.name}.4242.deadbeef.tmp"
    fresh = entry.parent / f".{entry.name}.4243.cafe0000.tmp"  # a write in progress
    stale.write_bytes(b"half")
    fresh.write_bytes(b"half")
    old = stale.stat().st_mtime - cache.STALE_TEMPORARY_S - 60
    os.utime(stale, (old, old))
    cache.trim()
    assert not stale.exists() and fresh.exists() and entry.exists()


def _same_size_and_mtime(p: Path, name: str, replace: bool) -> None:
    """Put a different trace of the same size and mtime at `p`: renamed over it, or rewritten."""
    st = p.stat()
    new = _trace(p.with_name("new.json"), 5, name=name)
    assert new.stat().st_size == st.st_size
    if replace:
        os.replace(new, p)
    else:
        p.write_bytes(new.read_bytes())
        new.unlink()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (p.stat().st_size, p.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)


@pytest.mark.parametrize("replace", [True, False], ids=["renamed-over", "rewritten-in-place"])
def test_a_file_replaced_with_same_size_and_mtime_is_parsed_again(cache_env, tmp_path, replace):
    p = _trace(tmp_path / "w.pt.trace.json", 5, name="old")
    t_old = read_trace_cached(p)
    assert set(t_old.events["name"]) == {f"old{i}" for i in range(5)}
    _same_size_and_mtime(p, "new", replace)
    assert cache.load(p) is None
    assert set(read_trace_cached(p).events["name"]) == {f"new{i}" for i in range(5)}
    with pytest.raises(TraceChangedError):  # the old parse knows its file is gone
        trace_event(t_old, 0)
