"""Issue 23, item 8: a trace without ProfilerStep# says so on the Overview instead of a made-up "Steps 1"."""

from __future__ import annotations

from .conftest import NO_STEPS_RUN, open_view


def test_overview_says_no_steps_in_this_trace(guarded_page, tensorboard):
    page = open_view(guarded_page, tensorboard, "overview", NO_STEPS_RUN)
    assert page.inner_text("#steps-count") == "no steps in this trace (whole trace window)"
    assert "No steps in this trace" in page.inner_text("#overview-notes")
