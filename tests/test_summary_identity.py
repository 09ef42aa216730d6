"""Per-worker summaries follow the parse cache's identity rule: a trace rewritten in place with the
same size and mtime gets a new summary, in the running plugin and after a restart."""

import json
import os
import time
from pathlib import Path

import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

import tb_plugin.loader  # noqa: F401 - bound to the real reader before any test patches it
from tb_plugin.plugin import GpuscopePlugin
from tb_plugin.summaries import fs, store
from tb_plugin.summaries import summary as S

P = "/data/plugin/gpuscope"
OLD = time.time() - 3600


def _trace(kernel_us: int) -> bytes:
    ev = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 1000,
            "args": {},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "pid": 0,
            "tid": 7,
            "ts": 10,
            "dur": kernel_us,
            "args": {"device": 0, "stream": 7, "correlation": 1},
        },
    ]
    return json.dumps({"schemaVersion": 1, "baseTimeNanoseconds": 10**18, "traceEvents": ev}).encode()


def _rewrite_same_size_and_mtime(path: Path, data: bytes) -> None:
    st = path.stat()
    assert len(data) == st.st_size
    with open(path, "r+b") as f:  # in place: same inode
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)


def _client(logdir: Path):
    p = GpuscopePlugin(base_plugin.TBContext(logdir=str(logdir)))
    return Client(application.TensorBoardWSGI([p])), p


def _computation(c) -> dict:
    r = c.get(f"{P}/distributed?run=job&span=1")
    assert r.status_code == 200, r.get_data()[:300]
    return {w: v["computation_us"] for w, v in r.json["workers"].items()}


@pytest.fixture
def logdir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    for w in ("w0", "w1"):
        f = tmp_path / "logs" / "job" / f"{w}.1000.pt.trace.json"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(_trace(100))
        os.utime(f, (OLD, OLD))
    return tmp_path / "logs"


def test_a_same_size_same_mtime_rewrite_gets_a_new_summary(logdir):
    c, p = _client(logdir)
    assert _computation(c) == {"w0": 100.0, "w1": 100.0}
    _rewrite_same_size_and_mtime(logdir / "job" / "w1.1000.pt.trace.json", _trace(900))
    p.state().refresh(force=True)
    assert _computation(c)["w1"] == 900.0  # in the running plugin
    c2, _ = _client(logdir)
    assert _computation(c2)["w1"] == 900.0  # after a restart (summaries in the cache dir)


def test_a_summary_records_and_checks_the_files_inode_and_ctime(logdir):
    path = logdir / "job" / "w0.1000.pt.trace.json"
    src = fs.stat(str(path))
    s = S.summarize_path(str(path))
    assert s.source is not None and s.source.ident == list(src.ident) and len(src.ident) == 4
    where = str(logdir / "w0.summary.json.gz")
    store.write(where, s)
    assert store.read(where, src) == s
    _rewrite_same_size_and_mtime(path, _trace(900))
    assert store.read(where, fs.stat(str(path))) is None
