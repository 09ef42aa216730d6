"""Issue 14's visible bugs, each reproduced in headless Chromium against a real TensorBoard."""

from __future__ import annotations

import time

from .conftest import HTML_RUN, LINKED_RUN, MANY_STEPS_RUN, TRACES, missing, open_view


def need_shared() -> None:
    if not TRACES.is_dir():
        missing("../shared/traces not present (set GPUSCOPE_SHARED)")


def plugin_frame(page, timeout: float = 60000):
    """The gpuscope iframe inside TensorBoard's own page."""
    page.wait_for_selector("iframe", timeout=timeout)
    page.wait_for_function(
        "() => [...document.querySelectorAll('iframe')].some(f => (f.src || '').includes('plugin_entry'))",
        timeout=timeout,
    )
    # the element's src is set before its frame has navigated there: wait for the frame itself
    end = time.monotonic() + timeout / 1000
    while True:
        frame = next((f for f in page.frames if "plugin_entry" in f.url), None)
        if frame is not None:
            return frame
        assert time.monotonic() < end, [f.url for f in page.frames]
        page.wait_for_timeout(50)


def test_symlinked_run_folder_is_listed_and_shown(guarded_page, tensorboard):
    """Bug 1: a run folder that is a symlink (with a link cycle inside) is a run like any other."""
    page = open_view(guarded_page, tensorboard, "operators", LINKED_RUN)
    assert LINKED_RUN in page.eval_on_selector_all("#gs-run option", "os => os.map(o => o.value)")
    assert page.input_value("#gs-run") == LINKED_RUN
    assert page.input_value("#gs-worker") == "linkedworker"
    page.wait_for_selector("#view-operators table.data-table tbody tr.clickable")


def test_run_select_follows_the_hash(guarded_page, tensorboard):
    """Bug 2: after the hash names another run, the Run select shows that run."""
    need_shared()
    page = open_view(guarded_page, tensorboard, "operators", "resnet50")
    page.evaluate("location.hash = '#run=cnn_single&view=operators'")
    page.wait_for_function(
        "() => document.querySelector('#gs-worker').value !== '' && location.hash.includes('cnn_single')"
        " && document.querySelector('#view-operators')?.dataset.ready === '1'"
    )
    page.wait_for_function("() => document.querySelector('#gs-run').value === 'cnn_single'", timeout=5000)


def test_unknown_run_falls_back_with_a_notice(guarded_page, tensorboard):
    """Bug 10: an unknown run in the URL shows a valid run and a short notice, not an HTTP error."""
    page = guarded_page
    page.goto(f"{tensorboard.url}/data/plugin_entry.html?name=gpuscope#run=nope&view=operators")
    page.wait_for_selector("#view-operators[data-ready='1']")
    assert page.locator(".banner[role=alert]").count() == 0, page.inner_text("#gs-main")
    assert "nope" in page.inner_text("#gs-notice")
    shown = page.input_value("#gs-run")
    assert shown != "nope" and shown == page.evaluate("new URLSearchParams(location.hash.slice(1)).get('run')")
    page.evaluate("location.hash = '#run=nope2&view=operators'")
    page.wait_for_function("() => (document.querySelector('#gs-notice')?.textContent || '').includes('nope2')")
    page.wait_for_selector("#view-operators[data-ready='1']")
    assert page.locator(".banner[role=alert]").count() == 0, page.inner_text("#gs-main")


