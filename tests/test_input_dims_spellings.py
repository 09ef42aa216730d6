"""Issue 11, item 5: torch <= 1.8 spelled the input shapes arg `Input dims`; every spelling is read.

On the real torch 1.8 trace of ../shared/traces/public/kineto_rn50_autograd (pytorch/kineto's
resnet50_autograd_api sample: `Operator` category, 33,535 ops, shapes under `Input dims`); the expected values
are computed here from the raw JSON. The spellings live in profiler_core/trace/event_args.py.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter

import pytest

from profiler_core.analysis.tables import operators
from profiler_core.trace.event_args import SPELLINGS
from profiler_core.trace.event_args import arg as shape_arg
from profiler_core.trace.read.reader import parse_trace, read_trace

from .conftest import TRACES, missing

TORCH18 = TRACES / "public" / "kineto_rn50_autograd" / "worker0.pt.trace.json.gz"


@pytest.fixture(scope="module")
def torch18():
    """(the raw JSON document, the trace as read) of the real torch 1.8 trace."""
    if not TORCH18.exists():
        missing(f"the real torch 1.8 trace is not at {TORCH18}")
    return json.loads(gzip.decompress(TORCH18.read_bytes())), read_trace(TORCH18, processes=0)


def _compact(v) -> str:
    return json.dumps(v, separators=(",", ":"))


def _self_nesting_names(events: list) -> set:
    """Names of ops that run inside an op of the same name on the same thread (raw JSON, µs)."""
    out, stacks = set(), {}
    ops = sorted((e for e in events if e.get("cat") == "Operator"), key=lambda e: (e["tid"], e["ts"], -e["dur"]))
    for e in ops:
        stack = stacks.setdefault(e["tid"], [])
        while stack and stack[-1]["ts"] + stack[-1]["dur"] < e["ts"] + e["dur"]:
            stack.pop()
        if stack and stack[-1]["name"] == e["name"]:
            out.add(e["name"])
        stack.append(e)
    return out


def test_reader_reads_torch18_input_dims(torch18):
    doc, t = torch18
    ops = [(i, e) for i, e in enumerate(doc["traceEvents"]) if e.get("cat") == "Operator"]
    assert len(ops) > 30_000 and all("Input dims" in e["args"] and "Input Dims" not in e["args"] for _, e in ops)
    ev = t.events.set_index("idx")
    got = ev.loc[[i for i, _ in ops], "input_dims"].astype(str).tolist()
    assert got == [_compact(e["args"]["Input dims"]) for _, e in ops]
    assert ev.loc[[i for i, _ in ops], "input_type"].astype(str).tolist() == [
        _compact(e["args"]["Input type"]) for _, e in ops
    ]


def test_group_by_input_shape_on_a_torch18_trace(torch18):
    doc, t = torch18
    # ProfilerStep, Optimizer.* and DataLoader ranges are not table rows (as in torch-tb-profiler)
    skipped = ("ProfilerStep#", "Optimizer.", "enumerate(DataLoader)#")
    want = Counter(
        (e["name"], _compact(e["args"]["Input dims"]))
        for e in doc["traceEvents"]
        if e.get("cat") == "Operator" and not e["name"].startswith(skipped)
    )
    rows = operators.operators(t, group_by="name_shape")["rows"]
    got = {
        (r["name"], r["input_shape"].replace(" ", "")): r["calls"] for r in rows if r["name"] in {n for n, _ in want}
    }
    want = Counter({(n, "" if d == "[]" else d): c for (n, d), c in want.items()})  # no inputs: no shape
    # torch 1.8 nests ops in same-name ops (aten::addmm in aten::addmm); like torch and torch-tb-profiler such
    # a nest counts once (with the outer op's shape), so only names that never nest are compared exactly
    nesting = _self_nesting_names(doc["traceEvents"])
    assert "aten::addmm" in nesting and len(nesting) < len({n for n, _ in want}) / 2
    assert set(got) <= set(want)
    assert {k: v for k, v in got.items() if k[0] not in nesting} == {
        k: v for k, v in want.items() if k[0] not in nesting
    }
    assert all(got[k] <= want[k] for k in got)
    per_name = Counter(n for n, _ in want)
    assert max(per_name.values()) > 1  # names with several shapes: one row per shape, not one per name


def test_new_spelling_wins_when_both_are_present():
    doc = {
        "traceEvents": [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "a",
                "pid": 1,
                "tid": 1,
                "ts": 0,
                "dur": 1,
                "args": {"Input Dims": [[1]], "Input dims": [[2]]},
            },
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "b",
                "pid": 1,
                "tid": 1,
                "ts": 1,
                "dur": 1,
                "args": {"Input dims": [[3, 3]]},
            },
            {"ph": "X", "cat": "cpu_op", "name": "c", "pid": 1, "tid": 1, "ts": 2, "dur": 1, "args": {}},
        ]
    }
    t = parse_trace(json.dumps(doc).encode())
    assert t.events["input_dims"].astype(str).tolist() == ["[[1]]", "[[3,3]]", ""]


def test_shape_arg_reads_every_spelling():
    for key, alts in SPELLINGS.items():
        assert shape_arg({key: [1]}, key) == [1]
        for alt in alts:
            assert shape_arg({alt: [2]}, key) == [2]
        assert shape_arg({key: [1], alts[0]: [2]}, key) == [1]
        assert shape_arg({}, key) is None


def test_key_averages_groups_torch18_shapes(torch18):
    from profiler_core.analysis import events_from_trace

    doc, _ = torch18
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "Operator"]
    ka = events_from_trace(doc).key_averages(group_by_input_shape=True)
    want = Counter(_compact(e["args"]["Input dims"]) for e in ops if e["name"] == "aten::addmm")
    ours = {_compact(e.input_shapes): e.count for e in ka if e.key == "aten::addmm"}
    assert want and set(ours) == set(want)
    assert all(ours[k] == want[k] / 2 for k in want)  # each addmm nests one same-name addmm (one call, as torch)
