"""Self time on the shared real traces (issue 21 item 8, issue 23 item 4): never negative in any consumer, and
one number for the same operator in Operators, Diff, the summaries and key_averages()."""

from __future__ import annotations

import numpy as np
import pytest

from profiler_core.analysis import events_from_trace
from profiler_core.analysis.stages.node_stats import node_stats
from profiler_core.analysis.tables import operators
from profiler_core.trace.categories import OP_CATS
from profiler_core.trace.read.reader import read_trace
from tb_plugin.summaries.summary import summarize
from tb_plugin.views import diff, modules
from tests.conftest import TRACES

from .real_traces_support import load_json, read_real_trace, real_trace_files


@pytest.mark.parametrize("path", real_trace_files(), ids=lambda p: str(p.relative_to(TRACES)))
def test_no_self_time_is_negative(path):
    t = read_real_trace(path)
    if t is None:  # refused on purpose, with its reason (tests/real_traces_support.py)
        return
    assert (node_stats(t)["host_self"].to_numpy() >= 0).all()
    assert all(r["host_self_us"] >= 0 for r in operators.operators(t, "name_shape")["rows"])
    nodes = diff.op_nodes(t)
    assert (nodes["host_self"].to_numpy() >= 0).all()
    _, mods = modules.module_nodes(t)
    assert (mods["host_self"].to_numpy(np.float64) >= 0).all()


def test_record_param_comms_on_b200():
    # tl_b200_eager: record_param_comms [0, 190.881] us holds a 5.008 us cudaStreamIsCapturing and the NCCL
    # annotation nccl:_all_gather_base (156.039 us), which holds every other runtime call of the collective
    # (their External id names record_param_comms). Self = 190.881 - 156.039 - 5.008 = 29.834 us (was
    # -9.402: those calls were subtracted from both). torch's rule, and our key_averages(), give the same.
    path = TRACES / "public" / "tl_b200_eager" / "eager_trace.json.gz"
    if not path.exists():
        pytest.skip("tl_b200_eager not present")
    t = read_trace(str(path))
    row = next(r for r in operators.operators(t)["rows"] if r["name"] == "record_param_comms")
    assert row["host_self_us"] == pytest.approx(29.834, abs=1e-3)
    ka = next(e for e in events_from_trace(load_json(path)).key_averages() if e.key == "record_param_comms")
    assert ka.self_cpu_time_total == pytest.approx(29.834, abs=1e-3)
    ops = [e for e in events_from_trace(load_json(path)) if e.activity_type in OP_CATS]
    assert min(e.self_cpu_time_total for e in ops) >= 0


# traces on which key_averages() and every view give one self time for every operator (Diff and the summaries
# too); on every other trace the differences are named and pinned by the test at the end of this file
AGREEING = (
    "kineto_resnet50_v100/num_workers_0",
    "public/ds_train_h800",
    "public/hta_amd_mi250",
    "public/hta_cp_alexnet",
    "public/hta_trace_filter",
    "public/tl_mi300_ddp_resnet18",
)


@pytest.mark.parametrize("sub", AGREEING)
def test_every_consumer_gives_one_self_time(sub):
    paths = sorted((TRACES / sub).glob("*.json*"))
    if not paths:
        pytest.skip(f"{sub} not present")
    t = read_trace(str(paths[0]))
    ops = {r["name"]: r for r in operators.operators(t)["rows"]}
    ka = {e.key: e for e in events_from_trace(load_json(paths[0])).key_averages()}
    for name, r in ops.items():
        assert r["host_self_us"] == pytest.approx(ka[name].self_cpu_time_total, abs=0.01), name
        assert r["host_total_us"] == pytest.approx(ka[name].cpu_time_total, abs=0.01), name
    for r in summarize(t).top_operators:
        assert r == ops[r["name"]]
    # Diff counts only the ops inside steps: where it counts every call of an op, its sums are Operators'
    compared = 0
    for r in diff.diff(t, t)["ops"]:
        o = ops.get(r["name"])
        if o is not None and r["base"]["calls"] == o["calls"]:
            compared += 1
            assert r["base"]["host_self_us"] == pytest.approx(o["host_self_us"], abs=0.01), r["name"]
            assert r["base"]["device_self_us"] == pytest.approx(o["device_self_us"], abs=0.01), r["name"]
    assert compared > 0


