"""Export on every table: a CSV download and a copy of the rows shown (after filter and sort),
numbers unformatted."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from .conftest import TRACES, missing, open_view


def need_shared() -> None:
    if not TRACES.is_dir():
        missing("../shared/traces not present (set GPUSCOPE_SHARED)")


def test_operator_table_csv_and_copy_follow_filter_and_sort(guarded_page, tensorboard):
    need_shared()
    page = open_view(guarded_page, tensorboard, "operators", "cnn_single")
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=tensorboard.url)
    page.fill("#view-operators input.filter", "conv")
    page.click("#view-operators th[data-key=calls]")
    order = page.get_attribute("#view-operators th[data-key=calls]", "data-sort")
    shown = page.eval_on_selector_all(
        "#view-operators table.data-table tbody tr td:first-child", "tds => tds.map(t => t.textContent)"
    )
    info = page.inner_text("#view-operators .table-info")
    with page.expect_download() as dl:
        page.click("#view-operators .export-csv")
    download = dl.value
    assert download.suggested_filename.endswith(".csv") and "operators" in download.suggested_filename
    rows = list(csv.DictReader(io.StringIO(Path(download.path()).read_text(encoding="utf-8"))))
    assert len(rows) == int(info.split()[0].replace(",", "")) and rows, (len(rows), info)
    assert all("conv" in r["name"].lower() for r in rows)
    assert [r["name"] for r in rows[: len(shown)]] == shown
    calls = [int(r["calls"]) for r in rows]
    assert calls == sorted(calls, reverse=(order == "desc"))
    # numbers as numbers: no unit, no thousands separator
    assert all(
        r["host_total_us"]
        and float(r["host_total_us"]) >= 0
        and " " not in r["host_total_us"]
        and "," not in r["host_total_us"]
        for r in rows
    )
    page.click("#view-operators .export-copy")
    page.wait_for_function(
        "() => (document.querySelector('#view-operators .export-msg')?.textContent || '').includes('copied')"
    )
    text = page.evaluate("navigator.clipboard.readText()")
    lines = text.strip("\n").split("\n")
    assert lines[0].split("\t")[0] == "name" and len(lines) == len(rows) + 1
    assert [ln.split("\t")[0] for ln in lines[1:]] == [r["name"] for r in rows]


@pytest.mark.parametrize(
    "view,run,selector",
    [
        ("kernels", "resnet50", "#view-kernels .table-box"),
        ("memory", "cnn_single", "#mem-events .table-box"),
        ("modules", "cnn_single", "#view-modules"),
        ("overview", "resnet50", "#view-overview .section"),
    ],
)
def test_tables_offer_export(guarded_page, tensorboard, view, run, selector):
    need_shared()
    page = open_view(guarded_page, tensorboard, view, run)
    page.wait_for_selector(f"{selector} .export-csv")
    with page.expect_download() as dl:
        page.locator(f"{selector} .export-csv").first.click()
    text = Path(dl.value.path()).read_text(encoding="utf-8")
    rows = list(csv.reader(io.StringIO(text)))
    assert len(rows) >= 2 and all(len(r) == len(rows[0]) for r in rows), text[:500]
