"""The all-ranks (merged) timeline's track filter and step-end markers (issue 39, item 5), in headless Chromium
against a real TensorBoard on a generated 4-rank job, at two widths: each rank's step ends are dashed lines down
its tracks at the step's end on the shared clock (from `/clock_offsets`' per-worker steps), and the track filter
keeps the tracks whose kind or name holds one of its words."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from .conftest import Guard, TensorBoard, browser_available, get_json, missing, open_view, wait_summaries

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from gen_distributed import generate  # noqa: E402

RANKS, STEPS, RUN = 4, 3, "job"


@pytest.fixture(scope="module")
def tb4(tmp_path_factory):
    if browser_available():
        missing(browser_available())
    d = tmp_path_factory.mktemp("merged_tracks_logdir")
    generate(str(d / RUN), ranks=RANKS, events=600, steps=STEPS, clock_skew={2: 700.0})
    tb = TensorBoard(d)
    try:
        tb.wait_ready()
        wait_summaries(tb, RUN, RANKS)
        yield tb
    finally:
        tb.stop()


def _tracks(page) -> list[dict]:
    return page.evaluate(
        "() => window.__gpuscope.timeline.tracks().map((t) => ({worker: t.worker, header: !!t.header, kind: t.kind, label: t.label}))"
    )


@pytest.mark.parametrize("width", [1000, 2560])
def test_merged_timeline_step_ends_and_track_filter(browser, tb4, width):
    context = browser.new_context(viewport={"width": width, "height": 900}, color_scheme="light")
    page = context.new_page()
    guard = Guard(tb4.url)
    guard.attach(context, page)
    try:
        offsets = get_json(f"{tb4.api}/clock_offsets?run={RUN}&span=1", timeout=60)
        open_view(page, tb4, "timeline", RUN, "merged=1", timeout=120_000)
        page.wait_for_function("() => window.__gpuscope.timeline && window.__gpuscope.timeline.stats.frames > 0")
        page.wait_for_function("() => (window.__gpuscope.timeline.stats.stepEnds || []).length > 0", timeout=30_000)
        # the whole run in view (a little wider than rank 0's trace): every rank's every step end is drawn where
        # its time on the shared clock is (aligned: rank 2's planted clock error of 700 µs is taken out)
        page.evaluate(
            "() => { const v = window.__gpuscope.timeline, [a, b] = v.view(), d = (b - a) * 0.08; v.setView(a - d, b + d); }"
        )
        page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        drawn = page.evaluate("window.__gpuscope.timeline.stats.stepEnds")
        v0, v1 = page.evaluate("window.__gpuscope.timeline.view()")
        plot = page.evaluate("document.querySelector('#tl-canvas canvas').getBoundingClientRect().width") - 200
        rows = {r["worker"]: r for r in offsets["workers"]}
        assert len(rows) == RANKS and all(len(r["steps"]) == STEPS for r in rows.values()), offsets
        assert rows[f"node0_rank{2:05d}"]["raw_shift_us"] == 700.0
        want = {
            (w, s["step"]): 200 + (s["end_us"] + r["shift_us"] - v0) / (v1 - v0) * plot
            for w, r in rows.items()
            for s in r["steps"]
        }
        assert sorted((d["worker"], d["step"]) for d in drawn) == sorted(want)
        for d in drawn:
            assert d["x"] == pytest.approx(want[(d["worker"], d["step"])], abs=1.5), (d, want)
        # its own step detail agrees with the step end's time on its own clock
        w0 = next(iter(rows))
        detail = get_json(
            f"{tb4.api}/distributed/step?run={RUN}&span=1&worker={w0}&step={rows[w0]['steps'][-1]['step']}"
        )
        assert detail["end_us"] == pytest.approx(rows[w0]["steps"][-1]["end_us"], abs=0.01)
        # the box turns them off
        page.uncheck("#tl-step-ends")
        page.wait_for_function("() => window.__gpuscope.timeline.stats.stepEnds.length === 0")
        assert "ends=0" in page.evaluate("location.hash")
        page.check("#tl-step-ends")
        page.wait_for_function("() => window.__gpuscope.timeline.stats.stepEnds.length > 0")

        # the track filter: rank 0 (unfolded) shows only its GPU tracks, its header says how many of how many
        before = [t for t in _tracks(page) if not t["header"] and t["worker"] == w0]
        kinds = {t["kind"] for t in before}
        assert kinds == {"cpu", "gpu"}, before
        page.fill("#tl-mtracks", "gpu")
        page.wait_for_function(
            "(w) => window.__gpuscope.timeline.tracks().filter((t) => !t.header && t.worker === w).every((t) => t.kind === 'gpu')",
            arg=w0,
        )
        after = [t for t in _tracks(page) if not t["header"] and t["worker"] == w0]
        assert after and len(after) == sum(t["kind"] == "gpu" for t in before)
        head = next(t for t in _tracks(page) if t["header"] and t["worker"] == w0)
        assert f"{len(after)} of {len(before)} tracks" in head["label"], head
        assert "mtracks=gpu" in page.evaluate("location.hash")
        # a word no track holds: no tracks, the headers stay
        page.fill("#tl-mtracks", "no such track")
        page.wait_for_function(
            "(w) => !window.__gpuscope.timeline.tracks().some((t) => !t.header && t.worker === w)", arg=w0
        )
        assert sum(t["header"] for t in _tracks(page)) == RANKS
        page.fill("#tl-mtracks", "")
        page.wait_for_function(
            "([w, n]) => window.__gpuscope.timeline.tracks().filter((t) => !t.header && t.worker === w).length === n",
            arg=[w0, len(before)],
        )
        box = page.locator("#tl-mtracks").bounding_box()
        assert box and box["x"] + box["width"] <= width
    finally:
        context.close()
    guard.check()
