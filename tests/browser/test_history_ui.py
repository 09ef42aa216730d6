"""The History view in headless Chromium against a real TensorBoard, on 20 generated nightly runs of one 2-rank job
whose rank 1 runs one kernel 1.5 ms longer per step from run 13 on (tests/api_support.py, as tests/test_history.py):
at 1000 and 2560 px (light and dark) the view names run 13 as the first regression, explains it with the planted
kernel on rank 1 (the job diff against run 12), highlights its row and its point on the chart and states the rule;
its button opens the Diff view's Jobs tab on that pair. Order by name and a glob are the route's parameters, kept in
the URL; a glob that matches nothing says so and keeps the tools. Without stored summaries, while the server holds
their computation, the view says "K of M workers summarized, …" and then draws the history."""

from __future__ import annotations

import os
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from .. import api_support
from .conftest import Guard, TensorBoard, browser_available, screenshot
from .test_job_diff_ui import HOLD_SUMMARIES
from .test_small_screen import MEASURE

PLANTED_FROM = 13
RUNS = 20
OLD = time.time() - 3600  # files untouched for an hour: complete, not still being written
READY_MS = 300_000  # 40 workers' summaries on a loaded 2-core machine


def _age(root: Path) -> None:
    for p in root.rglob("*.pt.trace.json*"):
        os.utime(p, (OLD, OLD))


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """A server over the planted 20-run series, and the run names in time order."""
    if browser_available():
        pytest.skip(browser_available())
    root = tmp_path_factory.mktemp("history_ui")
    names = api_support.series(root, runs=RUNS, regressed_from=PLANTED_FROM)
    _age(root)
    server = TensorBoard(root)
    try:
        server.wait_ready()
        yield server, names
    finally:
        server.stop()


@pytest.fixture(scope="module")
def held(tmp_path_factory):
    """A server over 6 runs without stored summaries, holding their computation until the returned gate exists."""
    if browser_available():
        pytest.skip(browser_available())
    d = tmp_path_factory.mktemp("history_held")
    names = api_support.series(d / "logs", runs=6, regressed_from=None)
    _age(d / "logs")
    gate = d / "release"
    server = TensorBoard(d / "logs", prelude=HOLD_SUMMARIES.format(gate=str(gate)))
    try:
        server.wait_ready()
        yield server, gate, names
    finally:
        gate.touch()
        server.stop()


def _open(page, tb: TensorBoard, extra: str = "") -> None:
    page.goto(f"{tb.url}/data/plugin_entry.html?name=gpuscope#view=history{extra}")
    page.wait_for_selector("#view-history[data-ready='1']", timeout=READY_MS)


def _rows(page) -> list[list[str]]:
    return page.evaluate(
        "() => [...document.querySelectorAll('#history-table tbody tr')].map(r => [...r.querySelectorAll('td')]"
        ".map(td => td.textContent))"
    )


def _hash(page) -> dict[str, list[str]]:
    return parse_qs(urlsplit(page.url).fragment)


