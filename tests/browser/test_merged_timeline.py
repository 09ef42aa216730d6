"""The merged timeline (issue 24 item 3) in headless Chromium against a real TensorBoard: a generated 64-rank job
whose rank 3 has a planted clock error of SKEW_US. Only the chosen, unfolded ranks' tiles are asked for (requests
counted by worker; with all 64 unfolded, only those in view), turning clock alignment off moves rank 3's events
by its offset, and the critical path's ranks can be chosen. The search box finds a name on every chosen rank and a
click on a match goes there: the rank unfolds, scrolls into view and its event is selected on the aligned clock."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from .conftest import Guard, TensorBoard, browser_available, missing, open_view, screenshot

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from gen_distributed import generate  # noqa: E402

RANKS = 64
SKEW_US = 1500.0
OLD = time.time() - 3600


def worker(rank: int) -> str:
    return f"node{rank // 8}_rank{rank:05d}"


@pytest.fixture(scope="module")
def tb64(tmp_path_factory):
    if browser_available():
        missing(browser_available())
    d = tmp_path_factory.mktemp("merged_logdir")
    for p in generate(str(d / "job64"), RANKS, events=300, steps=2, clock_skew={3: SKEW_US}):
        os.utime(p, (OLD, OLD))
    tb = TensorBoard(d)
    try:
        tb.wait_ready()
        yield tb
    finally:
        tb.stop()


def _header_y(page, w: str) -> float:
    """The canvas y of the group header of worker `w`."""
    return page.evaluate(
        """(w) => { const v = window.__gpuscope.timeline, i = v.tracks().findIndex((t) => t.header && t.worker === w);
        return i < 0 ? null : v.trackY(i) + 8; }""",
        w,
    )


def _first_event(page, w: str):
    """(idx, ts_us) of the first event drawn on worker `w`'s first track with events, or None."""
    return page.evaluate(
        """(w) => { for (const t of window.__gpuscope.timeline.tracks()) { if (t.header || t.worker !== w) continue;
          for (const r of t.rows) if (r.mode === 'events' && r.ts_us.length) return [r.idx[0], r.ts_us[0]]; } return null; }""",
        w,
    )


def _ts_of(page, w: str, idx: int):
    return page.evaluate(
        """([w, idx]) => { for (const t of window.__gpuscope.timeline.tracks()) { if (t.header || t.worker !== w) continue;
          for (const r of t.rows) if (r.mode === 'events') { const j = r.idx.indexOf(idx); if (j >= 0) return r.ts_us[j]; } }
          return null; }""",
        [w, idx],
    )


def _shot(page, name: str, tmp_path: Path) -> None:
    """A screenshot (see `screenshot`), copied into GPUSCOPE_SHOTS_DIR when that is set."""
    shot = screenshot(page, name, tmp_path)
    out = os.environ.get("GPUSCOPE_SHOTS_DIR")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / shot.name).write_bytes(shot.read_bytes())


