"""Navigation users expect, in headless Chromium against a real TensorBoard: the browser's Back and Forward move
between gpuscope's own views inside TensorBoard's tab (each view change adds a history entry; it used to replace
the URL, so Back left TensorBoard's page); a worker or span the URL names that is not there is said; table headers sort by keyboard."""

from __future__ import annotations

import pytest

from .conftest import MANY_STEPS_RUN, open_view
from .test_ui_bugs import plugin_frame

READY_MS = 60000


def _view(frame) -> str:
    frame.wait_for_selector("#gs-main .view[data-ready='1']", timeout=READY_MS)
    return frame.get_attribute("#gs-main .view", "id")


def _go(page, frame, how: str, view: str) -> None:
    """The browser's Back or Forward on TensorBoard's page (the history the iframe's entries joined), then wait
    until the frame shows `view`."""
    page.evaluate(f"setTimeout(() => history.{how}(), 0)")  # returns before the history moves
    frame.wait_for_selector(f"#{view}[data-ready='1']", timeout=READY_MS)


@pytest.mark.parametrize("width", [800, 1300])
def test_back_and_forward_move_between_views(browser, tensorboard, width):
    context = browser.new_context(viewport={"width": width, "height": 900})
    try:
        page = context.new_page()
        page.goto(f"{tensorboard.url}/#gpuscope")
        frame = plugin_frame(page)
        _view(frame)
        frame.select_option("#gs-run", MANY_STEPS_RUN)
        frame.wait_for_function(
            "run => new URLSearchParams(location.hash.slice(1)).get('run') === run"
            " && document.querySelector('.view')?.dataset.ready === '1'",
            arg=MANY_STEPS_RUN,
        )
        first = _view(frame)
        for tab in ("kernels", "operators"):
            frame.click(f".tab[data-view={tab}]")
            frame.wait_for_selector(f"#view-{tab}[data-ready='1']", timeout=READY_MS)
        _go(page, frame, "back", "view-kernels")
        # still TensorBoard's page, its URL mirroring the view shown
        assert page.url.startswith(tensorboard.url) and "p.gpuscope.view=kernels" in page.url, page.url
        assert frame.get_attribute(".tab[data-view=kernels]", "aria-selected") == "true"
        _go(page, frame, "back", first)
        assert frame.input_value("#gs-run") == MANY_STEPS_RUN
        _go(page, frame, "forward", "view-kernels")
        _go(page, frame, "forward", "view-operators")
        assert page.url.startswith(tensorboard.url) and "p.gpuscope.view=operators" in page.url, page.url
    finally:
        context.close()


@pytest.mark.parametrize("width", [800, 1300])
def test_unknown_worker_or_span_in_the_url_is_said(browser, tensorboard, width):
    """A worker or span the URL names that the run lacks is said in a notice, with what is shown instead (it was
    replaced silently)."""
    context = browser.new_context(viewport={"width": width, "height": 900})
    try:
        page = context.new_page()
        open_view(page, tensorboard, "overview", MANY_STEPS_RUN, "worker=nosuchworker")
        text = page.inner_text("#gs-notice")
        shown = page.input_value("#gs-worker")
        assert "nosuchworker" in text and f'"{shown}"' in text and shown != "nosuchworker", text
        page = context.new_page()
        open_view(page, tensorboard, "overview", MANY_STEPS_RUN, f"worker={shown}&span=nosuchspan")
        assert "nosuchspan" in page.inner_text("#gs-notice")
        assert page.input_value("#gs-span") != "nosuchspan"
        # a known worker and span: no notice
        page = context.new_page()
        open_view(page, tensorboard, "overview", MANY_STEPS_RUN, f"worker={shown}")
        assert page.locator("#gs-notice").count() == 0
    finally:
        context.close()


@pytest.mark.parametrize("width", [800, 1300])
def test_table_headers_sort_by_keyboard_with_aria_sort(browser, tensorboard, width):
    """A table's headers are tab stops: Enter and Space sort by that column, focus stays on the header, and
    `aria-sort` says the order (none on the other headers)."""
    context = browser.new_context(viewport={"width": width, "height": 900})
    try:
        page = context.new_page()
        open_view(page, tensorboard, "operators", MANY_STEPS_RUN)
        th = "#view-operators th[data-key='calls']"
        page.wait_for_selector(th)
        assert page.get_attribute(th, "aria-sort") == "none"
        page.focus(th)
        page.keyboard.press("Enter")
        assert page.get_attribute(th, "aria-sort") == "descending"
        assert page.evaluate("() => document.activeElement?.dataset.key") == "calls"
        page.keyboard.press(" ")
        assert page.get_attribute(th, "aria-sort") == "ascending"
        assert page.evaluate("() => document.activeElement?.dataset.key") == "calls"
        others = page.eval_on_selector_all(
            "#view-operators th.sortable", "ths => ths.filter(t => t.dataset.key !== 'calls').map(t => t.ariaSort)"
        )
        assert others and set(others) == {"none"}, others
        # Tab moves on to the next header
        page.keyboard.press("Tab")
        assert page.evaluate("() => document.activeElement?.tagName") == "TH"
    finally:
        context.close()
