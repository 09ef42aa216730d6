"""profiler_core.storage without a network: names, redaction, error messages, and fsspec's in-memory
filesystem (`memory://`, a non-object store: temporary name then rename) end to end."""

import gzip
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from profiler_core import storage
from profiler_core.trace.read import cache
from profiler_core.trace.read.lookup import trace_event
from profiler_core.trace.read.reader import parse_trace, read_trace
from profiler_core.trace.write import writer

from .cache_support import read_trace_cached
from .conftest import require_module

fsspec = require_module("fsspec", "fsspec is not installed (pip install -e .)")


@pytest.fixture
def mem():
    """A fresh memory:// root (fsspec's memory filesystem is shared by the whole process)."""
    root = f"memory://gpuscope-test-{os.getpid()}-{time.time_ns()}"
    yield root
    fs, path = storage.filesystem(root)
    if fs.exists(path):
        fs.rm(path, recursive=True)


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
            "name": f"op{i % 3}",
            "pid": 1,
            "tid": 1,
            "ts": 1 + 10 * i,
            "dur": 5,
            "args": {"External id": i + 2, "Input Dims": [[i]]},
        }
        for i in range(n)
    ]
    return {"schemaVersion": 1, "baseTimeNanoseconds": 10**18, "traceEvents": ev}


def test_names():
    assert storage.is_remote("s3://b/x") and storage.is_remote("gs://b") and storage.is_remote("memory://x")
    assert not storage.is_remote("/tmp/x") and not storage.is_remote("C:\\x") and not storage.is_remote("x")
    assert storage.protocol("abfs://c/x") == "abfs" and storage.protocol("/tmp") == ""
    assert storage.is_object_store("s3://b") and not storage.is_object_store("hdfs://n/x")
    assert storage.join("s3://b/logs/", "run1", "w.json") == "s3://b/logs/run1/w.json"
    assert storage.join("/tmp", "a") == os.path.join("/tmp", "a")
    assert storage.split("s3://b/logs/run1/w.json") == ("s3://b/logs/run1", "w.json")
    assert storage.relpath("s3://b/logs/run1/w.json", "s3://b/logs") == "run1/w.json"
    assert storage.relpath("s3://b/logs", "s3://b/logs") == "."
    assert storage.normalize_root("s3://b/logs/") == "s3://b/logs"


@pytest.mark.parametrize(
    "text,secret",
    [
        ("s3://AKIAXX:hunter2secret@bucket/logs", "hunter2secret"),
        ("https://acct.blob.core.windows.net/c/x?sv=2020&sig=abcdEFGH1234", "abcdEFGH1234"),
        ("failed: secret_access_key=abcd1234zz, retry", "abcd1234zz"),
        ("password: 'p4ssw0rd!'", "p4ssw0rd!"),
        ("GET /x?X-Amz-Security-Token=tok3nVALUE&y=1 refused", "tok3nVALUE"),
        ("header x-amz-security-token: tok3nVALUE", "tok3nVALUE"),
        ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG+bPxRfiCY==", "wJalrXUtnFEMI"),
        ("at 9s3://AKIAXX:hunter2secret@bucket/logs", "hunter2secret"),
        ("s3://bucket/a?X-Amz-Signature=f00dcafe#frag", "f00dcafe"),
    ],
)
def test_redact_removes_credentials(text, secret):
    out = storage.redact(text)
    assert secret not in out and "***" in out


def test_redact_keeps_text_without_credentials():
    for text in (
        "run1/w0.1.pt.trace.json: not found",
        "s3://bucket/logs/run1 is empty",
        "size = 3",
        "limit must be an integer, got 'abc'",
    ):
        assert storage.redact(text) == text


#: inputs on which a backtracking pattern scans the rest of the text from every position
ADVERSARIAL = ("a", "a://", "key-", "a://b", "token=", 'token="', "s3://b?", "x=", "-", "9a-")


