"""Logdirs in S3: a real S3 endpoint on 127.0.0.1 (moto's server mode) read and written with s3fs.

Writers put whole objects, the reader (serial, parallel byte ranges, event look-ups) reads them,
the parse cache keys them by ETag, the scanner and the plugin list runs, workers and spans and
notice new objects, and every failure (bucket missing, no credentials, connection refused) is a
short message in which the secret key never appears. One test runs a real
`tensorboard --logdir s3://...` process."""

import gzip
import json
import logging
import os
import socket
import subprocess
import sys
import time
import urllib.request
from importlib.metadata import entry_points

import pandas as pd
import pytest

from profiler_core import profile, record_function, storage, tensorboard_trace_handler
from profiler_core.trace.read import cache, stream
from profiler_core.trace.read.lookup import trace_event
from profiler_core.trace.read.reader import TraceReadError, read_trace
from profiler_core.trace.write import writer

from . import s3_server
from .cache_support import read_trace_cached
from .conftest import missing
from .s3_server import SECRET

P = "/data/plugin/gpuscope"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this checkout, for tensorboard


@pytest.fixture(scope="module")
def server():
    srv = s3_server.start()
    yield srv
    srv.stop()


_buckets = iter(range(10**6))


@pytest.fixture
def bucket(server, monkeypatch, tmp_path, caplog):
    """A new bucket on the server, this process pointed at it; logs checked for the secret after."""
    s3_server.use(server, monkeypatch)
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    name = f"bkt{next(_buckets)}"
    server.make_bucket(name)
    caplog.set_level(logging.INFO)
    yield name
    assert SECRET not in caplog.text


def _doc(n: int) -> dict:
    ev = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 10 * n + 10,
            "args": {"External id": 1},
        }
    ]
    ev += [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"op{i % 7}",
            "pid": 1,
            "tid": 1 + i % 2,
            "ts": 1 + 10 * i,
            "dur": 5,
            "args": {"External id": i + 2, "Input Dims": [[i % 5, 3]], "Input type": ["float"], "pad": "x" * (i % 50)},
        }
        for i in range(n)
    ]
    return {"schemaVersion": 1, "baseTimeNanoseconds": 10**18, "traceEvents": ev}


def _put(url: str, doc, gz: bool = False) -> str:
    data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    fs, path = storage.filesystem(url)
    fs.pipe_file(path, gzip.compress(data) if gz else data)
    return url


# ----------------------------------------------------------------------------- writing
def test_trace_handler_and_export_write_whole_objects_that_read_back(bucket, tmp_path):
    logdir = f"s3://{bucket}/logs/run1"
    with profile(on_trace_ready=tensorboard_trace_handler(logdir, worker_name="w0", use_gzip=True)) as prof:
        for _ in range(2):
            with record_function("forward"):
                sum(range(1000))
    url = f"s3://{bucket}/exported.pt.trace.json"
    assert prof.export_chrome_trace(url) == url
    files = list(storage.walk_files(logdir))
    assert len(files) == 1 and files[0].path.endswith(".pt.trace.json.gz")
    assert storage.split(files[0].path)[1].startswith("w0.")
    local = tmp_path / "exported.pt.trace.json"
    prof.export_chrome_trace(str(local))
    a = read_trace(url)
    b = read_trace(local)
    assert set(a.events["name"]) == set(b.events["name"]) >= {"forward"}
    assert len(read_trace(files[0].path).events) == len(a.events)


def test_a_failed_write_leaves_no_object(bucket):
    url = f"s3://{bucket}/logs/w0.1.pt.trace.json"
    with pytest.raises(RuntimeError):
        with writer.atomic_file(url, "trace") as (f, _):
            f.write(b'{"traceEvents": [')
            raise RuntimeError("the encoder failed half-way")
    assert list(storage.walk_files(f"s3://{bucket}")) == []


def test_writing_into_a_missing_bucket_is_a_clear_error(bucket):
    with pytest.raises(writer.TraceWriteError) as e:
        writer.write_trace(_doc(2), "s3://no-such-bucket-gpuscope/x.pt.trace.json")
    assert e.value.strerror == "cannot write trace s3://no-such-bucket-gpuscope/x.pt.trace.json: bucket does not exist"
    with pytest.warns(RuntimeWarning, match="bucket does not exist; profiling continues"):
        with profile(on_trace_ready=tensorboard_trace_handler("s3://no-such-bucket-gpuscope/logs")):
            pass


