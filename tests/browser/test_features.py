"""Issue 14's features in headless Chromium against a real TensorBoard: kernel launch
configuration, the timeline's range selection, counters and keys, the icicle chart, small screens."""

from __future__ import annotations

import re

from .conftest import SPLIT_SMEM_RUN, TRACES, missing, open_view, screenshot


def need_shared() -> None:
    if not TRACES.is_dir():
        missing("../shared/traces not present (set GPUSCOPE_SHARED)")


def test_kernel_launch_configuration_columns_and_split(guarded_page, tensorboard, tmp_path):
    need_shared()
    page = open_view(guarded_page, tensorboard, "kernels", "resnet50", "group_by=name_op")
    for key in ("registers_per_thread", "shared_memory", "theoretical_occupancy"):
        assert page.locator(f"#view-kernels th[data-key={key}]").count() == 1, key
    # below 1300 px the optional columns start hidden; the Columns menu shows them
    assert page.locator("#view-kernels th[data-key=launch_configs]").count() == 0
    page.click("#view-kernels details.cols summary")
    # a Kineto trace records only the total shared memory: no static/dynamic columns, not even in the menu
    for key in ("static_shared_memory", "dynamic_shared_memory"):
        assert page.locator(f"#view-kernels .cols-list input[data-key={key}]").count() == 0, key
    page.check("#view-kernels .cols-list input[data-key=launch_configs]")
    page.check("#view-kernels .cols-list input[data-key=grid]")
    assert page.locator("#view-kernels th[data-key=launch_configs]").count() == 1
    assert page.locator("#view-kernels th[data-key=grid]").count() == 1
    n_op = int(page.inner_text("#view-kernels .table-info").split()[0].replace(",", ""))
    page.click("#view-kernels .seg button[data-value=name_op_config]")
    page.wait_for_function(
        "() => document.querySelector('#view-kernels .seg button[data-value=name_op_config]')?.getAttribute('aria-pressed') === 'true'"
    )
    page.wait_for_selector("#view-kernels th[data-key=grid]")
    assert "group_by=name_op_config" in page.evaluate("location.hash")
    n_cfg = int(page.inner_text("#view-kernels .table-info").split()[0].replace(",", ""))
    assert n_cfg > n_op
    cells = page.eval_on_selector_all(
        "#view-kernels table.data-table tbody tr",
        """trs => trs.map(tr => {
        const th = [...document.querySelectorAll('#view-kernels th')].map(t => t.dataset.key);
        const td = [...tr.children].map(t => t.textContent);
        return Object.fromEntries(th.map((k, i) => [k, td[i]]));
    })""",
    )
    assert all(
        re.fullmatch(r"\[\d+, \d+, \d+\]", c["grid"]) and re.fullmatch(r"\[\d+, \d+, \d+\]", c["block"]) for c in cells
    ), cells[:3]
    assert all(c["theoretical_occupancy"].endswith("%") for c in cells)
    assert any(c["shared_memory"].endswith("B") for c in cells)
    screenshot(page, "kernels-launch", tmp_path)


def _kernel_cells(page) -> list[dict]:
    return page.eval_on_selector_all(
        "#view-kernels table.data-table tbody tr",
        """trs => trs.map(tr => {
        const th = [...document.querySelectorAll('#view-kernels th')].map(t => t.dataset.key);
        return Object.fromEntries(th.map((k, i) => [k, tr.children[i].textContent]));
    })""",
    )


def test_kernel_static_dynamic_shared_memory_columns(guarded_page, tensorboard):
    """Our CUPTI converter's static/dynamic split: optional columns (hidden at 1200 px), "varies" per group."""
    page = open_view(guarded_page, tensorboard, "kernels", SPLIT_SMEM_RUN, "group_by=name")
    page.wait_for_selector("#view-kernels th[data-key=shared_memory]")
    assert page.locator("#view-kernels th[data-key=static_shared_memory]").count() == 0
    page.click("#view-kernels details.cols summary")
    for key in ("static_shared_memory", "dynamic_shared_memory"):
        page.check(f"#view-kernels .cols-list input[data-key={key}]")
        page.wait_for_selector(f"#view-kernels th[data-key={key}]")
    got = {
        c["name"]: (c["shared_memory"], c["static_shared_memory"], c["dynamic_shared_memory"])
        for c in _kernel_cells(page)
    }
    assert got == {"reduce_kernel": ("1.00 KiB", "varies", "varies"), "scan_kernel": ("2.50 KiB", "512 B", "2.00 KiB")}


