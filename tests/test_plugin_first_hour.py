"""Issue 23 items 12, 14 and 15 at the HTTP level: the downloaded trace's name matches its bytes,
a diff without a comparison target compares with another profile, a missing logdir is named."""

import gzip
import time

import pytest

from .test_plugin import P, _client, _events, _put, _wait_loaded, make_logdir

DOC = {"schemaVersion": 1, "baseTimeNanoseconds": 10**18, "traceEvents": _events(6)}


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def logdir(tmp_path):
    """test_plugin's logdir: run1 (w0 with a .json.gz and a .json span, w1), run2, bad (three broken files, good)."""
    return make_logdir(tmp_path / "logs")


def test_a_gzipped_trace_downloads_under_a_json_name(logdir):
    c, _ = _client(logdir)
    _wait_loaded(c)
    r = c.get(f"{P}/trace?run=run1&worker=w0&span=1")  # w0.1000.pt.trace.json.gz
    assert r.status_code == 200 and r.headers["Content-Encoding"] == "gzip"
    cd = r.headers["Content-Disposition"]
    # the browser undoes Content-Encoding: what it saves is JSON, so the name ends in .json
    assert 'filename="w0.1000.pt.trace.json"' in cd and ".gz" not in cd, cd
    assert gzip.decompress(r.get_data()).lstrip().startswith(b"{")


def test_diff_without_a_target_compares_with_another_profile(logdir):
    c, _ = _client(logdir)
    _wait_loaded(c)
    r = c.get(f"{P}/diff?run=run1&worker=w1&span=1")
    assert r.status_code == 200, r.get_data(as_text=True)
    assert r.json["compared_with"]["run"] == "bad" and r.json["compared_with"]["worker"] == "good"
    r = c.get(f"{P}/diff?run=bad&worker=good&span=1")
    assert r.json["compared_with"] == {"run": "run1", "worker": "w0", "span": "2"}


def test_diff_with_a_single_profile_says_so(tmp_path):
    _put(tmp_path / "only" / "w.pt.trace.json", DOC)
    c, _ = _client(tmp_path)
    _wait_loaded(c)
    r = c.get(f"{P}/diff?run=only&worker=w&span=1")
    assert r.status_code == 400 and "only one profile" in r.json["error"]


def test_runs_with_rescan_lists_a_run_written_just_now(logdir):
    """Item 11: a reload (TensorBoard's or the tab's) asks `runs?rescan=1`, which lists the logdir now."""
    c, _ = _client(logdir)
    _wait_loaded(c)
    _put(logdir / "fresh" / "w.pt.trace.json", DOC)
    assert "fresh" in c.get(f"{P}/runs?rescan=1").json["runs"]


def test_tensorboard_reload_is_enabled_on_the_tab(logdir):
    c, _ = _client(logdir)
    assert c.get("/data/plugins_listing").json["gpuscope"]["disable_reload"] is False


def test_an_empty_answer_names_the_logdir(tmp_path):
    """Item 15: a mistyped --logdir shows which directory was searched, and that it does not exist."""
    missing = tmp_path / "no_such_dir"
    c, _ = _client(missing)
    d = c.get(f"{P}/runs").json
    assert d["runs"] == [] and d["logdir"] == str(missing) and d["logdir_missing"] is True
    empty = tmp_path / "empty"
    empty.mkdir()
    d = _client(empty)[0].get(f"{P}/runs").json
    assert d["logdir"] == str(empty) and "logdir_missing" not in d


def test_distributed_partial_answers_without_waiting_and_completes(tmp_path):
    """Item 10: `distributed?partial=1` answers from what exists (naming the workers still read in
    `pending`) and, asked again, completes; a broken worker is an error, not pending forever."""
    for w in ("w0", "w1"):
        _put(tmp_path / "job" / f"{w}.pt.trace.json", DOC)
    _put(tmp_path / "job" / "w2.pt.trace.json", b'{"traceEvents": [{"ph": "X", "na')
    c, _ = _client(tmp_path)
    first = c.get(f"{P}/distributed?run=job&span=1&partial=1")
    assert first.status_code == 200
    assert set(first.json.get("pending", [])) | set(first.json["workers"]) | {
        e["worker"] for e in first.json.get("errors", [])
    } == {"w0", "w1", "w2"}
    end = time.time() + 60
    d = first.json
    while d.get("pending") and time.time() < end:
        time.sleep(0.1)
        d = c.get(f"{P}/distributed?run=job&span=1&partial=1").json
    assert "pending" not in d and set(d["workers"]) == {"w0", "w1"}
    assert [e["worker"] for e in d["errors"]] == ["w2"]
