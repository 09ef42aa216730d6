"""Issue 23 item 10 in a real TensorBoard: the Distributed view of a run whose traces are still being
read shows at once the workers it knows of and the ones read so far, then fills in (it was blank,
waiting for every worker's summary, with only "Reading traces... (0 %)"). The view counts as ready
(data-ready=1) once complete."""

from __future__ import annotations

import json
import os
import time

from .conftest import Guard, TensorBoard, get_json, screenshot

OLD = time.time() - 3600
STEPS = 4


def _worker(path, ops_per_step: int) -> None:
    """A CPU trace of STEPS ProfilerStep ranges, each holding `ops_per_step` ops (written as a stream)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    span = ops_per_step * 10.0
    with open(path, "w", encoding="utf-8") as f:
        f.write('{"schemaVersion": 1, "traceEvents": [')
        first = True
        for s in range(STEPS):
            t0 = s * (span + 100)
            evs = [
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": f"ProfilerStep#{s}",
                    "pid": 1,
                    "tid": 1,
                    "ts": t0,
                    "dur": span + 50,
                    "args": {"External id": 10_000_000 + s},
                }
            ]
            for i in range(ops_per_step):
                evs.append(
                    {
                        "ph": "X",
                        "cat": "cpu_op",
                        "name": f"aten::op{i % 53}",
                        "pid": 1,
                        "tid": 1,
                        "ts": t0 + 5 + i * 10.0,
                        "dur": 6.0,
                        "args": {"External id": s * ops_per_step + i},
                    }
                )
            for e in evs:
                f.write(("" if first else ",") + json.dumps(e))
                first = False
        f.write("]}")
    os.utime(path, (OLD, OLD))


def test_distributed_view_shows_known_workers_at_once_and_fills_in(browser, tmp_path):
    logdir = tmp_path / "dist_early"
    for i in range(3):
        _worker(logdir / "job" / f"rank{i}.1700000000000.pt.trace.json", 50)
    _worker(logdir / "job" / "rank3.1700000000000.pt.trace.json", 150_000)  # seconds to read
    tb = TensorBoard(logdir)
    context = browser.new_context(viewport={"width": 1200, "height": 820})
    page = context.new_page()
    guard = Guard(tb.url)
    guard.attach(context, page)
    try:
        end = time.time() + 120  # TensorBoard up, without asking for the runs (that starts the reading)
        while time.time() < end:
            try:
                if "gpuscope" in get_json(f"{tb.url}/data/plugins_listing"):
                    break
            except OSError:
                pass
            time.sleep(0.2)
        page.goto(f"{tb.url}/data/plugin_entry.html?name=gpuscope#run=job&view=distributed")
        # the view draws what it knows while rank3 is still being read, naming it
        page.wait_for_selector("#view-distributed #dist-pending", timeout=60000)
        first = page.inner_text("#dist-pending")
        screenshot(page, "distributed_pending", tmp_path)
        assert "rank3" in first, first
        # ... and fills in: all four workers, nothing pending
        page.wait_for_selector("#view-distributed[data-ready='1']", timeout=300000)  # ready: complete
        assert page.locator("#dist-pending").count() == 0
        assert page.locator("#dist-devices tbody tr").count() == 4
        assert page.locator("#no-distributed").count() == 0
    finally:
        context.close()
        tb.stop()
    guard.check()
