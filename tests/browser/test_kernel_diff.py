"""Issue 24 item 2 in headless Chromium against a real TensorBoard: the Diff view's Kernels tab lists the kernel
rows largest |Δ| first, and a row's link opens the compared profile's timeline on that kernel."""

from __future__ import annotations

import pytest

from ..test_view_kernel_diff import BASE, EXP, events
from .conftest import TensorBoard, browser_available
from .issue23_traces import write_json


@pytest.fixture(scope="module")
def tb(tmp_path_factory):
    if browser_available():
        pytest.skip(browser_available())
    d = tmp_path_factory.mktemp("kernel_diff")
    for run, kw, last in (("kd_a", BASE, ("softmax_kernel", 4)), ("kd_b", EXP, ("gelu_kernel", 1))):
        doc = {
            "schemaVersion": 1,
            "baseTimeNanoseconds": 0,
            "traceEvents": events(**kw, last_kernel=last[0], last_us=last[1]),
        }
        write_json(doc, d / run / "w.1700000000000.pt.trace.json")
    server = TensorBoard(d)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def test_kernel_rows_sorted_and_a_row_opens_the_timeline(browser, tb):
    context = browser.new_context(viewport={"width": 1600, "height": 900})
    page = context.new_page()
    try:
        page.goto(
            f"{tb.url}/data/plugin_entry.html?name=gpuscope#run=kd_a&view=diff&exp_run=kd_b&exp_worker=w&exp_span=1"
        )
        page.wait_for_selector("#view-diff[data-ready='1']", timeout=120000)
        page.wait_for_selector("#diff-tab-kernels")
        page.click("#diff-tab-kernels")
        page.wait_for_selector("#diff-kernel-table tbody tr")
        got = page.evaluate(
            """() => [...document.querySelectorAll('#diff-kernel-table tbody tr')].map(r => {
                 const c = [...r.querySelectorAll('td')].map(td => td.textContent.trim());
                 return [c[0], c[1], c[2]];
               })"""
        )
        # hand-derived in tests/test_view_kernel_diff.py: +11, -8, -6 (renamed gemm), +2, 0 µs
        assert got == [
            ["relu_kernel", "", "name"],
            ["softmax_kernel", "", "unmatched"],
            [BASE["gemm"], EXP["gemm"], "structure"],
            ["gelu_kernel", "", "unmatched"],
            ["elementwise_add", "", "name"],
        ]
        assert "diff_tab=kernels" in page.evaluate("location.hash")
        # the baseline link of the same row names kd_a's first gemm (traceEvents index 5, framed around 20 µs)
        href = page.get_attribute("#diff-kernel-table tbody tr >> nth=2 >> a[data-side='base']", "href")
        assert "run=kd_a" in href and "view=timeline" in href and "sel=5" in href, href
        # the renamed gemm row: its compared-side link opens kd_b's timeline with the kernel selected
        with context.expect_page() as popup:
            page.click("#diff-kernel-table tbody tr >> nth=2 >> a[data-side='exp']")
        tl = popup.value
        tl.wait_for_selector("#view-timeline[data-ready='1']", timeout=120000)
        assert "run=kd_b" in tl.evaluate("location.hash")
        tl.wait_for_function("n => document.querySelector('#tl-sel-name')?.textContent === n", arg=EXP["gemm"])
        win = tl.evaluate("window.__gpuscope.timeline.view()")
        assert win[0] <= 20 <= win[1], win  # the first gemm runs at 20 µs
    finally:
        context.close()
