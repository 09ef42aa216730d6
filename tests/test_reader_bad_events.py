"""One bad event loses only itself: dropped or repaired with one counted warning, wherever it is."""

import gzip
import json

import pytest

from profiler_core.trace.read import stream
from profiler_core.trace.read.reader import TraceReadError, parse_trace, read_trace


def _event(i: int, **change) -> dict:
    e = {
        "ph": "X",
        "cat": "cpu_op",
        "name": f"op{i}",
        "pid": 1,
        "tid": 1,
        "ts": 10 * i,
        "dur": 5,
        "args": {"External id": i},
    }
    e.update(change)
    return e


DEEP = b"[" * 1000 + b"1" + b"]" * 1000
#: (bad field values, events kept of 10, warning text)
CASES = {
    "name is an object": ({"name": {"a": 1}}, 9, "1 complete events with a list or an object as name or cat skipped"),
    "cat is an object": ({"cat": {"a": 1}}, 9, "1 complete events with a list or an object as name or cat skipped"),
    "name is a list": ({"name": [1, 2]}, 9, "1 complete events with a list or an object as name or cat skipped"),
    "pid is 2**70": ({"pid": 2**70}, 10, "1 pid/tid values beyond 64 bits kept as text labels"),
    "args nest 1000 deep": ({"args": {"deep": "DEEP"}}, 9, "1 events nested too deeply to read skipped"),
    "ts is 1e308": ({"ts": 1e308}, 9, "1 complete events without a valid ts skipped"),
    "ts is -1e308": ({"ts": -1e308}, 9, "1 complete events without a valid ts skipped"),
    "ts is 2**70": ({"ts": 2**70}, 9, "1 complete events without a valid ts skipped"),
    "dur is 1e308": ({"dur": 1e308}, 9, "1 complete events with a dur beyond 5e+15 us skipped"),
    "dur is 2**64": ({"dur": 2**64}, 9, "1 complete events with a dur beyond 5e+15 us skipped"),
}


def _doc(case: str, pos: int) -> bytes:
    change, _, _ = CASES[case]
    events = [_event(i) for i in range(10)]
    events[pos] = _event(pos, **change)
    return json.dumps({"traceEvents": events}).encode().replace(b'"DEEP"', DEEP)


def _check(t, case: str, pos: int) -> None:
    _, kept, warning = CASES[case]
    assert len(t.events) == kept
    assert t.warnings == [warning]
    names = set(t.events["name"].astype(str))
    others = {f"op{i}" for i in range(10) if i != pos}
    assert others <= names  # every good event is kept, unchanged
    assert t.events["ts"].max() < 10**12 and t.events["dur"].max() == 5000
    if kept == 10:  # repaired, not dropped
        row = t.events[t.events["name"] == f"op{pos}"].iloc[0]
        assert t.label(row["pid"]) == str(2**70)


@pytest.mark.parametrize("pos", [0, 5, 9])
@pytest.mark.parametrize("case", sorted(CASES))
def test_parse_trace_keeps_the_rest(case, pos):
    _check(parse_trace(_doc(case, pos)), case, pos)


@pytest.mark.parametrize("case", sorted(CASES))
def test_read_trace_keeps_the_rest(tmp_path, case):
    path = tmp_path / "t.pt.trace.json.gz"
    path.write_bytes(gzip.compress(_doc(case, 5)))
    _check(read_trace(path, processes=0), case, 5)


def test_bad_events_in_a_worker_range_are_counted_once(tmp_path, monkeypatch):
    """The same cases spread over a trace read in ranges by another process: counted once each."""
    events = [_event(i) for i in range(40000)]
    bad = {}
    for k, case in enumerate(sorted(CASES)):
        i = 1000 + 3900 * k
        events[i] = _event(i, **CASES[case][0])
        bad[case] = i
    data = json.dumps({"traceEvents": events}).encode().replace(b'"DEEP"', DEEP)
    path = tmp_path / "big.pt.trace.json"
    path.write_bytes(data)
    monkeypatch.setattr(stream, "PARALLEL_MIN_BYTES", 0)
    t = read_trace(path, processes=1)
    dropped = sum(1 for c in CASES.values() if c[1] == 9)
    assert len(t.events) == 40000 - dropped
    counts = {}
    for w in t.warnings:
        n, what = w.split(" ", 1)
        counts[what] = int(n)
    expected = {}
    for _, _, warning in CASES.values():
        n, what = warning.split(" ", 1)
        expected[what] = expected.get(what, 0) + int(n)
    assert counts == expected


def test_parse_trace_never_raises_a_bare_type_error():
    with pytest.raises(TypeError, match="JSON bytes of a trace, not NoneType"):
        parse_trace(None)
    for data in (b'{"traceEvents": {"a": 1}}', b'{"traceEvents": [1, [2], "x"]}'):
        try:
            t = parse_trace(data)
        except TraceReadError:
            continue
        assert len(t.events) == 0
