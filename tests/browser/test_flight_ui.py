"""The flight recorder's section of the Distributed view, in headless Chromium against a real TensorBoard: a job
whose telemetry (4 ranks x 200 steps: rank 1 5 ms slower in every step, rank 3 20 ms slower in steps 100-109,
written with the recorder's own encoder) sits in the logdir beside the run of the capture its trigger started.
Opening the capture's Distributed view shows the telemetry of its parent folder: the rank x step heatmap of the
whole run, the chronic and the occasional straggler, and the capture with its reason."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ..test_flight_telemetry import _job
from .conftest import Guard, TensorBoard, browser_available, missing, open_view, screenshot, wait_summaries

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from gen_distributed import generate  # noqa: E402

RUN = "capture_step000106"


@pytest.fixture(scope="module")
def flight_tb(tmp_path_factory):
    if browser_available():
        missing(browser_available())
    d = tmp_path_factory.mktemp("flight_logdir")
    _job(d)  # the telemetry of 4 ranks in the logdir itself; its capture record names RUN
    generate(str(d / RUN), ranks=4, events=2000, steps=2)
    tb = TensorBoard(d)
    try:
        tb.wait_ready()
        wait_summaries(tb, RUN, 4)
        yield tb
    finally:
        tb.stop()


@pytest.fixture
def page(browser, flight_tb):
    context = browser.new_context(viewport={"width": 1300, "height": 1000}, color_scheme="light")
    pg = context.new_page()
    guard = Guard(flight_tb.url)
    guard.attach(context, pg)
    yield pg
    context.close()
    guard.check()


def test_heatmap_stragglers_and_capture(page, flight_tb, tmp_path):
    open_view(page, flight_tb, "distributed", RUN, "worker=rank00000")
    page.wait_for_selector("#flight-heatmap svg rect.cell", timeout=60000)
    cells = page.locator("#flight-heatmap svg rect.cell")
    rows = sorted(set(cells.evaluate_all("els => els.map(e => e.getAttribute('data-row'))")))
    assert rows == ["0", "1", "2", "3"]
    assert cells.count() == 4 * 200  # 200 steps fit in the 200 columns: one step per cell
    burst = page.locator("#flight-heatmap rect.cell[data-row='3'][data-col='105'] title").text_content()
    assert burst.startswith("rank 3 · steps 105–105") and "30.0 ms" in burst, burst
    text = page.inner_text("#flight-stragglers")
    assert "chronic straggler: rank 1, late in 189 steps" in text, text
    assert "occasional straggler: rank 3, late in 10 steps; bursts: steps 100–109" in text, text
    caps = page.inner_text("#flight-captures")
    assert "slow_rank" in caps and "rank 3 +20.0 ms over the other ranks' median" in caps and "shown" in caps, caps
    page.locator("#dist-flight").scroll_into_view_if_needed()
    screenshot(page, "flight_recorder", tmp_path)


def test_metric_switch_asks_for_another_metric(page, flight_tb):
    open_view(page, flight_tb, "distributed", RUN, "worker=rank00000&tmetric=data_ms")
    page.wait_for_selector("#flight-heatmap svg rect.cell", timeout=60000)
    title = page.locator("#flight-heatmap rect.cell[data-row='0'][data-col='0'] title").text_content()
    assert "1.0 ms" in title, title  # every step's data wait is 1 ms
