"""docs/python-api.md is what the API is: every `python` block of it runs, in order, in a folder of generated jobs
(tests/api_support.py); every public name and method of `gpuscope` and every exported column is on that page."""

from __future__ import annotations

import inspect
import os
import re
from pathlib import Path

import pytest

import gpuscope
from tb_plugin import api

from . import api_support
from .conftest import require_module

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "python-api.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", DOC.read_text(), flags=re.S | re.M)


#: the nightly run (in time order) from which the page's series is planted
REGRESSED_FROM = 13


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> tuple[Path, list[str]]:
    """What the page's examples read: logs/job (planted), logs/job_base, nightly/ (20 runs, planted from run 13),
    and the nightly runs' names in time order."""
    root = tmp_path_factory.mktemp("python_api_doc")
    api_support.job(root / "logs" / "job", planted=True)
    api_support.job(root / "logs" / "job_base", planted=False)
    names = api_support.series(root / "nightly", runs=20, regressed_from=REGRESSED_FROM)
    return root, names


@pytest.mark.slow
def test_every_python_block_runs(folder, monkeypatch, capsys):
    require_module("pyarrow", 'the Parquet example needs pyarrow (pip install "gpuscope[sql]")')
    require_module("duckdb", 'the DuckDB example needs duckdb (pip install "gpuscope[sql]")')
    root, nightly = folder
    blocks = _blocks("python")
    assert len(blocks) >= 6
    monkeypatch.chdir(root)
    ns: dict = {}
    for i, code in enumerate(blocks):
        exec(compile(code, f"{DOC.name} block {i + 1}", "exec"), ns)  # noqa: S102 - the documented examples
    out = capsys.readouterr().out
    # what the examples print is what the planted jobs hold
    assert f"first regression: {nightly[REGRESSED_FROM]}\n" in out
    assert "why: Compute (kernels)" in out and api_support.SLOW_KERNEL in out.split("why:")[1].split("\n")[0]
    assert set(os.listdir(root / "exported")) == {*api.EXPORT_SCHEMA, "events"}
    for prof in (v for v in ns.values() if isinstance(v, gpuscope.Profile)):
        prof.close()


def test_every_public_name_is_documented():
    text = DOC.read_text()
    for name in gpuscope.__all__:
        assert re.search(rf"`(gpuscope\.)?{name}\b", text), f"{name} is not on docs/python-api.md"
    for name, _ in inspect.getmembers(gpuscope.Profile):
        if name.startswith("_"):
            continue
        assert re.search(rf"`(Profile\.|\.)?{name}[(`]", text), f"Profile.{name} is not on docs/python-api.md"
    for table, cols in api.EXPORT_SCHEMA.items():
        row = next((ln for ln in text.splitlines() if ln.startswith(f"| `{table}` |")), None)
        assert row is not None, table
        for c in cols:
            assert f"`{c}`" in row, (table, c)


def test_the_api_module_is_typed():
    """mypy checks tb_plugin/api.py with complete annotations (pyproject's [tool.mypy]): every public function says
    its types."""
    for name, fn in inspect.getmembers(gpuscope.Profile, inspect.isfunction):
        if not name.startswith("_"):
            assert "return" in fn.__annotations__, name


def test_the_readme_from_python_block_runs(tmp_path, monkeypatch, capsys):
    """The README's "From Python" example, on a generated 2-rank job in the logdir it names."""
    readme = (ROOT / "README.md").read_text()
    [code] = [b for b in re.findall(r"^```python\n(.*?)^```", readme, flags=re.S | re.M) if "import gpuscope" in b]
    logdir = re.search(r'gpuscope\.open\("([^"]+)"\)', code).group(1)
    api_support.job(tmp_path / logdir, planted=True)
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(compile(code, "README.md From Python", "exec"), ns)  # noqa: S102 - the documented example
    ns["prof"].close()
    out = capsys.readouterr().out
    assert "rank 1 is" in out and "slow in" in out, out  # the planted rank named by the verdict
