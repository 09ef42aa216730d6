"""Speed rewrites in the views agree with the plain computation they replace."""

import numpy as np
import pytest

from profiler_core.analysis import intervals
from profiler_core.analysis.intervals import coverage as _coverage
from profiler_core.analysis.intervals import covered as _covered
from profiler_core.analysis.intervals import merged as _merged
from profiler_core.analysis.stages.columns import sorted_unique


@pytest.mark.parametrize("few", [0, 3, 64])
def test_covered_matches_interval_counting(monkeypatch, few):
    """`covered` (a slice per merged range up to FEW_RANGES of them, else a running sum) and `paint` agree with
    counting the intervals over each segment."""
    monkeypatch.setattr(intervals, "FEW_RANGES", few)
    rng = np.random.default_rng(1)
    checked = 0
    for _ in range(400):
        n = int(rng.integers(0, 60))
        s = rng.integers(0, 100, n)
        e = s + rng.integers(0, 15, n) * (rng.random(n) < 0.8)  # some zero-length intervals
        if rng.random() < 0.5:
            order = np.argsort(s, kind="stable")  # sorted starts: the fast path
            s, e = s[order], e[order]
        b = sorted_unique(np.concatenate([s, e, rng.integers(0, 120, int(rng.integers(0, 5)))]))
        if len(b) < 2:
            continue
        got = _covered(b, s, e)
        assert got.dtype == bool and len(got) == len(b) - 1
        assert np.array_equal(got, _coverage(b, s, e) > 0)
        painted = np.full(len(b) - 1, 7, np.int8)
        intervals.paint(painted, b, s, e, 2)
        assert np.array_equal(painted, np.where(got, 2, 7))
        checked += 1
    assert checked > 300


def test_merged_bounds_give_the_same_segment_sums():
    """A priority sweep over each role's union (`merged`) and the bounds of those unions gives the same ns per
    role as the sweep over every interval's bounds (the overview's breakdown and the ledger rely on it)."""
    rng = np.random.default_rng(2)
    for _ in range(300):
        roles = []
        for _r in range(3):
            n = int(rng.integers(0, 40))
            s = rng.integers(0, 200, n)
            e = s + rng.integers(0, 30, n) * (rng.random(n) < 0.8)
            if rng.random() < 0.5:
                order = np.argsort(s, kind="stable")
                s, e = s[order], e[order]
            roles.append((s, e))

        def sweep(rs: list) -> np.ndarray:
            win = np.array([0, 50, 120, 210])
            b = sorted_unique(np.concatenate([win] + [a for r in rs for a in r]))
            owner = np.full(len(b) - 1, len(rs), np.int64)
            for i in range(len(rs) - 1, -1, -1):
                if len(rs[i][0]):
                    owner[_covered(b, *rs[i])] = i
            k = np.searchsorted(win[:-1], b[:-1], side="right") - 1
            inside = (k >= 0) & (b[:-1] < win[-1])
            return np.bincount(k[inside] * (len(rs) + 1) + owner[inside], weights=np.diff(b)[inside], minlength=12)

        ms = [_merged(s, e) for s, e in roles]
        for m_s, m_e in ms:
            assert np.all(m_e > m_s) and np.all(m_s[1:] > m_e[:-1])  # disjoint, not touching, not empty
        assert np.array_equal(sweep(roles), sweep(ms))


