"""The verdict: one sentence that leads `gpuscope diagnose` (after its caveats), the `/diagnosis` JSON and the views.

Hand-made reports (the shape `report.diagnose` returns) pin each kind and its wording: a straggler that stands out
is named with its excess per step, its cause and what fixing it saves, even where a ledger bucket is larger; a
straggler under the threshold is not the verdict but its size is still said; a withholding caveat withholds the
straggler; the ledger's most recoverable bucket otherwise. Generated jobs (benchmarks/gen_distributed.py) check it
end to end: the planted rank is named with the planted cause and size, its unplanted twin names no rank, and a
job with a rank missing claims no straggler although one was planted."""

import sys
from pathlib import Path

import pytest

from profiler_core.trace.read.reader import read_trace
from tb_plugin.run_level import report
from tb_plugin.run_level.verdict import STANDS_OUT, fmt_ms, verdict
from tb_plugin.summaries import summary

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from gen_distributed import Plant, generate  # noqa: E402

DATA = {"phase": "data_loading", "label": "data loading"}


def _strag(worker: str, step: str, excess: float, saved: float, step_ms: float = 25.0, data: float | None = None):
    """A straggler as `stragglers.explain` gives it, its excess in data loading (`data`, default the excess)."""
    data = excess if data is None else data
    return {
        "worker": worker,
        "rank": int(worker[1:]),
        "step": step,
        "excess_ms": excess,
        "saved_ms": saved,
        "step_ms": step_ms,
        "what_if_ms": step_ms - saved,
        "why": f"data loading +{data:.1f} ms",
        "phases": [{**DATA, "ms": data + 1, "median_ms": 1.0, "excess_ms": data}],
        "kernels": [],
        "ops": [],
    }


def _ledger(*buckets: tuple[str, str, float]) -> dict:
    """A run ledger whose mean ranks `buckets` (key, label, recoverable ms) in the order given."""
    rows = [{"key": k, "label": lab, "ms": ms, "recoverable_ms": ms} for k, lab, ms in buckets]
    return {"caveats": [], "mean": {"average_wall_ms": 40.0, "buckets": rows}, "critical": None}


LEDGER = _ledger(
    ("data_loading", "Data loading (GPU idle)", 32.8),
    ("exposed_comm", "Exposed communication", 3.1),
    ("compute", "Compute (kernels)", 0.0),
)


def _report(stragglers: list, ledger=LEDGER, caveats=(), withheld=None, workers=4, reason=None) -> dict:
    steps = [{"step": str(i + 1), "step_ms": 25.0, "path": "", "straggler": s} for i, s in enumerate(stragglers)]
    found = sorted((s for s in stragglers if s), key=lambda s: -s["saved_ms"])
    return {
        "caveats": list(caveats),
        "withheld": withheld,
        "workers": workers,
        "ranks": {f"w{r}": r for r in range(workers)},
        "ledger": ledger,
        "ledger_reason": None,
        "steps": steps,
        "worst": found[0] if found and found[0]["saved_ms"] > 0 else None,
        "stragglers": found,
        "notes": [],
        "reason": reason,
    }


def test_a_straggler_in_every_step_is_named_with_its_excess_cause_and_saving():
    rep = _report([_strag("w2", str(i), 120.1, 119.3, 140.0) for i in (1, 2, 3, 4, 5)])
    v = verdict(rep)
    assert (
        v["text"]
        == "rank 2 is 120.1 ms slow in 5 of 5 steps: data loading +120.1 ms; fixing it saves 119.3 ms per step"
    )
    assert (v["kind"], v["rank"], v["worker"], v["ms"], v["saved_ms"]) == ("straggler", 2, "w2", 120.1, 119.3)


def test_the_straggler_comes_before_a_larger_ledger_bucket():
    """The ledger's top bucket (32.8 ms of data loading on the mean rank) does not hide a 4.3 ms straggler."""
    rep = _report([_strag("w1", str(i), 4.3, 4.0, 25.0) for i in (1, 2, 3)])
    v = verdict(rep)
    assert v["kind"] == "straggler" and v["rank"] == 1
    assert v["text"].startswith("rank 1 is 4.3 ms slow in 3 of 3 steps") and "saves 4.0 ms per step" in v["text"]
    assert "Data loading (GPU idle)" not in v["text"]


