"""Device time: GPU activities attributed to the CPU op that launched them, CUDA columns and footer."""

import copy
import gzip
import json
from pathlib import Path

import pytest

from profiler_core.analysis import DeviceType, events_from_trace
from profiler_core.analysis.synthetic import (
    annotation,
    gpu_annotation,
    kernel,
    memcpy,
    memory,
    memset,
    op,
    runtime,
    trace,
)
from profiler_core.trace.write.schema import convert_collector_events

from .conftest import missing


def gpu_trace():
    """One step: linear (addmm via External id on the kernel), copy (via runtime's External id),
    relu (runtime without External id: linked by enclosing op), memset; a GPU annotation span."""
    return trace(
        [
            annotation("ProfilerStep#3", 0, 200, 1),
            annotation("fwd", 1, 150, 2),
            op("aten::linear", 2, 40, 3),
            op("aten::addmm", 3, 30, 4),
            runtime("cudaLaunchKernel", 5, 10, corr=100, ext=4),
            op("aten::copy_", 50, 30, 5),
            runtime("cudaMemcpyAsync", 52, 20, corr=101, ext=5),
            op("aten::relu", 90, 30, 6),
            runtime("cudaLaunchKernel", 95, 10, corr=102),
            op("aten::zero_", 125, 20, 7),
            runtime("cudaMemsetAsync", 127, 5, corr=103, ext=7),
            kernel("volta_sgemm_128x64_nn", 20, 100.0, corr=100, ext=4),
            memcpy(130, 8.0, corr=101, nbytes=1 << 20),
            kernel("vectorized_elementwise_kernel<relu>", 140, 12.0, corr=102),
            memset(155, 2.0, corr=103, ext=7),
            gpu_annotation("fwd", 19, 150, 2),
            memory(51, 1 << 20, device_type=1),
        ],
        gpu=True,
        profile_memory=1,
    )


@pytest.fixture
def events():
    return events_from_trace(gpu_trace())


def get(events, name, device=DeviceType.CPU):
    (e,) = [x for x in events if x.name == name and x.device_type == device]
    return e


def test_kernels_attributed_by_external_id_and_correlation(events):
    addmm = get(events, "aten::addmm")
    assert [k.name for k in addmm.kernels] == ["volta_sgemm_128x64_nn"]
    assert addmm.self_device_time_total == pytest.approx(100.0)
    copy = get(events, "aten::copy_")  # kernel-less memcpy found via the runtime's External id
    assert copy.self_device_time_total == pytest.approx(8.0)
    relu = get(events, "aten::relu")  # no External id anywhere: the runtime call's enclosing op
    assert [k.name for k in relu.kernels] == ["vectorized_elementwise_kernel<relu>"]
    zero = get(events, "aten::zero_")
    assert zero.self_device_time_total == pytest.approx(2.0)


def test_device_totals_roll_up_the_tree(events):
    linear = get(events, "aten::linear")
    assert linear.self_device_time_total == 0
    assert linear.device_time_total == pytest.approx(100.0)
    step = get(events, "ProfilerStep*")
    assert step.device_time_total == pytest.approx(122.0)
    fwd = get(events, "fwd")
    assert fwd.device_time_total == pytest.approx(122.0)


def test_gpu_activities_are_cuda_rows(events):
    k = get(events, "volta_sgemm_128x64_nn", DeviceType.CUDA)
    assert k.cpu_time_total == 0 and k.self_cpu_time_total == 0
    assert k.device_time_total == pytest.approx(100.0) and k.device_index == 0 and k.thread == 7
    assert k.event_metadata["grid"] == [80, 1, 1]
    gpu_fwd = get(events, "fwd", DeviceType.CUDA)
    assert gpu_fwd.is_user_annotation
    avg = {(a.key, a.device_type): a for a in events.key_averages()}
    assert ("fwd", DeviceType.CPU) in avg and ("fwd", DeviceType.CUDA) in avg


def test_runtime_calls_are_cpu_children_of_their_op(events):
    addmm = get(events, "aten::addmm")
    assert [c.name for c in addmm.cpu_children] == ["cudaLaunchKernel"]
    assert addmm.self_cpu_time_total == pytest.approx(20)


def test_table_has_cuda_columns_and_footer(events):
    text = events.key_averages().table(sort_by="self_cuda_time_total", row_limit=6)
    lines = text.splitlines()
    header = lines[1]
    for col in (
        "Self CUDA",
        "Self CUDA %",
        "CUDA total",
        "CUDA time avg",
        "CPU Mem",
        "CUDA Mem",
        "Self CUDA Mem",
        "# of Calls",
    ):
        assert col in header
    assert header.index("CPU time avg") < header.index("Self CUDA") < header.index("CPU Mem")
    rows = lines[3:9]
    # As in torch, the GPU-side annotation span is a row of its own (150us, over 100% since the
    # total counts GPU activities only), then addmm and its kernel (100us each).
    assert rows[0].split()[0] == "fwd" and "122.95%" in rows[0]
    assert {rows[1].split()[0], rows[2].split()[0]} == {"aten::addmm", "volta_sgemm_128x64_nn"}
    # Self CUDA %: 100 / (100 + 8 + 12 + 2) over GPU activities only (annotation excluded)
    assert "100.000us" in rows[1] and "81.97%" in rows[1] and "81.97%" in rows[2]
    assert lines[-1] == "Self CUDA time total: 122.000us"
    assert lines[-2].startswith("Self CPU time total: ")


