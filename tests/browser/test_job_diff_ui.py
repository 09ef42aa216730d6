"""Issue 24 item 1 in headless Chromium against a real TensorBoard: the Diff view's "Jobs (all ranks)" tab shows
/jobdiff of two generated 8-rank jobs, B being A with rank 3's slow kernel planted 4 ms longer per step
(benchmarks/gen_distributed.py, as in tests/test_job_diff.py): the first ranked line names rank 3, compute and that
kernel with about +4 ms, and the CSV link asks for format=csv. The tab needs no worker pair: against a 16-rank job whose
rank 0 trace is cut short (so /diff of the rank-0 pair fails), and against a run that lists no worker, it still
compares the two jobs. A job whose slow kernel was renamed (a library upgrade) shows it as one kernel row aligned by
structure. Without stored summaries, while the server holds every summary computation, the tab shows "0 of
8 workers summarized, …" and then, once they are released and computed, the diff."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from .conftest import ROOT, TensorBoard, browser_available

sys.path.insert(0, str(ROOT / "benchmarks"))

from gen_distributed import SLOW_KERNEL, Plant, generate  # noqa: E402

KERNEL_MS = 4.0
RENAMED = "sm90_xmma_gemm_renamed"  # jd_r: jd_b with SLOW_KERNEL under this name
CUT_RUN = "jd_16"  # 16 ranks, rank 0's trace cut short: /diff of the default worker pair (rank 0 of both) fails
OLD = time.time() - 3600  # files untouched for an hour: complete, not still being written


@pytest.fixture(scope="module")
def tb(tmp_path_factory):
    if browser_available():
        pytest.skip(browser_available())
    d = tmp_path_factory.mktemp("job_diff_ui")
    slow = (Plant(3, "kernel", KERNEL_MS),)
    for run, plants, rename in (("jd_a", (), None), ("jd_b", slow, None), ("jd_r", slow, {SLOW_KERNEL: RENAMED})):
        for p in generate(str(d / run), 8, events=2000, steps=3, plants=plants, layout=True, rename=rename):
            os.utime(p, (OLD, OLD))
    cut = generate(str(d / CUT_RUN), 16, events=2000, steps=3, layout=True)
    data = Path(cut[0]).read_bytes()
    Path(cut[0]).write_bytes(data[: len(data) // 2])
    for p in cut:
        os.utime(p, (OLD, OLD))
    server = TensorBoard(Path(d))
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


#: run first in a server process: its summary computations wait until the file named by `gate` exists
HOLD_SUMMARIES = """
import os, time
from tb_plugin.summaries import engine

def _held(f):
    def held(*a, **k):
        while not os.path.exists({gate!r}):
            time.sleep(0.05)
        return f(*a, **k)
    return held

