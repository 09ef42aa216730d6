"""gpuscope's cross-rank facts on the shared real multi-rank jobs against the oracle (tests/oracles/collectives.py),
which reads them from the raw events and shares no code with the analysis: per collective, the rank that arrived
last, how long the others waited and the exchange's own time; the broadcast roots never late; and what
`gpuscope diagnose` says first. The jobs are read through a temporary logdir that links to them, so their summaries
are written there, never into the shared folder."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest

from tb_plugin.run_level import critical_path
from tb_plugin.summaries import cli

from .conftest import TRACES, missing
from .oracles.collectives import collectives, load_ranks

PUBLIC = TRACES / "public"
MS = 1000.0  # the oracle's µs per ms
#: the oracle quotes µs from the files' floats; gpuscope keeps integer ns: they agree to rounding
TOL_MS = 0.01


def _logdir(tmp: Path, name: str) -> Path:
    src = PUBLIC / name
    if not src.is_dir():
        missing(f"the shared real job {name} is not at {src}")
    (tmp / name).symlink_to(src, target_is_directory=True)
    return tmp


@pytest.fixture(scope="module", params=["moe_a100_2rank_alltoall", "amd_mi300x_merged_4rank"])
def job(request, tmp_path_factory):
    """(oracle collectives in first-arrival order, gpuscope's Job, the same in gpuscope's instance order, logdir)."""
    name = request.param
    logdir = _logdir(tmp_path_factory.mktemp("real"), name)
    _, summaries, _ = cli.run_summaries(str(logdir), name, "1", log=lambda *a, **k: None)
    jb = critical_path.match(summaries)
    first = np.array([jb.calls["arrival"][jb.members(i)].min() for i in range(len(jb.inst))])
    order = np.argsort(first, kind="stable").tolist()
    return collectives(load_ranks(PUBLIC / name)), jb, order, (logdir, name)


def _rank(jb: critical_path.Job, w: int) -> int | None:
    return jb.ranks[jb.workers[w]]


def test_every_collective_is_matched_as_the_oracle_matches_it(job):
    oracle, jb, order, _ = job
    assert len(jb.inst) == len(oracle)
    for c, i in zip(oracle, order):
        members = sorted(_rank(jb, w) for w in jb.c_w[jb.members(i)].tolist())
        assert members == sorted(c.members), (c.key, members)


def test_the_late_rank_is_the_last_to_arrive(job):
    """Where the oracle names a late rank (no tie within 1 us), gpuscope names it too."""
    oracle, jb, order, _ = job
    named = [
        (c.key, c.late_rank, _rank(jb, int(jb.i_late[i]))) for c, i in zip(oracle, order) if c.late_rank is not None
    ]
    assert named and all(a == b for _, a, b in named), named


def test_waiting_and_exchange_agree_with_the_raw_events(job):
    """Each member's wait is the last arrival less its own (within its call: a broadcast root that finished
    before the last member came waited only while its call ran), and the exchange is the last end less the last
    arrival."""
    oracle, jb, order, _ = job
    for c, i in zip(oracle, order):
        assert jb.inst["transfer"].iat[i] / 1e6 == pytest.approx(c.exchange / MS, abs=TOL_MS), c.key
        for r in jb.members(i).tolist():
            m = c.members[_rank(jb, int(jb.c_w[r]))]
            within = max(0.0, min(c.last_arrival, m.end) - m.arrival)
            assert jb.c_wait[r] / 1e6 == pytest.approx(within / MS, abs=TOL_MS), (c.key, m.rank)


def test_broadcast_roots_finish_first_and_are_never_late(job):
    oracle, jb, order, _ = job
    roots = [(c, i) for c, i in zip(oracle, order) if c.one_sided]
    if not roots:
        pytest.skip("no broadcast in this job")
    for c, i in roots:
        assert min(c.members.values(), key=lambda m: m.end).rank == 0  # the root ends first ...
        assert _rank(jb, int(jb.i_late[i])) == c.late_rank != 0  # ... and is not the late one


def test_diagnose_names_the_rank_the_others_waited_for(job):
    """`gpuscope diagnose --json`: every step's path crosses collectives whose late rank is the oracle's, and the
    straggler it names is a rank that arrived last somewhere, never one that only waited."""
    oracle, _, _, (logdir, name) = job
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert cli.main(["diagnose", str(logdir), name, "--json"]) in (0, None)
    rep = json.loads(out.getvalue())
    late = {c.late_rank for c in oracle if c.late_rank is not None}
    for step in rep["steps"]:
        seen = {s["late_rank"] for s in step["segments"] if s["kind"] == "collective" and s["waiters"]}
        assert seen and seen <= late, (step["step"], seen, late)
    for s in rep["stragglers"]:
        assert s["rank"] in late, s


def test_slow_exchanges_are_named_as_communication_latency(job):
    """moe: 7 of the 12 all_to_allv of 8 KB took 1.6-2.5 ms once both ranks were there (the oracle's exchange), late
    rank alternating: named as communication latency with the oracle's figures, not as a rank's imbalance. The
    MI300X job's exchanges are what their bytes need: nothing named."""
    oracle, _, _, (logdir, name) = job
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert cli.main(["diagnose", str(logdir), name, "--json"]) in (0, None)
    slow = json.loads(out.getvalue())["slow_exchanges"]
    expected = [c for c in oracle if c.exchange > 100.0 and (c.bytes or 1 << 30) <= 64 * 1024]
    if not expected:
        assert slow is None, slow
        return
    [g] = slow["groups"]
    assert g["count"] == len(expected) and g["bytes"] == expected[0].bytes == 8192
    assert g["min_ms"] == pytest.approx(min(c.exchange for c in expected) / MS, abs=TOL_MS)
    assert g["max_ms"] == pytest.approx(max(c.exchange for c in expected) / MS, abs=TOL_MS)
    assert len(g["late_ranks"]) == 2  # both ranks were last at some: no one rank's doing
    assert "communication latency" in slow["text"] and "not imbalance" in slow["text"]


def test_the_verdict_names_what_the_raw_events_show(job):
    """moe: no rank is late at most collectives (the oracle's late ranks alternate), so the verdict names no rank
    and leads with the slow exchanges, and the ledger's sync skew says the lateness alternates; MI300X: rank 3 came
    last at every collective, so the verdict names it and the ledger does not call its lateness alternating."""
    oracle, _, _, (logdir, name) = job
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert cli.main(["diagnose", str(logdir), name, "--json"]) in (0, None)
    rep = json.loads(out.getvalue())
    late = [c.late_rank for c in oracle if c.late_rank is not None]
    top = max(set(late), key=late.count)
    skew = next(b for b in rep["ledger"]["mean"]["buckets"] if b["key"] == "sync_skew")
    alternates = any("alternates" in a for a in skew["advice"])
    if late.count(top) == len(late):
        assert rep["verdict"]["kind"] == "straggler" and rep["verdict"]["rank"] == top, rep["verdict"]
        assert not alternates, skew["advice"]
    else:
        assert late.count(top) <= 0.6 * len(late)
        assert rep["verdict"]["kind"] == "exchange" and rep["verdict"]["rank"] is None, rep["verdict"]
        assert alternates, skew["advice"]