# ----------------------------------------------------------------------------- reading
@pytest.mark.parametrize("gz", [True, False])
def test_parallel_byte_range_reader_reads_objects_like_the_serial_reader(bucket, monkeypatch, gz):
    doc = _doc(12000)  # ~1.8 MB of JSON: several 256 KB pieces per range
    url = _put(f"s3://{bucket}/big.pt.trace.json" + (".gz" if gz else ""), doc, gz)
    monkeypatch.setattr(stream, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.delenv("GPUSCOPE_PARSE_PROCESSES", raising=False)
    monkeypatch.setenv("GPUSCOPE_NATIVE_READER", "0")  # the Python reader's parser processes (native reads first)
    used = []
    real = stream.parallel_parse

    def spy(*args):
        t = real(*args)
        used.append(t is not None)
        return t

    monkeypatch.setattr(stream, "parallel_parse", spy)
    par = read_trace(url, processes=2)  # two span worker processes read the object themselves
    assert used == [True]
    seq = read_trace(url, processes=0)
    pd.testing.assert_frame_equal(par.events, seq.events, check_categorical=False)
    assert len(par.events) == 12001 and par.metadata == seq.metadata
    for i in (0, 1, 6000, 12000):  # look-ups: one range request (plain) or a partial inflate (gzip)
        assert trace_event(par, i) == doc["traceEvents"][i]


def test_a_missing_object_and_a_corrupt_one_are_read_errors(bucket):
    with pytest.raises(TraceReadError, match=r"^s3://.*/nothing.pt.trace.json: file not found$"):
        read_trace(f"s3://{bucket}/nothing.pt.trace.json")
    data = gzip.compress(json.dumps(_doc(50)).encode())
    url = _put(f"s3://{bucket}/bad.pt.trace.json.gz", data[: len(data) // 2])
    with pytest.raises(TraceReadError, match=r"^s3://.*/bad.pt.trace.json.gz: truncated gzip file"):
        read_trace(url)


def test_parse_cache_is_keyed_by_the_etag(bucket):
    url = _put(f"s3://{bucket}/logs/w0.1.pt.trace.json", _doc(50))
    t = read_trace_cached(url)
    entry = cache.entry_path(url)
    assert entry.exists() and cache.load(url) is not None
    info = storage.stat(url)
    assert info.version and t.source_stat == info.fingerprint
    doc = _doc(50)
    doc["traceEvents"][3]["name"] = "opX"  # same size, other bytes: a new ETag
    _put(url, doc)
    assert storage.stat(url).size == info.size and storage.stat(url).version != info.version
    assert cache.entry_path(url) != entry and cache.load(url) is None
    assert "opX" in set(read_trace_cached(url).events["name"])


# ----------------------------------------------------------------------------- listing and the plugin
def _fill(bucket: str) -> str:
    root = f"s3://{bucket}/logs"
    doc = _doc(6)
    _put(f"{root}/run1/w0.1000.pt.trace.json.gz", doc, gz=True)
    _put(f"{root}/run1/w0.2000.pt.trace.json", doc)
    _put(f"{root}/run1/w1.1500.pt.trace.json", doc)
    _put(f"{root}/run2/nested/host_1.pt.trace.json", doc)
    _put(f"{root}/.summaries/host_1.pt.trace.json", doc)  # hidden folder: skipped
    _put(f"{root}/bad/corrupt.pt.trace.json", b'{"traceEvents": [{"ph": "X", "ts": 1')
    return root


def test_scanner_lists_runs_workers_spans_and_new_objects_at_once(bucket):
    from tb_plugin.runs import Scanner

    sc = Scanner(_fill(bucket) + "/")
    runs = sc.scan()
    assert list(runs) == ["bad", "run1", "run2/nested"] and sc.error is None and sc.unstable == 0
    assert sorted(runs["run1"].workers) == ["w0", "w1"] and runs["run1"].spans("w0") == ["1", "2"]
    old_key = runs["run1"].file("w1", "1").key
    _put(f"s3://{bucket}/logs/run1/w2.1.pt.trace.json", _doc(2))  # an object is whole once listed
    _put(f"s3://{bucket}/logs/run1/w1.1500.pt.trace.json", _doc(7))
    runs = sc.scan()
    assert sorted(runs["run1"].workers) == ["w0", "w1", "w2"]
    assert runs["run1"].file("w1", "1").key != old_key


def _client(logdir: str):
    from tensorboard.backend import application
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    from tb_plugin.plugin import GpuscopePlugin

    p = GpuscopePlugin(base_plugin.TBContext(logdir=logdir))
    return Client(application.TensorBoardWSGI([p])), p


def _get(client, path: str, code: int = 200):
    r = client.get(P + path)
    body = r.get_data()
    assert SECRET.encode() not in body
    assert r.status_code == code, body
    return json.loads(body)


def test_plugin_serves_an_s3_logdir(bucket):
    client, plugin = _client(_fill(bucket))
    try:
        assert plugin.is_active()
        runs = _get(client, "/runs")
        assert runs["runs"] == ["bad", "run1", "run2/nested"]
        deadline = time.monotonic() + 60
        while runs["loading"] and time.monotonic() < deadline:
            time.sleep(0.1)  # background loads: wait until every file is read or failed
            runs = _get(client, "/runs")
        assert [(e["file"], "truncated" in e["error"] or "invalid" in e["error"]) for e in runs["errors"]] == [
            ("bad/corrupt.pt.trace.json", True)
        ]
        assert _get(client, "/workers?run=run1") == {"workers": ["w0", "w1"]}
        assert _get(client, "/spans?run=run1&worker=w0") == {"spans": ["1", "2"]}
        ov = _get(client, "/overview?run=run1&worker=w0&span=1")
        assert ov and "error" not in ov
        ev = _get(client, "/event?run=run1&worker=w0&span=1&idx=3")
        assert ev["event"]["name"] == "op2"
        r = client.get(P + "/trace?run=run1&worker=w1&span=1")
        assert r.status_code == 200 and json.loads(gzip.decompress(r.get_data()))["traceEvents"][0]["ts"] == 0
        _put(f"s3://{bucket}/logs/run3/w9.1.pt.trace.json", _doc(2))
        deadline = time.monotonic() + 30
        while "run3" not in _get(client, "/runs")["runs"]:
            assert time.monotonic() < deadline, "the new object was not noticed"
            time.sleep(0.2)
    finally:
        plugin.state().loader.close()


# ----------------------------------------------------------------------------- errors
def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _logdir_error(logdir: str) -> str:
    client, plugin = _client(logdir)
    try:
        assert plugin.is_active()  # the tab shows, with the reason
        runs = _get(client, "/runs")
        assert runs["runs"] == [] and len(runs["errors"]) == 1
        e = runs["errors"][0]
        assert e["file"] == storage.redact(logdir.rstrip("/"))
        return e["error"]
    finally:
        plugin.state().loader.close()


def test_missing_bucket_is_a_clear_message(bucket):
    assert _logdir_error("s3://no-such-bucket-gpuscope/logs/") == "bucket does not exist"


def test_no_credentials_is_a_clear_message(bucket, monkeypatch, tmp_path):
    import s3fs

    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    s3fs.S3FileSystem.clear_instance_cache()
    assert _logdir_error(f"s3://{bucket}/logs") == (
        "no credentials found for s3:// (set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, "
        "AWS_PROFILE or an instance role)"
    )


def test_refused_connection_is_a_clear_message(bucket, monkeypatch):
    import s3fs

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # botocore's own setting: no retries
    s3fs.S3FileSystem.clear_instance_cache()
    message = _logdir_error(f"s3://{bucket}/logs")
    assert message.startswith("cannot connect to the storage service (Could not connect to the endpoint URL")
    assert "Traceback" not in message


def test_credentials_in_the_logdir_url_are_never_served(bucket):
    logdir = f"s3://AKIAINURL:{SECRET}@{bucket}/logs"
    assert storage.redact(logdir) == f"s3://***@{bucket}/logs"  # what the answer names (checked there)
    assert _logdir_error(logdir) == (
        "credentials in a s3:// URL are not used (set AWS_ACCESS_KEY_ID / "
        "AWS_SECRET_ACCESS_KEY, AWS_PROFILE or an instance role)"
    )


# ----------------------------------------------------------------------------- a real tensorboard
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fetch(url: str):
    with urllib.request.urlopen(url, timeout=30) as r:
        body = r.read()
    assert SECRET.encode() not in body
    return json.loads(body)


def test_tensorboard_process_reads_an_s3_logdir(bucket, server, tmp_path):
    if not any(e.name == "gpuscope" for e in entry_points(group="tensorboard_plugins")):
        missing("gpuscope is not installed (pip install -e .)")
    root = _fill(bucket)
    port = _free_port()
    env = dict(
        os.environ,
        **server.env,
        GPUSCOPE_CACHE_DIR=str(tmp_path / "cache"),
        PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p),
    )
    log = open(tmp_path / "tensorboard.log", "wb")  # noqa: SIM115 - open for the server process's lifetime
    proc = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", root, "--host", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    base = f"http://127.0.0.1:{port}/data/plugin/gpuscope"
    try:
        deadline = time.time() + 120
        runs = None
        while time.time() < deadline:
            assert proc.poll() is None, (tmp_path / "tensorboard.log").read_text()[-3000:]
            try:
                runs = _fetch(f"{base}/runs")
                if runs["runs"] and not runs["loading"]:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        assert runs is not None and runs["runs"] == ["bad", "run1", "run2/nested"], runs
        assert _fetch(f"{base}/workers?run=run1") == {"workers": ["w0", "w1"]}
        assert _fetch(f"{base}/spans?run=run1&worker=w0") == {"spans": ["1", "2"]}
        ov = _fetch(f"{base}/overview?run=run1&worker=w0&span=2")
        assert isinstance(ov, dict) and "error" not in ov
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
    assert SECRET not in (tmp_path / "tensorboard.log").read_text(errors="replace")
