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