@pytest.mark.slow
def test_merged_timeline_asks_only_for_unfolded_ranks_and_alignment_moves_a_rank_by_its_offset(browser, tb64, tmp_path):
    context = browser.new_context(viewport={"width": 1300, "height": 900}, color_scheme="light")
    page = context.new_page()
    guard = Guard(tb64.url)
    guard.attach(context, page)
    asked: dict[str, int] = {}

    def count(req) -> None:
        u = urlparse(req.url)
        if u.path.endswith("/data/plugin/gpuscope/timeline"):
            w = parse_qs(u.query).get("worker", ["?"])[0]
            asked[w] = asked.get(w, 0) + 1

    page.on("request", count)
    try:
        open_view(page, tb64, "timeline", "job64", "merged=1", timeout=240_000)
        # the first 8 ranks by default, their offsets shown; only rank 0 (open by default) loaded
        assert page.locator("#tl-offsets-table tbody tr").count() == 8
        row3 = page.inner_text("#tl-offsets-table tbody tr >> nth=3")
        assert worker(3) in row3 and "1.5" in row3  # 1500 µs as fmtUs writes it (1.50 ms)
        assert set(asked) == {worker(0)}, asked
        # unfold rank 3 by its header: its tile is asked for, no other rank's
        c = page.locator("#tl-canvas canvas").bounding_box()
        page.mouse.click(c["x"] + 20, c["y"] + _header_y(page, worker(3)))
        page.wait_for_function(
            "(w) => window.__gpuscope.timeline.tracks().some((t) => !t.header && t.worker === w)", arg=worker(3)
        )
        assert set(asked) == {worker(0), worker(3)}, asked
        # zoom and pan: still only the two unfolded ranks
        page.click("#tl-zoom-in")
        page.click("#tl-zoom-in")
        page.click("#tl-reset")
        page.wait_for_timeout(300)
        assert set(asked) == {worker(0), worker(3)}, asked
        # alignment off: rank 3's events move by its clock offset (the planted skew); rank 0 (reference) stays
        ev3, ev0 = _first_event(page, worker(3)), _first_event(page, worker(0))
        assert ev3 is not None and ev0 is not None
        offs = page.evaluate("() => window.__gpuscope.merged.shifts()")
        page.uncheck("#tl-align")
        page.wait_for_function(
            "([w, s]) => window.__gpuscope.merged.shifts()[w] !== s", arg=[worker(3), offs[worker(3)]]
        )
        page.wait_for_function(
            "([w, idx, ts]) => window.__gpuscope.timeline.tracks().some((t) => t.worker === w && t.rows.some((r) =>"
            " r.mode === 'events' && r.idx.includes(idx) && r.ts_us[r.idx.indexOf(idx)] !== ts))",
            arg=[worker(3), ev3[0], ev3[1]],
        )
        moved = _ts_of(page, worker(3), ev3[0]) - ev3[1]
        assert abs(moved - SKEW_US) < 1, moved
        assert abs(_ts_of(page, worker(0), ev0[0]) - ev0[1]) < 1e-6
        _shot(page, "merged_timeline_64_unaligned", tmp_path)
        page.check("#tl-align")
        page.wait_for_function(
            "([w, idx, ts]) => window.__gpuscope.timeline.tracks().some((t) => t.worker === w && t.rows.some((r) =>"
            " r.mode === 'events' && r.idx.includes(idx) && Math.abs(r.ts_us[r.idx.indexOf(idx)] - ts) < 1e-6))",
            arg=[worker(3), ev3[0], ev3[1]],
        )
        # another subset (a rank beyond the first 8 among them): chosen but folded ranks load nothing
        page.fill("#tl-ranks", "0-3,40,63")
        page.click("#tl-ranks-apply")
        page.wait_for_function("() => document.querySelectorAll('#tl-offsets-table tbody tr').length === 6")
        page.wait_for_timeout(300)
        assert set(asked) == {worker(0), worker(3)}, asked
        page.mouse.click(c["x"] + 20, c["y"] + _header_y(page, worker(40)))
        page.wait_for_function(
            "(w) => window.__gpuscope.timeline.tracks().some((t) => !t.header && t.worker === w)", arg=worker(40)
        )
        assert set(asked) == {worker(0), worker(3), worker(40)}, asked
        _shot(page, "merged_timeline_64", tmp_path)
        # the critical path's ranks: the generator's straggler (rank 64 // 3 = 21) sets every step; still folded
        page.click("#tl-ranks-path")
        page.wait_for_function(
            "(w) => document.querySelector('#tl-offsets-table').textContent.includes(w)", arg=worker(21)
        )
        assert page.input_value("#tl-ranks") != "0-3,40,63"
        page.wait_for_timeout(300)
        assert worker(21) not in asked, asked
        # all 64 ranks unfolded: only those in view load; scrolling to the end loads the last ones, not those between
        page.fill("#tl-ranks", "0-63")
        page.click("#tl-ranks-apply")
        page.wait_for_function("() => document.querySelectorAll('#tl-offsets-table tbody tr').length === 64")
        page.click("#tl-unfold-all")
        page.wait_for_function("() => window.__gpuscope.timeline.tracks().filter((t) => t.header).length === 64")
        page.wait_for_timeout(500)
        first = set(asked)
        assert 1 <= len(first) < 16, sorted(first)
        page.evaluate("() => window.__gpuscope.timeline.pan(0, 1e9)")
        page.wait_for_function(
            "(w) => window.__gpuscope.timeline.tracks().some((t) => !t.header && t.worker === w && t.rows.length)",
            arg=worker(63),
        )
        assert len(asked) < 32 and worker(32) not in asked, sorted(asked)
        _shot(page, "merged_timeline_64_all_unfolded_end", tmp_path)
    finally:
        context.close()
    guard.check()