def _timeline(page, tb, run, extra=""):
    open_view(page, tb, "timeline", run, extra)
    page.wait_for_function(
        "() => window.__gpuscope.timeline && window.__gpuscope.timeline.stats.frames > 0 && window.__gpuscope.timeline.tracks().length > 0"
    )
    return page


def test_timeline_range_selection_summary(guarded_page, tensorboard, tmp_path):
    need_shared()
    page = _timeline(guarded_page, tensorboard, "resnet50")
    box = page.locator("#tl-canvas canvas").bounding_box()
    # drag on the ruler: all tracks
    page.mouse.move(box["x"] + 300, box["y"] + 10)
    page.mouse.down()
    page.mouse.move(box["x"] + 700, box["y"] + 10, steps=5)
    page.mouse.up()
    page.wait_for_selector("#tl-summary-head")
    page.wait_for_function("() => window.__gpuscope.timeline.counterNames().length > 0")
    screenshot(page, "timeline-range", tmp_path)
    head = page.inner_text("#tl-summary-head")
    n_tracks = page.evaluate("window.__gpuscope.timeline.tracks().length")
    assert f"{n_tracks} tracks" in head, head
    assert page.locator("#tl-summary table.data-table tbody tr").count() > 3
    assert "range=" in page.evaluate("location.hash")
    # Shift+drag inside the first track only: fewer tracks, fewer events
    all_events = int(head.split("·")[-1].split()[0].replace(",", ""))
    y0 = page.evaluate("window.__gpuscope.timeline.trackY(0)")
    page.keyboard.down("Shift")
    page.mouse.move(box["x"] + 300, box["y"] + y0 + 22)
    page.mouse.down()
    page.mouse.move(box["x"] + 700, box["y"] + y0 + 26, steps=5)
    page.mouse.up()
    page.keyboard.up("Shift")
    page.wait_for_function("() => (document.querySelector('#tl-summary-head')?.textContent || '').includes('1 track ')")
    one = int(page.inner_text("#tl-summary-head").split("·")[-1].split()[0].replace(",", ""))
    assert 0 < one < all_events
    cols = page.eval_on_selector_all("#tl-summary th", "ths => ths.map(t => t.dataset.key)")
    assert {"name", "cat", "count", "total_us", "self_us"} <= set(cols)
    cats = page.eval_on_selector_all("#tl-summary tbody td:nth-child(2)", "ts => ts.map(t => t.textContent)")
    assert cats and all(c for c in cats), cats
    # F frames the range
    page.focus("#tl-canvas")
    page.keyboard.press("f")
    page.wait_for_function(
        "() => { const t = window.__gpuscope.timeline, [a, b] = t.view(), r = t.range; return r && a <= r.a && b >= r.b && (b - a) < (r.b - r.a) * 1.2; }"
    )


def test_timeline_counter_tracks(guarded_page, tensorboard):
    need_shared()
    page = _timeline(guarded_page, tensorboard, "resnet50")
    page.wait_for_function("() => window.__gpuscope.timeline.counterNames().some(n => n.includes('utilization'))")
    page2 = page.context.new_page()
    _timeline(page2, tensorboard, "cnn_single")
    page2.wait_for_function(
        "() => window.__gpuscope.timeline.counterNames().some(n => n.startsWith('Memory allocated'))"
    )
    page2.close()


def test_show_in_timeline_next_previous_and_selected_event_in_url(guarded_page, tensorboard):
    need_shared()
    page = open_view(guarded_page, tensorboard, "operators", "cnn_single")
    name = page.inner_text("#view-operators table.data-table tbody tr >> nth=0 >> td >> nth=0")
    page.click("#view-operators table.data-table tbody tr >> nth=0 >> .tl-jump")
    page.wait_for_selector("#view-timeline[data-ready='1']")
    page.wait_for_function(
        "() => (document.querySelector('#tl-occ-label')?.textContent || '').includes('occurrence 1 of')"
    )
    assert page.inner_text("#tl-sel-name") == name
    total = int(page.inner_text("#tl-occ-label").split(" of ")[1].split()[0].replace(",", ""))
    assert total >= 2
    first = page.evaluate("window.__gpuscope.timeline.view()")
    page.click("#tl-occ-next")
    page.wait_for_function("() => document.querySelector('#tl-occ-label').textContent.includes('occurrence 2 of')")
    assert page.evaluate("window.__gpuscope.timeline.view()") != first
    page.click("#tl-occ-prev")
    page.click("#tl-occ-prev")
    page.wait_for_function(
        f"() => document.querySelector('#tl-occ-label').textContent.includes('occurrence {total} of')"
    )
    # the selected event is in the URL: a reload (without the search) selects it again
    page.wait_for_function("() => /[#&]sel=\\d+/.test(location.hash)")
    sel = page.evaluate("new URLSearchParams(location.hash.slice(1)).get('sel')")
    page.evaluate(
        "() => { const p = new URLSearchParams(location.hash.slice(1)); p.delete('find'); p.delete('occ'); p.delete('win'); location.hash = p.toString(); }"
    )
    page.reload()
    page.wait_for_selector("#view-timeline[data-ready='1']")
    page.wait_for_function("() => document.querySelector('#tl-sel-name')")
    assert page.inner_text("#tl-sel-name") == name
    assert page.evaluate("new URLSearchParams(location.hash.slice(1)).get('sel')") == sel


