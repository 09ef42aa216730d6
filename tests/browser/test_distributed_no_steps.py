"""The Distributed view of traces without ProfilerStep says so: "Whole trace window (no steps)" and "no steps in
the traces", not "Step 0" and "1 steps" (the one step "0" is the whole trace window, the `no_steps` caveat), at two
widths; a run with one real step reads "1 step"."""

from __future__ import annotations

import copy
import os
import time

import pytest

from .browser_traces import no_steps_trace, write
from .conftest import Guard, TensorBoard, open_view

OLD = time.time() - 3600


def _job(folder, with_step: bool) -> None:
    for rank in range(2):
        t = copy.deepcopy(no_steps_trace())
        t["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": 2}
        if with_step:
            ev = t["traceEvents"][0]
            t["traceEvents"].append({**ev, "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0.0, "dur": 500.0})
        p = write(t, folder / f"rank{rank}.1700000000000.pt.trace.json")
        os.utime(p, (OLD, OLD))


@pytest.fixture(scope="module")
def tb(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("dist_no_steps")
    _job(logdir / "nosteps", with_step=False)
    _job(logdir / "onestep", with_step=True)
    server = TensorBoard(logdir)
    server.wait_ready()
    yield server
    server.stop()


def _open(browser, tb, run: str, width: int):
    context = browser.new_context(viewport={"width": width, "height": 820})
    page = context.new_page()
    guard = Guard(tb.url)
    guard.attach(context, page)
    open_view(page, tb, "distributed", run)
    options = page.eval_on_selector_all("#dist-step option", "os => os.map(o => o.textContent)")
    counts = page.inner_text("#dist-counts")
    context.close()
    guard.check()
    return counts, options


@pytest.mark.parametrize("width", [1000, 1600])
def test_distributed_says_there_are_no_steps(browser, tb, width):
    counts, options = _open(browser, tb, "nosteps", width)
    assert counts == "2 workers · no steps in the traces (whole trace window)", counts
    assert "Step 0" not in options and "Whole trace window (no steps)" in options, options


def test_one_step_is_one_step(browser, tb):
    counts, options = _open(browser, tb, "onestep", 1200)
    assert counts == "2 workers · 1 step", counts
    assert "Step 1" in options, options
