"""samples/cpu_train.py runs, writes one trace per cycle and prints torch's table."""

import importlib.util
import json
import os
from pathlib import Path

import pytest

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "cpu_train.py"


@pytest.mark.filterwarnings("ignore:Profiler clears events")
def test_cpu_sample(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("cpu_train_sample", SAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--logdir", str(tmp_path), "--steps", "12", "--hidden", "32"]) == 0
    out = capsys.readouterr().out
    assert out.count("Self CPU time total:") == 2
    assert "FLOPs" in out and "mlp::linear" in out
    files = sorted(os.listdir(tmp_path))
    assert len(files) == 2 and all(f.endswith(".pt.trace.json") for f in files)
    steps_per_file = []
    for f in files:
        d = json.loads((tmp_path / f).read_text())
        names = [e["name"] for e in d["traceEvents"] if e.get("ph") == "X"]
        steps_per_file.append(sorted(n for n in names if n.startswith("ProfilerStep#")))
        assert "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__" in names
        assert "mlp::linear" in names and "Optimizer.step#SGD.step" in names
        ops = [e for e in d["traceEvents"] if e.get("name") == "mlp::linear"]
        assert all(e["args"]["flops"] > 0 for e in ops)
        assert any(e.get("name") == "[memory]" for e in d["traceEvents"])
    assert steps_per_file == [
        ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"],
        ["ProfilerStep#7", "ProfilerStep#8", "ProfilerStep#9"],
    ]
