"""What the diagnosis cannot know, said first (issue 37 item 5; `tb_plugin/run_level/caveats.py`): on the shared
real jobs (2 of 128 ranks; one profiled step; no ProfilerStep) and on generated jobs (a rank dropped, collectives
without `Collective name`, call counts that differ), through `gpuscope diagnose --json` and its text, the
Distributed view and the Overview's run ledger; a complete, multi-step, matched job (the twin) gets none."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

from tb_plugin.run_level import caveats as cv
from tb_plugin.run_level.run_ledger import run_view
from tb_plugin.summaries.schema import from_dict

from .conftest import TRACES, missing
from .summaries_support import gpuscope

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from gen_distributed import generate  # noqa: E402

PUBLIC = TRACES / "public"
REAL = ("hta_trace_filter", "ds_train_h800", "moe_a100_2rank_alltoall")
HEAD = "What this diagnosis cannot know:"


@pytest.fixture(scope="module")
def real_logdir(tmp_path_factory) -> Path:
    if not all((PUBLIC / r).is_dir() for r in REAL):
        missing(f"the shared real traces ({PUBLIC})")
    root = tmp_path_factory.mktemp("caveats_real") / "logs"
    root.mkdir()
    for r in REAL:
        (root / r).symlink_to(PUBLIC / r, target_is_directory=True)
    return root


def _diagnose(logdir: Path, run: str | None = None) -> tuple[dict, str]:
    """`gpuscope diagnose --json` and its text on the run."""
    extra = (run,) if run else ()
    j = gpuscope("diagnose", str(logdir), *extra, "--json")
    assert j.returncode == 0, j.stderr
    t = gpuscope("diagnose", str(logdir), *extra)
    assert t.returncode == 0, t.stderr
    return json.loads(j.stdout), t.stdout


def _keys(rep: dict) -> list[str]:
    return [c["key"] for c in rep["caveats"]]


def _leads(text: str, *words: str) -> None:
    """The text's first lines (after the run line) are the caveats, holding `words`."""
    lines = text.splitlines()
    assert lines[1] == HEAD, lines[:3]
    block = lines[1 : lines.index("", 1)]
    for w in words:
        assert any(w in x for x in block), (w, block)


def _nothing_cross_rank(rep: dict) -> None:
    assert rep["worst"] is None and rep["stragglers"] == [] and rep["steps"] == []
    assert rep["withheld"] == cv.MISSING_RANKS and "withheld" in rep["reason"]
    led = rep["ledger"]
    assert led["critical"] is None and led["caveats"] == rep["caveats"]
    skew = [b for b in led["mean"]["buckets"] if b["key"] == "sync_skew"][0]
    assert skew["ms"] is None and "missing ranks" in skew["reason"]


def test_two_of_128_ranks_claim_no_waiting_straggler_or_what_if(real_logdir):
    rep, text = _diagnose(real_logdir, "hta_trace_filter")
    assert list(rep)[0] == "caveats"
    first = rep["caveats"][0]
    assert first["key"] == cv.MISSING_RANKS and first["withholds"] is True
    assert "2 of 128 ranks present" in first["text"] and "126 ranks missing" in first["text"]
    _nothing_cross_rank(rep)
    # an older trace: its NCCL kernels name no collective nor process group
    un = [c for c in rep["caveats"] if c["key"] == cv.UNMATCHED]
    assert un and "Collective name" in un[0]["text"] and un[0]["withholds"] is False
    _leads(text, "2 of 128 ranks present", "Collective name")
    assert "Straggler:" not in text and "Waiting for other ranks (sync skew): n/a" in text
    assert "at the median the step would take" not in text


def test_one_profiled_step(real_logdir):
    rep, text = _diagnose(real_logdir, "ds_train_h800")
    assert _keys(rep) == [cv.MISSING_RANKS, cv.ONE_STEP]
    assert "1 of 64 ranks present" in rep["caveats"][0]["text"]
    one = rep["caveats"][1]
    assert "one profiled step (ProfilerStep#1)" in one["text"] and "steady state is unknown" in one["text"]
    _leads(text, "1 of 64 ranks present", "one profiled step", "profile 5 steps")


def test_no_profiler_step_says_the_window_used(real_logdir):
    rep, text = _diagnose(real_logdir, "moe_a100_2rank_alltoall")
    assert _keys(rep) == [cv.NO_STEPS]  # both ranks of 2 present; the 12 all_to_allv all matched
    t = rep["caveats"][0]["text"]
    assert "no ProfilerStep" in t and "whole trace window (22.7-23.8 ms)" in t and 'one step "0"' in t
    assert rep["withheld"] is None and rep["worst"] is not None  # nothing withheld: the ranks are all there
    _leads(text, "no ProfilerStep", "whole trace window")


# --- generated jobs -----------------------------------------------------------------------------------------------


def _job(root: Path, **kw) -> Path:
    generate(str(root / "job"), 4, events=2000, steps=3, buckets=4, straggler=-1, **kw)
    return root