def test_figures_are_means_over_the_stragglers_steps():
    rep = _report([_strag("w3", "1", 10.0, 9.0, data=8.0), _strag("w3", "2", 20.0, 19.0, data=16.0)])
    v = verdict(rep)
    assert (
        v["text"] == "rank 3 is 15.0 ms slow in 2 of 2 steps: data loading +12.0 ms; fixing it saves 14.0 ms per step"
    )


def test_a_straggler_of_one_step_says_which_and_what_it_saves_over_all_steps():
    rep = _report([_strag("w0", "1", 0.02, 0.01), _strag("w3", "2", 20.0, 19.8), _strag("w0", "3", 0.03, 0.02)])
    v = verdict(rep)
    assert v["text"] == (
        "rank 3 is 20.0 ms slow in 1 of 3 steps (step 2): data loading +20.0 ms; "
        "fixing it saves 19.8 ms in that step, 6.6 ms per step over all 3"
    )
    assert v["saved_ms"] == pytest.approx(6.6)


def test_other_standing_out_stragglers_are_named_after_the_worst():
    rep = _report([_strag("w3", "1", 20.0, 19.8), _strag("w1", "2", 10.0, 9.9), _strag("w0", "3", 0.02, 0.01)])
    v = verdict(rep)
    assert v["rank"] == 3 and v["text"].endswith("(rank 1 also stands out in other steps)"), v


def test_a_straggler_standing_out_in_a_shorter_step_is_not_hidden_by_a_worst_that_does_not():
    """The worst saving (0.9 ms of a 40 ms step) is noise there; 0.8 ms of a 5 ms step is not."""
    rep = _report([_strag("w1", "1", 1.0, 0.9, step_ms=40.0), _strag("w2", "2", 0.85, 0.8, step_ms=5.0)])
    assert rep["worst"]["worker"] == "w1"
    v = verdict(rep)
    assert v["kind"] == "straggler" and v["rank"] == 2 and v["text"].startswith("rank 2 is 850 µs slow in 1 of 2"), v


def test_one_profiled_step():
    v = verdict(_report([_strag("w2", "1", 19.9, 19.7)]))
    assert "rank 2 is 19.9 ms slow in the one profiled step:" in v["text"]


def test_no_straggler_stands_out_gives_the_most_recoverable_bucket_and_still_sizes_the_slowest():
    """Timer noise (a 0.08 ms straggler on a 25 ms step) is not a verdict, but it is not hidden either."""
    saved = 25.0 * STANDS_OUT * 0.5
    v = verdict(_report([_strag("w1", "1", 0.09, saved), _strag("w2", "2", 0.05, 0.04)]))
    assert v["kind"] == "ledger" and v["rank"] is None and v["worker"] is None and v["ms"] == 32.8
    assert v["text"] == (
        f"no rank holds the others up (the slowest, rank 1, would save {fmt_ms(saved)} in step 1: under 5% of the "
        "step); the most recoverable: Data loading (GPU idle) 32.8 ms per step"
    )


def test_no_straggler_at_all():
    v = verdict(_report([None, None]))
    assert v["text"] == "no rank holds the others up; the most recoverable: Data loading (GPU idle) 32.8 ms per step"
    assert v["kind"] == "ledger"


def test_below_one_ms_in_microseconds():
    v = verdict(_report([None], ledger=_ledger(("launch_overhead", "Kernel launch overhead (GPU idle)", 0.184))))
    assert v["text"].endswith("the most recoverable: Kernel launch overhead (GPU idle) 184 µs per step")


def test_nothing_recoverable():
    v = verdict(_report([None], ledger=_ledger(("compute", "Compute (kernels)", 0.0))))
    assert v["kind"] == "none" and v["text"] == "no rank holds the others up; nothing recoverable stands out"


