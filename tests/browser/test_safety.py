"""Offline and safe: strings from traces render as text, the page works inside TensorBoard's own
iframe (its CSP), and no request leaves the server (the guarded_page fixture checks that)."""

from __future__ import annotations

from .browser_traces import HOSTILE
from .conftest import BROKEN_RUN, HTML_RUN, HTML_WORKER, open_view


def test_html_in_names_renders_literally(guarded_page, tensorboard):
    page = open_view(guarded_page, tensorboard, "operators", HTML_RUN)
    names = page.eval_on_selector_all(
        "#view-operators table.data-table tbody tr td:first-child", "tds => tds.map(t => t.textContent)"
    )
    for hostile in HOSTILE:
        assert hostile in names, (hostile, names)
    # nothing was parsed as markup, nothing ran
    assert page.locator("#gs-app img, #gs-app script, #gs-app b, #gs-app svg[onload]").count() == 0
    assert page.evaluate("window.__xss") is None
    assert page.input_value("#gs-run") == HTML_RUN
    assert page.locator("#gs-worker option").first.inner_text() == HTML_WORKER
    # call stacks too
    page.locator("#view-operators tbody tr", has_text="<script>window.__xss=2</script>").first.click()
    page.wait_for_selector("#op-stack pre.stack")
    assert "<script>stack()</script>" in page.inner_text("#op-stack")
    # and the timeline: search, select, details
    page.click(".tab[data-view=timeline]")
    page.wait_for_selector("#view-timeline[data-ready='1']")
    page.fill("#tl-search", "<img")
    page.wait_for_selector("#tl-results-table tbody tr")
    page.click("#tl-results-table tbody tr >> nth=0")
    page.wait_for_selector("#tl-sel-name")
    assert page.inner_text("#tl-sel-name") == HOSTILE[0]
    assert page.evaluate("window.__xss") is None
    for view in ("overview", "memory", "modules", "kernels"):
        page.click(f".tab[data-view={view}]")
        page.wait_for_selector(f"#view-{view}[data-ready='1'], #view-{view}[data-ready='error']")
    assert page.evaluate("window.__xss") is None
    assert page.locator("#gs-app img, #gs-app script").count() == 0


def test_inside_tensorboard_iframe(guarded_page, tensorboard):
    """The real TensorBoard page: the plugin loads in its iframe under TensorBoard's CSP."""
    page = guarded_page
    page.goto(f"{tensorboard.url}/#gpuscope")
    frame = page.frame_locator("iframe")
    frame.locator("#gs-app").wait_for(timeout=60000)
    frame.locator("#view-overview[data-ready='1']").wait_for(timeout=60000)
    views = ["overview", "operators", "kernels", "roofline", "timeline", "memory", "modules", "distributed", "diff"]
    assert frame.locator(".tab").evaluate_all("ts => ts.map(t => t.dataset.view)") == [*views, "history"]
    csp = [e for e in page.guard.errors if "Content Security Policy" in e]
    assert not csp, csp
    # the theme follows TensorBoard's dark mode (a class on its body)
    frame.locator("body:not(.dark)").wait_for()
    page.evaluate("document.body.classList.add('dark-mode')")
    frame.locator("body.dark").wait_for(timeout=5000)
    page.evaluate("document.body.classList.remove('dark-mode')")
    frame.locator("body:not(.dark)").wait_for(timeout=5000)


def test_unreadable_file_is_listed_and_explained(guarded_page, tensorboard):
    """The bad file is named in the shell; opening it gives the backend's reason, not a blank page."""
    page = guarded_page
    page.goto(f"{tensorboard.url}/data/plugin_entry.html?name=gpuscope#run={BROKEN_RUN}&view=overview")
    page.wait_for_selector("#gs-bad-files")
    text = page.inner_text("#gs-bad-files")
    assert "could not be read" in text and "bad.1700000000000.pt.trace.json" in text, text
    page.wait_for_selector("#view-overview[data-ready='error']")
    msg = page.inner_text("#view-overview .banner[role=alert]")
    assert "overview" in msg and "HTTP 4" in msg, msg
    # the failed request itself is the only console error (Chromium logs every 4xx)
    assert all("Failed to load resource" in e for e in page.guard.errors), page.guard.errors
    page.guard.errors.clear()
    # the other runs still work
    page.select_option(
        "#gs-run",
        "cnn_single"
        if "cnn_single" in page.eval_on_selector_all("#gs-run option", "os => os.map(o => o.value)")
        else HTML_RUN,
    )
    page.wait_for_selector("#view-overview[data-ready='1']")
