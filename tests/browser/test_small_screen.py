"""Small screens: at 1000 x 700 no chart text is drawn below 10 px and no table is cut off
(each fits its box, nothing overflows the page sideways)."""

from __future__ import annotations

import pytest

from .conftest import TRACES, Guard, missing, open_view

VIEWS = [
    ("overview", "resnet50", ""),
    ("operators", "cnn_single", ""),
    ("kernels", "resnet50", ""),
    ("kernels", "resnet50", "group_by=name_op_config"),
    ("memory", "cnn_single", ""),
    ("modules", "cnn_single", ""),
    ("diff", "resnet50", ""),
    ("timeline", "resnet50", ""),
    ("distributed", "cnn_ddp", ""),
]

MEASURE = """() => {
  const small = [];
  for (const t of document.querySelectorAll('svg text')) {
    const svg = t.ownerSVGElement, vb = svg.viewBox.baseVal, r = svg.getBoundingClientRect();
    if (!r.width || !vb || !vb.width) continue;
    const px = parseFloat(getComputedStyle(t).fontSize) * r.width / vb.width;
    if (px < 10) small.push([t.textContent, Math.round(px * 10) / 10]);
  }
  for (const el of document.querySelectorAll('#gs-app *')) {
    if (el.closest('svg') || !el.childNodes.length) continue;
    const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own || !el.getClientRects().length) continue;
    const px = parseFloat(getComputedStyle(el).fontSize);
    if (px < 10) small.push([el.textContent.slice(0, 40), px]);
  }
  const cut = [];
  for (const box of document.querySelectorAll('.table-scroll')) {
    const t = box.querySelector('table');
    if (t && box.getClientRects().length && t.getBoundingClientRect().width > box.clientWidth + 1) cut.push([box.parentElement.id || box.parentElement.className, t.getBoundingClientRect().width, box.clientWidth]);
  }
  return {small, cut, overflow: document.documentElement.scrollWidth - window.innerWidth};
}"""


@pytest.mark.parametrize("view,run,extra", VIEWS)
def test_readable_at_1000_by_700(browser, tensorboard, view, run, extra):
    if not TRACES.is_dir():
        missing("../shared/traces not present (set GPUSCOPE_SHARED)")
    context = browser.new_context(viewport={"width": 1000, "height": 700})
    page = context.new_page()
    guard = Guard(tensorboard.url)
    guard.attach(context, page)
    try:
        open_view(page, tensorboard, view, run, extra)
        if view == "kernels":
            page.wait_for_selector("#view-kernels table.data-table tbody tr")
        # resize observers settled: every responsive chart is drawn at its box's width
        page.wait_for_function("""() => [...document.querySelectorAll('.chart-holder')].every(h => {
            const svg = h.querySelector('svg');
            return !svg || !h.clientWidth || Math.abs(Number(svg.getAttribute('width')) - Math.max(260, Math.round(h.clientWidth))) < 2;
        })""")
        page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        m = page.evaluate(MEASURE)
        assert not m["small"], m["small"][:10]
        assert not m["cut"], m["cut"]
        assert m["overflow"] <= 0, m["overflow"]
    finally:
        context.close()
    guard.check()