def test_sort_keys_cuda_device_rewrite(events):
    avgs = events.key_averages()
    a = avgs.table(sort_by="self_cuda_time_total")
    b = avgs.table(sort_by="self_device_time_total")
    assert a == b
    for key in (
        "cuda_time",
        "cuda_time_total",
        "device_time_total",
        "xpu_time_total",
        "cuda_memory_usage",
        "self_cuda_memory_usage",
    ):
        assert avgs.table(sort_by=key)


def test_cuda_memory_columns(events):
    copy = get(events, "aten::copy_")
    assert copy.device_memory_usage == 1 << 20 and copy.self_device_memory_usage == 1 << 20
    text = events.key_averages().table(sort_by="self_cuda_memory_usage", row_limit=1)
    assert "1.00 MB" in text.splitlines()[3]


def test_export_stacks_self_cuda(events, tmp_path):
    t = gpu_trace()
    for e in t["traceEvents"]:
        if e.get("name") == "aten::addmm":
            e["args"]["Call stack"] = "model.py(10): forward;train.py(3): <module>;"
    ev = events_from_trace(t)
    path = tmp_path / "cuda.stacks"
    ev.export_stacks(str(path), "self_cuda_time_total")
    assert path.read_text() == "train.py(3):_<module>;model.py(10):_forward 100\n"
    ev.export_stacks(str(path), "self_cpu_time_total")
    assert path.read_text() == "train.py(3):_<module>;model.py(10):_forward 20\n"


def test_cpu_only_trace_has_no_cuda_columns():
    ev = events_from_trace(trace([op("aten::mm", 0, 10, 1)]))
    text = ev.key_averages().table()
    assert "CUDA" not in text
    assert ev[0].device_time_total == 0


def test_kernel_without_any_link_is_still_a_row():
    ev = events_from_trace(trace([op("aten::mm", 0, 10, 1), kernel("orphan", 50, 5.0)], gpu=True))
    mm = get(ev, "aten::mm")
    assert mm.kernels == []
    assert get(ev, "orphan", DeviceType.CUDA).self_device_time_total == pytest.approx(5.0)


def _resnet_path(shared_traces):
    path = shared_traces / "kineto_resnet50_v100" / "num_workers_0" / "worker0.1623143089861.pt.trace.json.gz"
    ref = shared_traces / "reference" / "kineto_resnet50_v100.torch-tb-profiler-0.4.3.json"
    if not path.exists() or not ref.exists():
        missing("resnet50 trace or its reference absent")
    return path, ref


def test_resnet50_v100_operator_device_times_match_torch_tb_profiler(shared_traces):
    """Old-format real GPU trace (Operator/Runtime/Kernel/Memcpy/Memset, integer µs): per-op calls,
    host self/total and device self/total equal torch-tb-profiler 0.4.3's operator view."""
    path, ref_path = _resnet_path(shared_traces)
    with gzip.open(path, "rt") as f:
        ev = events_from_trace(json.load(f))
    ref = json.loads(ref_path.read_text())
    rows = ref["num_workers_0"]["workers"]["worker0"]["1"]["operation_table_Operation"]["data"]
    ours = {a.key: a for a in ev.key_averages() if a.device_type == DeviceType.CPU}
    assert len(rows) > 50
    for row in rows:
        a = ours[row["name"]]
        assert a.count == row["calls"], row["name"]
        assert round(a.self_device_time_total) == row["device_self_duration"], row["name"]
        assert round(a.device_time_total) == row["device_total_duration"], row["name"]
    conv = ours["aten::cudnn_convolution_backward_weight"]
    assert round(conv.self_cpu_time_total) == 22804 and round(conv.cpu_time_total) == 40246
    text = ev.key_averages().table(sort_by="self_cuda_time_total", row_limit=3)
    assert text.splitlines()[3].split()[0] == "aten::cudnn_convolution_backward_weight"
    assert "Self CUDA time total:" in text


def test_trace_from_our_cuda_converter_links_every_activity():
    """Raw CUPTI-style records -> profiler_core.cuda converter + linker -> our analysis."""
    from profiler_core.cuda import convert, link

    data = Path(__file__).resolve().parent / "data" / "cupti" / "synthetic_session.json"
    if not data.exists():
        missing("cupti fixture absent")
    s = json.loads(data.read_text())
    res = convert.convert_records(
        copy.deepcopy(s["records"]),
        device_properties=s["device_properties"],
        clock_offset_ns=s["clock_offset_ns"],
        pid=s["pid"],
    )
    base = s["host_base_ns"]
    t = {
        "schemaVersion": 1,
        "deviceProperties": s["device_properties"],
        "baseTimeNanoseconds": base,
        "traceEvents": convert_collector_events(copy.deepcopy(s["cpu_ops"]) + res.events, base),
    }
    link.link_trace(t)
    ev = events_from_trace(t)
    activities = [e for e in ev if e.activity_type in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert len(activities) >= 4
    attributed = sum(k.duration for e in ev if e.device_type == DeviceType.CPU for k in e.kernels)
    assert attributed == pytest.approx(sum(a.self_device_time_total for a in activities))
    launched = {k.name for e in ev if e.activity_type == "cpu_op" for k in e.kernels}
    assert any("matmul" in n for n in launched)
    assert all(e.name == "ProfilerStep*" for e in ev if (e.trace_name or "").startswith("ProfilerStep#"))
    text = ev.key_averages().table(sort_by="self_cuda_time_total")
    assert "Self CUDA time total:" in text and "CUDA Mem" in text
