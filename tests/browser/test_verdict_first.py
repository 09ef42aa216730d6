"""The answer first, the caveats first: in a multi-rank run's Overview and Distributed view the first things are what
the diagnosis cannot know (each caveat's text, a withholding one marked) and then the verdict, the sentence
`gpuscope diagnose` prints first (`/diagnosis`'s `verdict`), above the fold at 1000 and 2560 px wide and readable in
dark mode. Two generated 4-rank jobs (benchmarks/gen_distributed.py), both with rank 2's data loader 20 ms slower
in every step: one complete (no caveat; the verdict names rank 2), one with rank 3's trace missing (the caveat
withholds the cross-rank claims, so the verdict names no straggler)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from .conftest import Guard, TensorBoard, browser_available, get_json, missing, open_view, wait_summaries

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from gen_distributed import Plant, generate  # noqa: E402

RANKS, STEPS, SLOW = 4, 3, 2
RUNS = {"straggler": (), "missing": (3,)}  # run -> the ranks whose trace is left out
#: width -> viewport height (a laptop's 1000 px wide browser; a 2560 px wide screen)
SIZES = {1000: 700, 2560: 1300}


@pytest.fixture(scope="module")
def tb(tmp_path_factory):
    if browser_available():
        missing(browser_available())
    d = tmp_path_factory.mktemp("verdict_logdir")
    for run, drop in RUNS.items():
        generate(str(d / run), RANKS, events=2000, steps=STEPS, plants=(Plant(SLOW, "data", 20.0, None),), drop=drop)
    server = TensorBoard(d)
    try:
        server.wait_ready()
        for run, drop in RUNS.items():
            wait_summaries(server, run, RANKS - len(drop))
        yield server
    finally:
        server.stop()


def _page(browser, tb, width: int, scheme: str = "light"):
    context = browser.new_context(viewport={"width": width, "height": SIZES.get(width, 800)}, color_scheme=scheme)
    page = context.new_page()
    guard = Guard(tb.url)
    guard.attach(context, page)
    return context, page, guard


def _open(page, tb, view: str, run: str) -> None:
    open_view(page, tb, view, run)
    page.wait_for_selector(f"#view-{view} #diag-verdict:not([data-kind='pending'])", timeout=60000)


@pytest.mark.parametrize("width", list(SIZES))
@pytest.mark.parametrize("view", ["overview", "distributed"])
@pytest.mark.parametrize("run", list(RUNS))
def test_caveats_then_verdict_lead_the_view(browser, tb, run, view, width):
    diag = get_json(f"{tb.api}/diagnosis?run={run}&span=1", timeout=60)
    context, page, guard = _page(browser, tb, width)
    try:
        _open(page, tb, view, run)
        # the head is the view's first child, the caveats (when there are any) before the verdict
        first = page.evaluate(f"document.querySelector('#view-{view}').firstElementChild.id")
        assert first == "diag-head", first
        kids = page.evaluate("[...document.querySelector('#diag-head').children].map((e) => e.id)")
        verdict = page.inner_text("#diag-verdict")
        # the same sentence as the CLI's (the /diagnosis JSON is `gpuscope diagnose --json`)
        assert verdict == f"Verdict: {diag['verdict']['text']}", verdict
        if run == "missing":
            assert kids == ["diag-caveats", "diag-verdict"], kids
            items = page.locator("#diag-caveats li")
            assert items.count() == len(diag["caveats"]) >= 1
            cav = items.nth(0)
            assert cav.get_attribute("data-key") == "missing_ranks" and "withholds" in cav.get_attribute("class")
            assert cav.locator(".tag").inner_text() == "cross-rank claims withheld"
            assert f"{RANKS - 1} of {RANKS} ranks present" in cav.inner_text()
            assert page.get_attribute("#diag-verdict", "data-kind") == "withheld"
            assert "no straggler or waiting across ranks is claimed" in verdict and f"rank {SLOW}" not in verdict
            if view == "distributed":
                assert "No straggler is claimed" in page.inner_text("#dist-stragglers")
        else:
            assert kids == ["diag-verdict"], kids  # a complete job: nothing it cannot know
            assert page.get_attribute("#diag-verdict", "data-kind") == "straggler"
            assert re.match(
                rf"Verdict: rank {SLOW} is (19|20)\.\d ms slow in {STEPS} of {STEPS} steps: data loading", verdict
            )
        # above the fold, and above everything else the view shows
        vh = page.viewport_size["height"]
        head = page.locator("#diag-head").bounding_box()
        assert head["y"] >= 0 and head["y"] + head["height"] <= vh, (head, vh)
        below = page.evaluate(
            f"""[...document.querySelector('#view-{view}').children].slice(1)
              .filter((e) => e.getClientRects().length).map((e) => e.getBoundingClientRect().top)"""
        )
        assert below and min(below) >= head["y"] + head["height"] - 1, (below, head)
    finally:
        context.close()
    guard.check()


def _rgb(css: str) -> tuple[float, ...]:
    return tuple(float(x) for x in re.findall(r"[\d.]+", css)[:3])


def _contrast(a: str, b: str) -> float:
    """WCAG contrast ratio of two CSS rgb() colours."""

    def lum(c: tuple[float, ...]) -> float:
        ch = [v / 255 for v in c]
        ch = [v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4 for v in ch]
        return 0.2126 * ch[0] + 0.7152 * ch[1] + 0.0722 * ch[2]

    hi, lo = sorted((lum(_rgb(a)), lum(_rgb(b))), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_caveats_and_verdict_are_readable_in_both_themes(browser, tb, scheme):
    context, page, guard = _page(browser, tb, 1000, scheme)
    try:
        _open(page, tb, "distributed", "missing")
        assert page.evaluate("document.body.classList.contains('dark')") == (scheme == "dark")
        style = "(s) => { const c = getComputedStyle(document.querySelector(s)); return [c.color, c.backgroundColor]; }"
        for sel, box in (
            ("#diag-verdict", "#diag-verdict"),
            ("#diag-caveats li", "#diag-caveats"),
            ("#diag-caveats .tag", "#diag-caveats .tag"),
        ):
            fg = page.evaluate(style, sel)[0]
            bg = page.evaluate(style, box)[1]
            assert _contrast(fg, bg) >= 4.5, (scheme, sel, fg, bg)
    finally:
        context.close()
    guard.check()
