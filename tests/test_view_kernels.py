"""Kernels view: grouping by name and by launching op, duration-weighted means, Tensor Cores, bad input."""

from __future__ import annotations

import json

import pytest

from profiler_core.analysis.tables import kernels as kernel_table
from profiler_core.trace.sparse import SparseColumn
from tb_plugin.errors import BadRequest
from tb_plugin.views import kernels

from .test_views_common_support import kernel, make_trace, op, runtime


def trace():
    return make_trace(
        [
            op("aten::mm", 0, 20, ext=1),
            runtime("cudaLaunchKernel", 1, 1, corr=1, ext=1),
            op("aten::addmm", 30, 20, ext=2),
            runtime("cudaLaunchKernel", 31, 1, corr=2, ext=2),
            runtime("cudaLaunchKernel", 32, 1, corr=3, ext=2),
            kernel("volta_h884gemm_64x64_nt", 5, 10, corr=1, **{"blocks per SM": 1.0, "est. achieved occupancy %": 50}),
            kernel(
                "volta_h884gemm_64x64_nt", 35, 30, corr=2, **{"blocks per SM": 3.0, "est. achieved occupancy %": 25}
            ),
            kernel("volta_sgemm_128x64_nn", 70, 50, corr=3),
            kernel("orphan_kernel", 130, 5, corr=99, **{"blocks per SM": 0.5, "est. achieved occupancy %": 10}),
            kernel("Memcpy HtoD", 140, 100, corr=98, cat="gpu_memcpy"),
        ]
    )


def test_group_by_name():
    rows = kernels.kernels(trace(), "name")["rows"]
    assert [r["name"] for r in rows] == ["volta_sgemm_128x64_nn", "volta_h884gemm_64x64_nt", "orphan_kernel"]
    gemm = rows[1]
    assert gemm == {
        "name": "volta_h884gemm_64x64_nt",
        "calls": 2,
        "total_us": 40.0,
        "mean_us": 20.0,
        "min_us": 10.0,
        "max_us": 30.0,
        "blocks_per_sm": 2.5,
        "achieved_occupancy": 0.3125,
        "tensor_cores": True,
        "grid": None,
        "block": None,
        "registers_per_thread": None,
        "shared_memory": None,
        "theoretical_occupancy": None,
        "launch_configs": 1,
    }
    assert rows[0]["blocks_per_sm"] is None and rows[0]["achieved_occupancy"] is None
    assert rows[0]["tensor_cores"] is False
    json.dumps(rows)


def test_group_by_name_and_op():
    rows = kernels.kernels(trace(), "name_op")["rows"]
    got = [(r["name"], r["op"], r["calls"], r["total_us"]) for r in rows]
    assert got == [
        ("volta_sgemm_128x64_nn", "aten::addmm", 1, 50.0),
        ("volta_h884gemm_64x64_nt", "aten::addmm", 1, 30.0),
        ("volta_h884gemm_64x64_nt", "aten::mm", 1, 10.0),
        ("orphan_kernel", kernel_table.NO_OP, 1, 5.0),
    ]


def test_ties_sorted_by_name():
    t = make_trace([kernel("b_kernel", 0, 10, corr=1), kernel("a_kernel", 20, 10, corr=2)])
    assert [r["name"] for r in kernels.kernels(t)["rows"]] == ["a_kernel", "b_kernel"]


@pytest.mark.parametrize("group_by", ["Kernel", "op", ""])
def test_bad_group_by(group_by):
    with pytest.raises(BadRequest, match="group_by"):
        kernels.kernels(trace(), group_by)


def test_no_kernels():
    assert kernels.kernels(make_trace([op("aten::add", 0, 1)]), "name_op") == {"rows": []}


def test_bad_request_is_the_plugin_error():
    from tb_plugin.views import operators

    with pytest.raises(BadRequest):
        kernels.kernels(trace(), "bogus")
    with pytest.raises(BadRequest):
        operators.operators(trace(), "bogus")