def test_state_survives_a_tensorboard_reload_and_copy_link(browser, tensorboard):
    """Bug 3: the view and its options go into TensorBoard's own URL; F5 and the copied link restore them."""
    need_shared()
    context = browser.new_context(viewport={"width": 1200, "height": 820})
    try:
        page = context.new_page()
        page.goto(f"{tensorboard.url}/#gpuscope")
        frame = plugin_frame(page)
        frame.wait_for_selector("#gs-main .view[data-ready='1']", timeout=60000)
        frame.select_option("#gs-run", "resnet50")
        frame.wait_for_function(
            "() => location.hash.includes('run=resnet50') && document.querySelector('.view')?.dataset.ready === '1'"
        )
        frame.click(".tab[data-view=kernels]")
        frame.wait_for_selector("#view-kernels[data-ready='1']")
        frame.click("#view-kernels .seg button[data-value=name_op]")
        frame.wait_for_selector("#view-kernels th[data-key=op]")
        top = page.evaluate("location.href")
        assert (
            "p.gpuscope.run=resnet50" in top
            and "p.gpuscope.view=kernels" in top
            and "p.gpuscope.group_by=name_op" in top
        ), top
        frame.click("#gs-link")
        link = frame.input_value("#gs-link-text")
        assert link.startswith(tensorboard.url) and "p.gpuscope.view=kernels" in link, link
        page.reload()
        frame = plugin_frame(page)
        frame.wait_for_selector("#view-kernels[data-ready='1']", timeout=60000)
        assert frame.input_value("#gs-run") == "resnet50"
        assert frame.get_attribute("#view-kernels .seg button[data-value=name_op]", "aria-pressed") == "true"
        # the copied link, opened in a fresh page, shows the same view
        page2 = context.new_page()
        page2.goto(f"{tensorboard.url}/#gpuscope")
        plugin_frame(page2).wait_for_selector(".view[data-ready='1']", timeout=60000)
        page2.goto(link)
        page2.reload()
        frame2 = plugin_frame(page2)
        frame2.wait_for_selector("#view-kernels[data-ready='1']", timeout=60000)
        assert frame2.input_value("#gs-run") == "resnet50"
    finally:
        context.close()


def test_timeline_ruler_labels_are_distinct_when_zoomed_in(guarded_page, tensorboard):
    """Bug 4: an 85 µs window 56 ms into the trace reads distinct ruler labels."""
    need_shared()
    page = open_view(guarded_page, tensorboard, "timeline", "resnet50")
    page.wait_for_function("() => window.__gpuscope.timeline && window.__gpuscope.timeline.stats.frames > 0")
    page.evaluate(
        "() => { const t = window.__gpuscope.timeline; const [a] = t.extent(); t.setView(a + 56000, a + 56085); }"
    )
    page.wait_for_function("() => { const [a, b] = window.__gpuscope.timeline.view(); return b - a < 100; }")
    page.wait_for_function(
        "() => (window.__gpuscope.timeline.stats.ruler || []).length >= 3 && window.__gpuscope.timeline.view()[1] - window.__gpuscope.timeline.view()[0] < 100"
    )
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    labels = page.evaluate("window.__gpuscope.timeline.stats.ruler")
    assert len(labels) >= 3 and len(set(labels)) == len(labels), labels


def _overlaps(page, selector: str) -> list:
    return page.evaluate(
        """(sel) => {
        const boxes = [...document.querySelectorAll(sel)].map(t => t.getBoundingClientRect()).sort((a, b) => a.left - b.left);
        const bad = [];
        for (let i = 1; i < boxes.length; i++) if (boxes[i].left < boxes[i - 1].right - 0.5) bad.push([boxes[i - 1].right, boxes[i].left]);
        return [boxes.length, bad];
    }""",
        selector,
    )


def test_axis_labels_never_overlap_with_many_steps(guarded_page, tensorboard):
    """Bug 5: 464 steps on the overview: labels are thinned, none overlaps another."""
    page = open_view(guarded_page, tensorboard, "overview", MANY_STEPS_RUN)
    page.wait_for_selector("#view-overview svg.chart rect.bar")
    assert page.locator("#view-overview svg.chart rect.bar").count() >= 464
    n, bad = _overlaps(page, "#view-overview svg.chart .xlabel")
    assert n >= 3 and not bad, (n, bad[:5])


def test_modules_empty_state_has_no_stray_text(guarded_page, tensorboard):
    """Bug 7: a trace without modules shows only the empty-state message."""
    page = open_view(guarded_page, tensorboard, "modules", HTML_RUN)
    page.wait_for_selector("#no-modules")
    text = page.inner_text("#view-modules")
    assert text.strip() == page.inner_text("#no-modules").strip(), text


def test_memory_says_reserved_is_not_recorded(guarded_page, tensorboard):
    """Bug 9: a trace whose memory events carry no reserved bytes does not claim "Reserved 0 B"."""
    page = open_view(guarded_page, tensorboard, "memory", HTML_RUN)
    page.wait_for_selector("#mem-peak")
    assert "not recorded" in page.inner_text("#mem-no-reserved")
    assert "0 B" not in page.inner_text("#mem-peak")
