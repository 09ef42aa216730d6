"""Clock offsets from the collectives' common end times (issue 24 item 3) on a hand-made 6-rank job with planted
clock errors, through the real summaries (`summary.summarize`); expected values derived by hand below.

True time (µs): rank r starts its step at s_r and its clock reads true time + c_r (planted), so its trace's ts
are true + c_r and its origin (first event) is s_r + c_r:
  s = 0, 3000, 1500, 200, 900, 0;  c = 0, +1234.567, -250.25, +5000, +7000.5, -42
  group "a" (ranks 0, 1): 3 all_reduces ending at true 20, 40, 60 ms on both members;
  group "b" (ranks 1, 2): 3 broadcasts ending at true 30, 50, 70 ms, except that rank 2's second one ends 50 µs
      late (completion noise: the median of three differences drops it);
  group "c" (ranks 3, 4): 2 all_reduces ending at true 25, 45 ms (linked to each other, not to rank 0);
  rank 5: no collective.
A worker's timeline time is its ts minus its origin: true - s_r. Onto rank 0's timeline (true - s_0) it moves by
shift_r = s_r - s_0: 3000 for rank 1, 1500 for rank 2 (chained through rank 1); its clock offset against rank 0 is
(origin_r - origin_0) - shift_r = c_r - c_0: 1234.567, -250.25.
"""

from __future__ import annotations

import pytest

from tb_plugin.run_level import clock_offsets
from tb_plugin.summaries import summary

from .summaries_support import ready
from .test_views_common_support import make_trace, op

MS = 1000  # µs
S = [0, 3000, 1500, 200, 900, 0]
C = [0, 1234.567, -250.25, 5000, 7000.5, -42]
GROUPS = {"a": [0, 1], "b": [1, 2], "c": [3, 4]}
ENDS = {"a": [20, 40, 60], "b": [30, 50, 70], "c": [25, 45]}  # true end times, ms


def rank_trace(rank: int):
    clock = C[rank]
    ev = [op("ProfilerStep#1", S[rank] + clock, 100 * MS - S[rank], cat="user_annotation")]
    for g, members in GROUPS.items():
        if rank not in members:
            continue
        for k, end in enumerate(ENDS[g]):
            end_us = end * MS + (50 if (g, k, rank) == ("b", 1, 2) else 0)
            start_us = end_us - 2 * MS - 100 * rank  # members arrive at different times
            args = {"Collective name": "allreduce" if g != "b" else "broadcast", "Process Group Name": g}
            args["Group size"] = len(members)
            ev.append(op("record_param_comms", start_us + clock, end_us - start_us, **args))
    info = {"backend": "nccl", "rank": rank, "world_size": 6}
    info["pg_config"] = [{"pg_name": g, "ranks": r} for g, r in GROUPS.items() if rank in r]
    return make_trace(ev, metadata={"distributedInfo": info, "baseTimeNanoseconds": 0})


@pytest.fixture(scope="module")
def result():
    return clock_offsets.clock_offsets({f"r{r}": summary.summarize(rank_trace(r)) for r in range(6)})


def test_planted_offsets_are_recovered_within_a_microsecond_chained_through_groups(result):
    assert result["reason"] is None and result["reference"] == "r0"
    rows = {row["worker"]: row for row in result["workers"]}
    assert [row["rank"] for row in result["workers"]] == [0, 1, 2, 3, 4, 5]
    assert rows["r0"]["shift_us"] == 0 and rows["r0"]["offset_us"] == 0 and rows["r0"]["reason"] is None
    for r in (1, 2):
        row = rows[f"r{r}"]
        assert row["reason"] is None
        assert abs(row["shift_us"] - (S[r] - S[0])) < 1
        assert abs(row["offset_us"] - (C[r] - C[0])) < 1
        assert abs(row["raw_shift_us"] - (S[r] + C[r] - S[0] - C[0])) < 1
        assert row["collectives"] == 3
    assert rows["r1"]["via"] == "r0" and rows["r2"]["via"] == "r1"
    assert rows["r1"]["spread_us"] == 0 and rows["r2"]["spread_us"] == 0  # the 50 µs outlier is one of three


