"""The timeline viewer zooms (wheel, W/S), pans (drag, A/D), selects by click and by search."""

from __future__ import annotations

import pytest

from .conftest import TRACES, missing, open_view


@pytest.fixture
def timeline(guarded_page, tensorboard):
    if not TRACES.is_dir():
        missing("../shared/traces not present (set GPUSCOPE_SHARED)")
    page = open_view(guarded_page, tensorboard, "timeline", "resnet50")
    page.wait_for_function("() => window.__gpuscope.timeline.stats.rects > 50")
    return page


def view(page):
    return page.evaluate("window.__gpuscope.timeline.view()")


def hold(page, key: str, condition: str, arg) -> None:
    """Hold `key` down until `condition(arg)` holds in the page (the viewer animates while held)."""
    page.keyboard.down(key)
    try:
        page.wait_for_function(condition, arg=arg, timeout=10000)
    finally:
        page.keyboard.up(key)


def test_wheel_and_keys_zoom_and_pan(timeline):
    page = timeline
    a0, b0 = view(page)
    box = page.locator("#tl-canvas").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + 100)
    for _ in range(5):
        page.mouse.wheel(0, -200)
    page.wait_for_function(
        "(w) => { const [a, b] = window.__gpuscope.timeline.view(); return b - a < w; }", arg=(b0 - a0) / 3
    )
    a1, b1 = view(page)
    # W zooms in further (held until the window has shrunk), D pans right
    page.focus("#tl-canvas")
    hold(page, "w", "(w) => { const [a, b] = window.__gpuscope.timeline.view(); return b - a < w * 0.9; }", b1 - a1)
    a2, b2 = view(page)
    hold(page, "d", "(a0) => window.__gpuscope.timeline.view()[0] > a0", a2)
    a3, b3 = view(page)
    assert a3 > a2 and abs((b3 - a3) - (b2 - a2)) < 1e-6 * (b2 - a2) + 1e-9
    # drag right moves the window left
    page.mouse.move(box["x"] + 500, box["y"] + 200)
    page.mouse.down()
    page.mouse.move(box["x"] + 700, box["y"] + 200, steps=4)
    page.mouse.up()
    a4, _ = view(page)
    assert a4 < a3
    # a finer tile was fetched for the zoomed window
    page.wait_for_function("() => window.__gpuscope.timeline.stats.fetches >= 1")
    page.wait_for_function("() => location.hash.includes('win=')")
    assert page.evaluate("location.pathname").endswith("/data/plugin_entry.html")


def test_click_selects_event_and_shows_args(timeline):
    page = timeline
    page.fill("#tl-search", "aten::conv2d")
    page.wait_for_selector("#tl-results-table tbody tr")
    page.click("#tl-results-table tbody tr >> nth=0")
    assert page.inner_text("#tl-sel-name") == "aten::conv2d"
    page.wait_for_function("() => !document.querySelector('#tl-details').textContent.includes('loading details')")
    details = page.inner_text("#tl-details")
    assert "Input Dims" in details and "External id" in details, details  # every conv2d has both
    # the selected event is centred: clicking the canvas middle at its row picks it again
    before = view(page)
    page.click("#tl-zoom-in")
    page.wait_for_function(
        "([a, b]) => { const [c, d] = window.__gpuscope.timeline.view(); return d - c < b - a; }", arg=before
    )
    hit = page.evaluate("""() => { const t = window.__gpuscope.timeline; const [a, b] = t.view();
        const c = t.canvas.getBoundingClientRect(); let found = null;
        for (let y = 30; y < c.height && !found; y += 4) for (let x = 210; x < c.width && !found; x += 7) {
          const h = t.hitTest(x, y); if (h.sel) found = {x, y, name: h.sel.name}; }
        return found; }""")
    assert hit, "no event under any canvas point"
    box = page.locator("#tl-canvas canvas").bounding_box()
    page.mouse.click(box["x"] + hit["x"], box["y"] + hit["y"])
    page.wait_for_selector("#tl-sel-name")
    assert page.inner_text("#tl-sel-name") == hit["name"]


def test_download_link_serves_raw_trace(timeline, tensorboard):
    href = timeline.get_attribute("#tl-download", "href")
    assert href.startswith("./trace?")
    size = timeline.evaluate("async (h) => (await (await fetch(h)).arrayBuffer()).byteLength", href)
    assert size > 100000
