"""export_stacks: flame-graph lines, root first, sanitised frames, metric validation."""

import pytest

from profiler_core.analysis import events_from_trace
from profiler_core.analysis.synthetic import op, trace


def _events():
    return events_from_trace(
        trace(
            [
                op("aten::mm", 0, 100, 1, stack="lib/m.py(5): inner fn;lib/m.py(9): outer;main.py(1): <module>;"),
                op("aten::add", 10, 40, 2, stack="lib/m.py(7): helper\twith tab;main.py(1): <module>;"),
                op("aten::relu", 200, 30, 3, stack="main.py(2): <module>;"),
                op("aten::relu", 300, 30, 4, stack="main.py(2): <module>;"),
                op("aten::tiny", 400, 0.4, 5, stack="main.py(3): <module>;"),
                op("aten::nostack", 500, 10, 6),
            ]
        )
    )


def test_lines_root_first_and_sanitised(tmp_path):
    path = tmp_path / "out.stacks"
    _events().export_stacks(str(path), "self_cpu_time_total")
    assert path.read_text().splitlines() == [
        "main.py(1):_<module>;lib/m.py(9):_outer;lib/m.py(5):_inner_fn 60",
        "main.py(1):_<module>;lib/m.py(7):_helper_with_tab 40",
        "main.py(2):_<module> 30",
        "main.py(2):_<module> 30",  # duplicates repeat (flamegraph.pl sums them)
    ]  # aten::tiny: int(0.4) == 0 -> no line; aten::nostack: no stack -> no line


def test_default_metric_is_self_cpu(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    ev = _events()
    ev.export_stacks(str(a))
    ev.export_stacks(str(b), "self_cpu_time_total")
    assert a.read_text() == b.read_text() != ""


@pytest.mark.parametrize("metric", ["self_cuda_time_total", "self_xpu_time_total", "self_privateuse1_time_total"])
def test_device_metrics_accepted_and_empty_without_gpu(tmp_path, metric):
    path = tmp_path / "dev.stacks"
    _events().export_stacks(str(path), metric)
    assert path.read_text() == ""


@pytest.mark.parametrize("metric", ["cpu_time_total", "self_device_time_total", "bogus", ""])
def test_bad_metric_is_a_value_error(tmp_path, metric):
    with pytest.raises(ValueError, match="metric should be one of"):
        _events().export_stacks(str(tmp_path / "x"), metric)
    assert not (tmp_path / "x").exists()


def test_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="directory does not exist"):
        _events().export_stacks(str(tmp_path / "nope" / "x.stacks"))


def test_supported_metrics_listed():
    assert _events().supported_export_stacks_metrics() == [
        "self_cpu_time_total",
        "self_cuda_time_total",
        "self_xpu_time_total",
        "self_privateuse1_time_total",
    ]
