"""The trace writer: exact layout, valid JSON whatever the strings, gzip, atomic and failure-safe."""

import errno
import gzip
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

from profiler_core import ProfilerActivity, profile, record_function
from profiler_core.trace.write import writer
from profiler_core.trace.write.schema import base_time_ns
from profiler_core.trace.write.writer import TraceWriteError, write_trace

CPU = [ProfilerActivity.CPU]
NASTY = 'quote " backslash \\ newline \n tab \t nul \x00 unicode é 漢 emoji 🎉 lone \udc80 </script>'


def _profiled(with_stack: bool = False):
    with profile(activities=CPU, record_shapes=True, with_stack=with_stack) as p:
        with record_function(NASTY):
            pass
        p.add_metadata("note", NASTY)
        p.add_metadata_json("obj", json.dumps({"k": [1, 2.5, None]}))
    return p


def test_nasty_strings_give_valid_json(tmp_path):
    p = _profiled()
    path = tmp_path / "t.pt.trace.json"
    p.export_chrome_trace(str(path))
    d = json.loads(path.read_text(encoding="utf-8"))
    names = [e["name"] for e in d["traceEvents"] if e.get("cat") == "user_annotation"]
    assert names[0].startswith('quote " backslash \\ newline \n tab')
    assert d["note"].endswith("</script>") and d["obj"] == {"k": [1, 2.5, None]}
    assert d["traceName"] == str(path)


def test_layout_matches_kineto(tmp_path):
    p = _profiled()
    path = tmp_path / "t.json"
    p.export_chrome_trace(str(path))
    d = json.loads(path.read_text())
    keys = list(d)
    assert keys[0:2] == ["schemaVersion", "deviceProperties"]
    assert keys[-4:] == ["displayTimeUnit", "baseTimeNanoseconds", "traceEvents", "traceName"]
    assert d["schemaVersion"] == 1 and d["displayTimeUnit"] == "ms"
    ev = d["traceEvents"]
    phases = [e["ph"] for e in ev]
    first_x = phases.index("X")
    assert set(phases[:first_x]) == {"M"}
    assert ev[-1]["name"] == "Record Window End" and ev[-1]["pid"] == ""
    span = [e for e in ev if e.get("cat") == "Trace"][0]
    assert span["pid"] == "Spans" and span["tid"] == "PyTorch Profiler"
    pname = [e for e in ev if e["ph"] == "M" and e["name"] == "process_labels"][0]
    assert pname["args"] == {"labels": "CPU"} and pname["pid"] == os.getpid()
    for e in ev:
        if e["ph"] == "X":
            assert round(e["ts"] * 1000) == pytest.approx(e["ts"] * 1000, abs=1e-3)


def test_base_time_floor():
    assert base_time_ns(1790857026123456789) == 1790857026000000000


def test_gzip_roundtrip_and_no_leftovers(tmp_path):
    p = _profiled()
    path = tmp_path / "w.1.pt.trace.json.gz"
    p.export_chrome_trace(str(path))
    with gzip.open(path, "rt", encoding="utf-8") as f:
        d = json.load(f)
    assert d["traceEvents"] and os.listdir(tmp_path) == ["w.1.pt.trace.json.gz"]


def test_unserialisable_values_are_converted(tmp_path):
    trace = {
        "schemaVersion": 1,
        "deviceProperties": [],
        "x": np.float32(1.5),
        "y": {1, 2},
        "traceEvents": [{"ph": "X", "name": "a", "args": {"n": np.int64(3), "o": object()}}],
    }
    path = tmp_path / "t.json"
    write_trace(trace, path)
    d = json.loads(path.read_text())
    assert d["x"] == 1.5 and sorted(d["y"]) == [1, 2] and d["traceEvents"][0]["args"]["n"] == 3


def test_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(TraceWriteError, match="does not exist"):
        write_trace({"traceEvents": []}, tmp_path / "nope" / "t.json")


NOBODY = 65534


