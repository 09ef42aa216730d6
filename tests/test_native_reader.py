"""The native reader (profiler_core/trace/read/_native.c) gives exactly the Python reader's TraceData, or
declines the document (and the Python reader reads it, or says why not): on every shared real trace, the
held-in test traces, a fuzzed corpus made here with a fixed seed, and a byte-mutation loop bounded in time
(GPUSCOPE_NATIVE_FUZZ_SECONDS)."""

from __future__ import annotations

import json
import logging
import os
import random
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from profiler_core import settings
from profiler_core.trace.model import SPARSE_COLUMNS
from profiler_core.trace.read import columns, native, reader
from profiler_core.trace.read.reader import TraceReadError, parse_trace, parse_trace_native, read_bytes, read_trace

from .gil_support import runs_without_the_gil

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(settings.get("GPUSCOPE_SHARED") or ROOT.parent / "shared")


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


if not native.available():
    if _in_ci():
        raise RuntimeError("the native reader is not built (pip install -e . builds it with the C compiler)")
    pytest.skip("the native reader is not built (pip install -e . or .ci/build_native.sh .)", allow_module_level=True)


def _same(nat, ref) -> None:
    """Every frame, column, dtype and value equal (categories compared by value: their order follows a set's),
    and every sparse column: the same rows, values, texts and missing value."""
    for a, b in ((nat.events, ref.events), (nat.memory, ref.memory), (nat.flows, ref.flows)):
        pd.testing.assert_frame_equal(a, b, check_categorical=False)
        for c in a.columns:
            assert a[c].dtype == b[c].dtype, c
    assert list(nat.sparse) == list(ref.sparse) == list(SPARSE_COLUMNS)
    for c in SPARSE_COLUMNS:
        assert nat.sparse[c].equals(ref.sparse[c]), c
    pd.testing.assert_frame_equal(nat.names, ref.names)
    assert nat.metadata == ref.metadata
    assert nat.device_properties == ref.device_properties
    assert nat.warnings == ref.warnings
    assert nat.labels == ref.labels
    assert nat.base_ns == ref.base_ns


def _compare(data: bytes, name: str = "<doc>") -> str:
    """'native' when the native reader read `data` exactly as parse_trace, 'declined' otherwise;
    fails when it returns a TraceData that differs, or one for a document parse_trace refuses."""
    try:
        ref = parse_trace(data, name)
    except TraceReadError as e:
        ref = e
    nat = parse_trace_native(data, name)
    if nat is None:
        return "declined"
    assert not isinstance(ref, Exception), f"{name}: the native reader read what the Python reader refuses: {ref}"
    _same(nat, ref)
    return "native"


# ---------------------------------------------------------------- real traces
def _trace_files() -> list[Path]:
    files = [p for p in sorted((SHARED / "traces").rglob("*")) if p.is_file() and ".json" in p.name]
    files += [p for p in sorted((ROOT / "tests" / "data").rglob("*")) if p.is_file() and ".json" in p.name]
    return files


@pytest.mark.slow
def test_real_traces_read_alike():
    files = _trace_files()
    if not any(SHARED.joinpath("traces").rglob("*.json*")):
        pytest.skip(f"no shared traces at {SHARED}/traces (GPUSCOPE_SHARED)")
    outcomes = {}
    for path in files:
        try:
            data = read_bytes(path)
        except TraceReadError:
            continue
        outcomes[path.name] = _compare(data, str(path))
    read = [n for n, o in outcomes.items() if o == "native"]
    # the common Kineto shapes (torch 1.9 ... 2.x, CPU and GPU, ROCm, MTIA) are read natively
    assert len(read) >= 40, outcomes
    for kineto in ("rank0.json.gz", "eager_trace.json.gz", "mtia_rank_0.json.gz", "legacy_export.json"):
        assert outcomes.get(kineto) == "native", kineto


def test_read_trace_uses_it_and_says_which_reader(tmp_path, monkeypatch, caplog):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_base_doc()))
    caplog.set_level(logging.INFO, logger=reader.__name__)
    t_native = read_trace(path, processes=0)
    assert f"{path} read by the native reader" in caplog.text
    caplog.clear()
    monkeypatch.setenv("GPUSCOPE_NATIVE_READER", "0")
    t_python = read_trace(path, processes=0)
    assert f"{path} read by the Python reader" in caplog.text and "native reader" not in caplog.text
    _same(t_native, t_python)


