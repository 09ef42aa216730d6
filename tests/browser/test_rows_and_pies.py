"""Issue 39, item 6, at two widths: a table row's "show in timeline" button opens the occurrences that row counts
(a 48-call row of the operators by input shape opened "occurrence 1 of 241", every event of its name); the pies of
a view have one colour per name and legend texts that read apart."""

from __future__ import annotations

import re

import pytest

from .conftest import TRACES, missing, open_view

READY_MS = 60000


def _total(page) -> int:
    page.wait_for_selector("#tl-occ-label", timeout=READY_MS)
    page.wait_for_function("() => /of [\\d,]+/.test(document.querySelector('#tl-occ-label').textContent)")
    return int(re.search(r"of ([\d,]+)", page.inner_text("#tl-occ-label")).group(1).replace(",", ""))


def _first_row_where(page, view: str, pred: str) -> tuple[int, dict]:
    """The index and cells (by header) of the first row of the view's table for which `pred(cells)` holds."""
    page.wait_for_selector(f"#view-{view} table.data-table tbody tr", timeout=READY_MS)
    heads = [
        re.sub(r"[\s▲▼▴▾↑↓]+$", "", t.strip())
        for t in page.locator(f"#view-{view} table.data-table thead th").all_inner_texts()
    ]
    rows = page.locator(f"#view-{view} table.data-table tbody tr")
    for i in range(min(rows.count(), 25)):
        cells = dict(zip(heads, rows.nth(i).locator("td").all_inner_texts()))
        if page.evaluate(f"c => ({pred})(c)", cells):
            return i, cells
    raise AssertionError(f"no row of {view} fits {pred}")


@pytest.mark.parametrize("width", [1000, 2560])
def test_row_button_opens_the_rows_occurrences(browser, tensorboard, width):
    if not (TRACES / "kineto_resnet50_v100").is_dir():
        missing("../shared/traces not present (set GPUSCOPE_SHARED)")
    context = browser.new_context(viewport={"width": width, "height": 900})
    try:
        page = context.new_page()
        # operators by name and input shape: a row of one shape of an op that runs with several
        open_view(page, tensorboard, "operators", "resnet50", "group_by=name_shape")
        i, cells = _first_row_where(page, "operators", "c => c['Name'] === 'aten::cudnn_convolution'")
        calls = int(cells["Calls"].replace(",", ""))
        page.locator("#view-operators table.data-table tbody tr").nth(i).locator("button.tl-jump").click()
        page.wait_for_selector("#view-timeline[data-ready='1']", timeout=READY_MS)
        assert _total(page) == calls, (page.inner_text("#tl-occ"), cells)
        assert page.inner_text("#tl-occ-scope").strip().startswith("[[")  # the row's input shape is said
        all_of_name = page.evaluate(
            "async () => { const q = new URLSearchParams(location.hash.slice(1));"
            " const r = await fetch(`./timeline/occurrences?run=${q.get('run')}&worker=${encodeURIComponent(q.get('worker'))}"
            "&span=${q.get('span')}&name=aten%3A%3Acudnn_convolution&limit=1`); return (await r.json()).total; }"
        )
        assert all_of_name > calls  # the shape's calls, not every call of the name

        # kernels with the op that launched them
        open_view(page, tensorboard, "kernels", "resnet50", "group_by=name_op")
        i, cells = _first_row_where(page, "kernels", "c => true")
        calls = int(cells["Calls"].replace(",", ""))
        page.locator("#view-kernels table.data-table tbody tr").nth(i).locator("button.tl-jump").click()
        page.wait_for_selector("#view-timeline[data-ready='1']", timeout=READY_MS)
        assert _total(page) == calls, (page.inner_text("#tl-occ"), cells)
        assert "launched by" in page.inner_text("#tl-occ-scope")
    finally:
        context.close()


def _legends(page, view: str) -> list[list[tuple[str, str, str]]]:
    """Per pie of the view: (full name, shown text, swatch colour) of each legend item."""
    return page.eval_on_selector_all(
        f"#view-{view} figure.pie-box",
        """figs => figs.map(f => [...f.querySelectorAll('.legend-item')].map(i => [i.title,
            i.querySelector('.legend-name').textContent, getComputedStyle(i.querySelector('.swatch')).backgroundColor]))""",
    )


