"""Pipeline parallelism (profiler_core/analysis/worker/pipeline.py) on jobs from benchmarks/gen_pipeline.py.

The job: p = 4 stages, m = 8 micro-batches, a forward takes F = 40 µs and a backward B = 80 µs on every stage
(kernels back to back), P2P transfers take `transfer_us`. Worked out by hand for 0 transfer: in 1F1B (and GPipe)
a step lasts (m + p - 1)(F + B) = 11 x 120 = 1320 µs, each stage computes m (F + B) = 960 µs of it and idles
360 µs: ratio 3/11. Stage s starts its first forward at s F (waiting for stage s - 1 to pass micro-batch 0 on),
ends its last backward s B before stage 0 does (then has nothing left: true idle), and in between waits only for
gradients from stage s + 1: 360 - s F - s B µs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from profiler_core.analysis.worker import pipeline as pp
from profiler_core.trace.read.reader import read_trace
from tb_plugin.run_level import pipeline as run_pp
from tb_plugin.summaries.schema import Pipeline, convert

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from gen_pipeline import generate_pipeline  # noqa: E402

P, M, F, B = 4, 8, 40, 80
US = 1000


def analyse(projections: dict) -> dict:
    """`run_pp.analyse` of the projections as `project` gives them (dicts), typed as the summary holds them."""
    return run_pp.analyse({w: convert(p, Pipeline) for w, p in projections.items()})


def _job(tmp_path: Path, **kw) -> dict:
    paths = generate_pipeline(str(tmp_path / "job"), P, M, steps=2, fwd_us=F, bwd_us=B, **kw)
    return run_pp.pipeline({Path(p).name.split(".")[0]: read_trace(p, processes=0) for p in paths})


def _parts(st: dict) -> int:
    return st["true_idle_ns"] + st["p2p_wait_ns"] + st["p2p_transfer_ns"] + st["upstream_wait_ns"]


@pytest.mark.parametrize("schedule,name", [("1f1b", "1F1B"), ("gpipe", "GPipe")])
def test_schedule_and_bubbles_without_transfer_time(tmp_path, schedule, name):
    r = _job(tmp_path, transfer_us=0, schedule=schedule)
    assert r["reason"] is None
    assert (r["schedule"], r["stages"], r["microbatches"], r["virtual_stages"]) == (name, P, M, 1)
    assert len(r["steps"]) == 2
    for step in r["steps"]:
        assert step["end_ns"] - step["start_ns"] == (M + P - 1) * (F + B) * US
        assert step["theoretical_ratio"] == pytest.approx(3 / 11)
        assert step["bubble_ratio"] == pytest.approx(3 / 11)
        for s, st in enumerate(step["stages"]):
            assert st["idle_ns"] == (P - 1) * (F + B) * US
            assert _parts(st) == st["idle_ns"]
            assert st["p2p_transfer_ns"] == 0 and st["p2p_wait_ns"] == 0
            assert st["true_idle_ns"] == s * B * US
            want = {}
            if s > 0:
                want[str(s - 1)] = s * F * US
            if s < P - 1:
                want[str(s + 1)] = ((P - 1) * (F + B) - s * F - s * B) * US
            assert st["waiting_on"] == want
            assert st["upstream_wait_ns"] == sum(want.values())
        # the chart: stage s runs micro-batch 0's forward from s F
        assert [c[0][:2] + c[0][3:4] for c in step["chart"]] == [["F", 0, s * F * US] for s in range(P)]


def test_transfer_time_keeps_the_split_exact_and_the_ratio_within_its_bound(tmp_path):
    """With 5 µs transfers, idle still splits exactly; the ratio is at least 3/11 and at most the ratio with every
    span lengthened by two transfers: 1 - m (F + B) / ((m + p - 1)(F + B + 2 x 5))."""
    r = _job(tmp_path, transfer_us=5)
    assert r["schedule"] == "1F1B"
    for step in r["steps"]:
        window = step["end_ns"] - step["start_ns"]
        for st in step["stages"]:
            assert st["idle_ns"] == window - M * (F + B) * US
            assert _parts(st) == st["idle_ns"]
        # stage 0 waits for every gradient (its backwards never start before one arrives): each of its 8
        # gradient receives ends in a 5 µs transfer while it idles; its activation sends overlap its compute or
        # those receives
        assert step["stages"][0]["p2p_transfer_ns"] == M * 5 * US
        assert 3 / 11 <= step["bubble_ratio"] <= 1 - M * (F + B) / ((M + P - 1) * (F + B + 10))


def test_a_slow_stage_shows_as_upstream_wait_on_the_stages_after_it(tmp_path):
    base = _job(tmp_path / "base", transfer_us=0)["steps"][0]["stages"]
    slow = _job(tmp_path / "slow", transfer_us=0, slow_stage=1)["steps"][0]["stages"]
    # stage 1 now computes 2 x 960 µs: the bottleneck, idle least
    assert slow[1]["busy_ns"] == 2 * M * (F + B) * US
    assert min(range(P), key=lambda s: slow[s]["idle_ns"]) == 1
    for s in (2, 3):
        fed_by = str(s - 1)
        assert _parts(slow[s]) == slow[s]["idle_ns"]
        # waiting for the forward input from the stage before grows from the warm-up's s F to most of the idle
        assert base[s]["waiting_on"][fed_by] == s * F * US
        assert slow[s]["waiting_on"][fed_by] >= 5 * base[s]["waiting_on"][fed_by]
        others = (slow[s]["true_idle_ns"], slow[s]["p2p_wait_ns"], slow[s]["p2p_transfer_ns"])
        assert slow[s]["waiting_on"][fed_by] > max(others)


def test_projection_is_small_json_and_enough_for_the_analysis(tmp_path):
    paths = generate_pipeline(str(tmp_path / "job"), P, M, steps=2, transfer_us=5)
    proj = {Path(p).name.split(".")[0]: pp.project(read_trace(p, processes=0)) for p in paths}
    for p in proj.values():
        assert p["version"] == pp.PROJECTION_VERSION and p["reason"] is None
        assert len(p["steps"]) == 2
        for s in p["steps"]:
            assert len(s["spans"]) == 2 * M
            assert len(s["busy"]) <= 2 * M  # kernels back to back: at most one busy range per span
        json.dumps(p)
    assert analyse(json.loads(json.dumps(proj)))["steps"][0]["stages"][0]["idle_ns"] > 0


def test_busy_ranges_are_bounded_and_the_closed_gaps_counted():
    n = pp.MAX_BUSY_RANGES + 3
    starts = np.arange(n, dtype=np.int64) * 100
    gaps = np.full(n, 50, np.int64)
    gaps[[5, 9, 20]] = [1, 2, 3]  # the three shortest gaps (after ranges 5, 9, 20) get closed
    busy = np.stack([starts, starts + 100 - gaps], axis=1)
    out, closed = pp._bounded(busy)
    assert len(out) == pp.MAX_BUSY_RANGES and closed == 6
    assert out[5].tolist() == [500, 700 - 50]


def test_span_names():
    assert pp.parse_span("PP:2F13") == ("F", 13, 2)
    assert pp.parse_span("PP:0W3") == ("W", 3, 0)
    assert pp.parse_span("Backward 4") == ("B", 4, None)
    assert pp.parse_span("forward_mb3") == ("F", 3, None)
    assert pp.parse_span("backward_step_mb7") == ("B", 7, None)
    assert pp.parse_span("ProfilerStep#3") is None and pp.parse_span("forward") is None


def _proj(rank: int, spans: list) -> dict:
    return {
        "version": 1,
        "rank": rank,
        "base_ns": 0,
        "reason": None,
        "steps": [{"step": "1", "spans": spans, "p2p": [], "busy": [], "closed_gap_ns": 0}],
    }


def test_interleaved_schedule_and_its_theoretical_ratio():
    """Two ranks holding virtual stages (0, 2) and (1, 3), 2 micro-batches: (p - 1) / (v m + p - 1) = 1/5."""

    def spans(stages):
        out, t = [], 0
        for kind in ("F", "B"):
            for v in stages if kind == "F" else stages[::-1]:
                for mb in range(2):
                    out.append([kind, mb, v, t, t + 10])
                    t += 10
        return out

    r = analyse({"a": _proj(0, spans([0, 2])), "b": _proj(1, spans([1, 3]))})
    assert (r["schedule"], r["virtual_stages"], r["microbatches"]) == ("interleaved", 2, 2)
    assert r["steps"][0]["theoretical_ratio"] == pytest.approx(1 / 5)


def test_unknown_schedule_and_missing_annotations_say_why():
    odd = [["B", 0, -1, 0, 10], ["F", 0, -1, 10, 20]]
    r = analyse({"a": _proj(0, odd), "b": _proj(1, odd)})
    assert r["schedule"] == "unknown" and "neither" in r["schedule_reason"]
    assert r["steps"][0]["theoretical_ratio"] is None
    none = {"version": 1, "rank": 1, "base_ns": 0, "steps": [], "reason": pp.NO_SPANS}
    r = analyse({"a": _proj(0, odd), "b": none})
    assert r["steps"] == [] and pp.NO_SPANS in r["reason"]


def test_two_pipelines_at_once_are_refused_with_a_reason():
    a = [["F", 0, 0, 0, 10], ["B", 0, 0, 10, 20]]
    b = [["F", 0, 1, 5, 15], ["B", 0, 1, 15, 25]]
    r = analyse({"r0": _proj(0, a), "r1": _proj(1, b), "r2": _proj(2, a), "r3": _proj(3, b)})
    assert r["steps"] == [] and "several ranks run stage 0, 1" in r["reason"]


def test_command_line_reports_the_run_and_refuses_a_missing_folder(tmp_path, capsys):
    from tb_plugin.summaries import cli

    generate_pipeline(str(tmp_path / "job"), P, M, steps=1, transfer_us=0)
    assert cli.main(["pipeline", str(tmp_path / "job")]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["schedule"] == "1F1B" and r["steps"][0]["bubble_ratio"] == pytest.approx(3 / 11)
    assert cli.main(["pipeline", str(tmp_path / "absent")]) == 2
    assert "No such file" in capsys.readouterr().err


def test_interleaved_job_matches_its_theoretical_ratio(tmp_path):
    """v = 2 stages per rank (rank r holds r and r + 4), looped breadth-first, F = 80 and B = 160 µs per rank
    (40 and 80 per stage), 0 transfer. With m >= p no stage ever waits in the middle of a phase: the forwards
    take m F + (p - 1) F / v and the backwards m B + (p - 1) B / v, so a step lasts (v m + p - 1)(F + B) / v =
    19 x 120 = 2280 µs, each rank idles (p - 1)(F + B) / v = 360 µs of it: ratio 3/19 = (p - 1) / (v m + p - 1).
    Rank r waits r F / v at the start for its first input and idles r B / v at the end."""
    paths = generate_pipeline(str(tmp_path / "job"), P, M, steps=1, fwd_us=80, bwd_us=160, transfer_us=0, virtual=2)
    r = run_pp.pipeline({Path(p).name.split(".")[0]: read_trace(p, processes=0) for p in paths})
    assert (r["schedule"], r["virtual_stages"], r["microbatches"]) == ("interleaved", 2, M)
    step = r["steps"][0]
    assert step["end_ns"] - step["start_ns"] == 2280 * US
    assert step["bubble_ratio"] == pytest.approx(3 / 19) and step["theoretical_ratio"] == pytest.approx(3 / 19)
    for s, st in enumerate(step["stages"]):
        assert st["idle_ns"] == 360 * US and _parts(st) == st["idle_ns"]
        assert st["true_idle_ns"] == s * 80 * US
        assert st["waiting_on"].get(str(s - 1), 0) == s * 40 * US


def test_a_data_parallel_trace_has_no_pipeline_and_says_why(tmp_path):
    from gen_distributed import generate

    paths = generate(str(tmp_path / "dp"), 2, events=600, steps=2, gz=False)
    proj = {str(i): pp.project(read_trace(p, processes=0)) for i, p in enumerate(paths)}
    assert all(p["steps"] == [] and p["reason"] == pp.NO_SPANS for p in proj.values())
    assert pp.NO_SPANS in analyse(proj)["reason"]


def test_send_recv_counts_that_differ_between_stages_are_no_warning(tmp_path):
    """A middle stage sends and receives twice as often as the first and last (it has two neighbours): the calls of
    the pipeline's process group pair by time into stage-to-stage transfers, so none is unmatched, no caveat says
    "call counts differ" and the critical path's notes say nothing of missing calls."""
    from tb_plugin.run_level import caveats as cv
    from tb_plugin.run_level import critical_path as cp
    from tb_plugin.run_level.run_ledger import run_view
    from tb_plugin.summaries import summary as S

    paths = generate_pipeline(str(tmp_path / "job"), P, M, steps=2, fwd_us=F, bwd_us=B, transfer_us=5)
    sums = {Path(p).name.split(".")[0]: S.summarize(read_trace(p, processes=0)) for p in paths}
    counts = sorted(len(s.collective_calls.group) for s in sums.values())
    assert counts == [2 * M * 2] * 2 + [4 * M * 2] * 2  # ends: M sends + M recvs a step (2 steps); middles twice
    assert cv.caveats(sums) == []
    job = cp.match(sums)
    assert (job.calls["inst"] >= 0).all() and job.notes == []
    # every transfer pairs neighbouring stages, 2 M per step and direction
    pairs = job.inst["group"].value_counts().to_dict()
    want = {f"p2p rank {a} -> rank {b}" for a in range(P) for b in (a - 1, a + 1) if 0 <= b < P}
    assert set(pairs) == want and set(pairs.values()) == {2 * M}
    assert run_view(sums)["notes"] == []