def test_non_finite_kernel_args_are_estimated_or_ignored():
    """CUPTI-derived traces may carry "inf" blocks per SM (no SM count): estimate from the grid, skip bad occupancy."""
    import numpy as np

    from profiler_core.analysis import step_breakdown as overview

    props = {"deviceProperties": [{"id": 0, "name": "GPU", "numSms": 10, "computeMajor": 8, "computeMinor": 6}]}
    t = make_trace(
        [
            op("ProfilerStep#1", 0, 100, ext=1),
            kernel("k", 0, 40, corr=1, grid=[5, 1, 1]),
            kernel("k", 50, 10, corr=2, grid=[20, 1, 1], **{"est. achieved occupancy %": 30}),
        ],
        props,
    )
    kern = (t.events["cat"] == "kernel").to_numpy()
    for col, values in (("blocks_per_sm", [np.inf, -1.0]), ("occupancy", [np.inf, 30.0])):  # JSON has no inf
        arr = t.arg(col).astype(np.float64)
        arr[kern] = values
        t.sparse[col] = SparseColumn.from_dense(arr, np.nan)
    (row,) = kernels.kernels(t)["rows"]
    assert row["blocks_per_sm"] == pytest.approx((0.5 * 40 + 2.0 * 10) / 50)  # 5/10 and 20/10 blocks per SM
    assert row["achieved_occupancy"] == pytest.approx(0.30)
    gpu = overview.overview(t)["gpu"]
    assert gpu["sm_efficiency"] == pytest.approx((0.5 * 40 + 1.0 * 10) / 100)
    assert gpu["achieved_occupancy"] == pytest.approx(0.30)


V100 = {
    "id": 0,
    "name": "Tesla V100",
    "computeMajor": 7,
    "computeMinor": 0,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536,
    "regsPerMultiprocessor": 65536,
    "warpSize": 32,
    "sharedMemPerBlock": 49152,
    "sharedMemPerMultiprocessor": 98304,
    "numSms": 80,
    "sharedMemPerBlockOptin": 98304,
}


def _launch(name, ts, corr, grid, block, regs, smem):
    return kernel(
        name, ts, 10, corr=corr, grid=grid, block=block, **{"registers per thread": regs, "shared memory": smem}
    )


def config_trace():
    t = make_trace(
        [
            op("aten::conv2d", 0, 100, ext=1),
            runtime("cudaLaunchKernel", 1, 1, corr=1, ext=1),
            runtime("cudaLaunchKernel", 2, 1, corr=2, ext=1),
            runtime("cudaLaunchKernel", 3, 1, corr=3, ext=1),
            _launch("dgrad", 10, 1, [8, 8, 1], [64, 1, 1], 88, 3328),
            _launch("dgrad", 30, 2, [8, 8, 1], [64, 1, 1], 88, 3328),
            _launch("dgrad", 50, 3, [16, 4, 1], [64, 1, 1], 88, 3328),
        ]
    )
    t.device_properties = [V100]
    return t


def test_launch_configuration_columns_and_split():
    """Grid, block, registers, shared memory and theoretical occupancy; name_op_config splits by them."""
    rows = kernels.kernels(config_trace(), "name_op")["rows"]
    assert len(rows) == 1
    r = rows[0]
    # 88 registers x 2 warps per block: 10 blocks = 20 of 64 warps fit on a V100 SM
    assert (r["grid"], r["block"], r["registers_per_thread"], r["shared_memory"]) == (None, "[64, 1, 1]", 88, 3328)
    assert r["theoretical_occupancy"] == 0.3125 and r["launch_configs"] == 2
    split = kernels.kernels(config_trace(), "name_op_config")["rows"]
    assert [(x["grid"], x["calls"], x["launch_configs"]) for x in split] == [("[8, 8, 1]", 2, 1), ("[16, 4, 1]", 1, 1)]
    assert all(x["op"] == "aten::conv2d" and x["theoretical_occupancy"] == 0.3125 for x in split)
    # a Kineto trace records only the total: no static/dynamic split in any row
    assert not any({"static_shared_memory", "dynamic_shared_memory"} & set(x) for x in rows + split)


def _split_launch(ts, corr, static, dynamic):
    return kernel(
        "reduce",
        ts,
        10,
        corr=corr,
        grid=[8, 1, 1],
        block=[128, 1, 1],
        **{
            "registers per thread": 32,
            "shared memory": static + dynamic,
            "static shared memory": static,
            "dynamic shared memory": dynamic,
        },
    )


