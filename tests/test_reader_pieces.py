"""The reader's speed paths give exactly the whole-file result: small pieces cut inside I/O blocks
(separators inside strings, events longer than a piece), the tie-only event sort."""

import gzip
import json

import numpy as np
import pandas as pd
import pytest

import profiler_core.trace.read.columns as columns
import profiler_core.trace.read.stream as stream
from profiler_core.trace.read.lookup import trace_event
from profiler_core.trace.read.reader import parse_trace, read_trace


def _doc(n: int) -> dict:
    ev = []
    for i in range(n):
        args = {"External id": i, "Input Dims": [[i % 5, 3]], "Input type": ["float"]}
        if i % 7 == 0:
            args["text"] = "}, {" * (i % 4) + "]"  # looks like an event boundary, inside a string
        if i % 97 == 0:
            args["Call stack"] = "x" * 3000  # longer than a piece
        if i % 11 == 0:
            args["Sequence number"] = i
        ev.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": f"op{i % 13}",
                "pid": 1,
                "tid": 1 + i % 2,
                "ts": (i // 3) + 0.125,
                "dur": i % 4,
                "args": args,
            }
        )
        if i % 5 == 0:
            ev.append({"ph": "s", "id": i, "pid": 1, "tid": 1, "ts": i // 3, "cat": "fwdbwd", "name": "fwdbwd"})
    return {"schemaVersion": 1, "traceEvents": ev, "after": {"x": "]"}}


@pytest.mark.parametrize("block,io_block", [(512, 4096), (2048, 1 << 20), (1 << 20, 1 << 20)])
def test_small_pieces_read_exactly_like_the_whole_file(tmp_path, monkeypatch, block, io_block):
    doc = _doc(2000)
    text = json.dumps(doc, indent=1).encode()
    path = tmp_path / "t.pt.trace.json.gz"
    path.write_bytes(gzip.compress(text))
    whole = parse_trace(text, str(path))
    monkeypatch.setattr(stream, "BLOCK", block)
    monkeypatch.setattr(stream, "IO_BLOCK", io_block)
    t = read_trace(path)
    for a, b in ((t.events, whole.events), (t.memory, whole.memory), (t.flows, whole.flows)):
        pd.testing.assert_frame_equal(a, b, check_categorical=False)
    assert t.metadata == whole.metadata and t.warnings == whole.warnings
    if block < 4096:
        assert len(t.event_index) > 20
    for i in (0, 1, 97, 1500, len(doc["traceEvents"]) - 1):
        assert trace_event(t, i) == doc["traceEvents"][i]


def test_event_order_is_lexsort_of_idx_negative_dur_ts():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(0, 60))
        ts = rng.integers(0, 12, n)
        dur = rng.integers(0, 4, n)
        idx = np.cumsum(rng.integers(1, 3, n))
        expected = np.lexsort((idx, -dur, ts))
        assert np.array_equal(columns._event_order(ts, dur, idx), expected)
        shuffled = idx[rng.permutation(n)]  # not in idx order: the general path
        assert np.array_equal(columns._event_order(ts, dur, shuffled), np.lexsort((shuffled, -dur, ts)))


def test_event_order_ties_by_key_or_lexsort():
    """The ties' key (the ts's rank, then -dur, in 62 bits) and its fallback where dur spans too much."""
    rng = np.random.default_rng(1)
    for trial in range(600):
        n = int(rng.integers(0, 80))
        ts = np.sort(rng.integers(0, int(rng.integers(1, 20)), n)) + int(rng.choice([0, 1 << 40, -(1 << 50)]))
        if trial % 3 == 0:
            rng.shuffle(ts)
        dur = rng.integers(0, int(rng.choice([3, 1000, 1 << 62])), n)
        idx = np.arange(n) * 3
        assert np.array_equal(columns._event_order(ts, dur, idx), np.lexsort((idx, -dur, ts)))
        order, ts_sorted, dur_sorted = columns._sorted_order(ts, dur, idx)
        if ts_sorted is not None:  # the sorted columns it hands back are those of its order
            assert np.array_equal(ts_sorted, ts[order]) and np.array_equal(dur_sorted, dur[order])


def test_fast_ns_conversion_is_exact_for_three_decimals():
    from decimal import Decimal

    rng = np.random.default_rng(2)
    lim = int(columns._FAST_NS_LIMIT) * 1000
    ns = np.concatenate(
        [rng.integers(-lim + 1, lim - 1, 20000), rng.integers(-(10**7), 10**7, 20000), [0, 1, 999, 1000, -1]]
    )
    us = np.array([float(Decimal(int(v)) / 1000) for v in ns])  # what json.loads gives for "%.3f"
    assert np.array_equal(columns.to_ns(us), ns)
    big = np.array([1.7e15 + 0.5, np.nan, 3.25])  # outside the fast range / not finite: exact path
    assert list(columns.to_ns(big)) == [1_700_000_000_000_000_500, 0, 3250]


def test_event_order_with_few_wrong_ties_sorts_only_their_runs():
    rng = np.random.default_rng(3)
    for trial in range(60):
        n = int(rng.integers(100, 3000))
        ts = rng.integers(0, n * int(rng.choice([2, 20, 200])), n)  # some ties, few of them the wrong way
        if trial % 2:
            ts = np.sort(ts)
        dur = rng.integers(0, int(rng.choice([5, 10**6, 1 << 62])), n)
        idx = np.arange(n) * 2
        order, ts_sorted, dur_sorted = columns._sorted_order(ts, dur, idx)
        assert np.array_equal(order, np.lexsort((idx, -dur, ts)))
        if ts_sorted is not None:
            assert np.array_equal(ts_sorted, ts[order]) and np.array_equal(dur_sorted, dur[order])