def _as_nobody(action) -> str:
    """Run `action()` in a forked child that dropped root to uid/gid 65534; "" or its "Type: message"."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 0
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            try:
                action()
                out = ""
            except Exception as e:  # reported to the parent, which asserts on it
                out = f"{type(e).__name__}: {e}"
            os.write(write_end, out.encode("utf-8", "replace"))
        except BaseException:
            status = 1
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        out = f.read().decode("utf-8")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the unprivileged child could not drop root"
    return out


def test_unwritable_directory_is_a_clear_error(tmp_path):
    """As root (how CI runs) the write is tried by an unprivileged child, since root can write anywhere."""
    write_trace({"traceEvents": []}, tmp_path / "warm.json")  # imports done before any fork
    base = Path(tempfile.mkdtemp(prefix="gpuscope-ro-"))  # under the system temp dir, reachable by all
    try:
        base.chmod(0o755)
        ro = base / "ro"
        ro.mkdir()
        ro.chmod(0o555)

        def write():
            write_trace({"traceEvents": []}, ro / "t.json")

        if os.geteuid() == 0:
            error = _as_nobody(write)
        else:
            with pytest.raises(TraceWriteError) as info:
                write()
            error = f"TraceWriteError: {info.value}"
        assert re.match(r"TraceWriteError: .*cannot write trace .*Permission denied", error), error
        assert os.listdir(ro) == []
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_disk_full_leaves_no_file(tmp_path, monkeypatch, name):
    calls = {"n": 0}
    real_iter = writer.iter_json

    def failing_iter(trace, trace_name):
        for i, piece in enumerate(real_iter(trace, trace_name)):
            if i == 1:
                raise OSError(errno.ENOSPC, "No space left on device")
            calls["n"] += 1
            yield piece

    monkeypatch.setattr(writer, "iter_json", failing_iter)
    target = tmp_path / name
    target_existing = tmp_path / ("old-" + name)
    trace = {"traceEvents": [{"ph": "X", "name": str(i)} for i in range(10)]}
    with pytest.raises(TraceWriteError, match="No space left on device"):
        write_trace(trace, target)
    assert calls["n"] == 1
    assert os.listdir(tmp_path) == []
    # an existing complete file under the final name is never replaced by a partial one
    target_existing.write_text("{}")
    with pytest.raises(TraceWriteError):
        write_trace(trace, target_existing)
    assert target_existing.read_text() == "{}" and os.listdir(tmp_path) == [target_existing.name]


def test_disk_full_via_write_call(tmp_path, monkeypatch):
    real_fdopen = os.fdopen

    class FullFile:
        def __init__(self, f):
            self.f = f

        def write(self, b):
            raise OSError(errno.ENOSPC, "No space left on device")

        def flush(self):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.f.close()

    monkeypatch.setattr(writer.os, "fdopen", lambda fd, *a, **k: FullFile(real_fdopen(fd, *a, **k)))
    with pytest.raises(TraceWriteError, match="No space left"):
        write_trace({"traceEvents": []}, tmp_path / "t.json.gz")
    assert os.listdir(tmp_path) == []


def test_bad_trace_type_rejected_and_cleaned(tmp_path):
    with pytest.raises(TypeError, match="expected a trace dict"):
        write_trace("not a trace", tmp_path / "t.json")
    assert os.listdir(tmp_path) == []


def test_many_events_chunks(tmp_path):
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i / 1000, "dur": 0.001}
        for i in range(10000)
    ]
    write_trace({"traceEvents": events}, tmp_path / "t.json")
    d = json.loads((tmp_path / "t.json").read_text())
    assert [e["name"] for e in d["traceEvents"]] == [f"op{i}" for i in range(10000)]


def test_permission_denied_is_a_clear_error(tmp_path, monkeypatch):
    real_open = os.open

    def deny(path, flags, mode=0o777, *a, **k):
        if str(path).endswith(".tmp"):
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path, flags, mode, *a, **k)

    monkeypatch.setattr(writer.os, "open", deny)
    with pytest.raises(TraceWriteError, match="cannot write trace .*Permission denied"):
        write_trace({"traceEvents": []}, tmp_path / "t.json")
    assert os.listdir(tmp_path) == []


def test_a_fifo_is_refused_without_waiting_for_a_reader(tmp_path):
    import stat

    fifo = tmp_path / "pipe.pt.trace.json"
    os.mkfifo(fifo)
    prof = _profiled(with_stack=True)
    with pytest.raises(TraceWriteError, match="it is a FIFO; only a regular file is replaced"):
        prof.export_chrome_trace(str(fifo))  # hung forever before: opened for writing, no reader
    with pytest.raises(TraceWriteError, match="it is a FIFO"):
        prof.export_stacks(str(fifo))
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert os.listdir(tmp_path) == ["pipe.pt.trace.json"]  # no temporary left beside it


@pytest.mark.parametrize("dangling", [False, True])
def test_a_symlink_is_refused_and_its_target_left_alone(tmp_path, dangling):
    target = tmp_path / "real" / "t.pt.trace.json.gz"
    target.parent.mkdir()
    if not dangling:
        target.write_bytes(b"old")
        target.chmod(0o600)
    link = tmp_path / "link.pt.trace.json.gz"
    link.symlink_to(target)
    with pytest.raises(TraceWriteError, match="it is a symbolic link"):
        _profiled().export_chrome_trace(str(link))
    assert link.is_symlink() and os.readlink(link) == str(target)
    if dangling:
        assert not target.exists()  # before: a file was created where the link pointed
    else:
        assert target.read_bytes() == b"old" and (target.stat().st_mode & 0o777) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["link.pt.trace.json.gz", "real"]


def test_a_replaced_file_keeps_its_permissions(tmp_path):
    path = tmp_path / "t.pt.trace.json"
    path.write_bytes(b"old")
    path.chmod(0o600)
    _profiled().export_chrome_trace(str(path))
    assert json.loads(path.read_bytes())["traceEvents"]
    assert (path.stat().st_mode & 0o777) == 0o600  # before: 0644, readable by everyone


def _char_device(tmp_path, name: str, minor: int):
    """A private copy of /dev/null (minor 3) or /dev/full (minor 7); skips where mknod is refused."""
    import stat

    path = tmp_path / name
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    except (PermissionError, AttributeError, OSError) as e:
        pytest.skip(f"cannot create a character device here ({e})")
    return path


def test_a_character_device_is_refused(tmp_path):
    import stat

    null = _char_device(tmp_path, "null", 3)
    with pytest.raises(TraceWriteError, match="it is a character device"):
        _profiled().export_chrome_trace(str(null))
    assert stat.S_ISCHR(os.lstat(null).st_mode)
    assert os.listdir(tmp_path) == ["null"]