# key_averages() keeps torch's FunctionEvent tree and torch's "self" (duration minus the children's durations);
# the views use node_stats' written definition. They differ on purpose in two ways, named per trace below:
PYTHON_FRAMES = "python_frames"  # with_stack frames are children in torch's tree: an op's self excludes the
# whole frame; node_stats sees through frames (not nodes; nn.Module frames are) to the ops and calls inside
OVERLAPPING_CHILDREN = "overlapping_children"  # children overlapping each other or sticking out of their
# parent (ns rounding): torch subtracts each whole (self can go negative), node_stats their union, clipped
DIFFERENCES: dict[str, set[str]] = {  # trace folder (relative to TRACES) -> the named differences it shows
    "public/hta_mtia_single": {OVERLAPPING_CHILDREN},  # 2 operators
    "public/hta_ns_resolution": {OVERLAPPING_CHILDREN},  # 10 operators (ranges at 0.25 us steps)
    "public/tl_b200_eager": {PYTHON_FRAMES},  # 11 operators
    "public/tl_mi300_resnet_ckpt": {PYTHON_FRAMES},  # 7
    "public/tl_vllm_graph_capture": {PYTHON_FRAMES},  # 19
    "public/tl_xdit_sd35": {PYTHON_FRAMES},  # 33
    "torch_cpu_cnn/ddp_gloo": {PYTHON_FRAMES},  # forward_pass
    "torch_cpu_cnn/single": {PYTHON_FRAMES},  # forward_pass
}


def _node_children(e) -> list:
    """An event's children in node_stats' sense, found in torch's tree: frames (not modules) seen through."""
    out, todo = [], list(e.cpu_children)
    while todo:
        c = todo.pop()
        if c.activity_type == "python_function" and c.python_module_id < 0:
            todo.extend(c.cpu_children)
        else:
            out.append(c)
    return out


def _union(lo: float, hi: float, ranges: list) -> float:
    total, cur_s, cur_e = 0.0, 0.0, None
    for s, e in sorted((max(s, lo), min(e, hi)) for s, e in ranges):
        if e <= s:
            continue
        if cur_e is None or s > cur_e:
            total += 0.0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (0.0 if cur_e is None else cur_e - cur_s)


@pytest.mark.slow
@pytest.mark.parametrize("path", real_trace_files(), ids=lambda p: str(p.relative_to(TRACES)))
def test_key_averages_self_time_differs_from_the_views_only_as_named(path):
    # Operators' self time of every operator equals node_stats' definition applied to key_averages()' own tree
    # (an independent computation: frames seen through, the union of the children), and the operators whose
    # key_averages() self differs from Operators' are exactly those with a named cause; the causes a trace
    # shows are the ones DIFFERENCES lists for it (none for the rest: there the two agree on every operator).
    from profiler_core.analysis.events import DeviceType

    t = read_real_trace(path)
    if t is None:  # refused on purpose, with its reason (tests/real_traces_support.py)
        return
    ops = {r["name"]: r for r in operators.operators(t)["rows"]}
    el = events_from_trace(load_json(path))
    want: dict[str, float] = {}
    causes: dict[str, set[str]] = {}
    for e in el:
        if e.device_type != DeviceType.CPU or e.activity_type not in OP_CATS:
            continue
        kids = _node_children(e)
        lo, hi = e.time_range.start, e.time_range.end
        covered = _union(lo, hi, [(c.time_range.start, c.time_range.end) for c in kids])
        want[e.key] = want.get(e.key, 0.0) + (hi - lo) - covered
        named = causes.setdefault(e.key, set())
        if any(c.activity_type == "python_function" and c.python_module_id < 0 for c in e.cpu_children):
            named.add(PYTHON_FRAMES)
        if sum(c.time_range.end - c.time_range.start for c in kids) - covered > 1e-6:
            named.add(OVERLAPPING_CHILDREN)
    ka = {e.key: e for e in el.key_averages() if e.device_type == DeviceType.CPU}
    for name, r in ops.items():
        assert r["host_self_us"] == pytest.approx(want[name], abs=0.01), name
        assert r["host_total_us"] == pytest.approx(ka[name].cpu_time_total, abs=0.01), name
    # GPU work -> launching op: key_averages() links an activity through its External id or its runtime call's
    # (analysis/linking.py, over torch's tree), the views through the gpu_links stage; device self time, the GPU
    # work an op launched itself, is one number for every operator (the one difference on purpose, CUDA-graph
    # replays, has no capture in these traces: tests/test_graph_replay.py names it)
    device_differ = {
        n: (r["device_self_us"], ka[n].self_device_time_total)
        for n, r in ops.items()
        if abs(r["device_self_us"] - ka[n].self_device_time_total) > 0.01
    }
    assert device_differ == {}
    differ = {n for n, r in ops.items() if abs(r["host_self_us"] - ka[n].self_cpu_time_total) > 0.01}
    assert {n for n in differ if not causes[n]} == set()
    shown = set().union(*(causes[n] for n in differ))
    assert shown == DIFFERENCES.get(str(path.relative_to(TRACES).parent), set())
