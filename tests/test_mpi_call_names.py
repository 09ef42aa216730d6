"""MPI collectives are named and numbered as the trace has them, the same in `gpuscope diagnose`, the critical
path and the Distributed view: `mpi::Allreduce #2` is the rank's second mpi::Allreduce on its communicator, what a
timeline search for `mpi::Allreduce` finds as its second occurrence, mpi4py's pickling `mpi::allreduce` is a
call of its own, not a third spelling of the same one, and the Distributed view's group is the communicator.

A hand-made 2-rank job, one step 0-100 ms, every call on MPI_COMM_WORLD (our MPI integration's args):
  both ranks: mpi::Bcast 0-5, mpi::Allreduce 5-10, mpi::allreduce 10-15 ms;
  rank 1: aten::mm 15-55, then mpi::Allreduce 55-60; rank 0: mpi::Allreduce 15-60 (it waits 40 ms for rank 1).
So the path ends at the fourth call on the group, rank 1 late at its second mpi::Allreduce.
"""

from __future__ import annotations

from profiler_core.analysis.comm.collectives import collectives
from tb_plugin.run_level import report
from tb_plugin.summaries import summary
from tb_plugin.views import distributed

from .test_views_common_support import make_trace, op

MS = 1000  # µs


def mpi(method: str, start_ms: float, end_ms: float) -> dict:
    args = {
        "Collective name": method.lower(),
        "Group size": 2,
        "Process Group Name": "MPI_COMM_WORLD",
        "dtype": "float32",
        "In msg nelems": 1024,
        "bytes": 4096,
    }
    return op(f"mpi::{method}", start_ms * MS, (end_ms - start_ms) * MS, **args)


def rank_trace(rank: int):
    ev = [
        op("ProfilerStep#1", 0, 100 * MS, cat="user_annotation"),
        mpi("Bcast", 0, 5),
        mpi("Allreduce", 5, 10),
        mpi("allreduce", 10, 15),
    ]
    ev += [op("aten::mm", 15 * MS, 40 * MS), mpi("Allreduce", 55, 60)] if rank else [mpi("Allreduce", 15, 60)]
    info = {"backend": "mpi", "rank": rank, "world_size": 2}
    return make_trace(ev, metadata={"distributedInfo": info})


def test_collectives_keep_the_traces_names():
    names = collectives(rank_trace(0))["name"].tolist()
    assert names == ["mpi::Bcast", "mpi::Allreduce", "mpi::allreduce", "mpi::Allreduce"]


def test_path_and_views_number_each_name_as_the_trace_does():
    s = {f"r{r}": summary.summarize(rank_trace(r)) for r in range(2)}
    rep = report.diagnose(s)
    (step,) = rep["steps"]
    late = [seg for seg in step["segments"] if seg["kind"] == "collective" and seg["waiters"]]
    assert [(seg["name"], seg["call"], seg["late_rank"]) for seg in late] == [("mpi::Allreduce", 2, 1)]
    text = report.render_text(rep)
    assert "rank 1 late at mpi::Allreduce #2 on group MPI_COMM_WORLD (2 ranks)" in text, text
    assert "mpi:all_reduce" not in text
    parts = {w: x.distributed for w, x in s.items()}
    rows = distributed.step_detail(parts, "r0", "1")["collectives"]
    assert [(r["name"], r["call"]) for r in rows] == [
        ("mpi::Bcast", 1),
        ("mpi::Allreduce", 1),
        ("mpi::allreduce", 1),
        ("mpi::Allreduce", 2),
    ]
    view = distributed.from_summaries(parts)
    assert [(x["worker"], x["collective"]) for x in view["stragglers"]] == [("r1", "mpi::Allreduce #2")]
    # one communicator, one group: named by the communicator, as the critical path names it, not "name mpi::..."
    assert list(view["groups"]) == ["MPI_COMM_WORLD (size 2)"], list(view["groups"])
    assert {w: g["calls"] for w, g in view["groups"]["MPI_COMM_WORLD (size 2)"].items()} == {"r0": 4, "r1": 4}
