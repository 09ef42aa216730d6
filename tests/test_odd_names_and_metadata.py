"""Issue 26, items 11-13: odd names, deep nesting and wrong-typed metadata, JSON arrays that are no trace."""

import os
from pathlib import Path

from profiler_core.trace.read.reader import read_trace

from .test_plugin import OLD, P, _client, _events, _put, _wait_loaded

DOC = {"schemaVersion": 1, "baseTimeNanoseconds": 10**18, "traceEvents": _events(6)}


def _logs(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "logs"


def test_names_that_are_not_utf8_are_listed_escaped_and_open(tmp_path, monkeypatch):
    logs = _logs(tmp_path, monkeypatch)
    _put(logs / "ok" / "w.pt.trace.json", DOC)
    bad_run = os.path.join(os.fsencode(logs), b"run\xff")
    os.makedirs(bad_run)
    _put(Path(os.fsdecode(bad_run)) / "w.pt.trace.json", DOC)
    _put(Path(os.fsdecode(os.path.join(os.fsencode(logs), b"ok", b"x\xfe.pt.trace.json"))), DOC)
    c, _ = _client(logs)
    r = c.get(f"{P}/runs")
    assert r.status_code == 200
    d = _wait_loaded(c)
    assert d["runs"] == ["ok", "run\\xff"] and d["errors"] == []
    r = c.get(f"{P}/workers", query_string={"run": "ok"})
    assert r.status_code == 200 and r.json == {"workers": ["w", "x\\xfe"]}
    r = c.get(f"{P}/overview", query_string={"run": "ok", "worker": "x\\xfe", "span": "1"})
    assert r.status_code == 200 and r.json["steps"]
    r = c.get(f"{P}/workers", query_string={"run": "run\\xff"})
    assert r.status_code == 200 and r.json == {"workers": ["w"]}


def test_an_error_message_with_an_undecodable_name_is_json(tmp_path, monkeypatch):
    logs = _logs(tmp_path, monkeypatch)
    _put(
        Path(os.fsdecode(os.path.join(os.fsencode(logs), b"r", b"w\xff.pt.trace.json"))), b'{"traceEvents": [{"ph": "X"'
    )
    c, _ = _client(logs)
    d = _wait_loaded(c)
    assert [e["file"] for e in d["errors"]] == ["r/w\\xff.pt.trace.json"]


def _nested(depth: int) -> dict:
    ev = [
        {"ph": "X", "cat": "user_annotation", "name": f"M{i}", "ts": i, "dur": 10_000 - 2 * i, "pid": 1, "tid": 1}
        for i in range(depth)
    ]
    return {"schemaVersion": 1, "traceEvents": ev}


def test_modules_of_a_trace_nested_600_deep(tmp_path, monkeypatch):
    logs = _logs(tmp_path, monkeypatch)
    _put(logs / "deep" / "w.pt.trace.json", _nested(600))
    c, _ = _client(logs)
    r = c.get(f"{P}/modules?run=deep&worker=w&span=1")
    assert r.status_code == 200, r.json
    depth, node = 0, r.json["tree"][0]
    while node["children"]:
        depth, node = depth + 1, node["children"][0]
    assert depth == 99 and "500 modules nested deeper than 100" in r.json["note"]


def test_wrong_typed_device_properties_are_ignored_with_a_warning(tmp_path, monkeypatch):
    logs = _logs(tmp_path, monkeypatch)
    kernel = {
        "ph": "X",
        "cat": "kernel",
        "name": "k",
        "ts": 100,
        "dur": 50,
        "pid": 0,
        "tid": 7,
        "args": {"device": 0, "stream": 7},
    }
    doc = dict(
        DOC,
        traceEvents=DOC["traceEvents"] + [kernel],
        deviceProperties=[
            {
                "id": 0,
                "name": "GPU",
                "computeMajor": "8",
                "computeMinor": 0,
                "totalGlobalMem": "lots",
                "numSms": [1],
                "maxThreadsPerBlock": 10**30,
            },
            "not an object",
        ],
    )
    path = _put(logs / "props" / "w.pt.trace.json", doc)
    t = read_trace(path)
    assert t.device_properties == [{"id": 0, "name": "GPU", "computeMinor": 0}]
    assert "5 deviceProperties values of the wrong type ignored" in t.warnings
    c, _ = _client(logs)
    r = c.get(f"{P}/overview?run=props&worker=w&span=1")
    assert r.status_code == 200, r.json
    assert r.json["gpu"]["devices"][0]["compute_capability"] is None


def _link(logs: Path, tmp_path: Path, name: str, content: bytes) -> None:
    target = tmp_path / f"{name}.json"
    target.write_bytes(content)
    os.utime(target, (OLD, OLD))
    (logs / "links").mkdir(parents=True, exist_ok=True)
    (logs / "links" / f"{name}.pt.trace.json").symlink_to(target)


def test_json_arrays_without_trace_events_are_never_served(tmp_path, monkeypatch):
    logs = _logs(tmp_path, monkeypatch)
    _link(logs, tmp_path, "secret", b'["SECRET-TOKEN-123", "hunter2"]')
    _link(logs, tmp_path, "empty", b"[]")
    _link(logs, tmp_path, "trace", b'[{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]')
    c, _ = _client(logs)
    d = _wait_loaded(c)
    assert sorted(e["file"] for e in d["errors"]) == ["links/empty.pt.trace.json", "links/secret.pt.trace.json"]
    for name in ("secret", "empty"):
        r = c.get(f"{P}/trace?run=links&worker={name}&span=1")
        assert r.status_code == 422 and "no trace events" in r.json["error"]
        assert b"SECRET" not in r.get_data()
    assert c.get(f"{P}/trace?run=links&worker=trace&span=1").status_code == 200


def _skipping_doc() -> dict:
    ev = DOC["traceEvents"] + [{"ph": "Q", "name": "odd", "ts": 5, "pid": 1, "tid": 1}] * 2
    return dict(DOC, traceEvents=ev + [{"ph": "X", "name": "no_ts", "dur": 5, "pid": 1, "tid": 1}])


def test_runs_says_how_many_events_of_each_file_were_skipped(tmp_path, monkeypatch):
    logs = _logs(tmp_path, monkeypatch)
    _put(logs / "r" / "odd.pt.trace.json", _skipping_doc())
    _put(logs / "r" / "fine.pt.trace.json", DOC)
    c, _ = _client(logs)
    d = _wait_loaded(c)
    assert [(w["run"], w["file"]) for w in d["warnings"]] == [("r", "r/odd.pt.trace.json")]
    msg = d["warnings"][0]["message"]
    assert msg.startswith("3 events skipped (") and "unsupported phase 'Q'" in msg, msg


def test_skipped_events_reach_the_loader_from_worker_processes(tmp_path, monkeypatch):
    from tb_plugin.loader import Loader
    from tb_plugin.runs import Scanner

    logs = _logs(tmp_path, monkeypatch)
    _put(logs / "r" / "odd.pt.trace.json", _skipping_doc())
    files = [f for r in Scanner(str(logs)).scan().values() for f in r.files()]
    loader = Loader(processes=1)
    try:
        loader.prepare(files)
        loader.get(files[0])
        [(f, msg)] = loader.warnings()
        assert f.relpath == "r/odd.pt.trace.json" and msg.startswith("3 events skipped (")
    finally:
        loader.close()


def test_a_trace_with_an_undecodable_name_is_cached(tmp_path, monkeypatch):
    from profiler_core.trace.read import cache

    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    path = _put(Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), b"w\xff.pt.trace.json"))), DOC)
    t = read_trace(path)
    assert cache.store(str(path), t) is not None
    got = cache.load(str(path))
    assert got is not None and got.path == str(path) and len(got.events) == len(t.events)
    cache.trim()
    assert cache.load(str(path)) is not None


def test_skip_message():
    from tb_plugin.loader import skip_message

    assert skip_message([]) is None
    assert skip_message(
        [
            "2 events of unsupported phase 'Q' skipped",
            "1 entries of traceEvents that are not event objects",
            "3 negative durations clamped to 0",
        ]
    ) == (
        "3 events skipped (events of unsupported phase 'Q': 2; entries of traceEvents that are not event "
        "objects: 1); 3 negative durations clamped to 0"
    )
