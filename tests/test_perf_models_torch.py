"""The per-op performance models against torch's own FLOP counter: small CPU models (a transformer block, a
CNN, attention with and without a causal mask, the GEMM ops) run by torch 2.13 in the compat venv, traced with
record_shapes=True and counted by `torch.utils.flop_counter.FlopCounterMode` (tests/real_jobs/flop_job.py). Every
call torch counts must be one counted call of ours with the same FLOPs, and nothing more."""

from __future__ import annotations

import json
import os
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from profiler_core.analysis import perf_models
from profiler_core.analysis.roofline.ops import op_models
from profiler_core.trace.read.reader import read_trace

from .real_jobs.support import TIMEOUT_S, compat_python

JOB = Path(__file__).resolve().parent / "real_jobs" / "flop_job.py"
CASES = ("transformer", "cnn", "attention", "attention_causal", "gemms")
#: torch's counted op -> our family
TORCH_FAMILY = {
    "aten::mm": "gemm",
    "aten::addmm": "gemm",
    "aten::bmm": "gemm",
    "aten::baddbmm": "gemm",
    "aten::convolution": "conv",
    "aten::convolution_backward": "conv",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "attention",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": "attention",
}


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("flop_job")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [str(compat_python()), str(JOB), "--out", str(out)], capture_output=True, text=True, timeout=TIMEOUT_S, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def _torch_calls(job: Path, case: str) -> dict[str, list[int]]:
    calls = json.loads((job / f"{case}.flops.json").read_text())
    by: dict[str, list[int]] = defaultdict(list)
    for op, n in calls:
        by[TORCH_FAMILY[op]].append(n)
    return {k: sorted(v) for k, v in by.items()}


def _outermost_from_json(events: list[dict]) -> list[tuple[dict, perf_models.OpModel]]:
    """The counted calls computed from the raw events alone (with Concrete Inputs): per thread, a modelled call
    inside another modelled call does not count."""
    ops = sorted((e for e in events if e.get("cat") == "cpu_op"), key=lambda e: (e["tid"], e["ts"], -e["dur"]))
    counted, stack = [], []  # stack: (end, modelled) of the open calls of the thread
    tid = None
    for e in ops:
        if e["tid"] != tid:
            tid, stack = e["tid"], []
        while stack and stack[-1][0] <= e["ts"]:
            stack.pop()
        a = e.get("args", {})
        m = perf_models.model_op(e["name"], a.get("Input Dims", []), a.get("Input type"), a.get("Concrete Inputs"))
        ok = isinstance(m, perf_models.OpModel)
        if ok and not any(s[1] for s in stack):
            counted.append((e, m))
        stack.append((e["ts"] + e["dur"], ok))
    return counted


@pytest.mark.parametrize("case", CASES)
def test_model_flops_equal_torch_flop_counter_call_by_call(job, case):
    events = json.loads((job / f"{case}.json").read_text())["traceEvents"]
    ours: dict[str, list[int]] = defaultdict(list)
    for _e, m in _outermost_from_json(events):
        if m.matrix:
            ours[m.family].append(m.flops)
    assert {k: sorted(v) for k, v in ours.items()} == _torch_calls(job, case)


@pytest.mark.parametrize("case", CASES)
def test_trace_stage_counts_torch_flops_where_the_columns_say_enough(job, case):
    """The stage reads only the trace model's columns (no Concrete Inputs): the forward convolutions take their
    output shape from the autograd node; a backward convolution's output mask is not recorded, so it counts both
    gradients and says so. Every other counted matrix call equals torch's."""
    t = read_trace(str(job / f"{case}.json"))
    m = op_models(t)
    m = m[m["counted"] & m["matrix"]]
    torch_calls = _torch_calls(job, case)
    exact = m[m["note"] != "output_mask not recorded: grad-input and grad-weight counted"]
    assumed = m[m["note"] == "output_mask not recorded: grad-input and grad-weight counted"]
    for family, flops in exact.groupby("family")["flops"]:
        remaining = list(torch_calls.get(family, []))
        for n in flops.tolist():
            assert n in remaining, (family, n, torch_calls.get(family))
            remaining.remove(n)
    assert len(m) == sum(len(v) for v in torch_calls.values())
    # a call that counted both gradients counts at least what torch counted for some backward convolution
    conv = sorted(torch_calls.get("conv", []))
    assert all(n >= min(conv) for n in assumed["flops"].tolist())


def test_causal_flag_is_read_where_recorded(job):
    events = json.loads((job / "attention_causal.json").read_text())["traceEvents"]
    notes = {m.note for e, m in _outermost_from_json(events) if m.family == "attention"}
    assert notes == {"causal"}
    events = json.loads((job / "attention.json").read_text())["traceEvents"]
    assert {m.note for e, m in _outermost_from_json(events) if m.family == "attention"} == {""}
