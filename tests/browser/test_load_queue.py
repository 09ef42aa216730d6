"""Issue 12 item 4 / issue 14 bug 6 in a real TensorBoard: nine files, the big one last in the
queue; opening the big run reads it first, shows its own progress (bytes, MB/s, time left, files
loaded) and draws the view without waiting for the other files."""

from __future__ import annotations

import json
import os
import time

from .conftest import TensorBoard, get_json, screenshot

OLD = time.time() - 3600


def _trace(path, n: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write('{"traceEvents": [')
        for i in range(n):
            f.write(
                ("," if i else "")
                + json.dumps(
                    {
                        "ph": "X",
                        "cat": "cpu_op",
                        "name": f"aten::op{i % 97}",
                        "pid": 1,
                        "tid": 1 + i % 3,
                        "ts": i * 10.0,
                        "dur": 5.0,
                        "args": {"External id": i, "Input Dims": [[i % 7, 3]], "Input type": ["float"]},
                    }
                )
            )
        f.write("]}")
    os.utime(path, (OLD, OLD))


def test_requested_file_first_with_its_own_progress(browser, tmp_path):
    logdir = tmp_path / "queue_logdir"
    for i in range(8):
        _trace(logdir / f"run{i}" / "w.1.pt.trace.json", 100_000)
    _trace(logdir / "z_big" / "w.1.pt.trace.json", 700_000)
    tb = TensorBoard(logdir)
    context = browser.new_context(viewport={"width": 1200, "height": 820})
    try:
        # wait for TensorBoard without asking for the runs (that would start the loading early)
        end = time.time() + 120
        while time.time() < end:
            try:
                if "gpuscope" in get_json(f"{tb.url}/data/plugins_listing"):
                    break
            except OSError:
                pass
            time.sleep(0.2)
        page = context.new_page()
        page.goto(f"{tb.url}/data/plugin_entry.html?name=gpuscope#run=z_big&view=operators")
        page.wait_for_function(
            "() => /MB\\/s|in the queue/.test(document.querySelector('#gs-file-progress')?.textContent || '')",
            timeout=120000,
        )
        text = page.inner_text("#gs-file-progress")
        screenshot(page, "loading", tmp_path)
        assert "z_big/w.1.pt.trace.json" in text and " MB" in text and "files loaded" in text, text
        page.wait_for_selector("#view-operators[data-ready='1'], #view-operators[data-ready='error']", timeout=300000)
        done_when_shown = get_json(f"{tb.api}/runs")["progress"]["files_done"]
        assert page.get_attribute("#view-operators", "data-ready") == "1", page.inner_text("#gs-main")
        assert done_when_shown < 9, "the view waited for every other file"
        assert page.input_value("#gs-run") == "z_big"
        assert page.inner_text("#gs-file-progress").strip() == ""
    finally:
        context.close()
        tb.stop()
