"""Issue 40 item 6: run names are an escaping that cannot collide (a folder of the byte 0xff and a folder named
`run\\xff` are two runs, each with its own data), and the `gpuscope` command escapes control characters in all
its text output (a folder named `ctl\\x1b[31m` sends no escape sequence to the terminal)."""

from __future__ import annotations

import os
from pathlib import Path

from .summaries_support import gpuscope
from .test_plugin import OLD, P, _client, _events, _put, _wait_loaded


def _doc(n: int) -> dict:
    return {"schemaVersion": 1, "baseTimeNanoseconds": 10**18, "traceEvents": _events(n)}


def test_an_undecodable_name_and_its_escape_written_out_are_two_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    logs = tmp_path / "logs"
    raw = Path(os.fsdecode(os.path.join(os.fsencode(logs), b"run\xff")))
    literal = logs / "run\\xff"  # the text: r, u, n, backslash, x, f, f
    _put(raw / "bytes.pt.trace.json", _doc(6))
    _put(literal / "text.pt.trace.json", _doc(9))
    c, _ = _client(logs)
    d = _wait_loaded(c)
    assert d["errors"] == []
    assert sorted(d["runs"]) == ["run\\\\xff", "run\\xff"]  # as text: run\\xff (the folder named so), run\xff
    by_run = {r: c.get(f"{P}/workers", query_string={"run": r}).json for r in d["runs"]}
    assert by_run == {"run\\xff": {"workers": ["bytes"]}, "run\\\\xff": {"workers": ["text"]}}
    events = {}
    for run, worker in (("run\\xff", "bytes"), ("run\\\\xff", "text")):
        r = c.get(f"{P}/overview", query_string={"run": run, "worker": worker, "span": "1"})
        assert r.status_code == 200, r.json
        r = c.get(f"{P}/operators", query_string={"run": run, "worker": worker, "span": "1"})
        assert r.status_code == 200, r.json
        events[run] = r.json
    assert events["run\\xff"] != events["run\\\\xff"]  # each serves its own file


def test_the_command_escapes_control_characters_in_names(tmp_path):
    logs = tmp_path / "logs"
    bad = "ctl\x1b[31m"
    _put(logs / bad / "w.pt.trace.json", _doc(6))
    _put(logs / bad / "broken\x07.pt.trace.json", b'{"traceEvents": [{"ph": "X", "ts": 1')
    _put(logs / "other" / "w.pt.trace.json", _doc(6))
    for p in logs.rglob("*.json"):
        os.utime(p, (OLD, OLD))
    runs = [
        gpuscope("summarize", str(logs)),  # the broken file's failure, by name
        gpuscope("diagnose", str(logs)),  # "has 2 runs (...): name one"
        gpuscope("diagnose", str(logs), bad),  # "run ctl..., span 1" and the diagnosis
        gpuscope("jobdiff", f"{logs}:{bad}", f"{logs}:other"),
    ]
    for r in runs:
        out = r.stdout + r.stderr
        assert "\x1b" not in out and "\x07" not in out, (r.args, out)
    assert "broken\\x07.pt.trace.json" in runs[0].stderr
    assert "ctl\\x1b[31m" in runs[1].stderr
    assert runs[2].returncode == 0 and runs[2].stdout.startswith("run ctl\\x1b[31m, span 1"), runs[2].stderr
    assert "ctl\\x1b[31m" in runs[3].stdout, runs[3].stderr
