"""Issue 39 item 8 on the page: a run whose first file (by name) is an empty trace opens on a readable worker,
and the worker selector marks the empty one unreadable with its reason (as `gpuscope diagnose` names it), at two
widths."""

from __future__ import annotations

import pytest

from .conftest import TensorBoard, browser_available
from .issue23_traces import gpu_steps_trace, write_json


@pytest.fixture(scope="module")
def tb(tmp_path_factory):
    if browser_available():
        pytest.skip(browser_available())
    d = tmp_path_factory.mktemp("unreadable_worker")
    (d / "job").mkdir()
    (d / "job" / "a_empty.pt.trace.json").write_bytes(b"")  # sorts first: the old default worker
    write_json(gpu_steps_trace(3), d / "job" / "b_good.1700000000000.pt.trace.json")
    server = TensorBoard(d)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("width", [1000, 1600])
def test_an_empty_trace_is_listed_unreadable_and_not_opened_first(browser, tb, width):
    context = browser.new_context(viewport={"width": width, "height": 820})
    try:
        page = context.new_page()
        page.goto(f"{tb.url}/data/plugin_entry.html?name=gpuscope#run=job&view=overview")
        page.wait_for_selector("#view-overview[data-ready='1'], #view-overview[data-ready='error']", timeout=120000)
        assert page.get_attribute("#view-overview", "data-ready") == "1", page.inner_text("#gs-main")
        assert page.input_value("#gs-worker") == "b_good"
        options = page.eval_on_selector_all("#gs-worker option", "os => os.map(o => [o.value, o.textContent, o.title])")
        assert options == [["a_empty", "a_empty (unreadable)", "empty file"], ["b_good", "b_good", ""]], options
    finally:
        context.close()
