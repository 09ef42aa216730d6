"""with_flops: torch's formulas (verified values from torch 2.13) and the formula registry."""

import numpy as np
import pytest

from profiler_core import ProfilerActivity, profile, record_op, register_flops_formula
from profiler_core.flops import compute_flops


@pytest.mark.parametrize(
    "name,dims,concrete,expected",
    [
        ("aten::mm", [[4, 5], [5, 6]], [], 240),
        ("mm", [[4, 5], [5, 6]], [], 240),
        ("aten::addmm", [[6], [4, 5], [5, 6], [], []], ["", "", "", "1", "1"], 240),
        ("aten::bmm", [[2, 4, 5], [2, 5, 6]], [], 480),
        ("baddbmm", [[2, 4, 6], [2, 4, 5], [2, 5, 6]], [], 480),
        (
            "aten::conv2d",
            [[2, 3, 32, 32], [8, 3, 3, 3], [8], [], [], [], []],
            ["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "1"],
            777600,
        ),
        ("conv2d", [[2, 3, 32, 32], [8, 3, 3, 3]], [], 777600),
        (
            "aten::conv2d",
            [[1, 4, 8, 8], [4, 2, 3, 3], [], [], [], [], []],
            ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "2"],
            2 * 1 * 4 * 4 * 9 * 4 * 4 // 2,
        ),
        ("aten::mul", [[4, 5], [4, 5]], [], 20),
        ("add", [[4, 5], []], [], 20),
        ("matmul", [[4, 5], [5, 6]], [], 240),
        ("matmul", [[3, 4, 5], [5, 6]], [], 720),
        ("matmul", [[5], [5]], [], 10),
        ("aten::relu", [[4, 5]], [], 0),
        ("mylib::mm", [[4, 5], [5, 6]], [], 0),
    ],
)
def test_formulas(name, dims, concrete, expected):
    assert compute_flops(name, dims, concrete) == expected


def test_register_formula_and_prefix_matching():
    register_flops_formula("mylib::gemv", lambda dims, c: 2 * dims[0][0] * dims[0][1])
    register_flops_formula("conv1d_test", lambda dims, c: 7)
    assert compute_flops("mylib::gemv", [[3, 4], [4]]) == 24
    assert compute_flops("aten::conv1d_test", [[1]]) == 7
    with pytest.raises(TypeError, match="must be callable"):
        register_flops_formula("x", 3)


def test_broken_formula_warns_and_gives_zero():
    register_flops_formula("broken_formula_op", lambda dims, c: dims[5][0])
    with pytest.warns(UserWarning, match="broken_formula_op"):
        assert compute_flops("broken_formula_op", [[1]]) == 0


def test_flops_arg_on_events_and_implies_shapes():
    a, b = np.ones((4, 5), np.float32), np.ones((5, 6), np.float32)
    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as p:
        with record_op("aten::mm", a, b):
            pass
        with record_op("aten::relu", a):
            pass
    ops = {e["name"]: e["args"] for e in p.trace["traceEvents"] if e.get("cat") == "cpu_op"}
    assert ops["aten::mm"]["flops"] == 240 and ops["aten::mm"]["Input Dims"] == [[4, 5], [5, 6]]
    assert "flops" not in ops["aten::relu"]
    assert p.trace["with_flops"] == 1 and "record_shapes" not in p.trace