@pytest.mark.parametrize("width", [1000, 2560])
def test_pie_legends_read_apart(browser, tensorboard, width):
    """Issue 39, item 6: the two pies of a view coloured their legends by place, so they looked alike while naming
    different things (and long kernel names were cut to the same start). One colour per name across the view's
    pies, different names different colours, and legend texts that differ where the names differ."""
    if not (TRACES / "kineto_resnet50_v100").is_dir():
        missing("../shared/traces not present (set GPUSCOPE_SHARED)")
    context = browser.new_context(viewport={"width": width, "height": 900})
    try:
        page = context.new_page()
        for view, extra in (("operators", ""), ("kernels", "group_by=name_op")):
            open_view(page, tensorboard, view, "resnet50", extra)
            page.wait_for_selector(f"#view-{view} figure.pie-box .legend-item")
            pies = _legends(page, view)
            assert len(pies) == 2, pies
            colour: dict[str, str] = {}
            for items in pies:
                shown = [s for _, s, _ in items]
                assert len(set(shown)) == len(shown), shown  # no two items of a pie read alike
                for name, _, c in items:
                    if name == "others":
                        continue
                    assert colour.setdefault(name, c) == c, (view, name)  # one colour per name in both pies
            assert len(set(colour.values())) == len(colour), (view, colour)  # different names, different colours
            # each legend text fits its column: nothing is cut by the box
            clipped = page.eval_on_selector_all(
                f"#view-{view} .legend-name", "ns => ns.filter(n => n.scrollWidth > n.clientWidth + 1).length"
            )
            if width >= 2560:
                assert clipped == 0, (view, clipped)
    finally:
        context.close()


def _drawn(page) -> dict:
    """The timeline's flow counts once the tile of the view is in and drawn."""
    page.wait_for_function("() => { const t = window.__gpuscope.timeline; return !t.pending && !t.queued; }")
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    return page.evaluate(
        "() => { const s = window.__gpuscope.timeline.stats;"
        " return {flows: s.flows, selected: s.flowsSelected, hidden: s.flowsHidden}; }"
    )


@pytest.mark.parametrize("width", [1000, 2560])
def test_selected_events_flows_are_highlighted_however_many_are_visible(browser, tensorboard, width):
    """Issue 39, item 6: with more than 300 flows in view only the selected event's are drawn, and with fewer they
    are drawn over the others in the selection's colour (`stats.flowsSelected`: those drawn highlighted)."""
    if not (TRACES / "kineto_resnet50_v100").is_dir():
        missing("../shared/traces not present (set GPUSCOPE_SHARED)")
    context = browser.new_context(viewport={"width": width, "height": 900})
    try:
        page = context.new_page()
        open_view(page, tensorboard, "timeline", "resnet50")
        page.wait_for_function("() => window.__gpuscope.timeline && window.__gpuscope.timeline.stats.frames > 0")
        launch = page.evaluate(
            "async () => { const q = new URLSearchParams(location.hash.slice(1));"
            " const r = await fetch(`./timeline/search?run=${q.get('run')}&worker=${encodeURIComponent(q.get('worker'))}"
            "&span=${q.get('span')}&query=cudaLaunchKernel&limit=2000`); const d = await r.json();"
            " return d.results.filter((x) => x.name === 'cudaLaunchKernel')[Math.floor(d.results.length / 2)]; }"
        )
        page.evaluate(
            """(r) => { const t = window.__gpuscope.timeline;
            t.select({ track: r.track, depth: r.depth, idx: r.idx, name: r.name, cat: String(r.cat ?? ''), ts_us: r.ts_us, dur_us: r.dur_us });
            const [a, b] = t.extent(); t.setView(a, b); }""",
            launch,
        )
        whole = _drawn(page)
        assert whole["hidden"] is True, whole  # the whole trace: thousands of launches' flows in view
        assert whole["selected"] >= 1 and whole["flows"] == whole["selected"], whole
        page.evaluate("(r) => window.__gpuscope.timeline.setView(r.ts_us - 30, r.ts_us + r.dur_us + 120)", launch)
        near = _drawn(page)
        assert near["hidden"] is False and near["selected"] >= 1, near
        assert near["flows"] > near["selected"], near  # the others in view are drawn too, the selected's over them
    finally:
        context.close()
