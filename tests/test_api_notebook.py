"""samples/api_walkthrough.ipynb runs top to bottom (nbclient, a python3 Jupyter kernel) on the shared V100 ResNet-50
run, and its cells show what the API answers there: the steps, the top kernels, a plot, the job diff of the two
runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import gpuscope

from .conftest import TRACES, missing, require_module

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "samples" / "api_walkthrough.ipynb"
V100 = TRACES / "kineto_resnet50_v100"


def _text(cell) -> str:
    out = []
    for o in cell.get("outputs", []):
        out.append(o.get("text") or o.get("data", {}).get("text/plain", ""))
    return "\n".join(out)


@pytest.mark.slow
def test_the_walkthrough_runs_on_a_real_trace(tmp_path):
    nbformat = require_module("nbformat", 'the notebook test needs nbformat (pip install "gpuscope[notebook]")')
    nbclient = require_module("nbclient", 'the notebook test needs nbclient (pip install "gpuscope[notebook]")')
    require_module("ipykernel", 'the notebook test needs a Jupyter kernel (pip install "gpuscope[notebook]")')
    require_module("matplotlib", 'the notebook plots with matplotlib (pip install "gpuscope[notebook]")')
    if not V100.is_dir():
        missing(f"the shared traces are not at {TRACES} (set GPUSCOPE_SHARED to the folder holding traces/)")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    [params] = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert params.source.rstrip().splitlines()[-1].startswith("LOGDIR = ")
    params.source = f"LOGDIR = {json.dumps(str(V100))}"
    nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert not [o for c in code for o in c.get("outputs", []) if o.get("output_type") == "error"]
    with gpuscope.open(V100) as prof:
        job = prof.select("num_workers_0")
        top = job.kernels().nlargest(5, "total_us")
        steps = job.steps()
        cause = job.diff(prof.select("num_workers_4")).cause
    shown = {c.source.splitlines()[0]: _text(c) for c in code}
    kernels = next(t for s, t in shown.items() if s.startswith("top = "))
    assert all(name[:40] in kernels for name in top["name"])
    assert all(str(s) in shown["steps = job.steps()"] for s in steps["step"])
    assert any("image/png" in o.get("data", {}) for c in code for o in c.get("outputs", []))
    diff = next(t for s, t in shown.items() if s.startswith("diff = "))
    assert cause is not None and cause[:40] in diff