def test_static_dynamic_shared_memory_split():
    """Our converter's static/dynamic shared-memory args: shown per group, None where the group's launches differ."""
    t = make_trace(
        [
            op("aten::sum", 0, 100, ext=1),
            op("aten::mean", 200, 100, ext=2),
            *(runtime("cudaLaunchKernel", ts, 1, corr=c, ext=e) for ts, c, e in ((1, 1, 1), (2, 2, 1), (201, 3, 2))),
            _split_launch(10, 1, 1024, 0),
            _split_launch(30, 2, 1024, 0),
            _split_launch(210, 3, 512, 512),
        ]
    )
    by_op = {r["op"]: r for r in kernels.kernels(t, "name_op")["rows"]}
    assert {
        o: (r["shared_memory"], r["static_shared_memory"], r["dynamic_shared_memory"], r["launch_configs"])
        for o, r in by_op.items()
    } == {"aten::sum": (1024, 1024, 0, 1), "aten::mean": (1024, 512, 512, 1)}
    [r] = kernels.kernels(t, "name")["rows"]
    # same Kineto configuration (total 1024 B), different split: the split varies, the total does not
    assert (r["shared_memory"], r["static_shared_memory"], r["dynamic_shared_memory"], r["launch_configs"]) == (
        1024,
        None,
        None,
        2,
    )
    cfg = kernels.kernels(t, "name_op_config")["rows"]
    assert sorted((x["op"], x["static_shared_memory"], x["dynamic_shared_memory"]) for x in cfg) == [
        ("aten::mean", 512, 512),
        ("aten::sum", 1024, 0),
    ]