def test_scan_threads_leave_the_reading_thread_a_core(monkeypatch):
    """By default the scans get the cores but the reading thread's (at most 4; none on one core: it scans
    itself); GPUSCOPE_NATIVE_THREADS sets them, 0 the reading thread alone."""
    monkeypatch.delenv("GPUSCOPE_NATIVE_THREADS", raising=False)
    for cores, want in ((1, 0), (2, 1), (3, 2), (16, 4)):
        monkeypatch.setattr(native.os, "cpu_count", lambda c=cores: c)
        assert native.scan_threads() == want, cores
    for setting, want in (("0", 0), ("1", 1), ("6", 6)):
        monkeypatch.setenv("GPUSCOPE_NATIVE_THREADS", setting)
        assert native.scan_threads() == want, setting


@pytest.mark.parametrize("threads,block_rows", [("0", None), ("3", None), ("0", 7), ("3", 40), ("1", None)])
def test_a_file_is_scanned_piece_by_piece_alike(tmp_path, monkeypatch, threads, block_rows):
    """read_file scans the inflated file in pieces of whole events (here ~20 KB, so many), in the reading
    thread or on scan threads, their rows joined into blocks as they are added (a few pieces each with
    `block_rows`): the same TraceData as the Python reader's, and an event_index whose every range holds
    exactly its piece's events."""
    import gzip

    if block_rows is not None:
        monkeypatch.setattr(columns, "BLOCK_ROWS", block_rows)
    monkeypatch.setenv("GPUSCOPE_NATIVE_THREADS", threads)
    assert native.scan_threads() == int(threads)
    monkeypatch.setattr(native, "SCAN_PIECE", 20_000)
    monkeypatch.setattr(native, "INFLATE_BLOCK", 8_000)  # blocks smaller than a piece: joined first
    data = json.dumps(_base_doc()).encode()
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(data))
    t = native.read_file(str(path))
    assert t is not None
    _same(t, parse_trace(data, str(path)))
    index = t.event_index
    assert len(index) > 5
    firsts = [i for i, _, _ in index] + [len(_base_doc()["traceEvents"])]
    for (first, lo, hi), nxt in zip(index, firsts[1:]):
        assert len(json.loads(b"[" + data[lo:hi] + b"]")) == nxt - first


def test_finish_on_threads_gives_the_same_trace(monkeypatch):
    """`Builder.finish` puts the columns in order on threads for big traces (FINISH_THREADS_ROWS): the same
    TraceData as in one thread, by both readers."""
    data = json.dumps(_base_doc()).encode()
    serial = parse_trace(data, "t.json")
    monkeypatch.setattr(columns, "FINISH_THREADS_ROWS", 0)
    monkeypatch.setattr(columns.os, "cpu_count", lambda: 4)
    _same(parse_trace(data, "t.json"), serial)
    nat = parse_trace_native(data, "t.json")
    assert nat is not None
    _same(nat, serial)


def test_a_bare_piece_scans_as_its_array():
    """parse_events(..., bare=True) reads the events of a piece without the array's brackets as the array."""
    events = json.dumps(_base_doc()["traceEvents"]).encode()
    pairs = native.scan_pairs()
    whole = native._native.parse_events(events, 1 << 40, 4096, pairs)
    bare = native._native.parse_events(events[1:-1], 1 << 40, 4096, pairs, True)
    assert isinstance(whole, dict) and isinstance(bare, dict)
    assert bare["entries"] == whole["entries"] and bare["texts"] == whole["texts"]
    for group in ("complete", "memory", "flows", "metadata", "unsupported"):
        assert {k: bytes(v) for k, v in bare[group].items()} == {k: bytes(v) for k, v in whole[group].items()}
    shifted = [v - 1 if j % 3 else v for j, v in enumerate(memoryview(whole["pieces"]["first_start_end"]).cast("q"))]
    assert list(memoryview(bare["pieces"]["first_start_end"]).cast("q")) == shifted
    assert native._native.parse_events(b"  ", 10, 4096, pairs, True)["entries"] == 0
    for bad in (events, events[1:-1] + b",", events[1:-1] + b"]"):
        assert isinstance(native._native.parse_events(bad, 1 << 40, 4096, pairs, True), str)


