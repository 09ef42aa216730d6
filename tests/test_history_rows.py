"""Issue 41 item 4: `gpuscope history` over runs it has seen reads one small row per run from disk
(`tb_plugin/summaries/rows.py`) instead of every worker's summary: on 8 generated runs of a 2-rank job whose rank 1
slows down from run 6, a second call reads the summaries of only the two runs the regression compares, answers as
the first did, and a run whose trace was rewritten (or whose row file was damaged) is computed again."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tb_plugin.summaries import cli, rows, store

from . import api_support

RUNS, FROM = 8, 6


@pytest.fixture
def series(tmp_path) -> tuple[Path, list[str]]:
    return tmp_path, api_support.series(tmp_path, runs=RUNS, regressed_from=FROM)


def _history(root: Path, capsys) -> dict:
    assert cli.main(["history", str(root), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_second_call_reads_rows_not_summaries(series, capsys, monkeypatch):
    root, names = series
    first = _history(root, capsys)
    assert first["regression"]["run"] == names[FROM]
    kept = sorted((root / ".gpuscope" / "rows" / "history").rglob("*.json"))
    assert len(kept) == RUNS
    reads: list[str] = []
    real = store.read
    monkeypatch.setattr(store, "read", lambda where, *a, **k: (reads.append(where), real(where, *a, **k))[1])
    second = _history(root, capsys)
    assert second == first
    read_runs = {Path(p).parent.name for p in reads}
    assert read_runs == {names[FROM - 1], names[FROM]}, read_runs  # the regression's job diff, nothing else

    # a rewritten trace: its run's row no longer matches and is computed again; a damaged row too
    trace = sorted((root / names[2]).glob("*.pt.trace.json*"))[0]
    os.utime(trace, ns=(trace.stat().st_atime_ns, trace.stat().st_mtime_ns + 1_000_000_000))
    (root / ".gpuscope" / "rows" / "history" / names[4] / "1.json").write_text("{not json")
    reads.clear()
    third = _history(root, capsys)
    assert {Path(p).parent.name for p in reads} == {names[2], names[4], names[FROM - 1], names[FROM]}
    assert third["runs"] == first["runs"] and third["regression"] == first["regression"]


def test_a_row_is_kept_for_its_files_only(series, capsys):
    root, names = series
    _history(root, capsys)
    path = rows.path(str(root), "history", names[0], "1")
    data = json.loads(Path(path).read_text())
    assert rows.read(path, data["key"]) == data["row"]
    assert rows.read(path, "another key") is None
    assert rows.read(str(root / "missing.json"), data["key"]) is None
    assert rows.fingerprint(str(root), []) is None


def test_the_route_and_api_read_the_kept_rows_too(series, capsys, monkeypatch):
    """`gpuscope.open(LOGDIR).history()` (the /history route's handler) answers as the CLI from the rows the CLI
    kept, reading the summaries of only the two runs the regression compares; without the CLI's rows it keeps its
    own beside the parse cache (never in the logdir), and a fresh process reads those."""
    import shutil

    import gpuscope

    root, names = series
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(root.parent / "cache"))
    cli_answer = _history(root, capsys)
    reads: list[str] = []
    real = store.read
    monkeypatch.setattr(store, "read", lambda where, *a, **k: (reads.append(where), real(where, *a, **k))[1])
    with gpuscope.open(root) as prof:
        api = json.loads(json.dumps(prof.history().data))
    assert api["runs"] == cli_answer["runs"] and api["regression"] == cli_answer["regression"]
    assert {Path(p).parent.name for p in reads} == {names[FROM - 1], names[FROM]}
    shutil.rmtree(root / ".gpuscope" / "rows")
    with gpuscope.open(root) as prof:
        assert json.loads(json.dumps(prof.history().data))["runs"] == api["runs"]
    assert not (root / ".gpuscope" / "rows").exists()  # the plugin's rows are its own
    reads.clear()
    with gpuscope.open(root) as prof:
        assert json.loads(json.dumps(prof.history().data)) == api
    assert {Path(p).parent.name for p in reads} == {names[FROM - 1], names[FROM]}
