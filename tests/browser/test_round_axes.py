"""The Memory view's byte axis ticks at round values of the unit its labels use (5, 10, 15, 20 MiB), not at
quarters of a decimal maximum (4.77, 9.54, 14.31 MiB), at two widths."""

from __future__ import annotations

import re

import pytest

from .conftest import TRACES, missing, open_view

UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


@pytest.mark.parametrize("width", [1000, 1600])
def test_memory_axis_ticks_are_round(guarded_page, tensorboard, width):
    if not TRACES.is_dir():
        missing("../shared/traces not present (set GPUSCOPE_SHARED)")
    guarded_page.set_viewport_size({"width": width, "height": 820})
    page = open_view(guarded_page, tensorboard, "memory", "cnn_single")
    page.wait_for_selector("#view-memory svg.line-chart polyline.series")
    # the y axis' labels: right-aligned at the plot's left edge
    labels = page.eval_on_selector_all(
        "#view-memory svg.line-chart text.axis",
        "ts => ts.filter(t => t.getAttribute('text-anchor') === 'end' && +t.getAttribute('x') < 100)"
        ".map(t => t.textContent)",
    )
    assert len(labels) == 5, labels
    values = []
    for text in labels[1:]:  # the first is 0
        m = re.fullmatch(r"([0-9.]+) (\w+)", text)
        assert m and m.group(2) in UNITS, labels
        values.append(float(m.group(1)))
        # a round number: a multiple of a quarter of its unit at most (512 KiB, 1.5 GiB, 2.5 MiB)
        assert abs(values[-1] * 4 - round(values[-1] * 4)) < 1e-9, labels
    assert values == sorted(values), labels
