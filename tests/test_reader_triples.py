"""grid/block [x, y, z] args become int32 columns: in bulk when every value is a list of three ints,
value by value otherwise, with the same result and the same count of bad values either way."""

from __future__ import annotations

import json

import numpy as np

from profiler_core.trace.read.reader import read_trace


def _kernels(tmp_path, grids: list) -> tuple:
    ev = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "pid": 0,
            "tid": 7,
            "ts": float(i),
            "dur": 1.0,
            "args": {"correlation": i} if g is None else {"correlation": i, "grid": g, "block": [1, 1, 1]},
        }
        for i, g in enumerate(grids)
    ]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    t = read_trace(p, processes=0)
    return t.dense_events()[["grid_x", "grid_y", "grid_z"]].to_numpy(), t.warnings


def test_triples_in_bulk_with_missing_values(tmp_path):
    xyz, warnings = _kernels(tmp_path, [None, [1, 2, 3], None, [4, 5, 6]])
    assert xyz.tolist() == [[0, 0, 0], [1, 2, 3], [0, 0, 0], [4, 5, 6]]
    assert not any("grid" in w for w in warnings)


def test_odd_triples_read_one_by_one_and_counted(tmp_path):
    grids = [[1, 2, 3], [1.5, 2, 3], [1, 2], [1 << 40, 1, 1], ["a", 1, 1], "x", [7, 8, 9]]
    xyz, warnings = _kernels(tmp_path, grids)
    assert xyz.dtype == np.int32
    assert xyz.tolist() == [[1, 2, 3], [1, 2, 3], [0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0], [7, 8, 9]]
    assert any(w.startswith("4 non-numeric values of 'grid'") for w in warnings), warnings


ODD = [
    [1.5, 2, 3],
    [True, 2, 3],
    ["8", 2, 3],
    ["x", 2, 3],
    [float("nan"), 1, 1],
    [1e30, 1, 1],
    [1e10, 1, 1],
    [1 << 40, 1, 1],
    [1 << 70, 1, 1],
    [1, 2],
    [1, 2, 3, 4],
    (1, 2, 3),
    "abc",
    [-5, 1, 1],
    [[1], 2, 3],
    {},
]


def test_bulk_path_equals_the_value_by_value_path():
    """Every odd value, alone or among good ones: the bulk conversion gives what the value-by-value one
    gives, and counts the same bad values."""
    from profiler_core.trace.read.columns import Builder

    for odd in ODD:
        for values in ([odd], [[1, 2, 3], odd, None], [None, odd, [4, 5, 6]]):
            bulk, slow = Builder(), Builder()
            got = bulk._triples("grid", values)
            want = slow._triples_slow("grid", values)
            assert got.dtype == np.int32 and got.shape == (len(values), 3)
            assert np.array_equal(got, want), (odd, got.tolist(), want.tolist())
            assert bulk.bad == slow.bad, odd
