"""Issue 14's features in headless Chromium against a real TensorBoard: kernel launch
configuration, the timeline's range selection, counters and keys, the icicle chart, small screens."""
from __future__ import annotations

import re

import pytest

from .conftest import open_view, TRACES


def need_shared() -> None:
    if not TRACES.is_dir():
        pytest.skip("../shared/traces not present")


def test_kernel_launch_configuration_columns_and_split(guarded_page, tensorboard):
    need_shared()
    page = open_view(guarded_page, tensorboard, "kernels", "resnet50", "group_by=name_op")
    for key in ("grid", "block", "registers_per_thread", "shared_memory", "theoretical_occupancy", "launch_configs"):
        assert page.locator(f"#view-kernels th[data-key={key}]").count() == 1, key
    n_op = int(page.inner_text("#view-kernels .table-info").split()[0].replace(",", ""))
    page.click("#view-kernels .seg button[data-value=name_op_config]")
    page.wait_for_function("() => document.querySelector('#view-kernels .seg button[data-value=name_op_config]')?.getAttribute('aria-pressed') === 'true'")
    page.wait_for_selector("#view-kernels th[data-key=grid]")
    assert "group_by=name_op_config" in page.evaluate("location.hash")
    n_cfg = int(page.inner_text("#view-kernels .table-info").split()[0].replace(",", ""))
    assert n_cfg > n_op
    cells = page.eval_on_selector_all("#view-kernels table.data-table tbody tr", """trs => trs.map(tr => {
        const th = [...document.querySelectorAll('#view-kernels th')].map(t => t.dataset.key);
        const td = [...tr.children].map(t => t.textContent);
        return Object.fromEntries(th.map((k, i) => [k, td[i]]));
    })""")
    assert all(re.fullmatch(r"\[\d+, \d+, \d+\]", c["grid"]) and re.fullmatch(r"\[\d+, \d+, \d+\]", c["block"]) for c in cells), cells[:3]
    assert all(c["theoretical_occupancy"].endswith("%") for c in cells)
    assert any(c["shared_memory"].endswith("B") for c in cells)
