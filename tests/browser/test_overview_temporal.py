"""The overview's GPU summary shows HTA's temporal breakdown (issue 11 item 6) in headless Chromium."""

from __future__ import annotations

from .conftest import TRACES, missing, open_view


def test_gpu_summary_shows_idle_compute_non_compute(guarded_page, tensorboard):
    if not TRACES.is_dir():
        missing("../shared/traces not present (set GPUSCOPE_SHARED)")
    page = open_view(guarded_page, tensorboard, "overview", "resnet50", "")
    page.wait_for_function("() => document.querySelectorAll('#gpu-temporal tbody tr').length >= 2", timeout=30000)
    rows = page.locator("#gpu-temporal tbody tr")
    first = rows.nth(0).inner_text()
    assert "GPU 0" in first and "average" in first and "%" in first
    assert rows.count() == 1 + 6  # the average, then the 6 steps of the ResNet-50 span
    assert "is idle" in page.inner_text("#recommendations")