def _requests_by_worker(page, route: str) -> dict[str, int]:
    """Counts, by worker, the page's requests to the plugin route `route` (filled in as they are made)."""
    asked: dict[str, int] = {}

    def count(req) -> None:
        u = urlparse(req.url)
        if u.path.endswith(f"/data/plugin/gpuscope/{route}"):
            w = parse_qs(u.query).get("worker", ["?"])[0]
            asked[w] = asked.get(w, 0) + 1

    page.on("request", count)
    return asked


def _go_to_match(page, rank: int) -> float:
    """Clicks rank `rank`'s earliest match in the search results and checks that it is selected, drawn on that rank's
    tracks in view and in the window, at its own time plus the rank's shift. Returns the shift."""
    row = page.locator(f"#tl-msearch-table tbody tr[data-worker='{worker(rank)}']").first
    idx = int(row.get_attribute("data-idx"))
    name = row.locator("td >> nth=1").text_content()
    assert "allreduce" in name.lower()
    page.evaluate("() => { const d = document.querySelector('#tl-sel-name'); if (d) d.textContent = ''; }")
    row.click()
    page.wait_for_function(
        "(n) => document.querySelector('#tl-sel-name')?.textContent === n", arg=name, timeout=120_000
    )
    assert worker(rank) in page.text_content("#tl-details")
    ts = _ts_of(page, worker(rank), idx)
    assert ts is not None
    a, b = page.evaluate("() => window.__gpuscope.timeline.view()")
    assert a <= ts <= b, (a, ts, b)
    assert page.evaluate(
        """([w, idx]) => { const v = window.__gpuscope.timeline, tr = v.tracks();
        return v.visibleTracks().some((i) => tr[i].worker === w && tr[i].rows.some((r) => r.mode === 'events' && r.idx.includes(idx))); }""",
        [worker(rank), idx],
    )
    shift = page.evaluate("(w) => window.__gpuscope.merged.shifts()[w]", worker(rank))
    own = page.evaluate(
        "(w) => fetch(`/data/plugin/gpuscope/timeline/search?run=job64&worker=${w}&span=1&query=allreduce&limit=20`).then((r) => r.json())",
        worker(rank),
    )
    hit = next(r for r in own["results"] if r["idx"] == idx)
    assert abs(ts - (hit["ts_us"] + shift)) < 1e-3, (ts, hit, shift)
    return shift


def test_merged_search_finds_a_name_on_every_chosen_rank_and_goes_there(browser, tb64, tmp_path):
    context = browser.new_context(viewport={"width": 1300, "height": 900}, color_scheme="light")
    page = context.new_page()
    guard = Guard(tb64.url)
    guard.attach(context, page)
    searched = _requests_by_worker(page, "timeline/search")
    tiles = _requests_by_worker(page, "timeline")
    try:
        open_view(page, tb64, "timeline", "job64", "merged=1&ranks=0-63", timeout=240_000)
        page.fill("#tl-msearch", "allreduce")
        page.press("#tl-msearch", "Enter")
        page.wait_for_selector("#tl-msearch-table tbody tr", timeout=120_000)
        head = page.text_content("#tl-msearch-head")
        assert "on 64 of 64 ranks" in head, head
        assert set(searched) == {worker(r) for r in range(64)}, sorted(searched)
        assert "mq=allreduce" in page.evaluate("location.hash")
        # rank 63's earliest match: far below the view (64 groups), its group folded
        before = set(tiles)
        _go_to_match(page, 63)
        # tiles only for the ranks brought into view, not for those between
        new = set(tiles) - before
        assert worker(63) in new and worker(32) not in tiles, sorted(new)
        assert "63" in parse_qs(page.evaluate("location.hash")[1:])["open"][0].split(",")
        # clocks not aligned, rank 3 (its clock SKEW_US off) shifted by that: its match is placed by the shift
        page.uncheck("#tl-align")
        shift = _go_to_match(page, 3)
        assert abs(shift - SKEW_US) < 1, shift
        _shot(page, "merged_timeline_search", tmp_path)
    finally:
        context.close()
    guard.check()
