"""A table's count reads as English: "1 row", not "1 rows" (and "2 rows"), at two widths."""

from __future__ import annotations

import pytest

from .conftest import TRACES, missing, open_view


@pytest.mark.parametrize("width", [1000, 1600])
def test_one_row_is_one_row(guarded_page, tensorboard, width):
    if not TRACES.is_dir():
        missing("../shared/traces not present (set GPUSCOPE_SHARED)")
    guarded_page.set_viewport_size({"width": width, "height": 820})
    page = open_view(guarded_page, tensorboard, "operators", "cnn_single")
    rows = "#view-operators table.data-table tbody tr.clickable"
    page.wait_for_selector(rows)
    page.fill("#view-operators input.filter", "aten::max_pool2d_with_indices_backward")
    page.wait_for_function("s => document.querySelectorAll(s).length === 1", arg=rows, timeout=10000)
    info = page.inner_text("#view-operators .table-info").strip()
    assert info.startswith("1 row") and not info.startswith("1 rows"), info
    page.fill("#view-operators input.filter", "aten::max_pool2d")
    page.wait_for_function("s => document.querySelectorAll(s).length === 3", arg=rows, timeout=10000)
    assert page.inner_text("#view-operators .table-info").strip().startswith("3 rows")
