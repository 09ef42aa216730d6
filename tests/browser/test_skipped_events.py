"""Issue 26, items 22 and 12: what the reader skipped in a file is shown on the page, per file, as
text; a module tree deeper than the view answers says so."""

from __future__ import annotations

from .conftest import DEEP_RUN, SKIPPED_RUN, get_json, open_view

FILE = f"{SKIPPED_RUN}/w.1700000000000.pt.trace.json"


def test_runs_lists_the_skipped_events_of_each_file(tensorboard):
    warnings = get_json(f"{tensorboard.api}/runs")["warnings"]
    mine = [w for w in warnings if w["file"] == FILE]
    assert len(mine) == 1 and mine[0]["run"] == SKIPPED_RUN
    assert mine[0]["message"].startswith("3 events skipped (")
    assert "unsupported phase 'Q'" in mine[0]["message"] and "without a valid ts" in mine[0]["message"]


def test_the_page_shows_n_events_skipped_per_file(guarded_page, tensorboard):
    page = open_view(guarded_page, tensorboard, "overview", SKIPPED_RUN)
    page.wait_for_selector("#gs-warnings li")
    lines = page.eval_on_selector_all("#gs-warnings li", "ls => ls.map(l => l.textContent)")
    line = next(x for x in lines if x.startswith(FILE + ": "))
    assert line.startswith(f"{FILE}: 3 events skipped (")
    assert page.locator("#gs-warnings b").count() == 0  # text, never markup


def test_a_module_tree_150_deep_shows_100_levels_and_a_note(guarded_page, tensorboard):
    page = open_view(guarded_page, tensorboard, "modules", DEEP_RUN)
    page.wait_for_selector("#modules-note")
    assert "50 modules nested deeper than 100 levels are not shown" in page.inner_text("#modules-note")
