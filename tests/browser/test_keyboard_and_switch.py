"""Navigation by keyboard and fast switches (issue 39, items 5 and 6), in headless Chromium against a real
TensorBoard, each at two widths: the view tabs move with the arrow keys and keep the focus after the view is drawn
again; a run switched while the shown view still loads asks nothing without its required parameters (the old view
used to go on asking with the new run and no worker or span: HTTP 400); the timeline ruler's last label is not cut
by the canvas's edge."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from .conftest import HTML_RUN, MANY_STEPS_RUN, open_view

READY_MS = 60000
WIDTHS = [1000, 2560]


def _focused_tab(page) -> str | None:
    return page.evaluate(
        "() => document.activeElement?.getAttribute('role') === 'tab' ? document.activeElement.dataset.view : null"
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_view_tabs_by_arrow_keys_keep_the_focus(browser, tensorboard, width):
    context = browser.new_context(viewport={"width": width, "height": 900})
    try:
        page = context.new_page()
        open_view(page, tensorboard, "overview", MANY_STEPS_RUN)
        # one tab stop: the selected tab
        stops = page.eval_on_selector_all(
            ".tabs[role=tablist] > [role=tab]", "ts => ts.filter(t => t.tabIndex === 0).map(t => t.dataset.view)"
        )
        assert stops == ["overview"], stops
        page.focus(".tab[data-view=overview]")
        page.keyboard.press("ArrowRight")
        page.wait_for_selector("#view-operators[data-ready='1']", timeout=READY_MS)
        # the tabs were drawn again with the view: the focus is on the new selected tab, not lost to <body>
        assert _focused_tab(page) == "operators"
        assert page.get_attribute(".tab[data-view=operators]", "aria-selected") == "true"
        page.keyboard.press("ArrowRight")
        page.wait_for_selector("#view-kernels[data-ready='1']", timeout=READY_MS)
        assert _focused_tab(page) == "kernels"
        page.keyboard.press("ArrowLeft")
        page.wait_for_selector("#view-operators[data-ready='1']", timeout=READY_MS)
        assert _focused_tab(page) == "operators"
        page.keyboard.press("Home")
        page.wait_for_selector("#view-overview[data-ready='1']", timeout=READY_MS)
        assert _focused_tab(page) == "overview"
        # Left from the first wraps to the last
        page.keyboard.press("ArrowLeft")
        page.wait_for_selector("#view-history[data-ready='1'], #view-history[data-ready='error']", timeout=READY_MS)
        assert _focused_tab(page) == "history"
        stops = page.eval_on_selector_all(
            ".tabs[role=tablist] > [role=tab]", "ts => ts.filter(t => t.tabIndex === 0).map(t => t.dataset.view)"
        )
        assert stops == ["history"], stops
        # a click keeps the focus on the clicked tab too
        page.click(".tab[data-view=timeline]")
        page.wait_for_selector("#view-timeline[data-ready='1']", timeout=READY_MS)
        assert _focused_tab(page) == "timeline"
    finally:
        context.close()


# delays inside the page: the Memory view's first answer, and the next run's worker list (so the old view's answer
# comes while the shell knows the new run but none of its workers yet)
DELAYS = """
(() => {
  const orig = window.fetch.bind(window);
  window.fetch = (input, init) => {
    const u = String(typeof input === 'string' ? input : input.url);
    const ms = u.includes('memory/curve') ? 1500 : u.includes('workers?run=' + encodeURIComponent(%r)) ? 3500 : 0;
    const p = orig(input, init);
    return ms ? p.then((res) => new Promise((r) => setTimeout(() => r(res), ms))) : p;
  };
})();
"""


@pytest.mark.parametrize("width", WIDTHS)
def test_a_fast_run_switch_asks_nothing_without_its_parameters(browser, tensorboard, width):
    context = browser.new_context(viewport={"width": width, "height": 900})
    try:
        page = context.new_page()
        page.add_init_script(DELAYS % MANY_STEPS_RUN)
        bad: list[str] = []
        asked: list[str] = []

        def seen(r):
            if "/data/plugin/gpuscope/" in r.url:
                asked.append(r.url)
                if r.status >= 400:
                    bad.append(f"{r.status} {r.url}")

        page.on("response", seen)
        with page.expect_request(lambda r: "memory/curve" in r.url, timeout=READY_MS):
            page.goto(
                f"{tensorboard.url}/data/plugin_entry.html?name=gpuscope#run={quote(HTML_RUN, safe='')}&view=memory"
            )
        # the memory view waits for its curve: switch the run now
        page.select_option("#gs-run", MANY_STEPS_RUN)
        page.wait_for_selector("#view-memory[data-ready='1'], #view-memory[data-ready='error']", timeout=READY_MS)
        page.wait_for_function(
            "run => new URLSearchParams(location.hash.slice(1)).get('run') === run",
            arg=MANY_STEPS_RUN,
            timeout=READY_MS,
        )
        page.wait_for_timeout(1500)  # any late request of the old view has been answered by now
        assert any("memory/curve" in u and "many_steps" in u for u in asked), asked
        assert not bad, bad
    finally:
        context.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_timeline_ruler_last_label_is_not_cut(browser, tensorboard, width):
    """A tick just inside the canvas's right edge: its label reads left of it (it was drawn right of the tick and
    cut); every label lies inside the plot and none overlaps the next."""
    context = browser.new_context(viewport={"width": width, "height": 900})
    try:
        page = context.new_page()
        open_view(page, tensorboard, "timeline", MANY_STEPS_RUN)
        page.wait_for_function("() => window.__gpuscope.timeline && window.__gpuscope.timeline.stats.frames > 0")
        canvas_w = page.evaluate("document.querySelector('#tl-canvas canvas').getBoundingClientRect().width")
        near_edge = 0
        for span in (1000.2, 2000.5, 500.05, 10001.0):
            page.evaluate(
                "s => { const t = window.__gpuscope.timeline; const [a] = t.extent(); const a0 = Math.ceil(a / 1000) * 1000 + 1000; t.setView(a0, a0 + s); }",
                span,
            )
            page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
            boxes = page.evaluate("window.__gpuscope.timeline.stats.rulerBoxes")
            labels = page.evaluate("window.__gpuscope.timeline.stats.ruler")
            assert len(boxes) == len(labels) >= 2, (span, labels)
            for left, right in boxes:
                assert left >= 200 and right <= canvas_w, (span, labels, boxes, canvas_w)
            assert all(b[0] >= a[1] for a, b in zip(boxes, boxes[1:])), (span, boxes)
            near_edge += boxes[-1][1] > canvas_w - 12
        assert near_edge, "no view put a labelled tick at the right edge"
    finally:
        context.close()