def test_merged_where_equals_merged_of_the_selected_rows():
    """The union made a block of rows at a time (`merged_where`) is `merged` of the selected rows' intervals (each
    clipped to the window, those outside it dropped, when a window is given), for any block size."""
    from profiler_core.analysis.intervals import merged_where

    rng = np.random.default_rng(4)
    for trial in range(400):
        n = int(rng.integers(0, 80))
        ts = rng.integers(0, 300, n).astype(np.int64)
        if rng.random() < 0.7:
            ts.sort()  # the events' order (by ts), and not
        dur = (rng.integers(0, 40, n) * (rng.random(n) < 0.85)).astype(np.int64)
        mask = rng.random(n) < rng.random()
        block = int(rng.integers(1, 20))
        s, e = ts[mask], ts[mask] + dur[mask]
        got = merged_where(ts, dur, mask, block=block)
        want = _merged(s, e) if len(s) else (np.zeros(0, np.int64), np.zeros(0, np.int64))
        assert all(np.array_equal(g, w) and g.dtype == np.int64 for g, w in zip(got, want)), trial
        lo, hi = sorted(rng.integers(0, 340, 2).tolist())
        keep = (e > lo) & (s < hi)
        cs, ce = np.clip(s[keep], lo, hi), np.clip(e[keep], lo, hi)
        want = _merged(cs, ce) if len(cs) else (np.zeros(0, np.int64), np.zeros(0, np.int64))
        got = merged_where(ts, dur, mask, (lo, hi), block=block)
        assert all(np.array_equal(g, w) for g, w in zip(got, want)), trial


# ------------------------------------------------------------------ operators: bincount aggregation
def _groupby_reference(t, group_by: str) -> list[dict]:
    """The operator table by a plain pandas groupby over the table's nodes (the computation that
    `operators._operators` replaces with bincounts over group codes)."""
    from profiler_core.analysis.stages.columns import ns_to_us
    from profiler_core.analysis.tables import operators

    ops = operators._table_ops(t)
    keys = ["name"] + (["input_dims"] if group_by == "name_shape" else [])
    how = dict(
        calls=("row", "size"),
        host_self=("host_self", "sum"),
        host_total=("host_total", "sum"),
        device_self=("device_self", "sum"),
        device_total=("device_total", "sum"),
        tc_eligible=("tc_eligible", "any"),
        has_call_stack=("has_stack", "any"),
    )
    agg = ops.groupby(keys, sort=False, observed=True).agg(**how).reset_index()
    for k in keys:
        agg[k] = agg[k].astype(str)
    if group_by == "name_shape":
        agg["input_shape"] = [operators._display_shape(d) for d in agg["input_dims"]]
        agg = (
            agg.groupby(["name", "input_shape"], sort=False)
            .agg(
                calls=("calls", "sum"),
                **{c: (c, "sum") for c in ("host_self", "host_total", "device_self", "device_total")},
                tc_eligible=("tc_eligible", "any"),
                has_call_stack=("has_call_stack", "any"),
            )
            .reset_index()
        )
    metric = "device_self" if operators._has_device(t) else "host_self"
    cols = [metric, "name"] + (["input_shape"] if group_by == "name_shape" else [])
    agg = agg.sort_values(cols, ascending=[False] + [True] * (len(cols) - 1), kind="stable")
    out = []
    for r in agg.to_dict("records"):
        row = {"name": r["name"]}
        if group_by == "name_shape":
            row["input_shape"] = r["input_shape"]
        row.update(
            calls=int(r["calls"]),
            host_self_us=ns_to_us(r["host_self"]),
            host_total_us=ns_to_us(r["host_total"]),
            device_self_us=ns_to_us(r["device_self"]),
            device_total_us=ns_to_us(r["device_total"]),
            tc_eligible=bool(r["tc_eligible"]),
            has_call_stack=bool(r["has_call_stack"]),
        )
        out.append(row)
    return out


def _shapes_trace():
    from .test_views_common_support import make_trace, op

    events, ts = [op("ProfilerStep#1", 0, 10_000, ext=1)], 1
    rng = np.random.default_rng(7)
    dims = [None, [], [[2, 3]], [[2, 3], [3]], [[4]]]  # missing and [] both show as "[]"
    for k in range(600):
        d = dims[int(rng.integers(0, len(dims)))]
        extra = {} if d is None else {"Input Dims": d}
        if rng.random() < 0.1:
            extra["Call stack"] = "m.py(1): f"
        name = f"aten::op{int(rng.integers(0, 12))}"
        events.append(op(name, ts, 10, ext=k + 2, **extra))
        if rng.random() < 0.3:  # a child: the parent's self time shrinks
            events.append(op("aten::empty", ts + 2, 3, ext=10_000 + k))
        ts += 12
    return make_trace(events)


