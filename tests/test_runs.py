"""Logdir scanning: run/worker/span naming, stability of files being written, rescans."""

import json
import os
import time
from pathlib import Path

from tb_plugin.runs import Scanner, looks_like_trace, parse_name

OLD = time.time() - 3600


def _put(path: Path, doc=None, age: float | None = OLD) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc if doc is not None else {"traceEvents": []}))
    if age is not None:
        os.utime(path, (age, age))
    return path


def test_parse_name():
    assert parse_name("host_12.1796207156519141535.pt.trace.json.gz") == ("host_12", 1796207156519141535)
    assert parse_name("worker0.1623143089861.pt.trace.json") == ("worker0", 1623143089861 * 10**6)
    assert parse_name("worker0.pt.trace.json") == ("worker0", None)
    assert parse_name("a.b.7.pt.trace.json") == ("a.b", 7 * 10**6)
    assert parse_name("plain.json") == ("plain", None)
    assert parse_name("plain.json.gz") == ("plain", None)
    for bad in (
        "x.pt.trace.json.tmp",
        ".hidden.pt.trace.json",
        "x.tmp.pt.trace.json",
        "x.pt.trace.json~",
        "events.out.tfevents.1",
        "x.txt",
    ):
        assert parse_name(bad) is None, bad


def test_runs_workers_spans_in_time_order(tmp_path):
    _put(tmp_path / "a" / "w1.1623143566756.pt.trace.json")  # ms
    _put(tmp_path / "a" / "w1.1623143089861000000.pt.trace.json")  # ns, earlier
    _put(tmp_path / "a" / "w2.pt.trace.json.gz")
    _put(tmp_path / "b" / "deep" / "w.5.pt.trace.json")
    _put(tmp_path / "root.pt.trace.json")
    _put(tmp_path / ".hidden" / "w.pt.trace.json")
    _put(tmp_path / "c" / "config.json", {"lr": 0.1})  # plain json that is no trace
    _put(tmp_path / "c" / "bare.json", [{"ph": "X", "ts": 1}])
    runs = Scanner(str(tmp_path)).scan()
    assert list(runs) == ["a", "b/deep", "c", tmp_path.name]
    a = runs["a"]
    assert sorted(a.workers) == ["w1", "w2"]
    assert a.spans("w1") == ["1", "2"]
    assert a.file("w1", "1").relpath == "a/w1.1623143089861000000.pt.trace.json"
    assert a.file("w1", "2").relpath == "a/w1.1623143566756.pt.trace.json"
    assert a.file("w1", "3") is None and a.file("w1", "x") is None and a.file("nope", "1") is None
    assert list(runs["c"].workers) == ["bare"]


def test_a_run_folder_opened_as_the_logdir_is_named_after_it(tmp_path):
    """`--logdir runs/job` lists the run "job", as `--logdir runs` does, not "." (the names in the CLI and the tab
    are the same whichever folder is opened)."""
    _put(tmp_path / "runs" / "job" / "w0.1.pt.trace.json")
    assert list(Scanner(str(tmp_path / "runs" / "job")).scan()) == ["job"]
    assert list(Scanner(str(tmp_path / "runs" / "job") + "/").scan()) == ["job"]
    assert list(Scanner(str(tmp_path / "runs")).scan()) == ["job"]
    run = Scanner(str(tmp_path / "runs" / "job")).scan()["job"]
    assert run.name == "job" and run.file("w0", "1").run == "job"
    # a sub-folder whose run has that name already: the logdir's own traces keep "."
    _put(tmp_path / "runs" / "job" / "job" / "w1.1.pt.trace.json")
    assert list(Scanner(str(tmp_path / "runs" / "job")).scan()) == [".", "job"]


def test_files_being_written_wait_for_a_stable_scan(tmp_path):
    s = Scanner(str(tmp_path), stable_age_s=60)
    p = _put(tmp_path / "r" / "w.pt.trace.json", age=None)  # just written
    assert s.scan() == {} and s.unstable == 1
    with open(p, "a") as f:  # still growing
        f.write(" ")
    assert s.scan() == {} and s.unstable == 1
    runs = s.scan()  # unchanged since the last scan: stable
    assert list(runs) == ["r"] and s.unstable == 0


def test_rescan_sees_new_and_removed_files(tmp_path):
    s = Scanner(str(tmp_path))
    p = _put(tmp_path / "r1" / "w.1.pt.trace.json")
    assert list(s.scan()) == ["r1"]
    _put(tmp_path / "r1" / "w.2.pt.trace.json")
    _put(tmp_path / "r2" / "x.pt.trace.json")
    runs = s.scan()
    assert list(runs) == ["r1", "r2"] and runs["r1"].spans("w") == ["1", "2"]
    p.unlink()
    runs = s.scan()
    assert runs["r1"].spans("w") == ["1"]
    assert runs["r1"].file("w", "1").relpath == "r1/w.2.pt.trace.json"


def test_has_traces_and_missing_logdir(tmp_path):
    assert not Scanner(str(tmp_path)).has_traces()
    assert Scanner(str(tmp_path / "missing")).scan() == {}
    assert Scanner("").scan() == {}
    _put(tmp_path / "x" / "w.pt.trace.json")
    assert Scanner(str(tmp_path)).has_traces()


def test_looks_like_trace(tmp_path):
    assert looks_like_trace(str(_put(tmp_path / "t.json", {"traceEvents": []})))
    assert not looks_like_trace(str(_put(tmp_path / "c.json", {"a": 1})))
    # an execution trace is listed (the reader then says why it is not a Kineto trace); other JSON is not
    et = {"schema": "1.0.1", "pid": 1, "time": "2023-07-14 11:53:07", "nodes": [{"name": "aten::add"}]}
    assert looks_like_trace(str(_put(tmp_path / "et.json", et)))
    assert not looks_like_trace(str(_put(tmp_path / "n.json", {"nodes": [1, 2]})))


def test_symlinked_run_folders_are_followed_and_cycles_walked_once(tmp_path):
    logdir, data = tmp_path / "logdir", tmp_path / "data"
    _put(data / "job1" / "w.1.pt.trace.json")
    _put(logdir / "local" / "w.1.pt.trace.json")
    (logdir / "job1").symlink_to(data / "job1", target_is_directory=True)
    (data / "job1" / "loop").symlink_to(data, target_is_directory=True)  # a cycle through the link
    (logdir / "local" / "self").symlink_to(logdir, target_is_directory=True)  # a cycle to the root
    runs = Scanner(str(logdir)).scan()
    assert list(runs) == ["job1", "local"]
    assert runs["job1"].file("w", "1").relpath == "job1/w.1.pt.trace.json"