def test_redact_is_linear_on_adversarial_megabyte_inputs():
    # 60 KB of "a://" took 11.7 s to redact (quadratic): 1 MB would take hours. Run in a child so
    # that a regression fails on the timeout instead of hanging the suite.
    code = (
        "import sys; from profiler_core.storage import redact\n"
        f"for unit in {ADVERSARIAL!r}:\n"
        "    text = unit * (1_000_000 // len(unit))\n"
        "    assert len(redact(text)) <= len(text)\n"
        "print('ok')"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_redact_removes_secret_environment_values_and_url_credentials_quoted_elsewhere(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "envSECRETvalue42")
    assert storage.redact("signing with envSECRETvalue42 failed") == "signing with *** failed"
    storage.normalize_root("s3://KEYID:urlSECRET99@bkt/logs")  # the logdir as given
    out = storage.redact('Invalid bucket name "KEYID:urlSECRET99@bkt"')
    assert "urlSECRET99" not in out


def test_missing_protocol_package_is_a_clear_error():
    try:
        import gcsfs  # noqa: F401

        pytest.skip("gcsfs is installed")
    except ImportError:
        pass
    with pytest.raises(storage.StorageError) as e:
        list(storage.walk_files("gs://bucket/logs"))
    assert str(e.value) == "gs://bucket/logs: reading gs:// URLs needs gcsfs (pip install 'gpuscope[gcs]')"
    with pytest.raises(storage.StorageError, match="no fsspec implementation .* nosuchproto://"):
        storage.stat("nosuchproto://x/y")


def test_describe_error_names_the_cause():
    class NoCredentialsError(Exception):
        pass

    class EndpointConnectionError(Exception):
        pass

    assert storage.describe_error(NoCredentialsError("Unable to locate credentials"), "s3://b").startswith(
        "no credentials found for s3:// (set AWS_ACCESS_KEY_ID"
    )
    assert (
        storage.describe_error(FileNotFoundError("The specified bucket does not exist"), "s3://b")
        == "bucket does not exist"
    )
    assert (
        storage.describe_error(
            EndpointConnectionError('Could not connect to "http://h/b?X-Amz-Signature=zz12"'), "s3://b"
        )
        == 'cannot connect to the storage service (Could not connect to "http://h/b?***")'
    )
    assert storage.describe_error(PermissionError("Access Denied"), "s3://b").startswith("access denied")


def test_local_paths_keep_os_semantics(tmp_path):
    p = tmp_path / "a.json"
    p.write_bytes(b"0123456789")
    st = os.stat(p)
    info = storage.stat(str(p))
    assert (info.size, info.mtime_ns, info.version) == (10, st.st_mtime_ns, "")
    assert (
        storage.fingerprint(str(p))
        == info.fingerprint
        == (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev, st.st_ctime_ns)
    )  # identity.file_identity
    assert storage.read_range(str(p), 2, 5) == b"234"
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "b.json").write_text("{}")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.json").write_text("{}")
    assert [storage.relpath(f.path, str(tmp_path)) for f in storage.walk_files(str(tmp_path))] == [
        "a.json",
        "sub/c.json",
    ]
    with pytest.raises(IsADirectoryError):
        storage.stat(str(tmp_path))


def test_memory_filesystem_write_is_published_by_rename_and_failure_leaves_nothing(mem):
    url = storage.join(mem, "logs", "run1", "w0.1.pt.trace.json")
    with storage.atomic_writer(url) as f:
        f.write(b'{"traceEvents": []}')
    assert storage.read_range(url, 0, 100) == b'{"traceEvents": []}'
    fs, root = storage.filesystem(mem)
    assert [p.rsplit("/", 1)[1] for p in fs.find(root)] == ["w0.1.pt.trace.json"]  # no temporary left
    bad = storage.join(mem, "logs", "run1", "w1.1.pt.trace.json")
    with pytest.raises(RuntimeError):
        with storage.atomic_writer(bad) as f:
            f.write(b'{"traceEv')
            raise RuntimeError("encoder failed half-way")
    assert len(fs.find(root)) == 1