def test_a_file_over_the_event_budget_across_pieces_is_declined(tmp_path, monkeypatch):
    """Each piece within the budget of events, the file over it: read_file declines (the Python reader says so)."""
    monkeypatch.setattr(native, "SCAN_PIECE", 2_000)
    doc = _base_doc()
    n = len(doc["traceEvents"])
    monkeypatch.setattr(native, "max_trace_events", lambda: n - 1)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    assert native.read_file(str(path)) is None
    monkeypatch.setattr(native, "max_trace_events", lambda: n)
    assert native.read_file(str(path)) is not None


def test_a_cut_inside_a_string_is_declined(tmp_path, monkeypatch):
    """The last `}, {` of the inflated bytes is inside the last event's name: the piece cut there is not
    JSON, the scan declines the file and read_trace reads it with the Python reader."""
    monkeypatch.setattr(native, "SCAN_PIECE", 1000)
    doc = _base_doc()
    doc["traceEvents"].append(_op(999, {}) | {"name": "a}, {b"})
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    assert native.read_file(str(path)) is None
    assert parse_trace_native(json.dumps(doc).encode()) is not None  # read whole, the same document scans
    assert "a}, {b" in set(read_trace(path, processes=0).events["name"])


def test_a_declined_file_is_read_by_the_python_reader(tmp_path, caplog):
    doc = _base_doc()
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    kernel["args"]["grid"] = "grid(100,)"  # the Python reader counts it; the native one declines
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    caplog.set_level(logging.INFO, logger=reader.__name__)
    t = read_trace(path, processes=0)
    assert "read by the Python reader" in caplog.text
    assert any("'grid'" in w for w in t.warnings)


def test_choose_strategies_puts_it_after_the_cache():
    assert reader.choose_strategies(100, 0, True, True) == (
        reader.CACHE,
        reader.NATIVE,
        reader.STREAM,
        reader.WHOLE_FILE,
    )
    assert reader.choose_strategies(100, 0, False, False) == (reader.STREAM, reader.WHOLE_FILE)


# ---------------------------------------------------------------- a document with every shape it reads
def _base_doc() -> dict:
    ev: list = [
        {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "python3"}},
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": "stream 7 ", "args": {"name": "stream 7"}},
        {"ph": "M", "name": "process_sort_index", "pid": "Spans", "tid": 0, "args": {"sort_index": 3}},
        {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": ["GPU 0", {"a": 1}]}},
    ]
    for i in range(300):
        ev.append(
            {
                "ph": "X",
                "cat": "cpu_op" if i % 3 else "Operator",
                "name": f"aten::op{i % 11} \u00e9\\u",
                "pid": 7,
                "tid": 7 + i % 2,
                "ts": 1000 + i * 1.5,
                "dur": 0.001 * i,
                "args": {
                    "External id": i,
                    "Input Dims": [[i % 5, 3], []],
                    "Input type": ["float", ""],
                    "Sequence number": i // 2,
                    "Fwd thread id": 1,
                    "Call stack": "a.py(1): f;b.py(2): g" if i % 4 == 0 else None,
                    "bytes": str(i),
                    "other": {"nested": [1, 2, {"x": None}]},
                },
            }
        )
        ev.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": "void k<float>()",
                "pid": 0,
                "tid": 7,
                "ts": 1000.25 + i,
                "dur": 2,
                "args": {
                    "device": 0,
                    "stream": 7,
                    "correlation": 100 + i,
                    "external id": i,
                    "registers per thread": 32,
                    "shared memory": 0,
                    "blocks per SM": 0.5,
                    "warps per SM": 4,
                    "est. achieved occupancy %": 50,
                    "grid": [i, 1, 1],
                    "block": [128, 1, 1],
                },
            }
        )
        if i % 10 == 0:
            ev.append({"ph": "s", "id": i, "pid": 7, "tid": 7, "ts": 1000 + i, "cat": "ac2g", "name": "ac2g"})
            ev.append(
                {"ph": "f", "id": i, "pid": 0, "tid": 7, "ts": 1000.25 + i, "cat": "ac2g", "name": "ac2g", "bp": "e"}
            )
            ev.append(
                {
                    "ph": "i",
                    "s": "t",
                    "name": "[memory]",
                    "pid": 7,
                    "tid": 7,
                    "ts": 1001 + i,
                    "args": {"Total Reserved": 4096, "Total Allocated": 1024, "Bytes": 512, "Addr": 99, "Device Id": 0},
                }
            )
        if i % 50 == 0:
            ev.append(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": "nccl:all_reduce",
                    "pid": 7,
                    "tid": 7,
                    "ts": 1000 + i,
                    "dur": -1,
                    "args": {"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 10, "Group size": 2},
                }
            )
            ev.append({"ph": "C", "name": "counter", "pid": 7, "tid": 7, "ts": 1000 + i, "args": {"v": 1}})
            ev.append({"ph": "X", "cat": "python_function", "name": "f", "pid": 7, "tid": 7, "ts": 1000 + i})
            ev.append({"ph": "i", "name": "mark", "pid": [1], "ts": "x"})
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "GPU", "totalGlobalMem": 1 << 34}],
        "traceEvents": ev,
        "baseTimeNanoseconds": 1700000000000000000,
    }