@pytest.mark.parametrize("group_by", ["name", "name_shape"])
def test_operators_bincount_aggregation_matches_a_groupby(group_by):
    from profiler_core.analysis.tables import operators

    from .test_views_common_support import synthetic_gpu_trace

    for t in (synthetic_gpu_trace(n_ops=2000, ops_per_step=400), _shapes_trace()):
        got = operators.operators(t, group_by)["rows"]
        assert len(got) > 10
        assert got == _groupby_reference(t, group_by)
    shapes = {r["input_shape"] for r in operators.operators(_shapes_trace(), "name_shape")["rows"]}
    assert "[]" in shapes and "[[2, 3], [3]]" in shapes


def test_derived_op_data_is_compact():
    """The op tree keeps positions as int32, and a CPU trace's node stats hold no device-time arrays
    (one shared read-only zero), while a GPU trace's are real."""
    from profiler_core.analysis.stages.op_tree import op_tree
    from profiler_core.analysis.tables import operators

    from .test_views_common_support import synthetic_gpu_trace

    cpu = _shapes_trace()
    tree = op_tree(cpu)
    assert all(tree[c].dtype == np.int32 for c in ("row", "parent", "depth", "group", "merged_into"))
    assert tree["start"].dtype == np.int64 and tree["end"].dtype == np.int64
    st = operators.node_stats(cpu)
    for c in ("device_self", "device_total", "kernel_self", "tc_self"):
        arr = st[c].to_numpy()
        assert arr.strides == (0,) and not arr.flags.writeable and not arr.any()
    gpu = operators.node_stats(synthetic_gpu_trace(n_ops=500, ops_per_step=100))
    assert gpu["device_self"].to_numpy().strides == (8,) and gpu["device_self"].to_numpy().sum() > 0


def test_operators_with_plain_text_columns():
    """A trace built elsewhere may hold names and Input Dims as plain text, not categorical columns."""
    from profiler_core.analysis.tables import operators

    a, b = _shapes_trace(), _shapes_trace()
    for c in ("name", "input_dims"):
        b.events[c] = b.events[c].astype(object)
    for group_by in ("name", "name_shape"):
        assert operators.operators(b, group_by) == operators.operators(a, group_by)


_ASKED: list = []


def _starts_with_a(name: str) -> bool:
    """A module-level name classifier (remembered by `values_answer`) that counts its calls."""
    _ASKED.append(name)
    return name.startswith("a") or name == "z"


def test_name_answers_are_remembered_across_traces_and_agree(monkeypatch):
    """A module-level name classifier is asked once per distinct name across traces (`values_answer`'s memo), and
    `per_value` / `name_mask_among` answer as the classifier does row by row (a missing name: False)."""
    import pandas as pd

    from profiler_core.analysis.stages import columns

    assert columns._memoisable(_starts_with_a)
    monkeypatch.setattr(columns, "_VALUE_MEMO", {})
    _ASKED.clear()
    rng = np.random.default_rng(4)
    texts = ["a1", "b2", "z", "c", "a9", ""]
    for _trace in range(3):
        codes = rng.integers(-1, len(texts), 500)
        events = pd.DataFrame({"name": pd.Categorical.from_codes(codes, categories=texts)})
        want = np.array([c >= 0 and (texts[c].startswith("a") or texts[c] == "z") for c in codes])
        assert np.array_equal(columns.per_value(events["name"], _starts_with_a), want)
        rows = np.flatnonzero(rng.random(500) < 0.3)
        assert np.array_equal(columns.name_mask_among(events, rows, _starts_with_a), want[rows])
    assert sorted(_ASKED) == sorted(texts)  # each name once over the three traces
    lam = lambda name: name == "c"  # noqa: E731 - a lambda: not remembered
    assert not columns._memoisable(lam)
    assert np.array_equal(columns.values_answer(["c", "d", "c"], lam), [True, False, True])
