"""The facts of the shared real multi-rank jobs (issue 37), as tests/oracles/collectives.py reads them from the raw
events. These are the numbers the diagnosis must agree with once it follows the issue's definitions; the oracle
imports nothing of gpuscope (checked below with `ast`).

Tolerance: the oracle's numbers are exact sums and differences of the events' own `ts`/`dur`, so they are
asserted to 0.05 ms (half of the 0.1 ms they are quoted in): float rounding cannot move them that far, while any
change of definition does (taking the kernel's start instead of its arrival moves the MoE job's first waiting by
0.2 ms and its late counts to 6/6; clipping the DeepEP kernels to the step or not moves their share by 14.8 ms).
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import TRACES, missing
from tests.oracles import collectives as oracle
from tests.oracles.collectives import busy_time, collectives, late_counts, load_ranks, step_skew

PUBLIC = TRACES / "public"
ORACLE_DIR = Path(oracle.__file__).resolve().parent
MS = 1000.0


def _job(name: str) -> list[oracle.Rank]:
    path = PUBLIC / name
    if not path.is_dir():
        missing(f"the shared real job {name} is not at {path}")
    return load_ranks(path)


@pytest.fixture(scope="module")
def moe():
    return _job("moe_a100_2rank_alltoall")


@pytest.fixture(scope="module")
def mi300x():
    return _job("amd_mi300x_merged_4rank")


@pytest.fixture(scope="module")
def sampled():
    return _job("hta_trace_filter")


@pytest.fixture(scope="module")
def deepep():
    return _job("ds_train_h800")


# ---- the oracle is independent -------------------------------------------------------------------------------------


def test_oracle_imports_nothing_of_gpuscope():
    allowed = set(sys.stdlib_module_names) | {"numpy", "__future__"}
    for source in sorted(ORACLE_DIR.glob("*.py")):
        tree = ast.parse(source.read_text(), filename=str(source))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{source.name}: relative import (of the tests' package) at line {node.lineno}"
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top not in ("profiler_core", "tb_plugin", "tests", "gpuscope"), f"{source.name} imports {name}"
                assert top in allowed, f"{source.name} imports {name}: only the standard library (and numpy)"


# ---- moe_a100_2rank_alltoall: 2 x A100, 12 all_to_allv of 8 KB ------------------------------------------------------


def test_moe_collectives_matched_by_process_group_and_sequence(moe):
    assert [(r.rank, r.world_size) for r in moe] == [(0, 2), (1, 2)]
    colls = collectives(moe)
    assert [c.key for c in colls] == [("pg+seq", "0", seq) for seq in range(37, 49)]
    assert {c.how for c in colls} == {"pg+seq"}
    assert {c.name for c in colls} == {"all_to_allv"}
    assert {c.bytes for c in colls} == {8192}  # In msg nelems 2048 x Float: the "8 KB"
    assert all(m.kernel.launch_name == "cudaLaunchKernelExC" for c in colls for m in c.members.values())


def test_moe_late_rank_per_all_to_all(moe):
    colls = collectives(moe)
    # by arrival = the kernel's start: rank 1 last 5 times, rank 0 4 times, 3 ties (within 1 us)
    late = [c.late_rank for c in colls]
    assert late == [1, None, None, 0, 1, None, 0, 1, 0, 1, 0, 1]
    assert late_counts(colls) == {1: 5, 0: 4, None: 3}
    # the "6/6" is the same order with the ties broken
    by_start = Counter(max(c.members.values(), key=lambda m: m.start).rank for c in colls)
    assert by_start == {0: 6, 1: 6}
    # at seq 40 the launch and the stream alone say rank 0 came 0.05 ms after rank 1; its kernel could run only
    # 2.45 ms after them (held by its compute stream), so rank 1 waited 2.47 ms
    [seq40] = [c for c in colls if c.key[2] == 40]
    r0, r1 = seq40.members[0].kernel, seq40.members[1].kernel
    assert (r0.earliest - r1.earliest) / MS == pytest.approx(0.05, abs=0.01)
    assert (r0.start - r0.earliest) / MS == pytest.approx(2.45, abs=0.05)
    assert seq40.late_rank == 0 and seq40.members[1].waiting / MS == pytest.approx(2.47, abs=0.05)


def test_moe_first_all_to_all_waiting(moe):
    first = collectives(moe)[0]
    # rank 1 launched it first, but its kernel started 0.19 ms after rank 0's, which waited for it
    assert first.late_rank == 1
    assert first.members[0].waiting / MS == pytest.approx(0.19, abs=0.05)
    assert first.members[1].waiting == 0
    assert first.members[1].kernel.launch < first.members[0].kernel.launch
    assert first.members[0].kernel.dur > 10 * first.members[1].kernel.dur  # rank 0's kernel held the wait


def test_moe_exchanges_take_milliseconds_for_8_kb(moe):
    colls = collectives(moe)
    slow = [c for c in colls if c.exchange > 1 * MS]
    assert [c.key[2] for c in slow] == [40, 43, 44, 45, 46, 47, 48]
    # exchange = last end - last arrival: 1.6 .. 2.5 ms for 8 KB, the members ending 1.6 .. 2.5 ms apart
    assert min(c.exchange for c in slow) / MS == pytest.approx(1.64, abs=0.05)
    assert max(c.exchange for c in slow) / MS == pytest.approx(2.48, abs=0.05)
    assert all(1.6 * MS < c.end_spread < 2.5 * MS for c in slow)
    # the "2-4.5 ms" is the span of the long kernels (> 1 ms): 2.03 .. 4.53 ms; but the 2.03 ms one
    # (seq 41, rank 0) is waiting, not exchange: rank 1 arrived 2.02 ms after it, and both ended 16 us later
    long_kernels = {(c.key[2], r): m.kernel.dur for c in colls for r, m in c.members.items() if m.kernel.dur > MS}
    assert min(long_kernels.values()) / MS == pytest.approx(2.03, abs=0.05)
    assert max(long_kernels.values()) / MS == pytest.approx(4.53, abs=0.05)
    [seq41] = [c for c in colls if c.key[2] == 41]
    assert seq41.members[0].waiting / MS == pytest.approx(2.02, abs=0.05)
    assert seq41.exchange < 0.1 * MS
    # a wait is never taken for an exchange: in none of them did a member wait more than 2.5 ms
    assert max(m.waiting for c in colls for m in c.members.values()) / MS == pytest.approx(2.46, abs=0.05)


def test_moe_step_skew(moe):
    # no ProfilerStep: the job's own `moe_train_step` annotation is its one step
    assert step_skew(moe) == []
    [skew] = step_skew(moe, "moe_train_step")
    assert (skew.first_in, skew.last_in) == (1, 0)
    assert skew.entry / MS == pytest.approx(0.17, abs=0.05)
    assert skew.exit / MS == pytest.approx(0.36, abs=0.05)


# ---- amd_mi300x_merged_4rank: 4 x MI300X fused into one file --------------------------------------------------------


def test_mi300x_fused_file_split_into_four_ranks(mi300x):
    assert [r.rank for r in mi300x] == [0, 1, 2, 3]
    assert {r.source for r in mi300x} == {str(PUBLIC / "amd_mi300x_merged_4rank" / "merged_all_events.json.gz")}
    assert all(len(r.steps()) == 3 for r in mi300x)
    launches = Counter(m.kernel.launch_name for c in collectives(mi300x) for m in c.members.values())
    assert launches == {"hipExtLaunchKernel": 84}


def test_mi300x_collectives_matched_and_rank_3_always_last(mi300x):
    colls = collectives(mi300x)
    assert len(colls) == 21 and all(len(c.members) == 4 for c in colls)
    assert Counter(c.name for c in colls) == {"allreduce": 15, "broadcast": 6}
    assert {c.how for c in colls} == {"pg+seq"}
    assert late_counts(colls) == {3: 21}
    # rank 3 enters every step last, 1.6 .. 3.8 ms after rank 2
    skews = step_skew(mi300x)
    assert [s.name for s in skews] == ["ProfilerStep#9", "ProfilerStep#10", "ProfilerStep#11"]
    assert {(s.first_in, s.last_in) for s in skews} == {(2, 3)}
    assert [round(s.entry / MS, 1) for s in skews] == [1.6, 3.6, 3.8]


def test_mi300x_broadcast_roots_finish_first_and_are_not_late(mi300x):
    for c in collectives(mi300x):
        if c.name != "broadcast":
            continue
        assert c.one_sided
        first_to_end = min(c.members.values(), key=lambda m: m.end).rank
        assert first_to_end == 0  # the root (rank 0) finishes first ...
        assert c.late_rank == 3  # ... and rank 3, which arrived last, is the late one
        assert c.members[0].waiting > 1 * MS


# ---- hta_trace_filter: 2 of 128 ranks ------------------------------------------------------------------------------


def test_sampled_job_holds_2_of_128_ranks(sampled):
    assert [(r.rank, r.world_size) for r in sampled] == [(0, 128), (1, 128)]
    colls = collectives(sampled)
    # no collective metadata in these (older) traces: matched by stream + kernel name + order
    assert {c.how for c in colls} == {"stream+name+order"}
    assert len(colls) == 10 and all(len(c.members) == 2 for c in colls)
    # ... and 126 members of every collective are missing: no cross-rank waiting can be claimed
    assert all(len(c.members) < r.world_size for c in colls for r in sampled)


def test_sampled_job_order_matching_pairs_different_collectives(sampled):
    """Every kernel is ncclKernel_SendRecv: the host's nccl:<op> around each launch shows the order pairs an
    all_to_all with an all_reduce twice, another reason why the two ranks' kernels cannot be held against
    each other."""
    ops = {}
    for r in sampled:
        launches = [e for e in r.events if e.get("cat") == "cuda_runtime" and "Launch" in e.get("name", "")]
        annotations = [e for e in r.events if str(e.get("name", "")).startswith("nccl:")]
        for a in annotations:
            for e in launches:
                if e["tid"] == a["tid"] and a["ts"] <= e["ts"] <= a["ts"] + a["dur"]:
                    ops[(r.rank, e["args"]["correlation"])] = a["name"]
    pairs = [
        tuple(ops[(rank, m.kernel.correlation)] for rank, m in sorted(c.members.items())) for c in collectives(sampled)
    ]
    assert sum(a != b for a, b in pairs) == 2
    assert pairs[0] == ("nccl:all_to_all", "nccl:all_to_all")


def test_sampled_job_step_skew(sampled):
    skews = step_skew(sampled)
    assert [s.name for s in skews] == ["ProfilerStep#551", "ProfilerStep#552"]
    assert [(round(s.entry / MS, 2), round(s.exit / MS, 2)) for s in skews] == [(0.19, 0.78), (0.79, 8.5)]


# ---- ds_train_h800: one DeepSeek rank of 64, DeepEP --------------------------------------------------------------


def test_deepep_share_of_the_step(deepep):
    [rank] = deepep
    assert (rank.rank, rank.world_size) == (0, 64)
    [step] = rank.steps()
    assert (step.end - step.start) / MS == pytest.approx(112.2, abs=0.05)

    def in_step(kinds):
        return busy_time([(k.start, k.end) for k in rank.comm_kernels(kinds)], step.start, step.end) / MS

    # the 98.6 ms: every DeepEP kernel (dispatch, combine and their notify/layout kernels), in the step
    assert in_step(("deepep", "deepep_aux")) == pytest.approx(98.6, abs=0.05)
    # dispatch and combine proper: 69.2 ms of it
    assert in_step(("deepep",)) == pytest.approx(69.2, abs=0.05)
    names = Counter(oracle.comm_kind(k.name) for k in rank.kernels())
    assert (names["deepep"], names["deepep_aux"]) == (16, 20)
    # one rank of 64: nothing to match across ranks
    assert collectives(deepep, kinds=("deepep",))[0].late_rank is None


def test_sampled_job_forward_entry_skew(sampled):
    """The nearest the raw events come to the issue's "entered 7.5 ms apart, ended within 0.9 ms": the
    `## forward ##` annotation of ProfilerStep#551, entered 7.38 ms apart (rank 1 last), left 0.08 ms apart."""
    [skew] = step_skew(sampled, "## forward ##")
    assert (skew.first_in, skew.last_in) == (0, 1)
    assert skew.entry / MS == pytest.approx(7.38, abs=0.05)
    assert skew.exit / MS == pytest.approx(0.08, abs=0.05)


def test_answers_follow_the_ranks_events(moe):
    """The late counts belong to the files, not to the rank numbers: relabel the two files and they swap."""
    swapped = [oracle.Rank(1 - r.rank, r.source, r.events, r.world_size, r.distributed_info) for r in moe]
    assert late_counts(collectives(swapped)) == {0: 5, 1: 4, None: 3}
    first = collectives(swapped)[0]
    assert first.late_rank == 0 and first.members[1].waiting / MS == pytest.approx(0.19, abs=0.05)