def test_the_base_document_is_read_natively_and_alike():
    data = json.dumps(_base_doc()).encode()
    assert _compare(data) == "native"
    t = parse_trace_native(data)
    # values checked by hand, not only against the Python reader
    kernels = t.dense_events()[t.events["cat"] == "kernel"]
    assert kernels["grid_x"].tolist()[:3] == [0, 1, 2] and set(kernels["block_x"]) == {128}
    assert set(kernels["external_id"]) == set(range(300)) and set(kernels["registers"]) == {32}
    ops = t.dense_events()[t.events["cat"] == "cpu_op"]
    assert set(ops["input_dims"]) == {f"[[{k},3],[]]" for k in range(5)}
    assert set(ops["bytes"]) == set(range(300)) and (ops["device"] == -1).all()
    assert len(t.memory) == 30 and set(t.memory["total_reserved"]) == {4096} and set(t.memory["device_type"]) == {-1}
    assert len(t.flows) == 60 and set(t.flows["bp"]) == {"", "e"}
    assert "6 events of unsupported phase 'C' skipped" in t.warnings
    assert "6 negative durations clamped to 0" in t.warnings
    assert "6 complete events without a dur (set to 0)" in t.warnings
    assert t.names["value"].tolist() == ["python3", "stream 7", 3, ["GPU 0", {"a": 1}]]
    assert t.names["tid"].tolist()[1] == 7  # "stream 7 " is stream 7


# ---------------------------------------------------------------- the fuzzed corpus
_ODD_VALUES = [
    None,
    True,
    "",
    "7",
    "-12",
    "0x1f",
    "stream 3",
    " 12 ",
    "1_000",
    "N/A",
    1.5,
    -0.0,
    1e308,
    2**63,
    -(2**63) - 1,
    123456789012345678901234567890,
    [],
    [1, 2],
    [1, 2, 3],
    [1.0, 2, 3],
    [2**31, 1, 1],
    {},
    {"a": [1]},
    "\u00e9\ud7ff",
    3.141592653589793238462643383279,
    0.1234567890123456789,
    1234567890123456.789,
    5e-324,
]


