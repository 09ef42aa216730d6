"""Issue 23, item 5: a file holding several ranks fused together (pids rank * 1e8 + pid, args.rank, the
ranks' ProfilerStep# ranges overlapping) is refused with a clear message, never read as one worker whose
steps chain across ranks. The fused file is built here from two real ranks (hta_trace_filter), the way
trace-merging tools write it."""

from __future__ import annotations

import gzip
import json
import time

import pytest

from profiler_core.trace.read.decode import TraceReadError
from profiler_core.trace.read.reader import read_trace

from .conftest import SHARED, missing

RANKS = [SHARED / "traces" / "public" / "hta_trace_filter" / f"sampled_rank-{r}.json.gz" for r in (0, 1)]


def _fuse(out, ranks=RANKS):
    docs = []
    for p in ranks:
        if not p.is_file():
            missing(f"{p} is absent")
        with gzip.open(p, "rt") as f:
            docs.append(json.load(f))
    events = []
    for rank, d in enumerate(docs):
        for e in d["traceEvents"]:
            e = dict(e)
            if isinstance(e.get("pid"), int):
                e["pid"] = rank * 100_000_000 + e["pid"]
            e["args"] = {**(e.get("args") or {}), "rank": rank}
            events.append(e)
    fused = {k: v for k, v in docs[0].items() if k != "traceEvents"}
    fused["traceEvents"] = events
    out.write_text(json.dumps(fused))
    return docs


def _cpu_steps(d):
    return [
        (e["pid"], e["ts"], e["ts"] + e["dur"])
        for e in d["traceEvents"]
        if e.get("ph") == "X"
        and e.get("cat") in ("cpu_op", "user_annotation")
        and str(e.get("name", "")).startswith("ProfilerStep#")
    ]


def test_fused_ranks_are_refused_with_the_reason(tmp_path):
    path = tmp_path / "fused.pt.trace.json"
    docs = _fuse(path)
    s0, s1 = _cpu_steps(docs[0]), _cpu_steps(docs[1])
    # the real ranks' steps overlap in time: chained as one worker they made nonsense steps
    assert any(a0 < b1 and a1 < b0 for _, a0, b0 in s0 for _, a1, b1 in s1)
    with pytest.raises(TraceReadError) as err:
        read_trace(path, processes=0)
    msg = str(err.value)
    assert "2 processes fused into one file" in msg and "ranks 0, 1" in msg
    pids = sorted({p for p, _, _ in s0} | {100_000_000 + p for p, _, _ in s1})
    assert all(str(p) in msg for p in pids)


def test_each_rank_alone_is_read(tmp_path):
    for p in RANKS:
        if not p.is_file():
            missing(f"{p} is absent")
        assert len(read_trace(p, processes=0).events)


def test_fused_file_is_listed_unreadable_and_answers_422(tmp_path, monkeypatch):
    from tensorboard.backend import application
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    from tb_plugin.plugin import GpuscopePlugin

    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    run = tmp_path / "logs" / "job"
    run.mkdir(parents=True)
    _fuse(run / "merged.pt.trace.json")
    import os

    os.utime(run / "merged.pt.trace.json", (time.time() - 3600, time.time() - 3600))
    c = Client(application.TensorBoardWSGI([GpuscopePlugin(base_plugin.TBContext(logdir=str(tmp_path / "logs")))]))
    P = "/data/plugin/gpuscope"
    end = time.time() + 120
    while c.get(f"{P}/runs").json["loading"] and time.time() < end:
        time.sleep(0.1)
    errs = c.get(f"{P}/runs").json["errors"]
    assert [e["file"] for e in errs] == ["job/merged.pt.trace.json"]
    assert "fused into one file" in errs[0]["error"]
    r = c.get(f"{P}/overview?run=job&worker=merged&span=1")
    assert r.status_code == 422 and "fused into one file" in r.json["error"]
