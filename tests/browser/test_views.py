"""Each view renders with data in headless Chromium against a real `tensorboard --logdir`, with no
console error and no request leaving the server; screenshots go to docs/screenshots/."""

from __future__ import annotations

import pytest

from .conftest import SHARED_RUNS, TRACES, missing, open_view, screenshot

# view -> (run, extra hash state, selector that proves data was drawn, minimal count)
CASES = {
    "overview": ("resnet50", "", "#view-overview svg.chart rect.bar", 3),
    "operators": ("cnn_single", "", "#view-operators table.data-table tbody tr.clickable", 10),
    "kernels": ("resnet50", "", "#view-kernels table.data-table tbody tr", 10),
    "timeline": ("resnet50", "", "#tl-canvas canvas", 1),
    "memory": ("cnn_single", "", "#view-memory svg.line-chart polyline.series", 1),
    "modules": ("cnn_single", "", "#view-modules table.tree tbody tr", 1),
    "distributed": ("cnn_ddp", "", "#view-distributed svg.chart rect.bar", 2),
    "diff": ("resnet50", "", "#diff-out table.data-table tbody tr", 2),
}


def need_shared(run: str) -> None:
    if run in SHARED_RUNS.values() and not TRACES.is_dir():
        missing("../shared/traces not present (set GPUSCOPE_SHARED)")


@pytest.mark.parametrize("view", list(CASES))
def test_view_renders_with_data(guarded_page, tensorboard, view, tmp_path):
    run, extra, selector, minimum = CASES[view]
    need_shared(run)
    page = open_view(guarded_page, tensorboard, view, run, extra)
    page.wait_for_function(
        "([s, n]) => document.querySelectorAll(s).length >= n", arg=[selector, minimum], timeout=30000
    )
    assert page.locator(".banner[role=alert]").count() == 0, page.inner_text("#gs-main")
    if view == "timeline":
        page.wait_for_function(
            "() => window.__gpuscope.timeline && window.__gpuscope.timeline.stats.rects > 50", timeout=30000
        )
        # a zoomed window with launch -> kernel flows and one selected event, for the picture
        page.fill("#tl-search", "aten::conv2d")
        page.click("#tl-results-table tbody tr >> nth=3")
        page.evaluate(
            "() => { const t = window.__gpuscope.timeline; const [a, b] = t.view(); const m = (a + b) / 2; t.setView(m - 1500, m + 3500); }"
        )
        page.wait_for_function("() => !document.querySelector('#tl-details').textContent.includes('loading details')")
        # the tile of the new window has arrived and is drawn with its flows
        page.wait_for_function(
            "() => { const t = window.__gpuscope.timeline; return !t.pending && !t.queued && t.stats.flows > 0; }",
            timeout=10000,
        )
    assert page.get_attribute(f".tab[data-view={view}]", "aria-selected") == "true"
    screenshot(page, view, tmp_path)


def test_shell_selectors_and_url_state(guarded_page, tensorboard):
    """Run/worker/span selectors follow the data; the hash restores the view and its options."""
    need_shared("cnn_ddp")
    page = open_view(guarded_page, tensorboard, "kernels", "resnet50", "group_by=name_op")
    assert page.input_value("#gs-run") == "resnet50"
    assert page.locator("#gs-span option").count() == 2
    assert page.get_attribute("#view-kernels .seg button[data-value=name_op]", "aria-pressed") == "true"
    assert page.locator("#view-kernels th[data-key=op]").count() == 1
    page.select_option("#gs-run", "cnn_ddp")
    # the hash changes when the new run's view starts rendering (the old view element is gone)
    page.wait_for_function(
        "() => location.hash.includes('run=cnn_ddp') && document.querySelector('#view-kernels')?.dataset.ready === '1'"
    )
    assert sorted(page.eval_on_selector_all("#gs-worker option", "os => os.map(o => o.value)")) == [
        "worker0",
        "worker1",
    ]
    page.click(".tab[data-view=distributed]")
    page.wait_for_selector("#view-distributed[data-ready='1']")
    assert page.input_value("#gs-worker") == "All" and page.is_disabled("#gs-worker")
    page.click(".tab[data-view=operators]")
    page.wait_for_selector("#view-operators[data-ready='1']")
    h = page.evaluate("location.hash")
    assert "run=cnn_ddp" in h and "view=operators" in h and "worker=worker0" in h
    page.reload()
    page.wait_for_selector("#view-operators[data-ready='1']")
    assert page.input_value("#gs-run") == "cnn_ddp"


def test_operator_table_sorts_filters_and_shows_stacks(guarded_page, tensorboard):
    need_shared("cnn_single")
    page = open_view(guarded_page, tensorboard, "operators", "cnn_single")
    rows = page.locator("#view-operators table.data-table tbody tr")
    calls_col = "#view-operators table.data-table tbody tr td:nth-child(2)"
    page.click("#view-operators th[data-key=calls]")
    order = page.get_attribute("#view-operators th[data-key=calls]", "data-sort")
    calls = [
        int(x.replace(",", "")) for x in page.eval_on_selector_all(calls_col, "tds => tds.map(t => t.textContent)")
    ]
    assert len(calls) > 5 and calls == sorted(calls, reverse=(order == "desc")), (order, calls)
    page.click("#view-operators th[data-key=calls]")
    assert page.get_attribute("#view-operators th[data-key=calls]", "data-sort") != order
    page.fill("#view-operators input.filter", "conv")
    names = page.eval_on_selector_all(
        "#view-operators table.data-table tbody tr td:first-child", "tds => tds.map(t => t.textContent)"
    )
    assert names and all("conv" in n.lower() for n in names), names
    # a click on a row shows its call stacks (or says there are none) below the table
    first = rows.nth(0).locator("td").nth(0).inner_text()
    rows.nth(0).click()
    page.wait_for_selector("#op-stack h3")
    assert first in page.inner_text("#op-stack h3")
    assert "selected" in (rows.nth(0).get_attribute("class") or "")


def test_group_by_name_shape(guarded_page, tensorboard):
    need_shared("cnn_single")
    page = open_view(guarded_page, tensorboard, "operators", "cnn_single")
    page.click("#view-operators .seg button[data-value=name_shape]")
    page.wait_for_selector("#view-operators th[data-key=input_shape]")
    assert "group_by=name_shape" in page.evaluate("location.hash")


def test_memory_range_selection_filters_tables(guarded_page, tensorboard):
    need_shared("cnn_single")
    page = open_view(guarded_page, tensorboard, "memory", "cnn_single")
    page.wait_for_selector("#mem-events table.data-table")
    before = page.inner_text("#mem-events .table-info")
    box = page.locator("#view-memory svg.line-chart").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.4, box["y"] + box["height"] * 0.5)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] * 0.5, steps=5)
    page.mouse.up()
    page.wait_for_selector("#mem-reset")
    page.wait_for_selector("#mem-events table.data-table")
    assert "range=" in page.evaluate("location.hash")
    after = page.inner_text("#mem-events .table-info")
    count = lambda s: int(s.split()[0].replace(",", ""))  # noqa: E731
    assert count(after) < count(before), (before, after)
    assert page.locator("#view-memory circle.peak").count() >= 1


def test_theme_toggle(guarded_page, tensorboard):
    need_shared("cnn_single")
    page = open_view(guarded_page, tensorboard, "overview", "cnn_single")
    assert not page.evaluate("document.body.classList.contains('dark')")
    page.click("#gs-theme")  # auto -> light
    page.click("#gs-theme")  # light -> dark
    assert page.evaluate("document.body.classList.contains('dark')")
    bg = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert bg != "rgb(255, 255, 255)"
