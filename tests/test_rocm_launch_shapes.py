"""Issue 11, item 3: ROCm launch shapes and AMD occupancy.

Fixture: tests/data/issue11/rocm_launches.pt.trace.json.gz (hand-made after roctracer Kineto traces on an
MI300X, see PROVENANCE.md). hipExtModuleLaunchKernel / hipHccModuleLaunchKernel write the global work size
in work-items as `grid`; hipLaunchKernel / hipModuleLaunchKernel write blocks, as CUDA does.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from profiler_core.analysis import step_breakdown as overview
from profiler_core.analysis.stages.launch_stats import is_amd_device
from profiler_core.analysis.tables import kernels
from profiler_core.trace.read.reader import read_trace

from .test_views_common_support import kernel, make_trace, op, runtime

DATA = Path(__file__).parent / "data" / "issue11"
MI300X_CUS = 304


def load():
    return read_trace(DATA / "rocm_launches.pt.trace.json.gz", processes=0)


def by_name(rows):
    return {r["name"].split("<")[0].split(" ")[-1]: r for r in rows}


def test_work_item_grids_are_divided_by_the_block_size():
    t = load()
    rows = by_name(kernels.kernels(t)["rows"])
    ext = rows["Cijk_Ailk_Bljk_BBS_BH_MT256x256x64"]
    # 494.4, not 126,572
    assert ext["blocks_per_sm"] == pytest.approx(math.ceil(38_477_888 / 256) / MI300X_CUS, abs=1e-3)
    hcc = rows["triton_poi_fused_add_0"]
    assert hcc["blocks_per_sm"] == pytest.approx((4096 / 64) * (64 / 4) / MI300X_CUS, abs=1e-3)
    # hipLaunchKernel and hipModuleLaunchKernel grids are already in blocks
    assert rows["at::native::vectorized_elementwise_kernel"]["blocks_per_sm"] == pytest.approx(1216 / MI300X_CUS)
    assert rows["rocprim_reduce_kernel"]["blocks_per_sm"] == pytest.approx(152 / MI300X_CUS)


def test_amd_kernels_get_a_cdna_occupancy_estimate():
    t = load()
    rows = by_name(kernels.kernels(t)["rows"])
    # 32 wave slots per CU (2048 threads / 64); LDS 64 KiB per CU
    assert rows["Cijk_Ailk_Bljk_BBS_BH_MT256x256x64"]["achieved_occupancy"] == pytest.approx(4 * 4 / 32)  # LDS: 4 WGs
    assert rows["triton_poi_fused_add_0"]["achieved_occupancy"] == pytest.approx(1024 / MI300X_CUS * 4 / 32, abs=1e-6)
    assert rows["at::native::vectorized_elementwise_kernel"]["achieved_occupancy"] == pytest.approx(4 * 4 / 32)
    assert rows["rocprim_reduce_kernel"]["achieved_occupancy"] == pytest.approx(0.5 * 16 / 32)
    gpu = overview.overview(t)["gpu"]
    (dev,) = gpu["devices"]
    assert dev["name"] == "AMD Instinct MI300X"
    w = np.array([900, 100, 200, 300], float)
    occ = np.array([0.5, 1024 / MI300X_CUS * 4 / 32, 0.5, 0.25])
    assert gpu["achieved_occupancy"] == pytest.approx(float((occ * w).sum() / w.sum()), abs=1e-6)
    assert 0 < gpu["sm_efficiency"] <= 1


def test_amd_never_gets_an_occupancy_from_nvidia_tables():
    mi250 = {"id": 0, "name": "AMD Instinct MI250X", "warpSize": 64, "numSms": 110}
    # a kernel carrying NVIDIA-style occupancy args on an AMD device (e.g. a converted trace); the device has
    # no maxThreadsPerMultiprocessor, so no CDNA estimate either: "–"
    t = make_trace(
        [
            op("ProfilerStep#1", 0, 100, ext=1),
            runtime("hipLaunchKernel", 1, 1, corr=1, ext=1),
            kernel(
                "k",
                5,
                50,
                corr=1,
                grid=[220, 1, 1],
                block=[256, 1, 1],
                **{"blocks per SM": 9.0, "est. achieved occupancy %": 75},
            ),
        ],
        {"deviceProperties": [mi250]},
    )
    (row,) = kernels.kernels(t)["rows"]
    assert row["achieved_occupancy"] is None
    assert row["blocks_per_sm"] == pytest.approx(2.0)
    assert overview.overview(t)["gpu"]["achieved_occupancy"] is None


def test_is_amd_device():
    assert is_amd_device({"name": "AMD Instinct MI300X"})
    assert is_amd_device({"name": "gfx90a", "warpSize": 64})
    assert is_amd_device({"name": "", "warpSize": 64})
    assert not is_amd_device({"name": "NVIDIA H100 80GB HBM3", "warpSize": 32})
    assert not is_amd_device(None)