def test_timeline_keys_and_collapsing(guarded_page, tensorboard):
    need_shared()
    page = _timeline(guarded_page, tensorboard, "resnet50")
    assert page.locator("#tl-keys").is_hidden()
    page.focus("#tl-canvas")
    page.keyboard.press("?")
    page.wait_for_selector("#tl-keys", state="visible")
    assert "frame" in page.inner_text("#tl-keys")
    n = page.evaluate("window.__gpuscope.timeline.tracks().length")
    y1 = page.evaluate("window.__gpuscope.timeline.trackY(1)")
    page.click("#tl-collapse")
    assert page.evaluate(f"[...Array({n}).keys()].every(i => window.__gpuscope.timeline.isCollapsed(i))")
    assert page.evaluate("window.__gpuscope.timeline.trackY(1)") < y1
    page.click("#tl-expand")
    assert not page.evaluate("window.__gpuscope.timeline.isCollapsed(0)")
    # a click on a track's name collapses that track only
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    page.locator("#tl-canvas").scroll_into_view_if_needed()
    box = page.locator("#tl-canvas canvas").bounding_box()
    y0 = page.evaluate("window.__gpuscope.timeline.trackY(0)")
    page.mouse.click(box["x"] + 40, box["y"] + y0 + 8)
    assert page.evaluate("window.__gpuscope.timeline.isCollapsed(0) && !window.__gpuscope.timeline.isCollapsed(1)")


def _widths(page, sel):
    return page.eval_on_selector_all(
        sel,
        "ns => ns.map(n => [Number(n.dataset.depth), n.getBoundingClientRect().left, n.getBoundingClientRect().width, n.textContent])",
    )


def test_modules_icicle_sized_by_host_or_device_and_zooms(guarded_page, tensorboard, tmp_path):
    need_shared()
    page = open_view(guarded_page, tensorboard, "modules", "cnn_single")
    page.wait_for_selector("#modules-icicle .ic-node")
    nodes = _widths(page, "#modules-icicle .ic-node")
    assert len(nodes) > 3 and max(d for d, *_ in nodes) >= 2
    screenshot(page, "modules-icicle", tmp_path)
    root = [n for n in nodes if n[0] == 0]
    assert len(root) == 1
    assert all(w <= root[0][2] + 0.5 for _, _, w, _ in nodes)
    # a click on a deeper node zooms: it becomes the full-width root, the path above links back
    target = page.locator("#modules-icicle .ic-node[data-depth='1']").first
    name = target.inner_text()
    target.click()
    page.wait_for_function(
        "(n) => document.querySelector('#modules-icicle .ic-node[data-depth=\"0\"]').textContent === n", arg=name
    )
    assert page.locator("#modules-icicle .ic-crumb").count() >= 1
    page.click("#modules-icicle .ic-crumb >> nth=0")
    page.wait_for_function("() => document.querySelectorAll('#modules-icicle .ic-crumb').length === 0")
    assert page.locator("#view-modules .seg button[data-value=host]").get_attribute("aria-pressed") == "true"


def test_call_stack_icicle(guarded_page, tensorboard):
    from .conftest import HTML_RUN

    page = open_view(guarded_page, tensorboard, "operators", HTML_RUN)
    page.click("#view-operators table.data-table tbody tr >> nth=0")
    page.wait_for_selector("#stack-icicle .ic-node")
    texts = page.eval_on_selector_all("#stack-icicle .ic-node", "ns => ns.map(n => n.textContent)")
    assert any("<script>" in t for t in texts)  # shown as text, never run
    assert page.evaluate("window.__xss") is None
