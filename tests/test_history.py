"""A job's history across runs (tb_plugin/run_level/history.py): on 20 generated nightly runs of one 2-rank job whose
rank 1 runs one kernel 1.5 ms longer per step from run 13 on, `gpuscope history`, the `/history` route and
`gpuscope.open(...).history()` name run 13 as the first regression and its cause, the kernel on rank 1, by the job
diff against run 12; without the plant no run is named; runs are ordered by time, not by name, unless asked."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import msgspec
import pytest

import gpuscope
from tb_plugin.routes import ROUTES
from tb_plugin.run_level import history, report
from tb_plugin.summaries import cli
from tb_plugin.workspace import Workspace

from . import api_support

PLANTED_FROM = 13
RUNS = 20


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("history_planted")
    return root, api_support.series(root, runs=RUNS, regressed_from=PLANTED_FROM)


@pytest.fixture(scope="module")
def steady(tmp_path_factory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("history_steady")
    return root, api_support.series(root, runs=RUNS, regressed_from=None)


@pytest.mark.slow
def test_the_planted_run_and_its_cause_are_named(planted):
    root, names = planted
    with gpuscope.open(root) as prof:
        h = prof.history()
    frame = h.to_frame()
    assert list(frame["run"]) == names  # by time: the names run the other way
    assert h.regression == names[PLANTED_FROM]
    reg = h.data["regression"]
    assert reg["previous"] == names[PLANTED_FROM - 1]
    assert not frame["regressed"][:PLANTED_FROM].any()
    top = h.explained.to_frame().iloc[0]
    assert top["bucket"] == "compute" and top["name"] == api_support.SLOW_KERNEL
    assert top["ranks"] == [api_support.PLANT_RANK]
    assert top["delta_ms"] == pytest.approx(api_support.PLANT_MS, rel=0.2)
    assert reg["step_ms"] > reg["threshold_ms"] >= reg["baseline_ms"]
    for r in h.data["runs"]:
        assert len(r["per_rank"]) == 2 and r["verdict"]
        assert sum(r["buckets"].values()) == pytest.approx(r["mean_ms"], rel=0.05)


@pytest.mark.slow
def test_route_cli_and_api_give_one_answer(planted, capsys):
    root, names = planted
    with gpuscope.open(root) as prof:
        api_answer = prof.history().data
    ws = Workspace(str(root))
    for n in names:
        ws.collect({"run": n, "span": "1"})
    route = next(r for r in ROUTES if r.path == "/history")
    served = route.handler(ws, route.parse({}))
    ws.loader.close()
    ws.summaries.close()
    assert json.loads(json.dumps(served)) == json.loads(json.dumps(api_answer))
    assert cli.main(["history", str(root), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["runs"] == json.loads(json.dumps(api_answer["runs"]))
    assert printed["regression"] == json.loads(json.dumps(api_answer["regression"]))
    assert cli.main(["history", str(root)]) == 0
    text = capsys.readouterr().out
    assert f"first regression: {names[PLANTED_FROM]}:" in text and api_support.SLOW_KERNEL in text


@pytest.mark.slow
def test_no_run_is_named_without_a_cause(steady):
    root, names = steady
    with gpuscope.open(root) as prof:
        h = prof.history()
    assert h.regression is None and h.explained is None
    assert list(h.to_frame()["run"]) == names
    assert h.to_frame()["baseline_ms"].notna().sum() == RUNS - history.MIN_BASELINE


def test_order_by_name_and_a_glob(planted):
    root, names = planted
    with gpuscope.open(root) as prof:
        by_name = prof.history(order="name")
        some = prof.history(match="*-1?")
    assert list(by_name.to_frame()["run"]) == sorted(names)
    # by name the planted runs come first: they are the baseline, and the later (faster) runs no regression
    assert by_name.regression is None
    assert list(some.to_frame()["run"]) == [n for n in names if n[-2] == "1"]


def test_too_few_runs_say_so(planted, tmp_path):
    root, names = planted
    for n in names[:3]:
        (tmp_path / n).symlink_to(root / n)
    with gpuscope.open(tmp_path) as prof:
        h = prof.history()
    assert h.regression is None and any("needed" in n for n in h.data["notes"])


def test_unknown_glob_is_an_error(planted):
    root, _ = planted
    with gpuscope.open(root) as prof, pytest.raises(gpuscope.AnalysisError, match="no run matching"):
        prof.history(match="weekly-*")
    assert cli.main(["history", str(root), "--match", "weekly-*"]) == 2


def test_mfu_per_run_is_the_mean_of_its_ranks(planted):
    """A run's MFU is the mean over its ranks of their summaries' roofline MFU (as the job diff's), None where no rank
    has one (the generated traces record no shapes: no model FLOPs); each rank keeps its own, so the History view and
    `to_frame()` show MFU where it is known."""
    root, names = planted
    ws = Workspace(str(root))
    try:
        summaries = ws.collect({"run": names[0], "span": "1"}).summaries
    finally:
        ws.loader.close()
        ws.summaries.close()
    assert history.run_stats(summaries)["mfu"] is None
    workers = sorted(summaries)
    with_mfu = {
        w: msgspec.structs.replace(s, roofline=msgspec.structs.replace(s.roofline, mfu=m))
        for (w, s), m in zip(sorted(summaries.items()), (0.3, 0.5))
    }
    stats = history.run_stats(with_mfu)
    assert stats["mfu"] == pytest.approx(0.4)
    assert [r["mfu"] for r in sorted(stats["per_rank"], key=lambda r: r["worker"])] == [0.3, 0.5]
    one = {**with_mfu, workers[0]: summaries[workers[0]]}
    assert history.run_stats(one)["mfu"] == pytest.approx(0.5)
    with gpuscope.open(root) as prof:
        frame = prof.history().to_frame()
    assert "mfu" in frame.columns and frame["mfu"].isna().all()


@pytest.mark.slow
def test_each_runs_verdict_is_its_diagnosis_verdict_and_is_kept_per_run(planted, tmp_path, monkeypatch):
    """The history computes per run only what it shows (`report.run_verdict`, not the whole diagnosis): the verdict
    is still the diagnosis' sentence. The route keeps each run's row by its summaries' identity, so another order
    (another history) computes no run again (rows on disk from the tests before removed: the route's own here)."""
    root, names = planted
    shutil.rmtree(root / ".gpuscope" / "rows", ignore_errors=True)
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    ws = Workspace(str(root))
    try:
        got = {n: ws.collect({"run": n, "span": "1"}).summaries for n in names}
        for n in (names[0], names[PLANTED_FROM]):
            summaries = got[n]
            assert history.run_row(summaries)["verdict"] == report.diagnose(summaries)["verdict"]["text"]
        route = next(r for r in ROUTES if r.path == "/history")
        start = ws.summaries.answers.computed
        by_time = route.handler(ws, route.parse({}))
        before = ws.summaries.answers.computed
        assert before == start + len(names) + 1  # each run's row, then the history
        by_name = route.handler(ws, route.parse({"order": "name"}))
        assert ws.summaries.answers.computed == before + 1  # the history in the other order, no run's row
        assert sorted(r["verdict"] for r in by_name["runs"]) == sorted(r["verdict"] for r in by_time["runs"])
    finally:
        ws.loader.close()
        ws.summaries.close()
