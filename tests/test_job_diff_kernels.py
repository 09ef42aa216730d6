"""Job diff kernels (issue 24 item 2): kernels aligned as the Diff view's kernel diff aligns them, from the
summaries' kernel tables. Job B renames a kernel (a library or hardware upgrade: `gen_distributed.py
--rename-kernel`) and makes it slower on one rank: the job diff names it as one row matched by structure, with
its delta, never as a removed kernel plus a new one; its alignment is the kernel diff's on the same traces."""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec
import pytest

from profiler_core.analysis.worker import kernel_table
from profiler_core.analysis.worker.buckets import COMPUTE
from profiler_core.trace.read.reader import read_trace
from tb_plugin.run_level import job_diff as J
from tb_plugin.summaries.summary import summarize_path
from tb_plugin.views.kernel_diff import kernel_diff

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from gen_distributed import SLOW_KERNEL, Plant, generate, parse_rename  # noqa: E402

RANKS, SLOW_RANK, MS = 4, 1, 4.0
NEW = "sm90_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x64x32_warpgroupsize1x1x1"


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> dict:
    """Job A (the planted layout) and job B (SLOW_KERNEL renamed NEW, MS slower on SLOW_RANK): paths and
    summaries by worker."""
    logdir = tmp_path_factory.mktemp("jobdiff_kernels")
    out = {}
    for name, plants, rename in (
        ("a", (), None),
        ("b", (Plant(SLOW_RANK, "kernel", MS),), {SLOW_KERNEL: NEW}),
    ):
        paths = generate(str(logdir / name), RANKS, events=2000, steps=3, plants=plants, layout=True, rename=rename)
        out[name] = {Path(p).name.split(".")[0]: p for p in paths}
        out[name + "_s"] = {w: summarize_path(p) for w, p in out[name].items()}
    return out


def test_renamed_kernel_is_one_row_matched_by_structure(jobs):
    r = J.job_diff(jobs["a_s"], jobs["b_s"])
    label = f"{SLOW_KERNEL} -> {NEW}"
    top = r["kernels"][0]
    assert (top["name"], top["align"], top["a_name"], top["b_name"]) == (label, "structure", SLOW_KERNEL, NEW)
    assert top["a_path"] == top["b_path"] == "aten::mm"
    assert top["delta_ms"] == pytest.approx(MS / RANKS, rel=0.1)
    # every kernel of A has its row in B: nothing unmatched, and the old name is never a loss nor the new a gain
    assert all(k["align"] != "unmatched" for k in r["kernels"]), [k for k in r["kernels"] if k["align"] == "unmatched"]
    assert not [k for k in r["kernels"] if k["name"] in (SLOW_KERNEL, NEW)]
    # the compute line of the slow rank names the renamed kernel, with the planted ms
    first = r["lines"][0]
    assert (first["bucket"], first["kind"], first["name"], first["ranks"]) == (COMPUTE, "kernel", label, [SLOW_RANK])
    assert first["delta_ms"] == pytest.approx(MS, rel=0.1) and f"kernel {label} +4.0" in first["text"]
    assert f"{label},,all," in J.to_csv(r) and ",structure" in J.to_csv(r)


def test_job_diff_aligns_as_the_kernel_diff(jobs):
    """One rank of each job: the kernel diff of its two traces and the job diff of its two summaries pair the same
    (align, base kernel and path, exp kernel and path); communication kernels, which the job diff leaves out,
    aside."""
    w = sorted(jobs["a"])[SLOW_RANK]
    kd = kernel_diff(read_trace(jobs["a"][w], processes=0), read_trace(jobs["b"][w], processes=0))

    def side(s):
        return (s["name"], s["path"]) if s else None

    compute = [x for x in kd["rows"] if "nccl" not in (x["base"] or x["exp"])["name"]]
    want = {(x["align"], side(x["base"]), side(x["exp"])) for x in compute}
    r = J.job_diff({w: jobs["a_s"][w]}, {w: jobs["b_s"][w]})
    got = {
        (
            k["align"],
            (k["a_name"], k["a_path"]) if k["a_name"] is not None else None,
            (k["b_name"], k["b_path"]) if k["b_name"] is not None else None,
        )
        for k in r["kernels"]
    }
    assert got == want
    assert ("structure", (SLOW_KERNEL, "aten::mm"), (NEW, "aten::mm")) in got


def test_kernel_table_is_bounded_and_counts_steps(jobs, monkeypatch):
    s = jobs["a_s"][sorted(jobs["a"])[0]]
    t = s.kernel_table
    assert t is not None
    kernel_table.check(msgspec.to_builtins(t))
    assert t.steps == 3 and t.dropped == 0 and len(t.name) == len(set(zip(t.path, t.name)))
    # the same kernels as the steps' top kernels (fewer than TOP_N names here): per name, the same ns
    ph = s.phases
    tops: dict[str, int] = {}
    for top in ph.top_kernels:
        for i, ns in top:
            tops[ph.names[int(i)]] = tops.get(ph.names[int(i)], 0) + ns
    table: dict[str, int] = {}
    for name, ns in zip(t.name, t.total):
        table[name] = table.get(name, 0) + ns
    assert table == tops and len(table) >= 5
    # at most MAX_GROUPS groups, the largest by time, in order of first start; the rest counted as dropped
    monkeypatch.setattr(kernel_table, "MAX_GROUPS", 3)
    small = kernel_table.project(read_trace(jobs["a"][sorted(jobs["a"])[0]], processes=0))
    assert len(small["name"]) == 3 and small["dropped"] == len(t.name) - 3
    kept = sorted(t.total, reverse=True)[:3]
    assert sorted(small["total"], reverse=True) == kept
    assert small["dropped_ns"] == sum(t.total) - sum(kept)


def test_rename_option_splits_at_the_names_colon():
    assert parse_rename("void at::native::k<1>:void at::native::k2<1>") == (
        "void at::native::k<1>",
        "void at::native::k2<1>",
    )
    assert parse_rename("sm80_a:sm90_a") == ("sm80_a", "sm90_a")
    for bad in ("nocolon", ":x", "x:"):
        with pytest.raises(ValueError):
            parse_rename(bad)
