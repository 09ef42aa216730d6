"""Timeline tools: a range's count/total/self by name, counter tracks, occurrences, locate."""

import json

import pytest

from tb_plugin.errors import BadRequest, NotFound
from tb_plugin.views import timeline_tools as tt

from .test_views_common_support import kernel, make_trace, op, runtime


def trace():
    return make_trace(
        [
            op("outer", 0, 100),
            op("inner", 10, 30),
            op("inner", 50, 20),
            op("leaf", 55, 5),
            op("other", 0, 40, tid=2),
            runtime("cudaLaunchKernel", 20, 2, corr=1),
            runtime("cudaLaunchKernel", 60, 2, corr=2),
            kernel("k1", 30, 40, corr=1),
            kernel("k2", 50, 40, corr=2, stream=8),  # overlap 50..70 on GPU 0
        ]
    )


def rows(d):
    return {r["name"]: (r["count"], r["total_us"], r["self_us"]) for r in d["rows"]}


def test_range_summary_names_each_rows_category():
    """Each row of a range's summary carries its events' category (the page shows it as a column), so a kernel and
    an op of the same look are told apart."""
    d = tt.range_summary(trace(), 0, 100)
    cats = {r["name"]: r["cat"] for r in d["rows"]}
    assert cats["outer"] == "cpu_op" and cats["cudaLaunchKernel"] == "cuda_runtime" and cats["k1"] == "kernel", cats


def test_range_summary_clips_and_subtracts_children():
    t = trace()
    d = tt.range_summary(t, 0, 100, tracks="0")
    assert rows(d) == {
        "outer": (1, 100.0, 50.0),
        "inner": (2, 50.0, 41.0),
        "leaf": (1, 5.0, 5.0),
        "cudaLaunchKernel": (2, 4.0, 4.0),
    }
    part = tt.range_summary(t, 15, 60, tracks="0")
    # outer clipped to 45; inner 15..40 (25) + 50..60 (10); leaf 55..60 (5); launches inside children
    assert rows(part)["outer"] == (1, 45.0, 10.0)
    assert rows(part)["inner"] == (2, 35.0, 28.0)
    assert rows(part)["leaf"] == (1, 5.0, 5.0)
    everything = tt.range_summary(t, 0, 100)
    assert rows(everything)["other"] == (1, 40.0, 40.0) and rows(everything)["k1"] == (1, 40.0, 40.0)
    assert everything["events"] == 9
    json.dumps(everything)
    with pytest.raises(BadRequest):
        tt.range_summary(t, 10, 5)
    with pytest.raises(BadRequest):
        tt.range_summary(t, 0, 10, tracks="0,99")


def test_gpu_utilization_counter_is_the_union_of_kernels():
    d = tt.counters(trace(), 0, 100, width_px=10)
    util = [c for c in d["counters"] if c["unit"] == "fraction"]
    assert [c["name"] for c in util] == ["GPU 0 utilization"]
    # kernels cover 30..90 (overlapping on two streams): buckets of 10 µs
    assert util[0]["values"] == [0, 0, 0, 1, 1, 1, 1, 1, 1, 0]
    assert util[0]["ts_us"][:3] == [0.0, 10.0, 20.0]


def test_occurrences_and_locate():
    t = trace()
    occ = tt.occurrences(t, "inner")
    assert occ["total"] == 2 and [r["ts_us"] for r in occ["results"]] == [10.0, 50.0]
    assert all(r["depth"] == 1 for r in occ["results"])
    assert tt.occurrences(t, "inn")["total"] == 0  # exact names only
    first = occ["results"][0]
    assert tt.locate(t, first["idx"]) == first
    with pytest.raises(NotFound):
        tt.locate(t, 10**6)


def test_occurrences_of_a_table_row_count_what_the_row_counts():
    """Issue 39: the row's occurrence button opened "occurrence 1 of 241" from a 48-call row (every event of the
    name). `of=operators` (with the row's input shape) and `of=kernels` (with the launching op) answer the calls the
    operator and kernel tables' rows count."""
    from tb_plugin.views import kernels, operators

    a, b = {"Input Dims": [[2, 3]]}, {"Input Dims": [[4, 5]]}
    t = make_trace(
        [
            op("aten::add", 0, 10, ext=1, **a),
            op("aten::add", 20, 10, ext=2, **a),
            op("aten::add", 40, 10, ext=3, **b),
            op("aten::mul", 60, 10, ext=4, **a),
            runtime("cudaLaunchKernel", 1, 1, corr=1, ext=1),
            runtime("cudaLaunchKernel", 41, 1, corr=2, ext=3),
            runtime("cudaLaunchKernel", 61, 1, corr=3, ext=4),
            kernel("ew", 100, 5, corr=1),
            kernel("ew", 110, 5, corr=2),
            kernel("ew", 120, 5, corr=3),
        ]
    )
    assert tt.occurrences(t, "aten::add")["total"] == 3  # every event of the name: of both shapes
    for r in operators.operators(t, "name_shape")["rows"]:
        got = tt.occurrences(t, r["name"], of="operators", input_shape=r["input_shape"])
        assert got["total"] == r["calls"], (r, got["total"])
    shapes = operators.operators(t, "name_shape")["rows"]
    by_shape = {r["input_shape"]: r["calls"] for r in shapes if r["name"] == "aten::add"}
    assert sorted(by_shape.values()) == [1, 2]
    assert tt.occurrences(t, "aten::add", of="operators")["total"] == 3
    for r in kernels.kernels(t, "name_op")["rows"]:
        got = tt.occurrences(t, r["name"], of="kernels", op=r["op"])
        assert got["total"] == r["calls"], (r, got["total"])
    ts = [x["ts_us"] for x in tt.occurrences(t, "ew", of="kernels", op="aten::mul")["results"]]
    assert ts == [120.0]
    assert tt.occurrences(t, "ew", of="kernels")["total"] == 3
    with pytest.raises(BadRequest):
        tt.occurrences(t, "ew", of="nope")
