"""One-time CUDA start-up, host syncs and the window of a trace without ProfilerStep, on the shared real traces.

The facts come from the raw events (tests/oracles/runtime_calls.py, standard library only, nothing of gpuscope):

* hta_cp_alexnet, hta_et_trace: the first runtime call of the process (cudaDeviceGetStreamPriorityRange, where the
  context is created) lasts 29.9 s and 19.6 s, every later call of that name µs; hta_cp_alexnet's second
  cudaLaunchKernel lasts 3.06 s (its module loaded; median launch 9 µs) and a cudaFree 6.0 s;
  kineto_rn50_autograd (torch 1.8 spellings) has a cudaLaunchKernel of 1.57 s among 9,329 of median 11 µs;
  hta_cupti_profiler's start-up is a cudaStreamCreateWithFlags of 1.30 s and a cudaFree of 1.33 s, while its
  launches are all tens of ms (the CUPTI profiler's kernel replay): its 1.22 s launch is not ten times the later
  ones, so it is not one-time.
* No start-up inside: tl_b200_eager (calls of µs), hta_ns_resolution (an 89 ms cudaDeviceSynchronize: a sync),
  hta_neg_queue (a 158 ms cudaDeviceSynchronize and five cudaMemcpyAsync of 139-147 ms in four of its steps:
  syncs and copies), tl_mi300_ddp_resnet18 (hipFree of 70 ms, 270 times its median, in the second and in the third
  iteration: it recurs), tl_vllm_graph_capture.
* hta_neg_queue's last step holds its 158 ms cudaDeviceSynchronize, under which the GPU idles 101.6 ms between
  the tiny kernels the host waits for: host sync.
* tl_vllm_graph_capture (HIP spellings under cuda_runtime) has no ProfilerStep; its Python frames (threading
  bootstrap) start 0.54 ms before its first operator and end 0.01 ms after its last.

gpuscope's answers are asserted against them: the ledger (`worker_ledger`, `gpuscope diagnose --json`), its text,
the Overview's advice and the single-rank critical path. Within 5 % where a figure is compared.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from profiler_core.analysis.stages.startup import startup_calls
from profiler_core.analysis.stages.steps import steps
from profiler_core.analysis.step_breakdown import overview_with_advice
from profiler_core.analysis.worker import single_rank_path as srp
from profiler_core.analysis.worker.buckets import HOST_COMPUTE, HOST_SYNC, LAUNCH_OVERHEAD, START_UP
from profiler_core.analysis.worker.ledger import worker_ledger
from profiler_core.trace.read.reader import read_trace
from tb_plugin.run_level import report
from tb_plugin.summaries import cli
from tests.conftest import TRACES, missing
from tests.oracles import runtime_calls as raw
from tests.test_views_common_support import kernel, make_trace, op, runtime

PUBLIC = TRACES / "public"
TOL = 0.05
#: runs whose window holds one-time start-up
STARTED = ("hta_cp_alexnet", "hta_et_trace", "kineto_rn50_autograd", "hta_cupti_profiler")
#: runs whose window holds none (each with a long call of another kind where it has one)
UNSTARTED = ("tl_b200_eager", "hta_ns_resolution", "hta_neg_queue", "tl_mi300_ddp_resnet18", "tl_vllm_graph_capture")


def _file(run: str) -> Path:
    folder = PUBLIC / run
    if not folder.is_dir():
        missing(f"the shared real trace {run} is not at {folder}")
    files = sorted(p for p in folder.iterdir() if p.is_file() and ".json" in p.name)
    assert len(files) == 1, files
    return files[0]


_EVENTS: dict[str, list[dict]] = {}
_TRACES: dict[str, object] = {}


def _events(run: str) -> list[dict]:
    if run not in _EVENTS:
        _EVENTS[run] = raw.events(_file(run))
    return _EVENTS[run]


def _trace(run: str):
    if run not in _TRACES:
        _TRACES[run] = read_trace(str(_file(run)))
    return _TRACES[run]


def _window(evs: list[dict]) -> tuple[float, float]:
    st = raw.profiler_steps(evs)
    return (st[0]["start"], st[-1]["end"]) if st else raw.ops_window(evs)


def _startup_idle_ms(evs: list[dict]) -> float:
    """The oracle's start-up time with the GPU idle inside the window (ms)."""
    lo, hi = _window(evs)
    spans = raw.union([(c["ts"], c["ts"] + c["dur"]) for c in raw.one_time_calls(evs)])
    return raw.length(raw.minus(raw.clip(spans, lo, hi), raw.gpu_busy(evs))) / 1000.0


