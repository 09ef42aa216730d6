"""Issue 11, item 5: torch <= 1.8 spelled the input shapes arg `Input dims`; every spelling is read.

Fixture: tests/data/issue11/torch18_input_dims.pt.trace.json.gz (hand-made after a torch 1.8 trace, see
PROVENANCE.md). The spellings live in profiler_core/trace/arg_spellings.py.
"""
from __future__ import annotations

import json
from pathlib import Path

from profiler_core.trace.arg_spellings import SPELLINGS, shape_arg
from profiler_core.trace.reader import parse_trace, read_trace
from tb_plugin.views import operators

DATA = Path(__file__).parent / "data" / "issue11"
FIXTURE = DATA / "torch18_input_dims.pt.trace.json.gz"


def test_reader_reads_torch18_input_dims():
    t = read_trace(FIXTURE, processes=0)
    ev = t.events
    mm = ev[ev["name"].astype(str) == "aten::mm"]
    assert len(mm) == 12
    assert sorted(set(mm["input_dims"].astype(str))) == ["[[2,3],[3,4]]", "[[64,64],[64,64]]", "[[8,16],[16,32]]"]
    assert set(mm["input_type"].astype(str)) == {'["float","float"]'}


def test_group_by_input_shape_on_a_torch18_trace():
    t = read_trace(FIXTURE, processes=0)
    rows = operators.operators(t, group_by="name_shape")["rows"]
    names = [r["name"] for r in rows]
    assert names.count("aten::mm") == 3 and names.count("aten::add") == 3  # was one row per name
    assert {r["calls"] for r in rows if r["name"] in ("aten::mm", "aten::add")} == {4}


def test_new_spelling_wins_when_both_are_present():
    doc = {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 1,
         "args": {"Input Dims": [[1]], "Input dims": [[2]]}},
        {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 1, "dur": 1,
         "args": {"Input dims": [[3, 3]]}},
        {"ph": "X", "cat": "cpu_op", "name": "c", "pid": 1, "tid": 1, "ts": 2, "dur": 1, "args": {}}]}
    t = parse_trace(json.dumps(doc).encode())
    assert t.events["input_dims"].astype(str).tolist() == ["[[1]]", "[[3,3]]", ""]


def test_shape_arg_reads_every_spelling():
    for key, alts in SPELLINGS.items():
        assert shape_arg({key: [1]}, key) == [1]
        for alt in alts:
            assert shape_arg({alt: [2]}, key) == [2]
        assert shape_arg({key: [1], alts[0]: [2]}, key) == [1]
        assert shape_arg({}, key) is None


def test_key_averages_groups_torch18_shapes():
    import gzip

    from profiler_core.analysis import events_from_trace

    trace = json.loads(gzip.decompress(FIXTURE.read_bytes()))
    ka = events_from_trace(trace).key_averages(group_by_input_shape=True)
    mm = [e for e in ka if e.key == "aten::mm"]
    assert len(mm) == 3 and sorted(map(str, (e.input_shapes for e in mm)))[0] == "[[2, 3], [3, 4]]"
