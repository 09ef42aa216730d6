"""Overview view: priority breakdown, GPU summary, recommendations, environment (numbers worked out by hand)."""

from __future__ import annotations

import json

import pytest

from profiler_core.analysis import step_breakdown as overview

from .test_views_common_support import kernel, make_trace, op, runtime
from .trace_builder import memory_event

V100 = {
    "id": 0,
    "name": "Tesla V100-SXM2-16GB",
    "totalGlobalMem": 16 * 2**30,
    "computeMajor": 7,
    "computeMinor": 0,
    "numSms": 80,
}


def one_step_trace(**meta):
    """One step [0, 100] µs; see test_breakdown_priority_rules for the expected split."""
    ev = [
        op("ProfilerStep#1", 0, 100, ext=1, cat="user_annotation"),
        op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 8, ext=9, cat="user_annotation"),
        op("aten::mm", 10, 30, ext=2),
        op("gloo:all_reduce", 60, 15, tid=2, ext=3, cat="user_annotation"),
        runtime("cudaLaunchKernel", 12, 5, corr=1, ext=2),
        kernel("volta_h884gemm_64x64", 20, 30, corr=1, **{"blocks per SM": 0.5, "est. achieved occupancy %": 40}),
        runtime("cudaMemcpyAsync", 30, 2, corr=2, ext=2),
        kernel("Memcpy DtoD", 45, 10, corr=2, cat="gpu_memcpy"),
        runtime("cudaMemsetAsync", 35, 1, corr=3, ext=2),
        kernel("Memset", 90, 5, corr=3, cat="gpu_memset"),
        runtime("cudaLaunchKernel", 37, 1, corr=4, ext=2),
        kernel("volta_sgemm_128x64_nn", 40, 20, corr=4, **{"blocks per SM": 2.0, "est. achieved occupancy %": 60}),
    ]
    return make_trace(ev, {"deviceProperties": [V100], **meta})


def test_breakdown_priority_rules():
    ov = overview.overview(one_step_trace())
    (step,) = ov["steps"]
    # kernel [20,60]; memcpy hidden by kernels; memset [90,95]; gloo [60,75]; runtime [12,17] (the other calls
    # run under kernels); DataLoader [0,8]; aten::mm [10,40] minus runtime and kernels = [10,12]+[17,20]; rest other
    assert step == {
        "step": "1",
        "total_us": 100.0,
        "kernel_us": 40.0,
        "memcpy_us": 0.0,
        "memset_us": 5.0,
        "communication_us": 15.0,
        "runtime_us": 5.0,
        "dataloader_us": 8.0,
        "cpu_exec_us": 5.0,
        "other_us": 22.0,
    }
    assert ov["average"] == {k: v for k, v in step.items() if k != "step"}
    json.dumps(ov)  # JSON-able


def test_gpu_summary_by_hand():
    gpu = overview.overview(one_step_trace())["gpu"]
    assert gpu["utilization"] == pytest.approx(0.4)  # kernels busy [20, 60] of [0, 100]
    # blocks per SM: 0.5 on [20,40], 2.5 -> 1 on [40,50], 2 -> 1 on [50,60]: (10 + 10 + 10) / 100
    assert gpu["sm_efficiency"] == pytest.approx(0.3)
    assert gpu["achieved_occupancy"] == pytest.approx((40 * 30 + 60 * 20) / 50 / 100)
    assert gpu["tensor_core_ratio"] == pytest.approx(30 / 50)  # the h884 kernel
    (dev,) = gpu["devices"]
    assert dev["device"] == 0 and dev["name"] == V100["name"] and dev["compute_capability"] == "7.0"


def test_blocks_per_sm_estimated_from_grid_when_missing():
    t = make_trace(
        [
            op("ProfilerStep#1", 0, 100, ext=1),
            runtime("cudaLaunchKernel", 1, 1, corr=1, ext=1),
            kernel("k", 0, 50, corr=1, grid=[40, 1, 1], block=[128, 1, 1]),
        ],
        {"deviceProperties": [V100]},
    )
    assert overview.overview(t)["gpu"]["sm_efficiency"] == pytest.approx(0.5 * 50 / 100)  # 40 blocks / 80 SMs


