"""table(): torch's layout rules (widths, truncation, units, limits, sorting errors) on small inputs."""

import pytest

from profiler_core.analysis import EventList, events_from_trace
from profiler_core.analysis.events import format_memory, format_time
from profiler_core.analysis.synthetic import annotation, op, trace
from profiler_core.analysis.table import _flops_scale


@pytest.mark.parametrize(
    "us, text",
    [(0, "0.000us"), (999.9994, "999.999us"), (1000, "1.000ms"), (1234567, "1.235s"), (-9267.389, "-9267.389us")],
)
def test_format_time(us, text):
    assert format_time(us) == text


@pytest.mark.parametrize(
    "nbytes, text",
    [
        (0, "0 B"),
        (-496, "-496 B"),
        (1024, "1.00 KB"),
        (-57600, "-56.25 KB"),
        (3 << 20, "3.00 MB"),
        (5 << 30, "5.00 GB"),
    ],
)
def test_format_memory(nbytes, text):
    assert format_memory(nbytes) == text


@pytest.mark.parametrize(
    "flops, unit, scale",
    [(240, "FLOPs", 1.0), (100663296, "MFLOPs", 1e-6), (2e9, "GFLOPs", 1e-9), (5e20, "PFLOPs", 1e-15)],
)
def test_flops_scale_from_minimum(flops, unit, scale):
    got_scale, got_unit = _flops_scale(flops)
    assert got_unit == unit and got_scale == pytest.approx(scale)


@pytest.fixture
def events():
    return events_from_trace(
        trace(
            [
                annotation("block", 0, 1000, 1),
                op("aten::mm", 10, 400, 2, dims=[[128, 256], [256, 512]]),
                op("aten::relu", 500, 100, 3, dims=[[128, 512]]),
                op("aten::relu", 700, 50, 4, dims=[[128, 512]]),
                op("a" * 70, 800, 10, 5),
            ]
        )
    )


def test_layout_widths_and_trailing_spaces(events):
    text = events.key_averages().table()
    lines = text.split("\n")
    sep, header = lines[0], lines[1]
    assert sep == "-" * 55 + "  " + ("-" * 12 + "  ") * 6
    assert header.startswith(" " * 51 + "Name")
    assert all(line.endswith("  ") for line in lines[:-2])
    assert text.endswith("Self CPU time total: 1.000ms\n")
    long_row = [line for line in lines if line.startswith("aaa")][0]
    assert long_row.startswith("a" * 52 + "...  ")


def test_name_width_shrinks_to_longest_name():
    ev = events_from_trace(trace([op("aten::mm", 0, 10, 1)]))
    header = ev.key_averages().table().split("\n")[1]
    assert header.startswith("        Name  ")  # len("aten::mm") + 4 = 12


def test_percentages_and_averages(events):
    row = [line for line in events.key_averages().table().split("\n") if "aten::relu" in line][0]
    cells = row.split()
    assert cells[1:7] == ["15.00%", "150.000us", "15.00%", "150.000us", "75.000us", "2"]


def test_sort_row_limit_and_unknown_key(events):
    avgs = events.key_averages()
    rows = avgs.table(sort_by="cpu_time_total", row_limit=2).split("\n")[3:5]
    assert [r.split()[0] for r in rows] == ["block", "aten::mm"]
    assert avgs.table(row_limit=-1).count("\n") == 3 + 4 + 2  # header block, 4 rows, sep + footer
    zero = avgs.table(row_limit=0).split("\n")
    assert zero[0] == zero[2] == zero[3] and zero[4].startswith("Self CPU time total")
    with pytest.raises(AttributeError, match="'FunctionEventAvg' object has no attribute 'bogus'"):
        avgs.table(sort_by="bogus")
    with pytest.raises(TypeError, match="sort_by must be an attribute name"):
        avgs.table(sort_by=3)


def test_header_and_top_level_lines(events):
    text = events.key_averages().table(header="MY HEADER", top_level_events_only=True, time_unit="ms")
    lines = text.split("\n")
    width = len(lines[4]) - 2  # the dashed separator without its two trailing spaces
    assert lines[0] == "=" * width and lines[1] == "MY HEADER" and lines[2] == "=" * width
    assert lines[3] == "This report only display top-level ops statistics"
    assert lines[4].startswith("-") and "Name" in lines[5]
    body = [line for line in lines[7:] if line and not line.startswith("-") and "total:" not in line]
    assert [b.split()[0] for b in body] == ["block"]
    assert "1.000ms" in body[0] and lines[-2] == "Self CPU time total: 1.000ms"


def test_time_unit_forces_units(events):
    text = events.key_averages().table(time_unit="s")
    assert "0.001s" in text and "us" not in text.replace("Calls", "")
    with pytest.raises(ValueError, match="time_unit"):
        events.key_averages().table(time_unit="minutes")


def test_input_shapes_column_and_truncation(events):
    text = events.key_averages(group_by_input_shape=True).table(max_shapes_column_width=12)
    header = text.split("\n")[1]
    assert header.endswith("Input Shapes  ")
    mm_row = [line for line in text.split("\n") if line.lstrip().startswith("aten::mm")][0]
    assert mm_row.endswith("[[128, 256],  ")


def test_source_location_rows_from_stacks():
    ev = events_from_trace(trace([op("aten::mm", 0, 10, 1, stack="a.py(1): f;" + "x" * 90 + ";")]))
    text = ev.table(max_src_column_width=30)
    lines = text.split("\n")
    assert lines[1].rstrip().endswith("Source Location")
    assert lines[3].rstrip().endswith("a.py(1): f")
    assert lines[4].strip() == "..." + "x" * 27
    assert lines[5].strip() == ""


def test_empty_list_gives_empty_string():
    assert EventList().table() == ""
    assert str(EventList()) == ""


def test_nan_percent_when_no_cpu_time():
    ev = events_from_trace(trace([op("aten::noop", 5, 0, 1)]))
    row = ev.table().split("\n")[3]
    assert row.split()[1] == "NaN"
