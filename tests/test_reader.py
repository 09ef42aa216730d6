"""read_trace: exact agreement with a plain-json reading of every shared trace, and odd inputs."""

import gzip
import json
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler_core.trace.categories import normalise_category
from profiler_core.trace.model import EVENT_COLUMNS, FRAME_COLUMNS, TraceData
from profiler_core.trace.read.lookup import trace_event_args
from profiler_core.trace.read.reader import TraceReadError, parse_trace, read_trace

from .conftest import missing
from .real_traces_support import json_bytes

#: torch 1.8-1.9's category spellings and the names the reader gives them, written out by hand
CATS = {
    "Operator": "cpu_op",
    "Runtime": "cuda_runtime",
    "Driver": "cuda_driver",
    "Kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "Trace": "trace",
}


def test_the_hand_written_spellings_are_the_category_tables():
    from profiler_core.trace.categories import normalise_category

    assert {k: normalise_category(k) for k in CATS} == CATS


#: µs timestamps since the epoch (2024: ~1.7e15 µs) are exact in a float64 only up to this many ns
EXACT_EPOCH_NS = 2**53
#: half the spacing of float64 values near 1.7e15 µs (0.25 µs), in ns
FLOAT_EPOCH_SLACK_NS = 128


def _ns(v) -> int:
    """Exact ns of a µs value as written in the file (ints: old traces; floats: 3 decimals)."""
    return v * 1000 if isinstance(v, int) else int(Decimal(str(v)) * 1000)


def _write(path: Path, doc, gz: bool = False) -> Path:
    text = doc if isinstance(doc, str) else json.dumps(doc)
    if gz:
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def _shared_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.pt.trace.json*"))


@pytest.mark.slow
def test_every_shared_trace_matches_plain_json(shared_traces):
    files = _shared_files(shared_traces)
    assert len(files) >= 7
    # one file per run: the two spans of a run have the same shape
    files = list({f.parent: f for f in files}.values())
    for path in files:
        text = json_bytes(path)  # by content, as the reader: moe_a100_2rank_alltoall's files are plain JSON
        doc = json.loads(text)
        t = read_trace(path)
        raw = doc["traceEvents"]
        xs = [(i, e) for i, e in enumerate(raw) if e.get("ph") == "X"]
        # times as written (decimal text), since a float64 µs loses nanoseconds past ~2**53 ns
        exact = json.loads(text, parse_float=Decimal)["traceEvents"]
        xt = [exact[i] for i, _ in xs]
        ev = t.dense_events().sort_values("idx").reset_index(drop=True)
        assert len(ev) == len(xs), path
        assert list(ev["idx"]) == [i for i, _ in xs]
        base = doc.get("baseTimeNanoseconds")
        if base is None:
            base = min(_ns(e["ts"]) for e in exact if "ts" in e and e.get("ph") in "Xisf")
        want_ts = np.array([_ns(e["ts"]) - (0 if "baseTimeNanoseconds" in doc else base) for e in xt], dtype=np.int64)
        if "baseTimeNanoseconds" in doc or base < EXACT_EPOCH_NS:
            assert t.base_ns == base
            assert list(ev["ts"]) == list(want_ts)
        else:
            # µs since the epoch with ns decimals, read through a float64: within half a float ulp
            assert abs(t.base_ns - base) <= FLOAT_EPOCH_SLACK_NS, path
            got = ev["ts"].to_numpy(np.int64) + (t.base_ns - base)
            assert np.abs(got - want_ts).max() <= FLOAT_EPOCH_SLACK_NS, path
        assert list(ev["dur"]) == [_ns(e["dur"]) for e in xt]
        assert list(ev["name"].astype(str)) == [e["name"] for _, e in xs]
        assert list(ev["cat"].astype(str)) == [CATS.get(e["cat"], e["cat"]) for _, e in xs]
        ext = [e["args"].get("External id", e["args"].get("external id", -1)) for _, e in xs]
        assert list(ev["external_id"]) == ext
        assert list(ev["correlation"]) == [e["args"].get("correlation", -1) for _, e in xs]
        dims_key = ("Input Dims", "Input dims")  # torch 1.8 spells it in lower case
        dims = [
            next((json.dumps(e["args"][k], separators=(",", ":")) for k in dims_key if k in e["args"]), "")
            for _, e in xs
        ]
        assert list(ev["input_dims"].astype(str)) == dims
        stacks = [e["args"].get("Call stack", "") for _, e in xs]
        assert list(ev["call_stack"].astype(str)) == stacks
        kern = [(i, e) for i, e in xs if e["cat"] in ("Kernel", "kernel")]
        kv = ev[ev["cat"] == "kernel"]
        assert len(kv) == len(kern)
        if kern:
            assert list(kv["grid_x"]) == [e["args"]["grid"][0] for _, e in kern]
            assert list(kv["block_z"]) == [e["args"]["block"][2] for _, e in kern]
            assert list(kv["registers"]) == [e["args"].get("registers per thread", -1) for _, e in kern]
            nan = float("nan")  # torch 1.8 writes no occupancy, and 'warps per SM' without 'blocks per SM'
            assert np.allclose(
                kv["warps_per_sm"], [e["args"].get("warps per SM", nan) for _, e in kern], equal_nan=True
            )
            assert np.array_equal(
                kv["occupancy"].to_numpy(float),
                [e["args"].get("est. achieved occupancy %", nan) for _, e in kern],
                equal_nan=True,
            )
            assert list(kv["device"]) == [e["args"]["device"] for _, e in kern]
            assert list(kv["stream"]) == [e["args"]["stream"] for _, e in kern]
            assert (kv["tid"] == kv["stream"]).all()  # "stream 7" parsed to 7
        mem = [e for e in raw if e.get("name") == "[memory]"]
        assert len(t.memory) == len(mem)
        assert sorted(t.memory["bytes"]) == sorted(e["args"]["Bytes"] for e in mem)
        flows = [e for e in raw if e.get("ph") in ("s", "f", "t")]
        assert len(t.flows) == len(flows)
        assert sorted(t.flows["id"]) == sorted(e["id"] for e in flows)
        assert len(t.names) == sum(1 for e in raw if e.get("ph") == "M")
        assert t.metadata == {k: v for k, v in doc.items() if k != "traceEvents"}
        assert t.device_properties == doc.get("deviceProperties", [])
        assert not t.warnings