@pytest.mark.parametrize(("width", "scheme"), [(1000, "light"), (2560, "dark")])
def test_the_planted_run_is_highlighted_and_explained(browser, planted, width, scheme, tmp_path):
    tb, names = planted
    context = browser.new_context(viewport={"width": width, "height": 900}, color_scheme=scheme)
    page = context.new_page()
    guard = Guard(tb.url)
    guard.attach(context, page)
    try:
        _open(page, tb)
        assert page.evaluate("document.body.classList.contains('dark')") == (scheme == "dark")
        planted_run, before = names[PLANTED_FROM], names[PLANTED_FROM - 1]
        box = page.locator("#history-regression")
        assert box.get_attribute("data-run") == planted_run
        assert f"First regression: run {planted_run}" in box.inner_text()
        cause = page.text_content("#history-cause")
        assert cause.startswith(f"Against run {before}: Compute (kernels) +"), cause
        assert api_support.SLOW_KERNEL in cause and f"on rank {api_support.PLANT_RANK}" in cause, cause
        # the table: every run in time order (the names run the other way), the planted one highlighted
        rows = _rows(page)
        assert [r[1] for r in rows] == names
        marked = page.locator("#history-table tr.first-regression")
        assert marked.count() == 1 and marked.locator("td").nth(1).inner_text() == planted_run
        assert "first regression" in marked.inner_text()
        assert all("first regression" not in " ".join(r) for i, r in enumerate(rows) if i != PLANTED_FROM)
        # its ranks are shown below the table: rank 1's median step the planted kernel's longer
        ranks = page.locator("#history-ranks tbody tr")
        assert f"Run {planted_run} per rank" in page.text_content("#history-ranks") and ranks.count() == 2
        # its background differs from the other rows' in both themes
        bg = "el => getComputedStyle(el).backgroundColor"
        other = page.locator("#history-table tbody tr").nth(2).locator("td").first
        assert marked.locator("td").first.evaluate(bg) != other.evaluate(bg)
        # the chart: one point per run, the planted one ringed and labelled; the rule under it
        assert page.locator("#history-chart circle.pt").count() == RUNS
        assert page.locator("#history-chart circle.pt.hl").get_attribute("data-cat") == planted_run
        assert f"first regression: {planted_run}" in page.text_content("#history-chart")
        rule = page.text_content("#history-rule")
        assert rule.startswith("Rule: a run regressed when its median step time") and "job diff" in rule
        # no text under 10 px, no table cut off, nothing wider than the window (as every view at 1000 px)
        m = page.evaluate(MEASURE)
        assert not m["small"] and not m["cut"] and m["overflow"] <= 0, m
        screenshot(page, f"history-{width}", tmp_path)
        page.click("#history-open-jobdiff")
        page.wait_for_selector("#view-diff[data-ready='1']", timeout=READY_MS)
        page.wait_for_selector("#jobdiff-lines li", timeout=READY_MS)
        h = _hash(page)
        assert h["run"] == [before] and h["exp_run"] == [planted_run] and h["diff_tab"] == ["jobs"], h
        first = page.text_content("#jobdiff-lines li >> nth=0")
        assert api_support.SLOW_KERNEL in first, first
        guard.check()
    finally:
        context.close()


def test_order_by_name_and_a_glob_are_the_routes(browser, planted):
    tb, names = planted
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    guard = Guard(tb.url)
    guard.attach(context, page)
    try:
        _open(page, tb)
        page.click("#history-tools button[data-value='name']")
        page.wait_for_selector("#view-history[data-ready='1']", timeout=READY_MS)
        assert _hash(page)["h_order"] == ["name"]
        assert [r[1] for r in _rows(page)] == sorted(names)
        # by name the planted runs come first: they are the baseline, no run is named
        assert page.get_attribute("#history-regression", "data-run") == ""
        page.fill("#history-match", "*-1?")
        page.press("#history-match", "Enter")
        page.wait_for_selector("#view-history[data-ready='1']", timeout=READY_MS)
        assert _hash(page)["h_match"] == ["*-1?"]
        assert [r[1] for r in _rows(page)] == sorted(n for n in names if n[-2] == "1")
        page.fill("#history-match", "weekly-*")
        page.click("#history-apply")
        page.wait_for_selector("#history-error", timeout=READY_MS)
        assert "no run matching 'weekly-*'" in page.text_content("#history-error")
        assert page.input_value("#history-match") == "weekly-*"
    finally:
        context.close()
    # a 404 is logged by the browser as a failed resource: the rest of the page must stay clean
    guard.errors = [e for e in guard.errors if "404" not in e]
    guard.check()


def test_the_view_says_summarizing_then_draws_the_history(browser, held):
    tb, gate, names = held
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    page = context.new_page()
    try:
        page.goto(f"{tb.url}/data/plugin_entry.html?name=gpuscope#view=history")
        page.wait_for_selector("#history-pending", timeout=120000)
        assert " workers summarized, " in page.text_content("#history-pending")
        gate.touch()
        page.wait_for_selector("#view-history[data-ready='1']", timeout=READY_MS)
        assert page.query_selector("#history-pending") is None
        assert [r[1] for r in _rows(page)] == names
        assert page.get_attribute("#history-regression", "data-run") == ""
    finally:
        context.close()