engine.summarize, engine.summarize_path = _held(engine.summarize), _held(engine.summarize_path)
"""


@pytest.fixture(scope="module")
def held_tb(tmp_path_factory):
    """A server over two 4-rank jobs (B: rank 3's slow kernel) without stored summaries, holding their computation
    until the returned gate file exists."""
    if browser_available():
        pytest.skip(browser_available())
    d = tmp_path_factory.mktemp("job_diff_held")
    for run, plants in (("jd_a", ()), ("jd_b", (Plant(3, "kernel", KERNEL_MS),))):
        for p in generate(str(d / "logs" / run), 4, events=1500, steps=2, plants=plants, layout=True):
            os.utime(p, (OLD, OLD))
    gate = d / "release"
    server = TensorBoard(d / "logs", prelude=HOLD_SUMMARIES.format(gate=str(gate)))
    try:
        server.wait_ready()
        yield server, gate
    finally:
        gate.touch()
        server.stop()


def _open_jobs_tab(page, tb, exp_run: str, done: str = "#jobdiff-lines li") -> None:
    """Opens the Diff view of jd_a against `exp_run` and its Jobs (all ranks) tab, and waits for `done`."""
    page.goto(f"{tb.url}/data/plugin_entry.html?name=gpuscope#run=jd_a&view=diff&exp_run={exp_run}")
    page.wait_for_selector("#view-diff[data-ready='1']", timeout=120000)
    page.wait_for_selector("#diff-tab-jobs", timeout=120000)
    page.click("#diff-tab-jobs")
    page.wait_for_selector(done, timeout=120000)


def test_job_diff_tab_names_the_planted_rank_kernel_and_ms(browser, tb):
    context = browser.new_context(viewport={"width": 1600, "height": 900})
    page = context.new_page()
    try:
        _open_jobs_tab(page, tb, "jd_b")
        assert "diff_tab=jobs" in page.evaluate("location.hash")
        header = page.text_content("#jobdiff-header")
        assert "(8 ranks" in header and header.count("8 ranks") == 2, header
        first = page.text_content("#jobdiff-lines li >> nth=0")
        assert first.startswith("Compute (kernels) +"), first
        assert "on rank 3:" in first and f"kernel {SLOW_KERNEL}" in first, first
        got_ms = float(re.match(r"Compute \(kernels\) \+([0-9.]+) ms per step", first).group(1))
        assert got_ms == pytest.approx(KERNEL_MS, rel=0.1)
        # the drill-down: the kernel table's first row is the planted kernel, 4 ms / 8 ranks longer on the mean rank
        k0 = _kernel_rows(page)[0]
        assert k0["Kernel"] == SLOW_KERNEL and k0["Δ"].startswith("+0.5") and k0["Aligned by"] == "name", k0
        # per rank: 8 rows, rank 3's step +4 ms
        ranks = page.evaluate(
            "() => [...document.querySelectorAll('#jobdiff-ranks tbody tr')].map(r => [...r.querySelectorAll('td')]"
            ".map(td => td.textContent))"
        )
        assert [r[0] for r in ranks] == [f"rank {i}" for i in range(8)]
        assert float(ranks[3][3].removeprefix("+").removesuffix(" ms")) == pytest.approx(KERNEL_MS, rel=0.1)
        # the compute column (shown: it changed on some rank) has rank 3's +4 ms, and no change on the others
        heads = page.evaluate(
            "() => [...document.querySelectorAll('#jobdiff-ranks thead th')].map(th => th.textContent)"
        )
        ci = heads.index("Δ Compute (kernels)")
        assert float(ranks[3][ci].removeprefix("+").removesuffix(" ms")) == pytest.approx(KERNEL_MS, rel=0.1)
        assert all(r[ci] == "0.00 ms" for i, r in enumerate(ranks) if i != 3), ranks
        href = page.get_attribute("#jobdiff-csv", "href")
        q = parse_qs(urlsplit(href).query)
        assert q["format"] == ["csv"] and q["run"] == ["jd_a"] and q["exp_run"] == ["jd_b"], href
        # the link answers a CSV file whose first ranked row is the same line
        csv = page.evaluate("h => fetch(h).then(r => r.text())", href)
        assert csv.splitlines()[1].startswith("1,kernel,"), csv[:300]
    finally:
        context.close()


def _kernel_rows(page) -> list[dict]:
    """The job diff's kernel table as {column header: cell text} per row, in the order shown."""
    return page.evaluate(
        "() => { const hs = [...document.querySelectorAll('#jobdiff-kernels thead th')].map(th => th.textContent);"
        " return [...document.querySelectorAll('#jobdiff-kernels tbody tr')].map(r => Object.fromEntries("
        "[...r.querySelectorAll('td')].map((td, i) => [hs[i], td.textContent]))); }"
    )


def test_renamed_kernel_is_one_row_aligned_by_structure(browser, tb):
    context = browser.new_context(viewport={"width": 1600, "height": 900})
    page = context.new_page()
    try:
        _open_jobs_tab(page, tb, "jd_r")
        rows = _kernel_rows(page)
        top = rows[0]
        assert top["Kernel"] == f"{SLOW_KERNEL} -> {RENAMED}" and top["Aligned by"] == "structure", top
        assert top["Δ"].startswith("+0.5") and top["Op path"] not in ("", "–"), top
        assert not [r for r in rows if r["Aligned by"] == "unmatched"], rows
    finally:
        context.close()


def test_jobs_tab_needs_no_worker_pair(browser, tb):
    context = browser.new_context(viewport={"width": 1600, "height": 900})
    page = context.new_page()
    try:
        # 8 ranks against 16 whose rank 0 cannot be read: the rank-0 pair's diff fails in its own tab, the Jobs tab
        # compares the jobs (the 15 readable ranks of B) and names the unreadable worker
        _open_jobs_tab(page, tb, CUT_RUN, done="#jobdiff-header")
        header = page.text_content("#jobdiff-header")
        assert "(8 ranks" in header and "(15 ranks" in header, header
        assert "node0_rank00000" in page.text_content("#jobdiff-errors")
        assert "diff_tab=jobs" in page.evaluate("location.hash")
        page.click("#diff-tab-ops")
        failed = page.text_content("#diff-ops .banner[data-failed]")
        assert "truncated" in failed, failed
        # the compared run lists no worker (its /workers answers none): no pair, yet the two jobs are compared
        page.route(
            lambda u: "/data/plugin/gpuscope/workers?" in u and "run=jd_b" in u,
            lambda route: route.fulfill(json={"workers": []}),
        )
        page.goto("about:blank")
        _open_jobs_tab(page, tb, "jd_b", done="#jobdiff-lines li")
        assert page.input_value("#diff-worker") == ""
        assert page.text_content("#jobdiff-lines li >> nth=0").startswith("Compute (kernels) +")
        page.click("#diff-tab-ops")
        assert "no worker" in page.text_content("#diff-ops .banner[data-nopair]")
    finally:
        context.close()


def test_jobs_tab_says_summarizing_then_shows_the_diff(browser, held_tb):
    tb, gate = held_tb
    context = browser.new_context(viewport={"width": 1600, "height": 900})
    page = context.new_page()
    try:
        _open_jobs_tab(page, tb, "jd_b", done="#jobdiff-pending")
        text = page.text_content("#jobdiff-pending")
        assert text.startswith("0 of 8 workers summarized, estimating the time left…"), text
        assert page.query_selector("#jobdiff-header") is None
        gate.touch()  # the summaries are computed now: the tab, asking again, shows the diff
        page.wait_for_selector("#jobdiff-lines li", timeout=120000)
        first = page.text_content("#jobdiff-lines li >> nth=0")
        assert first.startswith("Compute (kernels) +") and "on rank 3:" in first, first
        assert "(4 ranks" in page.text_content("#jobdiff-header")
        assert page.query_selector("#jobdiff-pending") is None
    finally:
        context.close()