def test_complete_matched_multi_step_job_has_no_caveat(tmp_path):
    rep, text = _diagnose(_job(tmp_path))
    assert rep["caveats"] == [] and rep["withheld"] is None and list(rep)[0] == "caveats"
    assert HEAD not in text and text.startswith(f"run job, span 1\nVerdict: {rep['verdict']['text']}\n\n")
    assert "\ngpuscope diagnosis: 4 workers\n" in text
    assert len(rep["steps"]) == 3


def test_a_dropped_rank_withholds_the_cross_rank_claims(tmp_path):
    rep, text = _diagnose(_job(tmp_path, drop=(2,)))
    assert _keys(rep) == [cv.MISSING_RANKS]
    assert "3 of 4 ranks present (ranks 0-1, 3;" in rep["caveats"][0]["text"]
    _nothing_cross_rank(rep)
    _leads(text, "3 of 4 ranks present")


def test_collectives_without_collective_name_are_matched_by_order_and_say_so(tmp_path):
    """No record_param_comms names the NCCL collectives, and no backend range either: the kernels are matched by
    stream, name and order, and the caveat says so, since a member's missing call would shift the order."""
    rep, text = _diagnose(_job(tmp_path, nameless=True))
    assert _keys(rep) == [cv.MATCHED_BY_ORDER]
    t = rep["caveats"][0]["text"]
    assert t.startswith("of the 48 matched calls, 48 by the kernel's stream, name and order") and "Collective name" in t
    assert len(rep["steps"]) == 3 and all(
        any(s["kind"] == "collective" for s in step["segments"]) for step in rep["steps"]
    )
    _leads(text, "of the 48 matched calls")


def test_call_counts_that_differ_are_named(tmp_path):
    root = _job(tmp_path)
    path = sorted((root / "job").glob("*rank00001*"))[0]
    doc = json.loads(gzip.decompress(path.read_bytes()))
    last = max(i for i, e in enumerate(doc["traceEvents"]) if e.get("name") == "record_param_comms")
    del doc["traceEvents"][last]  # rank 1's last all_reduce call (its kernel stays, named by no call)
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    rep, _ = _diagnose(root)
    t = [c for c in rep["caveats"] if c["key"] == cv.UNMATCHED][0]["text"]
    assert "call counts differ between its members (rank 1: 11, rank 0: 12" in t, t


# --- the views ----------------------------------------------------------------------------------------------------


def _summary(rank: int, world: int, steps: list[str], whole: bool = False, host: str | None = None):
    ph = {
        "step": steps,
        "start": [i * 10_000_000 for i in range(len(steps))],
        "end": [(i + 1) * 10_000_000 for i in range(len(steps))],
        **{k: [0] * len(steps) for k in ("data_loading", "h2d", "host_sync", "launch", "gpu_idle", "compute")},
        "comm": [0] * len(steps),
        "names": [],
        "top_kernels": [[] for _ in steps],
        "top_ops": [[] for _ in steps],
        "reasons": {},
        "whole_trace": whole,
    }
    return from_dict({"devices": {"rank": rank, "world_size": world, "host": host}, "phases": ph})


def test_caveats_from_summaries_only():
    full = {f"w{r}": _summary(r, 2, ["1", "2", "3"]) for r in range(2)}
    assert [c.key for c in cv.caveats(full)] == [cv.UNMATCHED]  # no collective at all links the two
    assert "no collective in any of the 2 workers' traces" in cv.caveats(full)[0].text
    mixed = {"a": _summary(0, 2, ["1"]), "b": _summary(1, 4, ["1"])}
    c = cv.caveats(mixed)[0]
    assert c.key == cv.MISSING_RANKS and c.withholds and "disagree on world_size (2, 4)" in c.text
    hosts = {f"w{r}": _summary(r, 2, ["1", "2"], host=f"node{r}") for r in range(2)}
    h = [c for c in cv.caveats(hosts) if c.key == cv.HOSTS][0]
    assert "2 hosts (node0, node1)" in h.text and not h.withholds
    # no host named (torch's traces): the caveat is left out, not guessed
    assert cv.HOSTS not in [c.key for c in cv.caveats(full)]


def test_distributed_view_and_run_ledger_carry_the_caveats(tmp_path):
    from profiler_core.trace.read.reader import read_trace
    from tb_plugin import handlers
    from tb_plugin.summaries.summary import summarize

    _job(tmp_path, drop=(2,))
    summaries = {p.name.split(".")[0]: summarize(read_trace(str(p))) for p in sorted((tmp_path / "job").iterdir())}
    d = handlers.distributed_view(summaries)
    assert list(d)[0] == "caveats" and [c["key"] for c in d["caveats"]] == [cv.MISSING_RANKS]
    assert d["stragglers"] == [] and d["withheld"] == cv.MISSING_RANKS
    led = run_view(summaries)
    assert list(led)[0] == "caveats" and led["caveats"] == d["caveats"] and led["critical"] is None
