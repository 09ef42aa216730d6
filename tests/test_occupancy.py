"""The pure occupancy calculator reproduces Kineto's kernel args (blocks/warps per SM, est. occupancy %)."""

import gzip
import json
import math

import pytest

from profiler_core.cuda.occupancy import UnknownDevice, active_blocks_per_sm, kernel_occupancy, shortest_f32

from .conftest import DATA

KEYS = ("blocks per SM", "warps per SM", "est. achieved occupancy %")
V100 = json.loads((DATA / "cupti" / "v100_kernel_occupancy.json").read_text())

# An H800 entry as torch 2.x writes it (a real H800 trace's deviceProperties), the reference for cc 9.0.
H800 = {
    "id": 0,
    "name": "NVIDIA H800",
    "totalGlobalMem": 84943110144,
    "computeMajor": 9,
    "computeMinor": 0,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536,
    "regsPerMultiprocessor": 65536,
    "warpSize": 32,
    "sharedMemPerBlock": 49152,
    "sharedMemPerMultiprocessor": 233472,
    "numSms": 132,
    "sharedMemPerBlockOptin": 232448,
}


def _ours(props, a):
    return kernel_occupancy(props, a["grid"], a["block"], a["registers per thread"], a["shared memory"])


@pytest.mark.parametrize(
    "k", V100["kernels"], ids=lambda k: f"g{k['grid']}b{k['block']}r{k['registers per thread']}s{k['shared memory']}"
)
def test_every_v100_launch_configuration_matches_kineto(k):
    assert _ours(V100["deviceProperties"], k) == {key: k[key] for key in KEYS}


@pytest.mark.slow
def test_every_kernel_of_the_shared_resnet50_traces(shared_traces):
    n = 0
    for path in sorted((shared_traces / "kineto_resnet50_v100").glob("*/*.pt.trace.json.gz")):
        with gzip.open(path) as f:
            trace = json.load(f)
        props = {p["id"]: p for p in trace["deviceProperties"]}
        for e in trace["traceEvents"]:
            if e.get("cat") == "Kernel":
                a = e["args"]
                assert _ours(props[a["device"]], a) == {key: a[key] for key in KEYS}, e
                n += 1
    assert n > 30000


def test_limits_hand_computed_v100():
    props = V100["deviceProperties"]
    # 64 threads, 80 regs, 2304 B smem: registers allow 12 blocks (6 warps of 2560 regs per sub-partition).
    r = active_blocks_per_sm(props, 64, 80, 2304)
    assert (r.active_blocks, r.limit_registers, r.limit_warps, r.limit_blocks) == (12, 12, 32, 32)
    assert r.limit_shared_memory == 98304 // 2304
    assert r.limiting_factors == ["registers"]
    # Block bigger than the device allows: no block fits.
    assert active_blocks_per_sm(props, 2048, 16, 0).active_blocks == 0
    # More than 48 KiB per block without opt-in: Kineto's calculator says 0 (its known quirk).
    assert active_blocks_per_sm(props, 128, 16, 49152 + 256).limit_shared_memory == 0
    # Too many registers per thread.
    assert active_blocks_per_sm(props, 32, 257, 0).limit_registers == 0


def test_hopper_uses_its_own_tables():
    # 256 threads, 32 regs, no smem: 8 blocks by warps (64 warps/SM), register limit 8, block limit 32.
    r = active_blocks_per_sm(H800, 256, 32, 0)
    assert r.active_blocks == 8
    # cc >= 8 reserves 1 KiB per block: 200 B of static smem still takes 1280 B (granularity 128).
    r = active_blocks_per_sm(H800, 32, 16, 200)
    assert r.limit_shared_memory == (228 * 1024) // 1280
    occ = kernel_occupancy(H800, (264, 1, 1), (256, 1, 1), 32, 0)
    assert occ == {"blocks per SM": 2.0, "warps per SM": 16.0, "est. achieved occupancy %": 25}


def test_unknown_device_or_missing_properties():
    occ = kernel_occupancy(None, (4, 1, 1), (128, 1, 1), 32, 0)
    assert occ["blocks per SM"] == math.inf and "est. achieved occupancy %" not in occ
    future = dict(H800, computeMajor=42)
    assert "est. achieved occupancy %" not in kernel_occupancy(future, (4, 1, 1), (128, 1, 1), 32, 0)
    with pytest.raises(UnknownDevice):
        active_blocks_per_sm(future, 128, 32, 0)
    with pytest.raises(ValueError, match="block size"):
        active_blocks_per_sm(H800, 0, 32, 0)


def test_float32_printing_matches_kineto_style():
    assert shortest_f32(4096 / 132) == 31.030304  # the value in the real trace example
    assert shortest_f32(0.4625) == 0.4625


# Blackwell, as NVIDIA's cuda_occupancy.h (CUDA 12.9) has it: 10.0 (B200) 32 blocks per SM and carveouts up to
# 228 KiB; 12.0 (RTX 50xx) 24 blocks and carveouts up to 100 KiB. Properties are the devices' published ones.
B200 = dict(H800, name="NVIDIA B200", computeMajor=10, computeMinor=0, numSms=148)
RTX5090 = dict(
    H800,
    name="NVIDIA GeForce RTX 5090",
    computeMajor=12,
    computeMinor=0,
    numSms=170,
    maxThreadsPerMultiprocessor=1536,
    sharedMemPerMultiprocessor=102400,
    sharedMemPerBlockOptin=101376,
)


def test_blackwell_capabilities_are_computed():
    r = active_blocks_per_sm(B200, 32, 16, 0)  # tiny blocks: the block limit decides
    assert (r.active_blocks, r.limit_blocks) == (32, 32)
    r = active_blocks_per_sm(B200, 64, 16, 40 * 1024)  # 41 KiB per block in a 228 KiB carveout
    assert r.limit_shared_memory == (228 * 1024) // (41 * 1024)
    r = active_blocks_per_sm(RTX5090, 32, 16, 0)
    assert (r.active_blocks, r.limit_blocks) == (24, 24)
    assert active_blocks_per_sm(RTX5090, 64, 16, 40 * 1024).limit_shared_memory == (100 * 1024) // (41 * 1024)
    assert kernel_occupancy(B200, (296, 1, 1), (256, 1, 1), 32, 0) == {
        "blocks per SM": 2.0,
        "warps per SM": 16.0,
        "est. achieved occupancy %": 25,
    }
    with pytest.raises(UnknownDevice):  # 10.2 has no carveout table in NVIDIA's header
        active_blocks_per_sm(dict(B200, computeMinor=2), 128, 32, 0)
