"""The parse cache never runs code from disk: no pickles, a private directory, foreign ones refused."""

import json
import logging
import os
import pickle
import stat
from pathlib import Path

import pandas as pd
import pytest

from profiler_core.trace.read import cache, cache_format
from profiler_core.trace.read.reader import read_trace

from .cache_support import read_trace_cached

OLD_MAGIC = b"GPUSCOPE-TRACE-CACHE\n"  # the header of the old pickle entries


@pytest.fixture
def cache_env(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(d))
    cache._warned.clear()
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


class _Payload:
    """Unpickling this creates the marker file: proof that a pickle from disk was executed."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_planted_pickle_is_never_executed(cache_env, tmp_path):
    p = _trace(tmp_path / "w.pt.trace.json")
    read_trace_cached(p)
    marker = tmp_path / "pwned"
    evil = OLD_MAGIC + pickle.dumps(_Payload(marker)) + pickle.dumps(_Payload(marker))
    # where this trace's entry lives, and an entry of the old format (trim used to read those)
    planted = [cache.entry_path(p), cache_env / "0123456789abcdef0123456789abcdef.trace.pkl"]
    for entry in planted:
        entry.write_bytes(evil)
    t = cache.load(p)
    assert t is None  # the planted entry is not a valid one: dropped, never unpickled
    t = read_trace_cached(p)
    assert list(t.events["name"]) == [f"op{i}" for i in range(5)]
    cache.trim()
    assert not marker.exists()
    assert not planted[1].exists()  # an old-format file is removed unopened


def test_the_directory_is_created_private(cache_env, tmp_path):
    p = _trace(tmp_path / "w.pt.trace.json")
    assert cache.store(p, read_trace(p)) is not None
    assert stat.S_IMODE(cache_env.stat().st_mode) == 0o700
    assert stat.S_IMODE(cache.entry_path(p).stat().st_mode) & 0o077 == 0


@pytest.mark.parametrize("mode", [0o777, 0o755])
def test_an_open_directory_of_ours_is_made_private(cache_env, tmp_path, mode):
    cache_env.mkdir()
    os.chmod(cache_env, mode)
    p = _trace(tmp_path / "w.pt.trace.json")
    assert cache.store(p, read_trace(p)) is not None
    assert stat.S_IMODE(cache_env.stat().st_mode) == 0o700


def _owned_by_someone_else(d: Path, monkeypatch) -> None:
    """Make `d` belong to another user: really when we are root, else by our uid changing."""
    if hasattr(os, "getuid") and os.getuid() == 0:
        os.chown(d, 54321, -1)
    else:
        uid = d.stat().st_uid
        monkeypatch.setattr(os, "getuid", lambda: uid + 1)


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="no file owners on this platform")
def test_a_directory_owned_by_someone_else_is_refused(cache_env, tmp_path, monkeypatch, caplog):
    p = _trace(tmp_path / "w.pt.trace.json")
    t = read_trace(p)
    cache.store(p, t)  # a valid entry inside, as someone else could have put there
    entry = cache.entry_path(p)
    assert entry.exists()
    _owned_by_someone_else(cache_env, monkeypatch)
    with caplog.at_level(logging.WARNING, logger="profiler_core.trace.read.cache"):
        assert cache.load(p) is None
        assert cache.store(p, t) is None
        assert cache.trim(max_bytes=0) == 0
    assert entry.exists()  # left alone, not read, not removed
    assert "owned by another user" in caplog.text and str(cache_env) in caplog.text
    assert caplog.text.count("not using the trace cache") == 1  # said once, not per file
    assert len(read_trace_cached(p).events) == 5  # reading works, without a cache


def test_an_entry_that_is_a_symlink_is_not_followed(cache_env, tmp_path):
    p = _trace(tmp_path / "w.pt.trace.json")
    read_trace_cached(p)
    entry = cache.entry_path(p)
    real = tmp_path / "elsewhere.gpc"
    entry.rename(real)
    entry.symlink_to(real)
    assert cache.load(p) is None


def _rewrite_header(entry: Path, change) -> None:
    """Re-write a cache entry with `change(header)` applied, buffers kept."""
    import msgspec

    with open(entry, "rb") as f:
        key = cache_format.read_key(f)
        header = cache_format.read_header(f)
        data = f.read()
    change(header)
    k, h = msgspec.msgpack.encode(key), msgspec.msgpack.encode(header)
    head = cache_format.MAGIC + len(k).to_bytes(8, "little") + k + len(h).to_bytes(8, "little") + h
    entry.write_bytes(head + b"\0" * (-len(head) % 64) + data)


def _events_column(header: dict, name: str) -> dict:
    return next(c for c in header["frames"]["events"]["columns"] if c["name"] == name)


@pytest.mark.parametrize(
    "change",
    [
        lambda h: _events_column(h, "ts").update(dtype="|O"),  # object: would unpickle
        lambda h: _events_column(h, "ts").update(dtype="V8"),
        lambda h: _events_column(h, "ts").update(offset=1 << 40),  # outside the file
        lambda h: _events_column(h, "name").update(categories=[]),  # codes out of range
        lambda h: _events_column(h, "pid").update(kind="pickle"),
        lambda h: h["fields"].update(base_ns="soon"),
    ],
)
def test_forged_entries_are_rejected_not_trusted(cache_env, tmp_path, change):
    p = _trace(tmp_path / "w.pt.trace.json")
    read_trace_cached(p)
    entry = cache.entry_path(p)
    _rewrite_header(entry, lambda h: None)
    assert cache.load(p) is not None  # the rewrite itself keeps a valid entry
    _rewrite_header(entry, change)
    assert cache.load(p) is None
    assert not entry.exists()


def test_round_trip_keeps_every_column_and_field(cache_env):
    trace = Path(__file__).parent / "data" / "analysis" / "ours_gpu.trace.json.gz"
    t = read_trace(trace)
    assert cache.store(trace, t) is not None
    t2 = cache.load(trace)
    for name in ("events", "memory", "flows", "names"):
        pd.testing.assert_frame_equal(getattr(t, name), getattr(t2, name))
    for name in ("metadata", "device_properties", "base_ns", "warnings", "labels", "source_stat", "event_index"):
        assert getattr(t2, name) == getattr(t, name), name
    assert isinstance(t2.event_index, tuple) and isinstance(t2.source_stat, tuple)
    t2.events.loc[0, "ts"] = -1  # ordinary pandas writes work on the loaded columns
    assert t2.events["ts"].iloc[0] == -1