def test_steps_average_and_parts_add_up():
    ev = []
    for i, (s, d) in enumerate([(0, 100), (110, 50), (170, 150)]):
        ev += [op(f"ProfilerStep#{i}", s, d, ext=10 + i), op("aten::add", s + 5, d // 2, ext=100 + i)]
    ov = overview.overview(make_trace(ev))
    assert [s["step"] for s in ov["steps"]] == ["0", "1", "2"]
    for s in ov["steps"]:
        parts = sum(v for k, v in s.items() if k.endswith("_us") and k != "total_us")
        assert parts == pytest.approx(s["total_us"])
    assert ov["average"]["total_us"] == pytest.approx(100.0)
    assert ov["average"]["cpu_exec_us"] == pytest.approx((50 + 25 + 75) / 3)
    assert ov["gpu"] is None and ov["environment"]["device_type"] == "CPU"
    assert ov["recommendations"] == []


def test_communication_kernels_by_name_and_by_launching_op():
    t = make_trace(
        [
            op("ProfilerStep#1", 0, 100, ext=1),
            op("nccl:all_reduce", 10, 5, ext=2),
            runtime("cudaLaunchKernel", 11, 1, corr=1, ext=2),
            kernel("some_collective_kernel", 20, 30, corr=1),
            runtime("cudaLaunchKernel", 16, 1, corr=2, ext=1),
            kernel("ncclDevKernel_AllGather_RING_LL", 60, 10, corr=2),
        ]
    )
    (step,) = overview.overview(t)["steps"]
    assert step["communication_us"] == 5 + 30 + 10 and step["kernel_us"] == 0


def test_recommendations_are_plain_text_with_the_triggers():
    recs = overview.overview(one_step_trace())["recommendations"]
    text = " ".join(recs)
    assert "8.0% of the step time is spent loading input data" in text  # DataLoader > 5%
    assert "15.0% of the step time is communication" in text  # communication > 10%
    assert "GPU 0 is busy less than half" in text  # utilization 40% < 50%
    assert "<" not in text and "href" not in text


def test_amp_and_memory_recommendations():
    memory = [
        memory_event(0, 1, 0, 1, 1, 2**30, -1, pid=0, tid=0),
        memory_event(10_000, 1, 0, 2, 1, int(15.5 * 2**30), -1, pid=0, tid=0),
    ]
    t = make_trace(
        [
            op("ProfilerStep#1", 0, 100, ext=1),
            op("aten::mm", 5, 90, ext=2),
            runtime("cudaLaunchKernel", 6, 1, corr=1, ext=2),
            kernel("volta_sgemm_128x64_nn", 7, 90, corr=1),
            *memory,
        ],
        {"deviceProperties": [V100]},
    )
    text = " ".join(overview.overview(t)["recommendations"])
    assert "Kernels with 100% of the time are launched by Tensor Core eligible operators" in text
    assert "96.9% of the 16.0 GB of GPU 0" in text


def test_environment():
    env = overview.overview(one_step_trace(distributedInfo={"backend": "nccl", "rank": 1, "world_size": 4}))[
        "environment"
    ]
    assert env["device_type"] == "GPU"
    assert env["devices"] == [
        {
            "id": 0,
            "name": V100["name"],
            "memory_bytes": V100["totalGlobalMem"],
            "compute_capability": "7.0",
            "num_sms": 80,
        }
    ]
    assert env["distributed"]["backend"] == "nccl" and env["world_size"] == 4


def test_empty_trace():
    ov = overview.overview(make_trace([]))
    assert ov["steps"] == [] and ov["gpu"] is None and ov["average"]["total_us"] == 0.0