def _random_kernel_trace(seed: int):
    """Kernels of a few names launched by a few ops (some by none), with random durations, launch sizes
    (some missing), blocks per SM and occupancy (some missing or not finite)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    events, ts = [], 0
    for i in range(300):
        ext = i + 1
        opname = f"aten::op{int(rng.integers(0, 4))}"
        events.append(op(opname, ts, 50, ext=ext))
        corr = i + 1 if rng.random() < 0.9 else 10_000 + i  # 10 %: no launch found -> op "N/A"
        events.append(runtime("cudaLaunchKernel", ts + 1, 1, corr=i + 1, ext=ext))
        args = {}
        if rng.random() < 0.8:
            args["grid"] = [int(rng.choice([8, 16])), 1, 1]
            args["block"] = [int(rng.choice([64, 128])), 1, 1]
            args["registers per thread"] = int(rng.choice([32, 64]))
            args["shared memory"] = 0
        if rng.random() < 0.7:
            args["blocks per SM"] = float(rng.choice([0.0, 0.5, 2.0, 3.25]))
        if rng.random() < 0.7:
            args["est. achieved occupancy %"] = float(rng.choice([10, 25, 50]))
        name = f"kernel_{int(rng.integers(0, 6))}"
        events.append(kernel(name, ts + 5, int(rng.integers(1, 40)), corr=corr, **args))
        ts += 60
    return make_trace(events)


def _naive(t, group_by: str) -> list[tuple]:
    """calls, total, min, max, weighted blocks per SM and occupancy, launch configurations per group, by a
    loop over the kernels (independent of the view's vectorised grouping)."""
    rows = {}
    ev = t.dense_events()
    op_of = {}
    for r in ev.itertuples():
        op_of.setdefault(r.external_id, r.name) if r.cat == "cpu_op" else None
    launch_ext = {r.correlation: r.external_id for r in ev.itertuples() if r.cat == "cuda_runtime"}
    for r in ev.itertuples():
        if r.cat != "kernel":
            continue
        opn = op_of.get(launch_ext.get(r.correlation, -2), kernel_table.NO_OP)
        key = (r.name, opn) if group_by == "name_op" else (r.name,)
        g = rows.setdefault(key, {"durs": [], "bps": [], "occ": [], "cfg": set()})
        d = float(r.dur)
        g["durs"].append(d)
        if r.blocks_per_sm > 0:
            g["bps"].append((r.blocks_per_sm, d))
        if r.occupancy >= 0:
            g["occ"].append((r.occupancy, d))
        g["cfg"].add(
            (r.grid_x, r.grid_y, r.grid_z, r.block_x, r.block_y, r.block_z, r.registers, r.shared_memory)
            if r.grid_x > 0
            else (0, 0, 0, r.block_x, r.block_y, r.block_z, r.registers, r.shared_memory)
        )

    def wmean(pairs):
        w = sum(d for _, d in pairs)
        return None if not pairs or w == 0 else sum(v * d for v, d in pairs) / w

    out = []
    for key, g in rows.items():
        b, o = wmean(g["bps"]), wmean(g["occ"])
        out.append(
            (
                key,
                len(g["durs"]),
                sum(g["durs"]) / 1000,
                min(g["durs"]) / 1000,
                max(g["durs"]) / 1000,
                None if b is None else round(b, 4),
                None if o is None else round(o / 100, 6),
                len(g["cfg"]),
            )
        )
    out.sort(key=lambda x: (-x[2], x[0]))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("group_by", ["name", "name_op"])
def test_grouping_matches_a_loop_over_the_kernels(seed, group_by):
    t = _random_kernel_trace(seed)
    got = [
        (
            (r["name"], r["op"]) if group_by == "name_op" else (r["name"],),
            r["calls"],
            r["total_us"],
            r["min_us"],
            r["max_us"],
            r["blocks_per_sm"],
            r["achieved_occupancy"],
            r["launch_configs"],
        )
        for r in kernels.kernels(t, group_by)["rows"]
    ]
    want = _naive(t, group_by)
    assert len(got) == len(want) > 5
    for g, w in zip(got, want):
        assert g[:2] == w[:2] and g[7] == w[7]
        assert g[2:5] == pytest.approx(w[2:5])
        for a, b in zip(g[5:7], w[5:7]):
            assert (a is None and b is None) or a == pytest.approx(b, abs=1e-6)
    assert any(r["op"] == kernel_table.NO_OP for r in kernels.kernels(t, "name_op")["rows"])


def test_plain_text_names_group_like_categorical_ones():
    """A trace built elsewhere may hold names as plain text, not the reader's categorical column."""
    a = _random_kernel_trace(4)
    b = _random_kernel_trace(4)
    b.events["name"] = b.events["name"].astype(object)
    for group_by in kernels.GROUP_BY:
        assert kernels.kernels(b, group_by) == kernels.kernels(a, group_by)


def test_a_missing_kernel_name_groups_as_empty_text_not_as_another_name():
    """A missing name (a NaN in the categorical column, or None in a plain one) is its own group, shown as "",
    and never borrows the name of another kernel."""
    import numpy as np

    a = _random_kernel_trace(5)
    kernel_rows = np.flatnonzero((a.events["cat"] == "kernel").to_numpy())
    want_total = sum(r["total_us"] for r in kernels.kernels(a)["rows"])
    a.events.loc[kernel_rows[0], "name"] = np.nan
    b = _random_kernel_trace(5)
    b.events["name"] = b.events["name"].astype(object)
    b.events.loc[kernel_rows[0], "name"] = None
    for t in (a, b):
        rows = kernels.kernels(t)["rows"]
        blank = [r for r in rows if r["name"] == ""]
        assert len(blank) == 1 and blank[0]["calls"] == 1, rows
        assert sum(r["calls"] for r in rows) == len(kernel_rows)
        assert sum(r["total_us"] for r in rows) == pytest.approx(want_total)
    assert kernels.kernels(a) == kernels.kernels(b)


def test_codes_of_row_tuples_number_them_by_first_appearance():
    import numpy as np
    import pandas as pd

    from profiler_core.analysis.tables.kernels import _codes

    rng = np.random.default_rng(1)
    cols = [rng.integers(-3, 4, 500), rng.integers(0, 2, 500), rng.integers(10, 13, 500)]
    tuples = list(zip(*(c.tolist() for c in cols)))
    expected = pd.factorize(pd.Index(tuples, tupleize_cols=False))[0]
    assert _codes(*cols).tolist() == expected.tolist()
    huge = [np.array([0, 2**40, 0, 5]), np.array([2**40, 0, 2**40, 1]), np.array([-(2**40), 7, -(2**40), 7])]
    assert _codes(*huge).tolist() == [0, 1, 0, 2]  # ranges beyond int64 together: factorized pairwise
    assert _codes(np.zeros(0, np.int64), np.zeros(0, np.int64)).tolist() == []


def test_theoretical_occupancy_with_properties_that_cannot_be_a_key():
    import numpy as np

    from profiler_core.analysis.tables.kernels import _theoretical

    v100 = {"name": "Tesla V100-DGXS-32GB", "computeMajor": 7, "computeMinor": 0, "maxThreadsPerBlock": 1024,
            "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "regsPerMultiprocessor": 65536,
            "warpSize": 32, "sharedMemPerBlock": 49152, "sharedMemPerMultiprocessor": 98304, "numSms": 80,
            "sharedMemPerBlockOptin": 98304}  # fmt: skip
    args = (np.array([0, 0]), np.array([256, 128]), np.array([32, 64]), np.array([0, 1024]))
    plain = _theoretical({0: v100}, *args)
    odd = _theoretical({0: {**v100, "extra": [1, 2]}}, *args)  # a list: computed without the memo
    assert np.isfinite(plain).all() and np.array_equal(plain, odd)
