"""`gpuscope diagnose` text (issue 22 item 7): per step, the ledger of the rank that set the step, so a cause on
one rank of many shows at its size and not divided by the number of ranks.

The job (benchmarks/gen_distributed.py): 8 ranks, 3 steps; rank 5's DataLoader span is 15 ms longer at step
index 1 (`--plant 5:data:15:1`). Every rank's DataLoader span is 100-140 µs without a plant, with the GPU idle
meanwhile, so rank 5's data loading at that step is 15.10-15.14 ms and the others' 0.10-0.14 ms: rank 5 is the
one the others wait for at that step (the longest busy time), its ledger line names data loading at 15.1 ms,
while the mean over the 8 ranks is (15.12 + 7 x 0.12) / 8 = 1.9-2.0 ms.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .summaries_support import gpuscope

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from gen_distributed import generate, parse_plant  # noqa: E402

PLANT_RANK, PLANT_MS, PLANT_STEP = 5, 15.0, 1


def _cli(*args: str) -> subprocess.CompletedProcess:
    return gpuscope("diagnose", *args)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("diagnose_text")
    plant = parse_plant(f"{PLANT_RANK}:data:{PLANT_MS:g}:{PLANT_STEP}")
    generate(str(root / "job"), 8, events=1000, steps=3, buckets=2, plants=(plant,))
    return root


def test_text_shows_the_planted_rank_and_cause_at_its_size(logdir):
    js = _cli(str(logdir), "--json")
    assert js.returncode == 0, js.stderr
    rep = json.loads(js.stdout)
    crit = rep["ledger"]["critical"]
    names = [s["step"] for s in crit["steps"]]
    assert len(names) == 3
    planted = names[PLANT_STEP]
    # --json holds the critical rank's ledger: rank 5's worker at the planted step, data loading at the plant's size
    worker = crit["steps"][PLANT_STEP]["worker"]
    assert rep["ranks"][worker] == PLANT_RANK
    assert 15.05 <= crit["steps"][PLANT_STEP]["buckets"]["data_loading"] <= 15.2
    mean_dl = next(b for b in rep["ledger"]["mean"]["buckets"] if b["key"] == "data_loading")["steps_ms"]
    assert 1.85 <= mean_dl[PLANT_STEP] <= 2.05

    txt = _cli(str(logdir))
    assert txt.returncode == 0, txt.stderr
    lines = txt.stdout.splitlines()
    head = lines.index("Ledger of the rank that set each step (its buckets of at least 0.05 ms, largest first):")
    rows = lines[head + 1 : head + 4]
    assert [re.match(r"  step (\S+), ", r).group(1) for r in rows] == names
    row = rows[PLANT_STEP]
    assert f"step {planted}, set by rank {PLANT_RANK} (its step " in row
    m = re.search(r"Data loading \(GPU idle\) ([0-9.]+) ms", row)
    assert m and float(m.group(1)) == pytest.approx(15.1, abs=0.051), row
    # largest first: with the GPU idle for 15 ms of a step of about 21 ms, data loading leads the line
    assert row.split(": ", 1)[1].startswith("Data loading (GPU idle)"), row
    # the other steps have no plant: their critical rank loads data for about 0.1 ms
    for i, r in enumerate(rows):
        if i != PLANT_STEP:
            m = re.search(r"Data loading \(GPU idle\) ([0-9.]+) ms", r)
            assert m is None or float(m.group(1)) <= 0.2, r


def test_each_steps_duration_says_which_window(logdir):
    """The two step times the text prints are labelled: the ledger's is the setting rank's own step, the critical
    path's the median over the ranks (what the what-if is said against); unlabelled, one step read as two
    durations."""
    rep = json.loads(_cli(str(logdir), "--json").stdout)
    lines = _cli(str(logdir)).stdout.splitlines()
    crit = rep["ledger"]["critical"]["steps"][PLANT_STEP]
    from tb_plugin.run_level.verdict import fmt_ms

    want = f"  step {crit['step']}, set by rank {PLANT_RANK} (its step {fmt_ms(crit['wall_ms'])}): "
    assert any(line.startswith(want) for line in lines), want
    path = next(s for s in rep["steps"] if s["step"] == crit["step"])
    want = f"  step {path['step']} (median step {fmt_ms(path['step_ms'])}"
    assert any(line.startswith(want) for line in lines), want


def test_sub_millisecond_parts_print_in_microseconds():
    """A 0.4 ms step's buckets read as µs (one formatter, `verdict.fmt_ms`), not each as '0.1 ms'."""
    from tb_plugin.run_level import report

    ledger = {
        "mean": {
            "average_wall_ms": 0.42,
            "buckets": [
                {"key": "compute", "label": "Compute", "ms": 0.21},
                {"key": "data_loading", "label": "Data loading", "ms": 0.12, "recoverable_ms": 0.08},
                {"key": "exposed_comm", "label": "Exposed communication", "ms": 0.09},
            ],
        },
        "critical": {
            "buckets": [{"key": "data_loading", "label": "Data loading"}],
            "steps": [{"step": "3", "wall_ms": 0.42, "worker": "w0", "buckets": {"data_loading": 0.12}}],
        },
    }
    lines = report._ledger_lines(ledger) + report._critical_lines(ledger, {"w0": 0})
    text = "\n".join(lines)
    assert "average step 420 µs" in text
    assert "Compute: 210 µs" in text
    assert "Data loading: 120 µs, recoverable 80 µs" in text
    assert "Exposed communication: 90 µs" in text
    assert "step 3, set by rank 0 (its step 420 µs): Data loading 120 µs" in text
    assert " 0.1 ms" not in text and " 0.4 ms" not in text


def test_critical_path_words_print_microseconds_below_a_millisecond():
    """The critical path's segments in words use the same formatter: a 0.5 ms piece of work and a 0.2 ms wait read
    '500 µs' and '200 µs', not '0.5 ms' and '0.2 ms' (nor '+0.0 ms' for a 30 µs excess)."""
    from tb_plugin.run_level import critical_path, stragglers

    work = {"kind": "work", "worker": "w1", "rank": 1, "ms": 0.5, "why": None}
    assert critical_path.segment_text(work) == "rank 1: 500 µs"
    coll = {
        "kind": "collective",
        "name": "mpi::Allreduce",
        "call": 2,
        "pg": "MPI_COMM_WORLD",
        "group": "g",
        "members": 2,
        "waiters": 1,
        "late_worker": "w1",
        "late_rank": 1,
        "wait_ms_median": 0.2,
        "transfer_ms": 0.1,
    }
    text = critical_path.segment_text(coll)
    assert text == "rank 1 late at mpi::Allreduce #2 on group MPI_COMM_WORLD (2 ranks) -> 1 rank waited 200 µs", text
    assert critical_path.segment_text({**coll, "waiters": 0}).endswith(", transfer 100 µs")
    s = {"worker": "w1", "rank": 1, "step": "3", "excess_ms": 0.03, "what_if_ms": 0.4, "step_ms": 0.43, "why": ""}
    words = stragglers.describe(s)
    assert "30 µs over the median worker" in words and "would take 400 µs instead of 430 µs" in words, words