def test_a_withholding_caveat_withholds_the_straggler():
    cav = {
        "key": "missing_ranks",
        "text": "2 of 128 ranks present (ranks 0-1; distributedInfo world_size 128): 126 ranks missing, ...",
        "withholds": True,
    }
    rep = _report([_strag("w1", "1", 30.0, 29.0)], caveats=[cav], withheld="missing_ranks")
    v = verdict(rep)
    assert v["kind"] == "withheld" and v["rank"] is None
    assert v["text"] == (
        "no straggler or waiting across ranks is claimed: 2 of 128 ranks present; "
        "the most recoverable on the ranks present: Data loading (GPU idle) 32.8 ms per step"
    )


def test_one_worker_and_no_worker():
    assert verdict(_report([], workers=1))["text"] == (
        "one worker: the most recoverable: Data loading (GPU idle) 32.8 ms per step"
    )
    v = verdict({**_report([], workers=0, ledger=None), "reason": "no worker summaries"})
    assert v == {"text": "no verdict: no worker summaries", "kind": "none", "rank": None, "worker": None,
                 "ms": None, "saved_ms": None}  # fmt: skip


def test_render_text_prints_it_first_after_the_caveats():
    rep = _report([_strag("w2", str(i), 20.0, 19.8) for i in (1, 2)])
    rep["caveats"] = [{"key": "hosts", "text": "the traces come from 2 hosts", "withholds": False}]
    rep["verdict"] = verdict(rep)
    rep["single_rank"] = None
    lines = report.render_text(rep).splitlines()
    assert lines[:3] == [
        "What this diagnosis cannot know:",
        "  ! the traces come from 2 hosts",
        f"Verdict: {rep['verdict']['text']}",
    ]
    rep["caveats"] = []
    assert report.render_text(rep).splitlines()[0] == f"Verdict: {rep['verdict']['text']}"


# --- generated jobs -----------------------------------------------------------------------------------------------

RANKS, STEPS, MS = 4, 3, 20.0


def _diagnose(run: Path) -> dict:
    sums = {p.name.split(".")[0]: summary.summarize(read_trace(p)) for p in sorted(run.iterdir())}
    return report.diagnose(sums)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> dict:
    """name -> diagnosis: a data-loading plant on rank 2 in every step, its unplanted twin (the same layout, no
    plant), and the planted job with rank 3's trace missing."""
    root = tmp_path_factory.mktemp("verdict")
    plant = (Plant(2, "data", MS, None),)
    kinds = {"planted": {"plants": plant}, "twin": {"layout": True}, "missing": {"plants": plant, "drop": (3,)}}
    out = {}
    for name, kw in kinds.items():
        generate(str(root / name), RANKS, events=2000, steps=STEPS, **kw)
        out[name] = _diagnose(root / name)
    return out


def test_the_report_carries_the_verdict_right_after_the_caveats(jobs):
    for rep in jobs.values():
        assert list(rep)[:2] == ["caveats", "verdict"]
        assert report.render_text(rep).splitlines()[len(report.caveat_lines(rep["caveats"]))].startswith("Verdict: ")


def test_generated_job_names_the_planted_rank_cause_and_size(jobs):
    v = jobs["planted"]["verdict"]
    assert (v["kind"], v["rank"]) == ("straggler", 2), v
    assert abs(v["ms"] - MS) <= 0.1 * MS and abs(v["saved_ms"] - MS) <= 0.1 * MS, v
    assert v["text"].startswith(f"rank 2 is {fmt_ms(v['ms'])} slow in {STEPS} of {STEPS} steps: data loading +"), v


def test_unplanted_twin_names_no_rank(jobs):
    v = jobs["twin"]["verdict"]
    assert v["kind"] == "ledger" and v["rank"] is None and v["worker"] is None, v
    assert v["text"].startswith("no rank holds the others up"), v


def test_missing_rank_claims_no_straggler_though_one_was_planted(jobs):
    v = jobs["missing"]["verdict"]
    assert v["kind"] == "withheld" and v["rank"] is None, v
    assert v["text"].startswith(
        f"no straggler or waiting across ranks is claimed: {RANKS - 1} of {RANKS} ranks present"
    )