def test_a_trace_is_read_by_its_content_whatever_its_name(shared_traces, tmp_path):
    """A real plain-JSON trace, gzipped under a plain name and plain under a .gz name: read as the original."""
    files = _shared_files(shared_traces / "public" / "moe_a100_2rank_alltoall")
    if not files:
        missing("public/moe_a100_2rank_alltoall (plain-JSON .pt.trace.json files) is absent")
    text = files[0].read_bytes()
    assert text[:2] != b"\x1f\x8b"  # plain JSON, as its name says
    want = read_trace(files[0]).dense_events()
    for name, data in (("gz.pt.trace.json", gzip.compress(text)), ("plain.pt.trace.json.gz", text)):
        (tmp_path / name).write_bytes(data)
        pd.testing.assert_frame_equal(read_trace(tmp_path / name).dense_events(), want)


def test_schema_dtypes_and_order(shared_traces):
    path = _shared_files(shared_traces / "torch_cpu_cnn")[0]
    t = read_trace(path)
    assert tuple(t.events.columns) == FRAME_COLUMNS  # the sparse args are kept apart (trace/sparse.py)
    ev = t.dense_events()
    assert tuple(ev.columns) == EVENT_COLUMNS
    for c in ("cat", "name", "input_dims", "input_type", "call_stack", "coll_name", "dtype"):
        assert isinstance(ev[c].dtype, pd.CategoricalDtype), c
    for c in ("pid", "tid", "ts", "dur", "external_id", "bytes", "python_id", "idx"):
        assert ev[c].dtype == np.int64, c
    for c in ("grid_x", "block_z", "registers", "shared_memory"):
        assert ev[c].dtype == np.int32, c
    assert ev["occupancy"].dtype == np.float64
    assert ev["ts"].is_monotonic_increasing
    assert (ev["dur"] >= 0).all()
    assert (ev.index == np.arange(len(ev))).all()
    # python_function args, with null parents -> -1
    py = ev[ev["cat"] == "python_function"]
    assert (py["python_id"] > 0).all() and (py["python_parent_id"] == -1).any()
    # string pids/tids became stable negative codes with labels
    tr = ev[ev["cat"] == "trace"].iloc[0]
    assert t.label(tr["pid"]) == "Spans" and t.label(tr["tid"]) == "PyTorch Profiler"
    assert tr["pid"] < -(1 << 31)
    assert set(t.memory.columns) >= {
        "ts",
        "pid",
        "tid",
        "device_type",
        "device_id",
        "addr",
        "bytes",
        "total_allocated",
        "total_reserved",
    }
    assert t.memory["ts"].is_monotonic_increasing
    assert (t.memory["addr"] > 0).all()
    assert set(t.flows["cat"].astype(str)) == {"fwdbwd"}
    assert set(t.flows["bp"].astype(str)) == {"", "e"}
    names = t.names
    assert "thread_name" in set(names["kind"])
    assert isinstance(t, TraceData)


