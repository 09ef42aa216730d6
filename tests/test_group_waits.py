"""Wait vs transfer per process group (issue 22 item 5) on a hand-made 4-rank job: a world all_reduce, a
2-rank subgroup [0, 1] where rank 0 waits, a 2-rank subgroup [2, 3] broadcast, and a `wait` call. Expected values
derived by hand; matching only when every worker runs a collective would leave both subgroups unmatched."""

from __future__ import annotations

import pandas as pd

from profiler_core.analysis.comm import group_waits

from .test_views_common_support import make_trace, op

GROUPS = {"0": [0, 1, 2, 3], "1": [0, 1], "2": [2, 3]}


def comm(coll, pg, ts, dur, size):
    return op(
        "record_param_comms",
        ts,
        dur,
        **{
            "Collective name": coll,
            "Process Group Name": pg,
            "Group size": size,
            "dtype": "Float",
            "In msg nelems": 1024,
        },
    )


def worker(rank, calls, pg_config=True):
    info = {"backend": "nccl", "rank": rank, "world_size": 4}
    if pg_config:
        info["pg_config"] = [{"pg_name": g, "ranks": r} for g, r in GROUPS.items() if rank in r]
    return make_trace(
        [op("ProfilerStep#1", 0, 1000, cat="user_annotation"), *calls], metadata={"distributedInfo": info}
    )


def job(pg_config=True):
    """(µs) world all_reduce: 30, 20, 25, 40; group 1: rank 0 (50, 15), rank 1 (10, 35); group 2 broadcast:
    rank 2 12, rank 3 8; rank 3 also waits 7 µs on the world group."""
    return {
        "r0": worker(
            0,
            [comm("allreduce", "0", 10, 30, 4), comm("allreduce", "1", 100, 50, 2), comm("allreduce", "1", 200, 15, 2)],
            pg_config,
        ),
        "r1": worker(
            1,
            [comm("allreduce", "0", 10, 20, 4), comm("allreduce", "1", 100, 10, 2), comm("allreduce", "1", 200, 35, 2)],
            pg_config,
        ),
        "r2": worker(2, [comm("allreduce", "0", 10, 25, 4), comm("broadcast", "2", 100, 12, 2)], pg_config),
        "r3": worker(
            3,
            [comm("allreduce", "0", 10, 40, 4), comm("broadcast", "2", 100, 8, 2), comm("wait", "0", 300, 7, 4)],
            pg_config,
        ),
    }


def totals(res) -> dict:
    return {
        (r.group, r.worker): (r.calls, r.aligned_calls, r.transfer // 1000, r.wait // 1000)
        for r in res["totals"].itertuples()
    }


def test_subgroups_get_wait_and_transfer():
    res = group_waits.wait_transfer_by_group(job())
    assert res["reason"] is None and res["notes"] == []
    assert totals(res) == {
        # world all_reduce: transfer = the shortest (20); rank 3's `wait` call is 7 µs of waiting only
        ("0 [0, 1, 2, 3]", "r0"): (1, 1, 20, 10),
        ("0 [0, 1, 2, 3]", "r1"): (1, 1, 20, 0),
        ("0 [0, 1, 2, 3]", "r2"): (1, 1, 20, 5),
        ("0 [0, 1, 2, 3]", "r3"): (2, 1, 20, 20 + 7),
        # subgroup [0, 1]: #1 transfer 10 (rank 0 waits 40), #2 transfer 15 (rank 1 waits 20)
        ("1 [0, 1]", "r0"): (2, 2, 10 + 15, 40),
        ("1 [0, 1]", "r1"): (2, 2, 10 + 15, 20),
        # subgroup [2, 3]: transfer 8, rank 2 waits 4
        ("2 [2, 3]", "r2"): (1, 1, 8, 4),
        ("2 [2, 3]", "r3"): (1, 1, 8, 0),
    }


def test_group_size_when_the_ranks_are_unknown():
    # no pg_config: groups are keyed by name and size; a 2-member group needs 2 workers, not all 4
    res = group_waits.wait_transfer_by_group(job(pg_config=False))
    t = totals(res)
    assert t[("1 (size 2)", "r0")] == (2, 2, 25, 40) and t[("2 (size 2)", "r2")] == (1, 1, 8, 4)
    assert res["notes"] == []


def test_missing_member_and_name_mismatch_are_named():
    calls = pd.DataFrame(
        {
            "worker": ["a", "b", "a", "b", "a"],
            "name": ["nccl:all_reduce", "nccl:all_reduce", "nccl:broadcast", "nccl:all_reduce", "nccl:all_reduce"],
            "pg": ["5"] * 5,
            "pg_ranks": [(0, 1)] * 5,
            "group_size": [2] * 5,
            "start": [0, 0, 10, 10, 20],
            "dur": [4000, 6000, 3000, 5000, 9000],
            "is_wait": [False] * 5,
        }
    )
    matched, notes = group_waits.match_in_groups(calls, {"a": 0, "b": 1})
    assert list(matched["aligned"]) == [True, True, False, False, False]
    assert list(matched["transfer"]) == [4000, 4000, 3000, 5000, 9000]
    assert list(matched["wait"]) == [0, 2000, 0, 0, 0]
    assert notes == [
        (
            "process group 5 [0, 1]: call #2 not matched (names differ (nccl:all_reduce, "
            "nccl:broadcast)); counted as transfer only"
        ),
        "process group 5 [0, 1]: call #3 not matched (1 of 2 members have it); counted as transfer only",
    ]


def test_pg_ranks_from_distributed_info():
    info = {
        "pg_config": [
            {"pg_name": "0", "ranks": [0, 1]},
            {"pg_name": "3", "ranks": "[2, 5]"},
            {"pg_name": "x", "ranks": "bad"},
            {"ranks": [1]},
            {"pg_name": "w", "ranks": "all"},
        ]
    }
    # "all" names no ranks (torch writes a list): such a group is matched by its size
    assert group_waits.pg_ranks_of(info) == {"0": (0, 1), "3": (2, 5)}
    assert group_waits.pg_ranks_of(None) == {}


def test_no_collectives_say_so():
    res = group_waits.wait_transfer_by_group({"w": make_trace([op("aten::add", 0, 10)])})
    assert res["reason"] and res["totals"] is None


def test_world_group_agrees_with_the_distributed_view():
    # where every worker runs every collective (one world group), the per-group split is the distributed view's
    from pathlib import Path

    from tb_plugin.views import distributed

    from .test_views_common_support import load_shared

    d = Path(__file__).parent / "data" / "issue11"
    traces = {f"r{i}": load_shared(d / f"nccl_rpc_rank{i}.pt.trace.json.gz") for i in (0, 1)}
    res = group_waits.wait_transfer_by_group(traces)
    view = distributed.distributed(traces)
    for w in traces:
        (row,) = res["totals"][res["totals"]["worker"] == w].itertuples()
        per_step = view["steps"].values()
        assert row.transfer / 1000 == sum(s[w]["transfer_us"] for s in per_step)
        assert row.wait / 1000 == sum(s[w]["wait_us"] for s in per_step)
    assert res["totals"]["wait"].max() > 0 and res["notes"] == []
