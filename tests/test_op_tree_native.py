"""The op tree's C pass (profiler_core/analysis/stages/_tree.c) against its numpy reference: the same depths,
candidate parents and thread codes on random trees (partial overlaps, zero lengths, ties, many threads), the
same op tree on every shared real trace, the fallback where the nodes are not in tree order or the pass is off,
and clear errors for wrong arrays. `.ci/native_sanitize.sh` runs this file against an ASan/UBSan build too."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler_core import settings
from profiler_core.analysis.stages import op_tree as tree_mod
from profiler_core.trace.read.decode import TraceReadError
from profiler_core.trace.read.reader import read_trace

from .gil_support import runs_without_the_gil

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(settings.get("GPUSCOPE_SHARED") or ROOT.parent / "shared")

if tree_mod._tree is None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        raise RuntimeError("the op tree's C pass is not built (pip install -e . builds it with the C compiler)")
    pytest.skip(
        "the op tree's C pass is not built (pip install -e . or .ci/build_native.sh .)",
        allow_module_level=True,
    )

_tree = tree_mod._tree


def _random_tree(rng: np.random.Generator, n: int, threads: int, small: type) -> tuple:
    """Nodes in tree order (thread, start, longest first, row): nested, partially overlapping, zero-length, tied."""
    grp = np.sort(rng.integers(0, threads, size=n))
    start = rng.integers(0, max(2, n // 2), size=n)
    dur = rng.integers(0, 12, size=n) * (rng.random(n) > 0.15)  # about one in 7 of zero length
    if n and rng.random() < 0.3:
        start = start * 10**12  # times near int64's range of ns
    end = start + dur
    order = np.lexsort((np.arange(n), -end, start, grp))
    return grp[order].astype(small), start[order].astype(np.int64), end[order].astype(np.int64)


@pytest.mark.parametrize("small", [np.int32, np.int64])
def test_depths_and_candidates_match_numpy_on_random_trees(small):
    rng = np.random.default_rng(7)
    deadline = time.monotonic() + float(os.environ.get("GPUSCOPE_NATIVE_FUZZ_SECONDS") or 0)
    trial = 0
    while trial < 2000 or time.monotonic() < deadline:
        n = int(rng.integers(1, 60 if trial % 10 else 3000))
        grp, start, end = _random_tree(rng, n, int(rng.integers(1, 5)), small)
        one = bool(grp.min() == grp.max())
        depth, cand = np.empty(n, small), np.empty(n, small)
        assert _tree.depths(grp, start, end, depth, cand) is True
        ref_depth, ref_cand = tree_mod.nest_numpy(grp, start, end, one, small)
        np.testing.assert_array_equal(depth, ref_depth)
        np.testing.assert_array_equal(cand, ref_cand)
        assert ref_depth.dtype == ref_cand.dtype == small
        trial += 1


def test_nest_uses_the_c_pass_and_the_setting_turns_it_off(monkeypatch):
    grp, start, end = _random_tree(np.random.default_rng(1), 500, 3, np.int32)
    calls = []
    real = tree_mod.nest_numpy
    monkeypatch.setattr(tree_mod, "nest_numpy", lambda *a: calls.append(1) or real(*a))
    native = tree_mod._nest(grp, start, end, False, np.int32)
    assert not calls
    monkeypatch.setenv("GPUSCOPE_NATIVE_TREE", "0")
    numpy_made = tree_mod._nest(grp, start, end, False, np.int32)
    assert calls
    for a, b in zip(native, numpy_made):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype


def test_nodes_out_of_tree_order_are_refused_and_counted_in_numpy(monkeypatch):
    grp = np.array([0, 0, 0], np.int32)
    start = np.array([5, 1, 2], np.int64)  # starts fall within a thread: not tree order
    end = np.array([9, 3, 4], np.int64)
    depth, cand = np.full(3, -7, np.int32), np.full(3, -7, np.int32)
    assert _tree.depths(grp, start, end, depth, cand) is False
    assert _tree.depths(np.array([1, 0], np.int32), start[:2], end[:2], depth[:2], cand[:2]) is False  # threads fall
    calls = []
    real = tree_mod.nest_numpy
    monkeypatch.setattr(tree_mod, "nest_numpy", lambda *a: calls.append(1) or real(*a))
    tree_mod._nest(grp, start, end, True, np.int32)
    assert calls  # the caller counts these in numpy


def test_wrong_arrays_are_clear_errors():
    i32, i64 = np.zeros(4, np.int32), np.zeros(4, np.int64)
    with pytest.raises(ValueError, match="group must be int32 or int64"):
        _tree.depths(np.zeros(4, np.int16), i64, i64, np.zeros(4, np.int16), np.zeros(4, np.int16))
    with pytest.raises(ValueError, match="start must hold items of 8 bytes"):
        _tree.depths(i32, i32, i64, i32.copy(), i32.copy())
    with pytest.raises(ValueError, match="different lengths"):
        _tree.depths(i32, i64, np.zeros(5, np.int64), i32.copy(), i32.copy())
    with pytest.raises(ValueError, match="different lengths"):
        _tree.depths(i32, i64, i64, np.zeros(0, np.int32), np.zeros(4, np.int32))
    ro = np.zeros(4, np.int32)
    ro.flags.writeable = False
    with pytest.raises((ValueError, BufferError, TypeError)):
        _tree.depths(i32, i64, i64, ro, np.zeros(4, np.int32))  # outputs must be writable
    with pytest.raises(ValueError, match="different lengths"):
        _tree.pair_codes(i64, np.zeros(3, np.int64), np.zeros(4, np.int64))
    with pytest.raises(ValueError, match="pid must hold items of 8 bytes"):
        _tree.pair_codes(i32, i64, np.zeros(4, np.int64))


def test_pair_codes_match_numpy():
    rng = np.random.default_rng(3)
    for trial in range(400):
        n = int(rng.integers(1, 400))
        pid = rng.integers(-5, int(rng.integers(1, 300)), size=n).astype(np.int64) * 10 ** int(rng.integers(0, 15))
        tid = rng.integers(-3, int(rng.integers(1, 60)), size=n).astype(np.int64)
        if trial % 5 == 0:
            tid = np.iinfo(np.int64).max - rng.integers(0, 3, size=n)  # extreme values
        if trial % 7 == 0:
            pid = np.repeat(pid[: max(1, n // 9)], 9)[:n]  # runs of one thread, as traces have them
            tid = np.repeat(tid[: max(1, n // 9)], 9)[:n]
            n = len(pid)
        codes = tree_mod.group_codes(pid, tid)
        ref = tree_mod.group_codes_numpy(pid, tid)
        assert codes.dtype == ref.dtype == np.int64
        np.testing.assert_array_equal(codes, ref)


def test_the_passes_release_the_gil():
    """Another thread runs while each C pass works (`gil_support.runs_without_the_gil`)."""
    grp, start, end = _random_tree(np.random.default_rng(5), 2_000_000, 4, np.int32)
    depth, cand = np.empty(len(grp), np.int32), np.empty(len(grp), np.int32)
    ok, during = runs_without_the_gil(lambda: _tree.depths(grp, start, end, depth, cand))
    assert ok and during
    pid = np.repeat(np.arange(1000, dtype=np.int64), 2000) * 7919 % 1009
    codes = np.empty(len(pid), np.int64)
    _, during = runs_without_the_gil(lambda: _tree.pair_codes(pid, pid[::-1].copy(), codes))
    assert during


def _tree_files() -> list[Path]:
    files = [p for p in sorted((SHARED / "traces").rglob("*")) if p.is_file() and ".json" in p.name]
    return files + [p for p in sorted((ROOT / "tests" / "data").rglob("*")) if p.is_file() and ".json" in p.name]


@pytest.mark.slow
def test_real_traces_give_the_same_op_tree(monkeypatch):
    """Every shared real trace and held-in test trace: the op tree with the C pass equals numpy's, frame and
    dtypes (the repairs and merges after the pass are the same code)."""
    if not any(SHARED.joinpath("traces").rglob("*.json*")):
        pytest.skip(f"no shared traces at {SHARED}/traces (GPUSCOPE_SHARED)")
    compared = 0
    for path in _tree_files():
        try:
            t = read_trace(path, use_cache=False)
        except TraceReadError:
            continue
        native = tree_mod._build_op_tree(t)
        with monkeypatch.context() as m:
            m.setenv("GPUSCOPE_NATIVE_TREE", "0")
            ref = tree_mod._build_op_tree(t)
        pd.testing.assert_frame_equal(native, ref)
        compared += len(native) > 0
    assert compared >= 30, compared