def test_exact_nanoseconds_and_category_names(tmp_path):
    ev = [
        {"ph": "X", "cat": c, "name": "n", "pid": 1, "tid": 1, "ts": 5350129802343.146 + i, "dur": 9053.8, "args": {}}
        for i, c in enumerate(
            ["Operator", "python", "Runtime", "cuda_driver", "Memcpy", "gpu_user_annotation", "WeirdCat"]
        )
    ]
    p = _write(tmp_path / "a.json", {"baseTimeNanoseconds": 7, "traceEvents": ev})
    t = read_trace(p)
    assert t.base_ns == 7
    assert list(t.events["ts"]) == [5350129802343146 + 1000 * i for i in range(7)]
    assert set(t.events["dur"]) == {9053800}
    assert list(t.events["cat"].astype(str)) == [
        "cpu_op",
        "python_function",
        "cuda_runtime",
        "cuda_driver",
        "gpu_memcpy",
        "gpu_user_annotation",
        "weirdcat",
    ]
    assert normalise_category(None) == ""


def test_bare_list_na_values_and_string_ids(tmp_path):
    ev = [
        {
            "ph": "X",
            "cat": "Memcpy",
            "name": "Memcpy HtoD",
            "pid": "0",
            "tid": "stream 7",
            "ts": 100,
            "dur": 0,
            "args": {"bytes": 4, "memory bandwidth (GB/s)": "N/A", "correlation": "N/A", "external id": 9},
        },
        {
            "ph": "X",
            "cat": "Kernel",
            "name": "k",
            "pid": 0,
            "tid": 7,
            "ts": 101,
            "dur": 3,
            "args": {"blocks per SM": "inf", "warps per SM": "N/A", "grid": [1, 2, 3], "block": "bad"},
        },
        {
            "ph": "X",
            "cat": "Operator",
            "name": "op",
            "pid": "host",
            "tid": "main",
            "ts": 99,
            "dur": -5,
            "args": "not an object",
        },
        {"ph": "B", "name": "unsupported", "pid": 1, "tid": 1, "ts": 1},
        "not an event",
        {"ph": "X", "name": "no ts", "pid": 1, "tid": 1},
    ]
    p = _write(tmp_path / "bare.json", ev)
    t = read_trace(p)
    e = t.dense_events()
    assert list(e["name"].astype(str)) == ["op", "Memcpy HtoD", "k"]
    assert t.base_ns == 99_000  # no baseTimeNanoseconds: rebased on the first event
    assert list(e["ts"]) == [0, 1000, 2000]
    assert list(e["dur"]) == [0, 0, 3000]
    memcpy = e.iloc[1]
    assert (memcpy["pid"], memcpy["tid"], memcpy["device"], memcpy["stream"]) == (0, 7, 0, 7)
    assert memcpy["correlation"] == -1 and memcpy["external_id"] == 9 and memcpy["bytes"] == 4
    k = e.iloc[2]
    assert k["blocks_per_sm"] == np.inf and np.isnan(k["warps_per_sm"])
    assert (k["grid_x"], k["grid_y"], k["grid_z"]) == (1, 2, 3)
    assert (k["block_x"], k["block_y"], k["block_z"]) == (0, 0, 0)
    op = e.iloc[0]
    assert t.label(op["pid"]) == "host" and t.label(op["tid"]) == "main"
    text = " | ".join(t.warnings)
    for part in (
        "args dropped",
        "not event objects",
        "phase 'B'",
        "without a valid ts",
        "clamped",
        "'correlation'",
        "'warps_per_sm'",
        "'block'",
    ):
        assert part in text, part