def test_the_bubble_is_its_own_ledger_bucket_with_pipeline_fixes(tmp_path):
    """A pipeline stage's waits in its send/recv kernels are the `pipeline_bubble` bucket (fixes: micro-batches,
    interleaving, balanced stages), not exposed communication to overlap with DDP bucketing; the buckets still add
    up to each step exactly, and the run's ledger keeps the waits there (none moved to sync skew)."""
    from profiler_core.analysis.worker import ledger as L
    from profiler_core.analysis.worker.buckets import EXPOSED_COMM, PIPELINE_BUBBLE, SYNC_SKEW
    from tb_plugin.run_level.run_ledger import run_view
    from tb_plugin.summaries import summary as S

    paths = generate_pipeline(str(tmp_path / "job"), P, M, steps=2, fwd_us=F, bwd_us=B, transfer_us=5)
    traces = {Path(p).name.split(".")[0]: read_trace(p, processes=0) for p in paths}
    for t in traces.values():
        led = L.worker_ledger(t)
        for i, wall in enumerate(led["wall_ns"]):
            assert sum(b["ns"][i] for b in led["buckets"].values() if b["ns"] is not None) == wall
        assert sum(led["buckets"][PIPELINE_BUBBLE]["ns"]) > 0 and sum(led["buckets"][EXPOSED_COMM]["ns"]) == 0
    run = run_view({w: S.decode(S.encode(S.summarize(t))) for w, t in traces.items()})
    top = run["mean"]["buckets"][0]
    assert top["key"] == PIPELINE_BUBBLE and top["ms"] > 0
    assert "micro-batches" in top["fix"] and "interleaved" in top["fix"] and "balanced" in top["fix"]
    by = {b["key"]: b for b in run["mean"]["buckets"]}
    assert by[SYNC_SKEW]["ms"] == 0 and by[EXPOSED_COMM]["ms"] == 0
    assert not [b["key"] for b in run["mean"]["buckets"] if b["ms"] and "DDP bucketing" in b["fix"]]


def test_a_data_parallel_job_has_no_bubble(tmp_path):
    from gen_distributed import generate

    from profiler_core.analysis.worker import ledger as L
    from profiler_core.analysis.worker.buckets import EXPOSED_COMM, PIPELINE_BUBBLE

    path = generate(str(tmp_path / "dp"), 2, events=600, steps=2, gz=False)[0]
    led = L.worker_ledger(read_trace(path, processes=0))
    assert sum(led["buckets"][PIPELINE_BUBBLE]["ns"]) == 0 and sum(led["buckets"][EXPOSED_COMM]["ns"]) > 0
