"""Tables, events and export_stacks rebuilt from real torch 2.13 traces equal torch's own output.

The fixtures in tests/data/analysis/ were made by make_fixtures.py in the torch venv: each
``<name>.trace.json.gz`` is torch's exported trace and ``<name>.expected.json.gz`` holds what torch
itself printed for the same profile (tables, per-event values, export_stacks, total_average).
"""

import difflib
import gzip
import json
from pathlib import Path

import pytest

from profiler_core.analysis import events_from_trace

from .conftest import TRACES, missing

DATA = Path(__file__).resolve().parent / "data" / "analysis"
SCENARIOS = ["matmuls", "module_mem", "verbose_stacks", "scheduled"]


def _read(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def _load(name):
    return _read(DATA / f"{name}.trace.json.gz"), _read(DATA / f"{name}.expected.json.gz")


def _cases():
    for name in SCENARIOS:
        for label in _read(DATA / f"{name}.expected.json.gz")["tables"]:
            yield name, label


@pytest.fixture(scope="module")
def built():
    out = {}
    for name in SCENARIOS:
        trace, expected = _load(name)
        out[name] = (events_from_trace(trace), expected)
    return out


@pytest.mark.parametrize("name,label", list(_cases()))
def test_table_text_equals_torch(built, name, label):
    events, expected = built[name]
    spec = expected["tables"][label]
    source = events if spec["source"] == "events" else events.key_averages(**spec["key_averages"])
    got = source.table(**spec["table"])
    if got != spec["text"]:
        diff = "\n".join(
            difflib.unified_diff(spec["text"].splitlines(), got.splitlines(), "torch", "ours", lineterm="", n=1)
        )
        pytest.fail(f"{name}/{label} differs from torch 2.13:\n{diff}")


@pytest.mark.parametrize("name", SCENARIOS)
def test_event_fields_equal_torch(built, name):
    events, expected = built[name]
    assert len(events) == len(expected["events"])
    for ours, theirs in zip(events, expected["events"]):
        assert ours.name == theirs["name"]
        assert ours.trace_name == theirs["trace_name"]
        assert ours.cpu_time_total == pytest.approx(theirs["cpu_time_total"], abs=2e-3)
        assert ours.self_cpu_time_total == pytest.approx(theirs["self_cpu_time_total"], abs=2e-3)
        assert ours.cpu_memory_usage == theirs["cpu_memory_usage"], ours.name
        assert ours.self_cpu_memory_usage == theirs["self_cpu_memory_usage"], ours.name
        assert ours.input_shapes == theirs["input_shapes"], ours.name
        assert ours.stack == theirs["stack"], ours.name
        assert len(ours.cpu_children) == len(theirs["children"]), ours.name
        assert (ours.cpu_parent is None) == (theirs["parent"] is None), ours.name
        assert bool(ours.is_user_annotation) == theirs["is_user_annotation"]


@pytest.mark.parametrize("name", SCENARIOS)
def test_ids_and_parents_of_ops_equal_torch(built, name):
    events, expected = built[name]
    for ours, theirs in zip(events, expected["events"]):
        if ours.activity_type in ("cpu_op", "user_annotation"):
            assert ours.id == theirs["id"]
            parent = ours.cpu_parent
            if parent is not None and parent.activity_type in ("cpu_op", "user_annotation"):
                assert parent.id == theirs["parent"]


@pytest.mark.parametrize("name", SCENARIOS)
def test_flops_equal_torch(built, name):
    """FLOPs computed from Input Dims (torch traces carry none) match torch's C++ counts."""
    events, expected = built[name]
    assert [e.flops for e in events] == [t["flops"] for t in expected["events"]]


@pytest.mark.parametrize("name", SCENARIOS)
def test_export_stacks_equal_torch(built, name, tmp_path):
    """Where torch wrote stacks, ours are the same text. Where torch refused (profiled without with_stack),
    the difference is only where the refusal can happen: torch's `profile.export_stacks` knows the flag and
    raises, as our `profile.export_stacks` does (test_profiler_refuses_export_stacks_without_with_stack);
    an EventList rebuilt from a trace file does not know it and writes what the events hold, no stack at
    all, so a 0-byte file (torch 2.13's own `EventList.export_stacks` writes 0 bytes for such events too)."""
    events, expected = built[name]
    want = expected["stacks"]["self_cpu_time_total"]
    path = tmp_path / "stacks.txt"
    events.export_stacks(str(path), "self_cpu_time_total")
    if want is None:
        assert all(not e["stack"] for e in expected["events"]), "torch refused, yet its events had stacks"
        assert all(not e.stack for e in events)
        assert path.read_bytes() == b""
    else:
        assert path.read_text() == want


def test_profiler_refuses_export_stacks_without_with_stack(tmp_path):
    """As torch 2.13: AssertionError('export_stacks() requires with_stack=True'), and no file."""
    from profiler_core import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function("work"):
            pass
    path = tmp_path / "stacks.txt"
    with pytest.raises(AssertionError, match=r"^export_stacks\(\) requires with_stack=True$"):
        prof.export_stacks(str(path), "self_cpu_time_total")
    assert not path.exists()


def test_verbose_fixture_really_has_stacks(built):
    """Guard: the export_stacks comparison above is not vacuous."""
    _events, expected = built["verbose_stacks"]
    assert expected["stacks"]["self_cpu_time_total"].count("\n") > 20


@pytest.mark.parametrize("name", SCENARIOS)
def test_total_average_equals_torch(built, name):
    events, expected = built[name]
    total = events.key_averages().total_average()
    assert total.key == "Total"
    assert total.count == expected["total_average"]["count"]
    assert total.self_cpu_time_total == pytest.approx(expected["total_average"]["self_cpu_time_total"], abs=1e-2)
    assert total.cpu_time_total == pytest.approx(expected["total_average"]["cpu_time_total"], abs=1e-2)


def test_sample_trace_from_notes_builds(shared_traces):
    """The shared sample (a real torch 2.13 MLP step) yields torch-style rows."""
    sample = shared_traces.parent / "notes" / "sample_cpu_trace.json"
    if not sample.exists():
        missing(f"{sample} is absent")
    events = events_from_trace(json.loads(sample.read_text()))
    keys = {a.key for a in events.key_averages()}
    assert {"ProfilerStep*", "train_step", "aten::addmm", "Optimizer.step#SGD.step"} <= keys
    step = [e for e in events if e.name == "ProfilerStep*"]
    assert len(step) == 1 and step[0].trace_name == "ProfilerStep#2"
    text = events.key_averages().table(sort_by="self_cpu_time_total", row_limit=3)
    assert text.splitlines()[1].split() == [
        "Name",
        "Self",
        "CPU",
        "%",
        "Self",
        "CPU",
        "CPU",
        "total",
        "%",
        "CPU",
        "total",
        "CPU",
        "time",
        "avg",
        "CPU",
        "Mem",
        "Self",
        "CPU",
        "Mem",
        "#",
        "of",
        "Calls",
        "Total",
        "FLOPs",
    ]


def _gpu_cases():
    for name in ("ours_gpu", "resnet50_v100"):
        for label in _read(DATA / f"{name}.expected.json.gz")["tables"]:
            yield name, label


@pytest.fixture(scope="module")
def gpu_built():
    """GPU traces whose expected tables torch 2.13's own post-processing computed (make_gpu_reference.py:
    torch's _parse_kineto_results, _build_tree, key_averages and table over an adapter that presents
    each Kineto JSON event as torch's C++ KinetoEvent would). An oracle for the aggregation, the tables
    and torch's attribution rules; for the JSON event -> KinetoEvent step (torch cannot profile a GPU
    here) a differential test, not an oracle.

    Memory records are dropped on both sides: torch attributes them by time across threads,
    our contract per thread, and the reference leaves memory out.
    """
    out = {}
    resnet = TRACES / "kineto_resnet50_v100" / "num_workers_0" / "worker0.1623143089861.pt.trace.json.gz"
    for name, path in (("ours_gpu", DATA / "ours_gpu.trace.json.gz"), ("resnet50_v100", resnet)):
        if not path.exists():
            continue
        trace = _read(path)
        trace["traceEvents"] = [e for e in trace["traceEvents"] if e.get("name") != "[memory]"]
        trace.pop("profile_memory", None)
        out[name] = events_from_trace(trace)
    return out


@pytest.mark.parametrize("name,label", list(_gpu_cases()))
def test_gpu_table_text_equals_torch_post_processing(gpu_built, name, label):
    if name not in gpu_built:
        missing(f"{name} trace absent (the shared traces)")
    spec = _read(DATA / f"{name}.expected.json.gz")["tables"][label]
    ka = (
        {"group_by_input_shape": spec["key_averages"]["group_by_input_shapes"]}
        if "group_by_input_shapes" in spec["key_averages"]
        else {}
    )
    got = gpu_built[name].key_averages(**ka).table(**spec["table"])
    assert "Self CUDA" in got
    if got != spec["text"]:
        diff = "\n".join(
            difflib.unified_diff(spec["text"].splitlines(), got.splitlines(), "torch", "ours", lineterm="", n=1)
        )
        pytest.fail(f"{name}/{label} differs from torch 2.13's table code:\n{diff}")


GPU_REFERENCES = {
    "ours_gpu": DATA / "ours_gpu.trace.json.gz",
    "resnet50_v100": TRACES / "kineto_resnet50_v100" / "num_workers_0" / "worker0.1623143089861.pt.trace.json.gz",
}


@pytest.mark.parametrize("name", sorted(GPU_REFERENCES))
def test_gpu_reference_is_torchs_own_output(name, tmp_path):
    """The committed GPU tables are what torch 2.13 computes now (make_gpu_reference.py in the compat venv)."""
    import subprocess

    from .conftest import COMPAT_VENV

    python = COMPAT_VENV / "bin" / "python"
    if not python.exists():
        missing(f"no venv with torch at {COMPAT_VENV} (.ci/run builds it; or set GPUSCOPE_COMPAT_VENV)")
    if not GPU_REFERENCES[name].exists():
        missing(f"{GPU_REFERENCES[name]} is absent")
    out = tmp_path / "ref.json.gz"
    proc = subprocess.run(
        [str(python), str(DATA / "make_gpu_reference.py"), str(GPU_REFERENCES[name]), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    fresh, committed = _read(out)["tables"], _read(DATA / f"{name}.expected.json.gz")["tables"]
    assert set(fresh) == set(committed)
    for label in committed:
        assert fresh[label]["text"] == committed[label]["text"], f"regenerate {name}.expected.json.gz ({label})"