@pytest.mark.parametrize("gz", [True, False])
def test_read_trace_and_events_from_a_url_equal_the_local_read(mem, tmp_path, gz):
    doc = _doc(500)
    url = storage.join(mem, "t.pt.trace.json" + (".gz" if gz else ""))
    written = writer.write_trace(doc, url)
    assert written == url
    local = tmp_path / storage.split(url)[1]
    local.write_bytes(storage.read_range(url, 0, storage.stat(url).size))
    a, b = read_trace(url), read_trace(local)
    pd.testing.assert_frame_equal(a.events, b.events, check_categorical=False)
    assert a.metadata == b.metadata and a.path == url
    assert a.source_stat == storage.stat(url).fingerprint
    for i in (0, 7, 250, 500):
        assert trace_event(a, i) == trace_event(b, i)
    text = gzip.decompress(local.read_bytes()) if gz else local.read_bytes()
    pd.testing.assert_frame_equal(a.events, parse_trace(text).events, check_categorical=False)


def test_a_rewritten_remote_file_is_a_cache_miss(mem, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    url = storage.join(mem, "t.pt.trace.json")
    writer.write_trace(_doc(20), url)
    t = read_trace_cached(url)
    assert cache.load(url) is not None and len(t.events) == 21
    cache.trim()
    assert cache.load(url) is not None  # trimming does not take a URL for a vanished file
    doc = _doc(20)
    doc["traceEvents"][1]["name"] = "op9"  # same size, other content: another version
    writer.write_trace(doc, url)
    assert cache.load(url) is None
    assert set(read_trace_cached(url).events["name"]) >= {"op9"}


def test_scanner_over_a_url_lists_runs_and_notices_new_files(mem):
    from tb_plugin.runs import Scanner

    for rel in (
        "run1/w0.1000.pt.trace.json",
        "run1/w0.2000.pt.trace.json",
        "run1/w1.1500.pt.trace.json",
        "run2/nested/host_1.pt.trace.json",
        ".hidden/x.pt.trace.json",
        "run1/w0.3000.pt.trace.json.tmp",
    ):
        writer.write_trace(_doc(3), storage.join(mem, rel))
    sc = Scanner(mem + "/", stable_age_s=0)
    runs = sc.scan()
    assert list(runs) == ["run1", "run2/nested"] and sc.error is None
    assert sorted(runs["run1"].workers) == ["w0", "w1"] and runs["run1"].spans("w0") == ["1", "2"]
    f = runs["run1"].file("w0", "2")
    assert f.path == storage.join(mem, "run1/w0.2000.pt.trace.json") and f.relpath == "run1/w0.2000.pt.trace.json"
    writer.write_trace(_doc(3), storage.join(mem, "run1", "w2.1.pt.trace.json"))
    assert sorted(sc.scan()["run1"].workers) == ["w0", "w1", "w2"]


def test_write_beside_replaces_only_a_regular_file(tmp_path):
    from tb_plugin.summaries import store

    new = tmp_path / "new.bin"
    with storage.write_beside(str(new)) as f:
        f.write(b"one")
    assert new.read_bytes() == b"one"
    secret = tmp_path / "secret"
    secret.write_bytes(b"keep")
    link = tmp_path / "planted.summary.json.gz"
    link.symlink_to(secret)
    os.mkfifo(tmp_path / "fifo")
    for bad in (link, tmp_path / "fifo", tmp_path):
        with pytest.raises(storage.NotAFile):
            with storage.write_beside(str(bad)) as f:
                f.write(b"x")
    # the summaries and the parse cache write through it: a planted link is not followed
    assert store.write(str(link), {"kind": "x"}) is False
    assert secret.read_bytes() == b"keep" and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "new.bin", "planted.summary.json.gz", "secret"]
    with pytest.raises(RuntimeError):  # a failed write leaves the old content and no temporary
        with storage.write_beside(str(new)) as f:
            f.write(b"two")
            raise RuntimeError
    assert new.read_bytes() == b"one" and len(list(tmp_path.iterdir())) == 4
