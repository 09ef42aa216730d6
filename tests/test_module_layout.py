"""The house's layout holds over the import graph (docs/internals.md, "Who owns what"): profiler_core names
nothing of tb_plugin; the views are imported by the route handlers only (never by another view, an analysis, the
summaries or the run level); run-level code imports only analyses, stages and the summary schema; the analyses
live in one package."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("profiler_core", "tb_plugin")


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every project module `path` imports (at module level or inside a function), relative imports resolved;
    `from pkg import name` counts as pkg.name when that is a module, else as pkg."""
    mod = _module(path)
    pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            for a in node.names:
                full = f"{base}.{a.name}"
                is_module = (ROOT / full.replace(".", "/")).with_suffix(".py").exists() or (
                    ROOT / full.replace(".", "/") / "__init__.py"
                ).exists()
                out.add(full if is_module else base)
    return {m for m in out if m.split(".")[0] in PACKAGES}


def _graph() -> dict[str, set[str]]:
    files = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    return {_module(p): _imports(p) for p in files}


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def test_the_graph_is_read():
    g = _graph()
    assert "tb_plugin.views.operators" in g["tb_plugin.handlers"]
    assert "profiler_core.analysis.tables.operators" in g["tb_plugin.views.operators"]


def test_profiler_core_names_nothing_of_tb_plugin():
    bad = {
        m: sorted(i for i in imps if _under(i, "tb_plugin"))
        for m, imps in _graph().items()
        if _under(m, "profiler_core")
    }
    assert {m: v for m, v in bad.items() if v} == {}


def test_only_the_route_handlers_import_views():
    bad = {
        m: sorted(i for i in imps if _under(i, "tb_plugin.views"))
        for m, imps in _graph().items()
        if m != "tb_plugin.handlers"
    }
    assert {m: v for m, v in bad.items() if v} == {}


def test_run_level_code_reads_analyses_stages_and_the_summary_schema_only():
    allowed = ("profiler_core.analysis", "tb_plugin.run_level", "tb_plugin.summaries.schema")
    bad = {
        m: sorted(i for i in imps if not any(_under(i, a) for a in allowed))
        for m, imps in _graph().items()
        if _under(m, "tb_plugin.run_level")
    }
    assert {m: v for m, v in bad.items() if v} == {}


def test_the_summary_is_built_from_analyses():
    imps = _graph()["tb_plugin.summaries.summary"]
    assert not any(_under(i, "tb_plugin.views") or _under(i, "tb_plugin.run_level") for i in imps)
    assert {"profiler_core.analysis.worker.ledger", "profiler_core.analysis.gpu_idle.gpu_idle_summary"} <= imps


def test_the_plugin_does_http_only():
    """plugin.py reaches the answers through the route table and the workspace, never a view or an analysis."""
    imps = _graph()["tb_plugin.plugin"]
    assert not any(_under(i, "tb_plugin.views") or _under(i, "profiler_core.analysis") for i in imps), imps
    assert "tb_plugin.routes" in imps


def test_the_api_sits_above_the_handlers():
    """tb_plugin/api.py (`import gpuscope`) asks the route handlers and the run level, never a view; below it
    nothing imports it but the CLI (its `export`)."""
    g = _graph()
    imps = g["tb_plugin.api"]
    assert {"tb_plugin.routes", "tb_plugin.workspace"} <= imps
    assert not any(_under(i, "tb_plugin.views") for i in imps), imps
    users = sorted(m for m, i in g.items() if "tb_plugin.api" in i)
    assert users == ["tb_plugin.summaries.cli"], users