def test_event_args_reads_one_event_lazily(shared_traces, tmp_path):
    path = _shared_files(shared_traces / "kineto_resnet50_v100")[0]
    t = read_trace(path)
    raw = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    k = t.events[t.events["cat"] == "kernel"].iloc[5]
    assert trace_event_args(t, int(k["idx"])) == raw[int(k["idx"])]["args"]
    with pytest.raises(IndexError):
        trace_event_args(t, len(raw) + 5)


@pytest.mark.parametrize(
    "content,reason",
    [
        (b"", "empty"),
        (b'{"traceEvents": [{"ph": "X", "ts": 1', "truncated"),
        (b'{"schemaVersion": 1}', "traceEvents"),
        (b'{"traceEvents": {"a": 1}}', "not a list"),
        (b"hello", "not a JSON trace"),
    ],
)
def test_bad_files_raise_clear_errors(tmp_path, content, reason):
    p = tmp_path / "bad.pt.trace.json"
    p.write_bytes(content)
    with pytest.raises(TraceReadError) as e:
        read_trace(p)
    assert reason in str(e.value) and str(p) in str(e.value)


def test_corrupt_and_truncated_gzip(tmp_path):
    good = gzip.compress(json.dumps({"traceEvents": []}).encode() * 50)
    p = tmp_path / "t.pt.trace.json.gz"
    p.write_bytes(good[: len(good) // 2])
    with pytest.raises(TraceReadError, match="truncated gzip"):
        read_trace(p)
    p.write_bytes(good[:10] + b"\x00garbage" * 20)
    with pytest.raises(TraceReadError, match="gzip"):
        read_trace(p)
    with pytest.raises(TraceReadError, match="not found"):
        read_trace(tmp_path / "missing.json")


def test_empty_trace_has_typed_empty_frames(tmp_path):
    t = read_trace(_write(tmp_path / "e.json", {"traceEvents": []}, gz=True))
    assert len(t.events) == 0 and tuple(t.events.columns) == FRAME_COLUMNS
    assert tuple(t.dense_events().columns) == EVENT_COLUMNS and all(c.n == 0 for c in t.sparse.values())
    assert t.events["ts"].dtype == np.int64
    assert isinstance(t.events["name"].dtype, pd.CategoricalDtype)
    assert len(t.memory) == 0 and len(t.flows) == 0 and len(t.names) == 0


def test_event_lookup_uses_the_piece_index(tmp_path, monkeypatch):
    import profiler_core.trace.read.reader as reader
    import profiler_core.trace.read.stream as stream

    monkeypatch.setattr(stream, "BLOCK", 4096)  # many small pieces
    ev = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"op{i}",
            "pid": 1,
            "tid": 1,
            "ts": i,
            "dur": 1,
            "args": {"External id": i, "text": "}, {" * (i % 3)},
        }
        for i in range(3000)
    ]
    p = _write(tmp_path / "many.json", {"traceEvents": ev, "after": [1, {"x": "]"}]}, gz=True)
    t = read_trace(p)
    assert len(t.event_index) > 10
    assert t.metadata == {"after": [1, {"x": "]"}]}
    monkeypatch.setattr(reader, "read_bytes", lambda path: pytest.fail("whole file re-read"))
    for i in (0, 1, 1234, 2999):
        assert trace_event_args(t, i) == ev[i]["args"]
    with pytest.raises(IndexError):
        trace_event_args(t, 3000)
    assert list(t.events["external_id"]) == list(range(3000))


def test_bare_na_nan_and_control_characters_are_repaired(tmp_path):
    text = (
        '{"traceEvents": [\n'
        '{"ph": "X", "cat": "Memcpy", "name": "Memcpy\tHtoD", "pid": 0, "tid": "stream 7",'
        ' "ts": 10, "dur": 0, "args": {"bytes": 8, "memory bandwidth (GB/s)": N/A}},\n'
        '{"ph": "X", "cat": "Kernel", "name": "k", "pid": 0, "tid": 7, "ts": 11, "dur": 2,'
        ' "args": {"blocks per SM": NaN, "warps per SM": Infinity, "grid": [1, 1, 1]}}\n'
        "]}"
    )
    for gz in (False, True):
        t = read_trace(_write(tmp_path / f"na{gz}.json", text, gz=gz))
        e = t.dense_events()
        assert list(e["name"].astype(str)) == ["Memcpy HtoD", "k"]
        assert e["bytes"].iloc[0] == 8
        assert np.isnan(e["blocks_per_sm"].iloc[1]) and e["warps_per_sm"].iloc[1] == np.inf
        assert any("repaired" in w for w in t.warnings)
        assert trace_event_args(t, 0)["memory bandwidth (GB/s)"] == "N/A"