def _mutate(doc: dict, rng: random.Random) -> bytes:
    """One mutation of the base document: a wrong type somewhere, a truncation, a byte flip, deep nesting,
    a huge or long number, invalid UTF-8, a bare NaN or an escaped key."""
    kind = rng.randrange(9)
    evs = doc["traceEvents"]
    if kind <= 2:  # a field or an arg of another type
        e = rng.choice(evs)
        if kind == 2 and isinstance(e.get("args"), dict) and e["args"]:
            e["args"][rng.choice(sorted(e["args"]))] = rng.choice(_ODD_VALUES)
        else:
            e[rng.choice(["ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "bp", "args"])] = rng.choice(
                _ODD_VALUES
            )
        return json.dumps(doc).encode()
    data = json.dumps(doc).encode()
    if kind == 3:  # truncated
        return data[: rng.randrange(len(data))]
    if kind == 4:  # bytes flipped
        b = bytearray(data)
        for _ in range(rng.randrange(1, 4)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        return bytes(b)
    if kind == 5:  # deep nesting
        depth = rng.choice([60, 65, 200, 3000])
        return data.replace(b'"other": {', b'"other": ' + b"[" * depth + b"1" + b"]" * depth + b', "o2": {', 1)
    if kind == 6:  # invalid UTF-8, raw control characters, lone surrogates
        bad = rng.choice([b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x01", b"\\ud800", b"\\x"])
        at = data.index(b"aten::op")
        return data[:at] + bad + data[at:]
    if kind == 7:  # bare words the Python reader repairs, numbers JSON does not allow
        word = rng.choice([b"NaN", b"N/A", b"Infinity", b"01", b"1.", b"-", b"1e", b"+1", b".5"])
        return data.replace(b'"dur": 2', b'"dur": ' + word, 1)
    # an escaped key or value (the native reader declines those it would have to decode to compare)
    return data.replace(
        rng.choice([b'"ph"', b'"[memory]"', b'"X"', b'"grid"']),
        rng.choice([b'"\\u0070h"', b'"\\u005bmemory]"', b'"\\u0058"', b'"gr\\u0069d"']),
        1,
    )


@pytest.mark.slow
def test_fuzzed_corpus_reads_alike_or_is_declined():
    rng = random.Random(25)
    base = json.dumps(_base_doc())
    outcomes = {"native": 0, "declined": 0}
    for i in range(150):
        data = _mutate(json.loads(base), rng)
        outcomes[_compare(data, f"<mutation {i}>")] += 1
    # both outcomes occur: the corpus reaches the native reader's conversions and its refusals
    assert outcomes["native"] >= 20 and outcomes["declined"] >= 40, outcomes


def _one_event(ts: str) -> bytes:
    return (
        b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": '
        + ts.encode()
        + b', "dur": 1}]}'
    )


def test_invalid_utf8_in_a_top_level_value_is_a_clear_error():
    """Invalid UTF-8 inside a top-level value other than traceEvents (left raw by the first pass): both readers
    say so (the native one by declining, the Python one by a TraceReadError naming the key), no traceback."""
    data = json.dumps(_base_doc()).encode().replace(b'"name": "GPU"', b'"\xffname": "GPU"', 1)
    assert b"\xff" in data
    assert parse_trace_native(data) is None
    with pytest.raises(TraceReadError, match="invalid JSON in 'deviceProperties'"):
        parse_trace(data)


def test_huge_numbers_and_exact_floats():
    for ts in ("1773709742341309.550", "0.1", "5e-324", "1E5", "-0.0", "123456789.123456789", "4503599627370497"):
        assert _compare(_one_event(ts), ts) == "native", ts
    for bad in ("1e400", "123456789012345678901234567890", "NaN", "01"):
        assert _compare(_one_event(bad), bad) == "declined", bad


def test_too_many_events_and_too_deep_are_left_to_the_python_reader(monkeypatch):
    from profiler_core.trace.read.budget import EVENT_PEAK_BYTES

    monkeypatch.setenv("GPUSCOPE_MAX_LOADED_BYTES", str(EVENT_PEAK_BYTES * 100))  # 100 events
    data = json.dumps(_base_doc()).encode()
    assert parse_trace_native(data) is None
    with pytest.raises(TraceReadError, match="more than 100 events"):
        parse_trace(data)
    monkeypatch.delenv("GPUSCOPE_MAX_LOADED_BYTES")
    deep = b'[{"ph": "X", "ts": 1, "dur": 1, "args": {"a": ' + b"[" * 100000 + b"]" * 100000 + b"}}]"
    assert parse_trace_native(deep) is None


def test_byte_mutation_loop():
    """Random byte edits of small documents for GPUSCOPE_NATIVE_FUZZ_SECONDS (short by default)."""
    seconds = settings.get("GPUSCOPE_NATIVE_FUZZ_SECONDS")
    rng = random.Random(2025)
    doc = _base_doc()
    doc["traceEvents"] = doc["traceEvents"][:40]
    seed = json.dumps(doc).encode()
    tokens = [b"{", b"}", b"[", b"]", b",", b":", b'"', b"\\", b"null", b"-", b"1e9", b"\xff", b"\xe2\x82", b" "]
    end = time.monotonic() + seconds
    runs = 0
    while time.monotonic() < end or runs < 50:
        b = bytearray(seed)
        for _ in range(rng.randrange(1, 6)):
            at = rng.randrange(len(b))
            op = rng.randrange(4)
            if op == 0:
                b[at] = rng.randrange(256)
            elif op == 1:
                del b[at : at + rng.randrange(1, 8)]
            elif op == 2:
                b[at:at] = rng.choice(tokens)
            else:
                b[at:at] = b[rng.randrange(len(b)) :][: rng.randrange(1, 40)]
        _compare(bytes(b), f"<byte mutation {runs}>")
        runs += 1


def test_the_scan_knows_the_args_table():
    """The C scan's fixed keys are exactly the keys of event_args.ARGS that fill a column, each kept as its
    row's kind for its row's frame: a row added, renamed or retyped on one side alone fails here."""
    from profiler_core.trace import event_args
    from profiler_core.trace.read import _native

    kinds = {"int64": "int64", "int32": "int32", "float": "float", "text": "text", "json": "raw", "value": "raw"}
    kinds["triple"] = "triple"
    table = {(k, kinds[a.kind.name], a.table) for a in event_args.ARGS if a.column is not None for k in a.keys}
    assert set(_native.KEYS) == table
    assert len(_native.KEYS) == len(table)
    assert native.scan_mismatch() is None


def _with_row(monkeypatch, row) -> None:
    from profiler_core.trace import event_args

    monkeypatch.setattr(event_args, "ARGS", (*event_args.ARGS, row))


def test_an_arg_the_scan_does_not_know_makes_it_decline(monkeypatch):
    """A column the table gains (a new key) that the C scan lacks: every file declined, never a wrong column."""
    from profiler_core.trace.event_args import INT64, Arg

    data = json.dumps(_base_doc()).encode()
    assert parse_trace_native(data) is not None
    _with_row(monkeypatch, Arg("new_field", ("new key",), "new_column", INT64, ("op",)))
    assert "'new key'" in native.scan_mismatch()
    assert parse_trace_native(data) is None


def test_an_arg_of_another_kind_or_missing_value_makes_it_decline(monkeypatch):
    """A key the scan knows, but the table keeps as another kind or missing as another value: declined."""
    from profiler_core.trace import event_args
    from profiler_core.trace.event_args import FLOAT, INT64

    data = json.dumps(_base_doc()).encode()
    regs = event_args.BY_FIELD["registers"]
    for changed in (replace(regs, kind=INT64, missing=-1), replace(regs, missing=0), replace(regs, kind=FLOAT)):
        monkeypatch.setattr(event_args, "ARGS", tuple(changed if a is regs else a for a in event_args.ARGS))
        assert native.scan_mismatch() is not None, changed
        assert parse_trace_native(data) is None, changed


def _op(i: int, args: dict, cat: str = "cpu_op") -> dict:
    return {"ph": "X", "cat": cat, "name": f"op{i}", "pid": 1, "tid": 1, "ts": 10 + i, "dur": 1, "args": args}


def test_older_spellings_are_read_natively_as_the_table_says():
    """torch 1.8's 'Input dims' and the lowercase 'external id' fill their columns where the current key is
    absent or missing, on every family that carries them (expected values written out by hand)."""
    evs = [
        _op(0, {"Input Dims": [[1, 2]], "External id": 5}),
        _op(1, {"Input dims": [[3]], "external id": 6}),
        _op(2, {"Input Dims": None, "Input dims": [[4]], "External id": -1, "external id": 7}),
        _op(3, {"Input dims": [[9]]}, cat="kernel"),  # not a kernel arg: missing
        _op(4, {"external id": 8}, cat="python_function"),
    ]
    data = json.dumps({"traceEvents": evs}).encode()
    assert _compare(data) == "native"
    t = parse_trace_native(data).events.sort_values("idx")
    assert t["input_dims"].tolist() == ["[[1,2]]", "[[3]]", "[[4]]", "", ""]
    assert t["external_id"].tolist() == [5, 6, 7, -1, 8]


def test_an_arg_without_the_arg_it_is_written_with_is_declined_or_read_alike():
    """event_args' `written_with` pairs reach the scan: a 'graph node id' without a 'graph id' (which the
    Python reader leaves out of a piece where no event has the lead) is declined; with it, read alike."""
    with_lead = [_op(0, {"graph id": 3, "graph node id": 4}, cat="kernel")]
    data = json.dumps({"traceEvents": with_lead}).encode()
    assert _compare(data) == "native"
    assert parse_trace_native(data).arg("graph_node_id").tolist() == [4]
    assert ("graph id", "graph node id") in native.scan_pairs()
    alone = [_op(0, {"graph node id": 4}, cat="kernel")]
    assert _compare(json.dumps({"traceEvents": alone}).encode()) == "declined"


def test_the_scan_releases_the_gil():
    """Another thread runs while the C scan works (`gil_support.runs_without_the_gil`)."""
    from profiler_core.trace.read import _native

    events = json.dumps(_base_doc()["traceEvents"] * 100).encode()  # ~80k events: tens of ms of scanning
    out, during = runs_without_the_gil(lambda: _native.parse_events(events, 10**9, 1 << 20, native.scan_pairs()))
    assert isinstance(out, dict) and during
