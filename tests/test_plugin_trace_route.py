"""/trace serves only files that parsed as traces, as they were parsed; headers on every route."""

import gzip
import os
import threading
from pathlib import Path
from urllib.parse import quote

import pytest

from .test_plugin import OLD, P, _client, _events, _put, _wait_loaded, logdir  # noqa: F401

SECRET = b"root:x:0:0:root:/root:/bin/bash\n"
DOC = {"schemaVersion": 1, "baseTimeNanoseconds": 10**18, "traceEvents": _events(6)}


def _secret(tmp_path: Path) -> Path:
    p = tmp_path / "outside" / "passwd"
    p.parent.mkdir()
    p.write_bytes(SECRET)
    os.utime(p, (OLD, OLD))
    return p


def _call(c, query: str, timeout: float = 30):
    """GET in a thread: a route that blocks (a FIFO opened for reading) fails the test, not hangs it."""
    out: list = []
    th = threading.Thread(target=lambda: out.append(c.get(f"{P}/{query}")), daemon=True)
    th.start()
    th.join(timeout)
    assert out, f"{query} gave no answer in {timeout} s"
    return out[0]


def test_a_symlink_to_a_file_that_is_no_trace_is_never_served(logdir, tmp_path):
    (logdir / "links").mkdir()
    (logdir / "links" / "x.pt.trace.json").symlink_to(_secret(tmp_path))
    c, _ = _client(logdir)
    d = _wait_loaded(c)
    assert any(e["file"] == "links/x.pt.trace.json" for e in d["errors"])
    r = _call(c, "trace?run=links&worker=x&span=1")
    assert r.status_code == 422 and r.json["error"]
    assert b"root:x" not in r.get_data()


@pytest.mark.parametrize("name", ["trunc", "schema", "corrupt"])
def test_a_file_that_failed_to_parse_is_not_served_raw(logdir, name):
    c, _ = _client(logdir)
    _wait_loaded(c)
    r = _call(c, f"trace?run=bad&worker={name}&span=1")
    assert r.status_code == 422 and r.headers["Content-Type"].startswith("application/json")
    assert "error" in r.json


def test_a_trace_swapped_for_something_else_after_loading_is_not_served(logdir, tmp_path):
    path = logdir / "run1" / "w1.1500.pt.trace.json"
    c, _ = _client(logdir)
    assert _call(c, "overview?run=run1&worker=w1&span=1").status_code == 200
    path.unlink()
    path.symlink_to(_secret(tmp_path))  # same name, same size and mtime do not matter
    r = _call(c, "trace?run=run1&worker=w1&span=1")
    assert 400 <= r.status_code < 500 and b"root:x" not in r.get_data()
    path.unlink()
    os.mkfifo(path)  # a FIFO: opening it for reading must not wait for a writer
    r = _call(c, "trace?run=run1&worker=w1&span=1")
    assert 400 <= r.status_code < 500


def test_devices_fifos_and_link_loops_are_not_listed_or_opened(logdir):
    odd = logdir / "odd"
    odd.mkdir()
    (odd / "zero.pt.trace.json").symlink_to("/dev/zero")
    os.mkfifo(odd / "fifo.pt.trace.json")
    (odd / "a.pt.trace.json").symlink_to(odd / "b.pt.trace.json")
    (odd / "b.pt.trace.json").symlink_to(odd / "a.pt.trace.json")
    (odd / "loop").symlink_to(logdir)  # a directory loop
    _put(odd / "ok.pt.trace.json", DOC)
    c, _ = _client(logdir)
    d = _wait_loaded(c)
    assert "odd" in d["runs"]
    assert _call(c, "workers?run=odd").json == {"workers": ["ok"]}
    assert not [e for e in d["errors"] if e["run"] == "odd"]
    for worker in ("zero", "fifo", "a"):
        assert _call(c, f"trace?run=odd&worker={worker}&span=1").status_code == 404


def test_a_non_latin1_worker_name_is_served_with_an_rfc5987_file_name(logdir):
    worker = '工作者 "é\\'
    name = worker + ".pt.trace.json"
    _put(logdir / "uni" / name, DOC)
    c, _ = _client(logdir)
    (listed,) = _call(c, "workers?run=uni").json["workers"]
    assert listed == worker.replace("\\", "\\\\")  # a backslash is listed escaped: names never collide
    r = _call(c, f"trace?run=uni&worker={quote(listed)}&span=1")
    assert r.status_code == 200
    assert gzip.decompress(r.get_data()) == (logdir / "uni" / name).read_bytes()
    cd = r.headers["Content-Disposition"]
    assert cd.startswith('inline; filename="') and cd.isascii()
    assert f"filename*=UTF-8''{quote(name, safe='')}" in cd


@pytest.mark.parametrize(
    "query",
    [
        "runs",
        "workers?run=run1",
        "overview?run=run1&worker=w0&span=1",
        "overview?run=nope&worker=w0&span=1",
        "trace?run=run1&worker=w0&span=1",
        "trace?run=run1&worker=w0&span=%C2%B2",
        "index.js",
        "missing.js",
    ],
)
def test_every_response_carries_a_content_security_policy(logdir, query):
    c, _ = _client(logdir)
    r = _call(c, query)
    csp = r.headers.get("Content-Security-Policy", "")
    assert "default-src 'none'" in csp, (query, r.status_code, csp)
