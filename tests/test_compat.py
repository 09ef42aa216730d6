"""Compatibility proof (issue 2 item 5): our traces load in torch-tb-profiler 0.4.3 and HTA.

The heavy tools live in a separate venv (benchmarks/compat_check.py says how to make it); the
end-to-end test runs the script when that venv exists and skips otherwise. The comparison
logic and the trace makers are tested here without it.
"""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import COMPAT_VENV, missing

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "compat_check.py"
VENV = COMPAT_VENV


@pytest.fixture(scope="module")
def compat():
    spec = importlib.util.spec_from_file_location("compat_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _venv_ready() -> bool:
    python = VENV / "bin" / "python"
    if not python.exists():
        return False
    probe = subprocess.run([str(python), "-c", "import torch_tb_profiler, hta"], capture_output=True)
    return probe.returncode == 0


def test_our_traces_and_our_view(compat, tmp_path):
    """The two traces the check feeds to the tools, as our analysis sees them."""
    cpu = compat.our_view(compat.make_cpu_trace(str(tmp_path)))
    assert cpu == {"ops": {"aten::mm": 9, "aten::relu": 3, "aten::add_": 3}, "steps": [2, 3, 4], "kernels": {}}
    gpu_path = compat.make_gpu_trace(str(tmp_path))
    gpu = compat.our_view(gpu_path)
    assert gpu["steps"] == [0, 1, 2]
    assert gpu["kernels"] == {"volta_sgemm_128x64_nn": 3, "void at::native::vectorized_elementwise_kernel<4>(int)": 3}
    with open(gpu_path) as f:
        raw = json.load(f)
    assert raw["deviceProperties"] and {"kernel", "gpu_memcpy", "cuda_runtime", "ac2g"} <= {
        e.get("cat") for e in raw["traceEvents"]
    }


def test_compare_flags_every_kind_of_disagreement(compat):
    ours = {"w": {"ops": {"aten::mm": 2}, "steps": [1, 2], "kernels": {"k": 1}}}
    good = {
        "w": {
            "torch-tb-profiler": {
                "ops": {"aten::mm": 2},
                "steps": ["1", "2"],
                "kernels": {"k": 1},
                "file_name_recognised": True,
            },
            "hta": {"ops": {"aten::mm": 2}, "steps": [1, 2], "kernels": {"k": 1}},
        }
    }
    assert compat.compare(ours, good) == []
    bad = json.loads(json.dumps(good))
    bad["w"]["hta"]["ops"] = {"aten::mm": 1}
    bad["w"]["torch-tb-profiler"]["steps"] = ["1"]
    bad["w"]["torch-tb-profiler"]["file_name_recognised"] = False
    problems = compat.compare(ours, bad)
    assert len(problems) == 3
    assert any("hta on w: operators" in p for p in problems)
    assert any("steps" in p for p in problems) and any("file name" in p for p in problems)
    crashed = {"w": {"torch-tb-profiler": {"error": "Traceback ...\nKeyError: 'x'"}, "hta": good["w"]["hta"]}}
    assert "failed to load" in compat.compare(ours, crashed)[0]
    assert "missing tool results" in compat.compare(ours, {"w": {"hta": good["w"]["hta"]}})[0]


def test_missing_venv_is_reported(compat, tmp_path, capsys):
    assert compat.main(["--venv", str(tmp_path / "none")]) == 2
    assert "compat venv not found" in capsys.readouterr().err


def test_torch_tb_profiler_and_hta_load_our_traces(tmp_path):
    if not _venv_ready():
        missing(
            f"compat venv with torch-tb-profiler and HTA not found at {VENV} "
            "(.ci/run builds it; or set GPUSCOPE_COMPAT_VENV)"
        )
    report_path = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--venv", str(VENV), "--json", str(report_path)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(report_path.read_text())
    assert report["problems"] == []
    for worker, tools in report["found"].items():
        assert set(tools) == {"torch-tb-profiler", "hta"}
        assert tools["torch-tb-profiler"]["ops"] == report["ours"][worker]["ops"]
        assert tools["hta"]["steps"] == report["ours"][worker]["steps"]
    gpu = report["found"]["gpuworker"]
    assert "Kernel" in gpu["torch-tb-profiler"]["views"]
    assert gpu["hta"]["analyses"]["gpu_kernel_breakdown"] == "ok"
