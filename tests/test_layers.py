"""The read path's layering, read from the source's imports (lazy ones inside functions too):
storage is below everything that uses it, the trace model does no I/O, the write and read sides of
`profiler_core.trace` do not import each other, and no import circle runs through them."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "profiler_core"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """The profiler_core modules `path` imports anywhere in its code (a name imported from a
    package counts as that submodule when one exists)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return {m for m in found if m in MODULES}


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
GRAPH = {m: _imports(p) - {m} for m, p in MODULES.items()}


def _reachable(start: str) -> set[str]:
    seen, todo = set(), list(GRAPH[start])
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(GRAPH[m])
    return seen


def test_the_graph_sees_known_imports():
    assert "profiler_core.storage" in GRAPH["profiler_core.trace.read.reader"]
    assert "profiler_core.trace.write.writer" in GRAPH["profiler_core.profiler"]  # a relative import


def test_storage_is_below_everything_that_uses_it():
    below = _reachable("profiler_core.storage")
    assert "profiler_core.storage" not in below
    assert not {m for m in below if m.startswith("profiler_core.trace")}, below


def test_the_trace_model_does_no_io():
    uses = _reachable("profiler_core.trace.model")
    assert "profiler_core.storage" not in uses
    assert not {m for m in uses if m.startswith(("profiler_core.trace.read", "profiler_core.trace.write"))}


def test_write_and_read_sides_do_not_import_each_other():
    for side, other in (
        ("profiler_core.trace.write", "profiler_core.trace.read"),
        ("profiler_core.trace.read", "profiler_core.trace.write"),
    ):
        for m in (m for m in GRAPH if m.startswith(side)):
            assert not {d for d in GRAPH[m] if d.startswith(other)}, m


def test_no_import_circle_through_the_trace_package():
    for m in (m for m in GRAPH if m.startswith("profiler_core.trace") or m == "profiler_core.storage"):
        assert m not in _reachable(m), f"{m} imports itself back"