def test_static_dynamic_shared_memory_columns(tmp_path):
    """Our converter's split shared-memory args become int32 columns; -1 where a kernel lacks them (Kineto)."""
    args = [
        {"shared memory": 3072, "static shared memory": 1024, "dynamic shared memory": 2048},
        {"shared memory": 512},
    ]
    ev = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "pid": 0,
            "tid": 7,
            "ts": 10 + i,
            "dur": 1,
            "args": {"device": 0, "stream": 7, "correlation": i + 1, **a},
        }
        for i, a in enumerate(args)
    ]
    t = read_trace(_write(tmp_path / "split.json", {"traceEvents": ev}))
    e = t.dense_events()
    assert e["static_shared_memory"].dtype == np.int32 and e["dynamic_shared_memory"].dtype == np.int32
    assert list(zip(e["shared_memory"], e["static_shared_memory"], e["dynamic_shared_memory"])) == [
        (3072, 1024, 2048),
        (512, -1, -1),
    ]


@pytest.mark.parametrize(
    "doc",
    [
        ["SECRET-TOKEN-123", "hunter2"],
        [1, 2, 3],
        [{"foo": 1}, {"bar": [2]}],
        {"traceEvents": [{"name": "x", "ts": 1}]},
        {"schema": "1.0.1", "nodes": [{"name": "aten::add", "id": 1}], "traceEvents": [{"id": 1}]},
    ],
    ids=["strings", "numbers", "objects-without-ph", "events-without-ph", "et-like-with-traceEvents"],
)
def test_json_that_is_not_a_trace_is_refused(tmp_path, doc):
    """No entry is a chrome-trace event (an object with "ph"): unreadable with the reason, not an empty run."""
    path = _write(tmp_path / "w.pt.trace.json", doc, gz=False)
    with pytest.raises(TraceReadError, match=r"no trace events \(not a trace: none of its \d+ entries is a chrome"):
        read_trace(path)
    with pytest.raises(TraceReadError, match="not a trace"):
        parse_trace(path.read_bytes(), str(path))


@pytest.mark.parametrize(
    "doc",
    [
        [{"ph": "X", "name": "aten::mm", "ts": 1, "dur": 2, "pid": 1, "tid": 1}],  # a bare list, no cat (legacy)
        {"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1}, "junk"]},
        {"traceEvents": [{"ph": "B", "name": "a", "ts": 1, "pid": 1, "tid": 1}]},  # a phase we skip, still a trace
        {"traceEvents": []},
    ],
)
def test_documents_with_a_chrome_trace_event_are_traces(tmp_path, doc):
    read_trace(_write(tmp_path / "w.pt.trace.json", doc, gz=False))


def test_execution_trace_is_refused(shared_traces):
    """The public execution trace (HTA's benchmark_simple_add_et) is not a Kineto trace."""
    et = shared_traces / "public" / "hta_et_file" / "benchmark_simple_add_et.json.gz"
    if not et.exists():
        missing(f"{et} is absent")
    with pytest.raises(TraceReadError, match=r"a PyTorch execution trace \(schema, nodes; no traceEvents\)"):
        read_trace(et)


@pytest.mark.parametrize(
    "rows",
    [
        [],
        [(1, 2, "process_name", "python"), (3, 0, "thread_name", "thread 3 (python)")],
        [(1, 2, "process_sort_index", 5), (3, 0, "thread_name", None)],  # not all texts: pandas' inference
        [(1, 2, "process_name", "a"), (3, 0, "x", [1, 2])],
    ],
)
def test_the_names_frame_is_built_as_pandas_infers_it(rows):
    from profiler_core.trace.model import NAME_COLUMNS
    from profiler_core.trace.read.columns import names_frame

    ref = pd.DataFrame(rows, columns=list(NAME_COLUMNS))
    ref = ref.astype({"pid": np.int64, "tid": np.int64, "kind": object, "value": object})
    got = names_frame(rows)
    pd.testing.assert_frame_equal(got, ref, check_column_type=True, check_index_type=True)
    assert [type(v) for v in got["value"]] == [type(v) for v in ref["value"]]