def test_ranks_without_a_common_collective_get_none_with_a_reason(result):
    rows = {row["worker"]: row for row in result["workers"]}
    for w in ("r3", "r4"):
        assert rows[w]["shift_us"] is None and rows[w]["offset_us"] is None
        assert "shares no matched collective" in rows[w]["reason"] and "rank 0" in rows[w]["reason"]
    assert rows["r5"]["shift_us"] is None and "none of its collectives" in rows["r5"]["reason"]


def test_a_job_without_matched_collectives_says_why():
    res = clock_offsets.clock_offsets({"r5": summary.summarize(rank_trace(5))})
    assert res["reference"] is None and res["reason"]
    assert res["workers"][0]["shift_us"] is None and res["workers"][0]["reason"] == res["reason"]
    assert clock_offsets.clock_offsets({})["reason"] == "the run has no worker summaries"


def test_route_recovers_the_generators_planted_clock_skews(tmp_path, monkeypatch):
    """gen_distributed's `clock_skew` moves every timestamp of ranks 3 and 5 by a known amount; the collectives end
    together on every rank in the generator, so the route's offsets are the skews and the aligned shifts are 0."""
    import argparse
    import sys
    from pathlib import Path

    from tensorboard.backend import application
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    import tb_plugin.plugin as plugin_mod

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from gen_distributed import generate

    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    skew = {3: 1234.567, 5: -777.125}
    generate(str(tmp_path / "logs" / "job"), 6, events=1500, steps=2, clock_skew=skew)
    flags = argparse.Namespace(gpuscope_dask_scheduler=None)
    p = plugin_mod.GpuscopePlugin(base_plugin.TBContext(logdir=str(tmp_path / "logs"), flags=flags))
    c = Client(application.TensorBoardWSGI([p]))
    got = ready(c, "/data/plugin/gpuscope/clock_offsets?run=job&span=1")  # the summaries are computed meanwhile
    assert got.status_code == 200, got.json
    assert got.json["reference"] == "node0_rank00000" and got.json["reason"] is None
    for row in got.json["workers"]:
        want = skew.get(row["rank"], 0.0)
        assert abs(row["offset_us"] - want) < 1 and abs(row["raw_shift_us"] - want) < 1 and abs(row["shift_us"]) < 1
    assert c.get("/data/plugin/gpuscope/clock_offsets?run=nope&span=1").status_code == 404
    assert c.get("/data/plugin/gpuscope/clock_offsets?run=job").status_code == 400


def test_each_worker_lists_its_steps_on_its_own_timeline(result):
    """The merged timeline marks where each rank's steps end (issue 39): every worker's row lists its steps on its
    own timeline (µs from its first event); moved by its shift they land on the reference's clock, where the
    planted step ends at 100 ms on every rank."""
    for row in result["workers"]:
        r = int(row["worker"][1:])
        assert row["steps"] == [{"step": "1", "start_us": 0.0, "end_us": 100 * MS - S[r]}], row
        if row["shift_us"] is not None:
            assert row["steps"][0]["end_us"] + row["shift_us"] == pytest.approx(100 * MS, abs=1)


def test_a_trace_without_steps_lists_none():
    """A trace without ProfilerStep: its one step is the trace window, not a step to mark."""
    args = {"Collective name": "allreduce", "Process Group Name": "0", "Group size": 1}
    ev = [op("record_param_comms", 10, 5, **args)]
    info = {"backend": "nccl", "rank": 0, "world_size": 1, "pg_config": [{"pg_name": "0", "ranks": [0]}]}
    t = make_trace(ev, metadata={"distributedInfo": info, "baseTimeNanoseconds": 0})
    got = clock_offsets.clock_offsets({"r0": summary.summarize(t)})
    assert [row["steps"] for row in got["workers"]] == [[]], got
