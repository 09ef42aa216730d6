"""Integrations record through recording's public API: no private globals, no copy of the event tuple."""

import ast
from pathlib import Path

from profiler_core import ProfilerActivity, profile, record_function, recording
from profiler_core.ops import record_op

ROOT = Path(__file__).resolve().parents[1] / "profiler_core"
USERS = [ROOT / "ops.py", ROOT / "integrations" / "pycuda_hooks.py", ROOT / "integrations" / "mpi.py"]


def test_users_of_recording_touch_no_private_name_and_build_no_event_tuple():
    for path in USERS:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("recording", "rec")
            ):
                assert not node.attr.startswith("_"), f"{path.name}: recording.{node.attr}"
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("recording"):
                assert all(not a.name.startswith("_") for a in node.names), path.name
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "events"
                and isinstance(node.value, ast.Name)
                and node.value.id == "buf"
            ):
                raise AssertionError(f"{path.name} writes a thread buffer's events itself")


def _events(p) -> list:
    return [e for e in p.events() if e.name in ("outer", "leaf", "inner")]


def test_begin_op_records_what_record_op_records():
    assert recording.begin_op("leaf") is None and not recording.plain_ops()  # not recording
    recording.end_op(None)
    with profile(activities=[ProfilerActivity.CPU]) as p:
        assert recording.plain_ops()
        with record_function("outer"):
            token = recording.begin_op("leaf", {"bytes": 8})
            inside = recording.current_external_id()
            with record_function("inner"):
                pass
            recording.end_op(token)
            assert recording.current_external_id() != inside
    with profile(activities=[ProfilerActivity.CPU]) as q:
        with record_function("outer"):
            with record_op("leaf", args={"bytes": 8}):
                with record_function("inner"):
                    pass
    got, want = _events(p), _events(q)
    assert (
        [(e.name, [c.name for c in e.cpu_children]) for e in got]
        == [(e.name, [c.name for c in e.cpu_children]) for e in want]
        == [("outer", ["leaf"]), ("leaf", ["inner"]), ("inner", [])]
    )
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True):
        assert not recording.plain_ops()  # shapes need record_op's full path


def test_the_package_imports_its_own_modules_without_tolerating_their_failure():
    # a broken profiler_core module must fail loudly, not turn CUDA or worker naming off silently
    for path in ROOT.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Try):
                continue
            own = [n for n in node.body if isinstance(n, ast.ImportFrom) and n.level > 0]
            catches = {ast.unparse(h.type) for h in node.handlers if h.type is not None}
            assert not (own and catches & {"ImportError", "Exception", "ModuleNotFoundError"}), (
                f"{path.relative_to(ROOT)}:{node.lineno}"
            )