def _diagnose(run: str, tmp_path: Path, monkeypatch, capsys) -> dict:
    """`gpuscope diagnose LOGDIR RUN --json` on a copy of the shared trace (summaries written beside the copy)."""
    src = _file(run)
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "logs" / run
    folder.mkdir(parents=True)
    shutil.copy(src, folder / src.name)
    capsys.readouterr()
    assert cli.main(["diagnose", str(tmp_path / "logs"), run, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _rows(rep: dict) -> dict[str, dict]:
    return {r["key"]: r for r in rep["ledger"]["mean"]["buckets"]}


def _ms(ns: list[int] | None) -> float:
    return sum(ns or []) / 1e6


# ---- the facts ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("run", ["hta_cp_alexnet", "hta_et_trace"])
def test_fact_the_first_call_creates_the_context(run):
    calls = raw.runtime_calls(_events(run))
    first = calls[0]
    later = [c["dur"] for c in calls[1:] if c["name"] == first["name"]]
    assert first["name"] == "cudaDeviceGetStreamPriorityRange" and first["dur"] > 10e6
    assert all(d * 1000 < first["dur"] for d in later)
    assert first in raw.one_time_calls(_events(run))


def test_fact_a_first_launch_loads_its_module():
    evs = _events("kineto_rn50_autograd")
    med = raw.median_of(evs, "cudaLaunchKernel")
    slow = [c for c in raw.one_time_calls(evs) if c["name"] == "cudaLaunchKernel"]
    assert slow and max(c["dur"] for c in slow) > 1000 * med and max(c["dur"] for c in slow) > 1e6


def test_fact_unstarted_runs_have_long_calls_of_other_kinds():
    assert max(c["dur"] for c in raw.runtime_calls(_events("hta_ns_resolution")) if c["name"] in raw.SYNCS) > 80e3
    neg = raw.runtime_calls(_events("hta_neg_queue"))
    assert sum(c["dur"] > 100e3 and "Memcpy" in c["name"] for c in neg) == 5
    mi300 = _events("tl_mi300_ddp_resnet18")
    frees = [c["dur"] for c in raw.runtime_calls(mi300) if c["name"] == "hipFree"]
    long = [d for d in frees if d >= raw.LONG_US]
    assert len(long) == 2 and min(long) > 100 * raw.median_of(mi300, "hipFree")
    for run in UNSTARTED:
        assert raw.one_time_calls(_events(run)) == [], run


# ---- start-up is its own item ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("run", STARTED)
def test_start_up_is_its_own_ledger_bucket(run):
    evs = _events(run)
    want = _startup_idle_ms(evs)
    assert want > 1000.0
    led = worker_ledger(_trace(run))
    got = _ms(led["buckets"][START_UP]["ns"])
    assert got == pytest.approx(want, rel=TOL)
    assert sum(led["buckets"][START_UP]["recoverable_ns"]) == 0
    wall = _ms(led["wall_ns"])
    for b in (LAUNCH_OVERHEAD, HOST_COMPUTE):  # never launch overhead nor CPU-bound: they hold none of it
        assert _ms(led["buckets"][b]["ns"]) <= wall - want * (1 - TOL), b
    for i, w in enumerate(led["wall_ns"]):
        assert sum(e["ns"][i] for e in led["buckets"].values() if e["ns"] is not None) == w


def test_start_up_calls_are_the_one_time_calls():
    for run in STARTED:
        t = _trace(run)
        rows = startup_calls(t)
        names = t.events["name"].astype(str).to_numpy()[rows].tolist()
        durs = t.events["dur"].to_numpy(np.int64)[rows]
        want = raw.one_time_calls(_events(run))
        assert sorted(names) == sorted(c["name"] for c in want), run
        assert sorted(durs / 1e3) == pytest.approx(sorted(c["dur"] for c in want), abs=1.0), run
    cupti = _trace("hta_cupti_profiler")
    assert "cudaLaunchKernel" not in [str(n) for n in cupti.events["name"].to_numpy()[startup_calls(cupti)]]


def test_diagnose_names_start_up_with_its_ms(tmp_path, monkeypatch, capsys):
    run = "hta_cp_alexnet"
    want = _startup_idle_ms(_events(run))
    longest_launch = max(c["dur"] for c in raw.one_time_calls(_events(run)) if c["name"] == "cudaLaunchKernel") / 1e3
    rep = _diagnose(run, tmp_path, monkeypatch, capsys)
    rows = _rows(rep)
    assert rows[START_UP]["ms"] == pytest.approx(want, rel=TOL)
    assert rows[START_UP]["recoverable_ms"] == 0
    assert rows[LAUNCH_OVERHEAD]["ms"] < TOL * longest_launch  # the 3 s first launch is not launch overhead
    assert rows[HOST_COMPUTE]["ms"] < rep["ledger"]["mean"]["average_wall_ms"] - want * (1 - TOL)
    by_kind = rep["single_rank"]["steps"][0]["by_kind"]
    assert by_kind["start_up"]["ns"] / 1e6 == pytest.approx(want, rel=TOL)
    assert by_kind["launch"]["ns"] / 1e6 < TOL * longest_launch
    text = report.render_text({k: v for k, v in rep.items() if k not in ("run", "span")})
    lines = text.splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith("  average step"))
    line = lines[at + 1]  # start-up leads the ledger's lines
    assert "One-time CUDA start-up" in line and f"{rows[START_UP]['ms']:.1f} ms" in line and "warm-up" in line


def test_overview_advice_names_start_up():
    run = "hta_et_trace"
    want = _startup_idle_ms(_events(run))
    _, tips = overview_with_advice(_trace(run))
    texts = [text for key, text in tips if key == START_UP]
    assert len(texts) == 1 and "cudaDeviceGetStreamPriorityRange" in texts[0]
    assert f"{want:,.1f} ms" in texts[0]


@pytest.mark.parametrize("run", UNSTARTED)
def test_no_start_up_where_none_happened(run):
    led = worker_ledger(_trace(run))
    assert led["buckets"][START_UP]["ns"] is not None and sum(led["buckets"][START_UP]["ns"]) == 0
    assert len(startup_calls(_trace(run))) == 0
    _, tips = overview_with_advice(_trace(run))
    assert not [text for key, text in tips if key == START_UP]


def test_diagnose_says_no_start_up_where_none_happened(tmp_path, monkeypatch, capsys):
    rep = _diagnose("tl_mi300_ddp_resnet18", tmp_path, monkeypatch, capsys)
    assert _rows(rep)[START_UP]["ms"] == 0
    assert rep["single_rank"]["steps"][0]["by_kind"]["start_up"]["ns"] == 0


# ---- a sync waiting for the GPU is host sync ------------------------------------------------------------------------


def test_sync_waiting_for_the_gpu_is_host_sync():
    evs = _events("hta_neg_queue")
    st = raw.profiler_steps(evs)
    last = st[-1]
    busy = raw.gpu_busy(evs)
    sync = next(c for c in raw.runtime_calls(evs) if c["name"] == "cudaDeviceSynchronize")
    assert last["start"] <= sync["ts"] < last["end"] and sync["dur"] > 150e3
    under = raw.length(raw.minus(raw.clip([(sync["ts"], sync["ts"] + sync["dur"])], last["start"], last["end"]), busy))
    under /= 1e3
    spans = raw.union([(c["ts"], c["ts"] + c["dur"]) for c in raw.runtime_calls(evs) if c["name"] in raw.SYNCS])
    all_syncs = raw.length(raw.minus(raw.clip(spans, last["start"], last["end"]), busy)) / 1e3
    assert under > 90.0
    led = worker_ledger(_trace("hta_neg_queue"))
    assert len(led["steps"]) == len(st)
    got = led["buckets"][HOST_SYNC]["ns"][-1] / 1e6
    assert under * (1 - TOL) <= got <= all_syncs * (1 + TOL)
    assert led["buckets"][HOST_COMPUTE]["ns"][-1] / 1e6 < (last["end"] - last["start"]) / 1e3 - under * (1 - TOL)
    assert led["buckets"][START_UP]["ns"][-1] == 0


def test_hip_syncs_wait_on_the_single_rank_path():
    run = "tl_vllm_graph_capture"
    hip = {c["name"] for c in raw.runtime_calls(_events(run)) if c["name"] in raw.SYNCS}
    assert {"hipDeviceSynchronize", "hipEventSynchronize"} <= hip
    path = srp.critical_path(_trace(run), 0)
    on = [s for s in path["segments"] if s["name"] in hip]
    assert on and {s["kind"] for s in on} == {"sync_wait"}


# ---- the window of a trace without ProfilerStep ---------------------------------------------------------------------


@pytest.mark.parametrize("run", ["tl_vllm_graph_capture", "tl_mi300_ddp_resnet18"])
def test_window_without_steps_is_the_operators_span(run):
    evs = _events(run)
    assert not raw.profiler_steps(evs)
    lo, hi = raw.ops_window(evs)
    flo, fhi = raw.frames_window(evs)
    assert (fhi - flo) - (hi - lo) > 100.0  # Python frames reach over 0.1 ms beyond the operators
    st = steps(_trace(run))
    assert len(st) == 1
    assert (int(st["end"].iloc[0]) - int(st["start"].iloc[0])) / 1e3 == pytest.approx(hi - lo, abs=1.0)


def test_diagnose_window_without_steps(tmp_path, monkeypatch, capsys):
    run = "tl_vllm_graph_capture"
    lo, hi = raw.ops_window(_events(run))
    rep = _diagnose(run, tmp_path, monkeypatch, capsys)
    assert rep["ledger"]["mean"]["average_wall_ms"] == pytest.approx((hi - lo) / 1e3, abs=0.001)
    text = next(c["text"] for c in rep["caveats"] if c["key"] == "no_steps")
    assert f"({(hi - lo) / 1e3:.1f} ms)" in text


# ---- hand-made traces: the rule's edges ------------------------------------------------------------------------------
# µs. A first call of `first_dur` at 10 (inside an op [0, 2,000,000)), then 50 ops of 1 ms from 2,000,000, each
# launching a kernel that keeps the GPU busy 960 of its 1,000 µs. Without ProfilerStep the window is [0, 2,050,000).
STEADY_START = 2_000_000


def _handmade(first: str = "cudaDeviceGetStreamPriorityRange", first_dur: int = 1_999_980, again: bool = False):
    evs = [op("aten::empty", 0, STEADY_START), runtime(first, 10, first_dur, corr=1)]
    for i in range(50):
        t0 = STEADY_START + i * 1000
        evs += [op("aten::mm", t0, 100), runtime("cudaLaunchKernel", t0 + 10, 10, corr=100 + i)]
        evs.append(kernel("gemm", t0 + 30, 960, 100 + i))
    if again:  # the same call as long again after the steady part: a recurring cost
        end = STEADY_START + 50_000
        evs += [op("aten::empty", end, first_dur + 20), runtime(first, end + 10, first_dur, corr=2)]
    return make_trace(evs)


def test_handmade_first_call_is_start_up_and_the_advice_leaves_it_out():
    t = _handmade()
    led = worker_ledger(t)
    assert led["buckets"][START_UP]["ns"] == [1_999_980_000]
    assert _ms(led["buckets"][HOST_COMPUTE]["ns"]) < 5.0 and _ms(led["buckets"][LAUNCH_OVERHEAD]["ns"]) < 5.0
    _, tips = overview_with_advice(t)
    keys = [k for k, _ in tips]
    assert keys.count(START_UP) == 1
    assert HOST_COMPUTE not in keys and LAUNCH_OVERHEAD not in keys  # the steady part keeps the GPU 96 % busy


def test_handmade_twins_without_start_up():
    short = _handmade(first_dur=10)
    assert sum(worker_ledger(short)["buckets"][START_UP]["ns"]) == 0
    assert START_UP not in [k for k, _ in overview_with_advice(short)[1]]
    # the same 2 s call twice: a cost paid again is not start-up (it is the host's)
    twice = worker_ledger(_handmade(again=True))
    assert sum(twice["buckets"][START_UP]["ns"]) == 0
    assert _ms(twice["buckets"][HOST_COMPUTE]["ns"]) == pytest.approx(2 * 1999.98, rel=0.01)
    # a 2 s sync is host sync whatever the GPU does: never start-up
    sync = worker_ledger(_handmade(first="cudaDeviceSynchronize"))
    assert sum(sync["buckets"][START_UP]["ns"]) == 0
    assert _ms(sync["buckets"][HOST_SYNC]["ns"]) == pytest.approx(1999.98, rel=0.01)
