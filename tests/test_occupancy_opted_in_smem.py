"""Issue 23, item 1: the theoretical occupancy of kernels using more than 48 KiB of shared memory (opted in)
on the real Hopper/Blackwell traces. Every kernel in a trace ran, so at least one of its blocks fits on an SM:
its theoretical occupancy is at least one block's warps over the SM's warp slots (never 0 %)."""

from __future__ import annotations

import gzip
import json

import pytest

from profiler_core.analysis.tables import kernels
from profiler_core.cuda.occupancy import OPTIN_SHARED_MEMORY_PER_BLOCK, optin_shared_memory_per_block
from profiler_core.trace.read.reader import read_trace

from .conftest import SHARED, missing

PUBLIC = SHARED / "traces" / "public"
RUNS = {"ds_train_h800": "train.json", "tl_b200_eager": "eager_trace.json.gz"}


def _path(run: str):
    p = PUBLIC / run / RUNS[run]
    if not p.is_file():
        missing(f"../shared/traces/public/{run} is absent")
    return p


def _raw(path) -> dict:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


@pytest.mark.parametrize("run", sorted(RUNS))
def test_every_kernel_that_ran_has_a_positive_theoretical_occupancy(run):
    path = _path(run)
    raw = _raw(path)
    props = raw["deviceProperties"][0]
    big = {}  # name -> (threads per block, shared memory) of the raw kernels above the 48 KiB default
    for e in raw["traceEvents"]:
        a = e.get("args") or {}
        if e.get("cat") == "kernel" and a.get("shared memory", 0) > props["sharedMemPerBlock"]:
            b = a["block"]
            big[e["name"]] = (b[0] * b[1] * b[2], a["shared memory"])
    assert big, f"{run} has kernels above 48 KiB of shared memory"
    rows = kernels.kernels(read_trace(path, processes=0), group_by="name_op_config")["rows"]
    checked = 0
    for r in rows:
        if r["name"] in big:
            threads, _ = big[r["name"]]
            one_block = -(-threads // 32) * 32 / props["maxThreadsPerMultiprocessor"]
            assert r["theoretical_occupancy"] is not None and r["theoretical_occupancy"] >= one_block - 1e-9, r
            checked += 1
    assert checked >= len(big)


def test_h800_384_thread_168_register_gemms_are_one_block_per_sm():
    """block 384 (12 warps), 168 registers (168 x 32 = 5,376 per warp: 16,384 / 5,376 = 3 warps per
    sub-partition, 12 per SM = 1 block), ~200-218 KiB shared memory (1 block of 227 KiB): 12 / 64 warps."""
    path = _path("ds_train_h800")
    raw = _raw(path)
    configs = {
        (e["name"], e["args"]["shared memory"])
        for e in raw["traceEvents"]
        if e.get("cat") == "kernel"
        and e["args"].get("registers per thread") == 168
        and e["args"]["block"] == [384, 1, 1]
        and e["args"]["shared memory"] > 48 * 1024
    }
    assert len(configs) >= 5
    rows = kernels.kernels(read_trace(path, processes=0), group_by="name_op_config")["rows"]
    hits = [r for r in rows if (r["name"], r.get("shared_memory")) in configs]
    assert hits and all(r["theoretical_occupancy"] == pytest.approx(12 / 64) for r in hits)


def test_optin_limit_from_properties_else_the_capability_table():
    h100 = {"computeMajor": 9, "computeMinor": 0, "sharedMemPerBlock": 49152}
    assert optin_shared_memory_per_block(h100) == 227 * 1024
    assert optin_shared_memory_per_block({**h100, "sharedMemPerBlockOptin": 232448}) == 232448
    assert optin_shared_memory_per_block({"computeMajor": 8, "computeMinor": 6}) == 99 * 1024
    assert optin_shared_memory_per_block({"computeMajor": 7, "computeMinor": 5}) == 64 * 1024
    assert optin_shared_memory_per_block({"computeMajor": 42, "computeMinor": 0}) is None
    # the table agrees with the values Kineto recorded on the real traces (V100, A100, H800, B200)
    recorded = {}
    for run in (
        "ds_train_h800/train.json",
        "tl_b200_eager/eager_trace.json.gz",
        "hta_neg_queue/rank0.json.gz",
        "hta_diff_test/test.json.gz",
    ):
        if not (PUBLIC / run).is_file():
            continue
        d = _raw(PUBLIC / run)
        for dev in (d.get("deviceProperties") or []) if isinstance(d, dict) else []:
            if dev.get("sharedMemPerBlockOptin") and dev.get("warpSize") == 32:
                recorded[(dev["computeMajor"], dev["computeMinor"])] = dev["sharedMemPerBlockOptin"]
    if not recorded:
        missing("no shared trace records sharedMemPerBlockOptin")
    for cc, value in recorded.items():
        assert OPTIN_SHARED_MEMORY_PER_BLOCK[cc] == value, cc


def test_h800_opted_in_gemms_achieved_occupancy_is_not_kinetos_zero():
    """Kineto writes `est. achieved occupancy %` 0 for these kernels (it leaves the opt-in out). Grid 112 on
    132 SMs = 0.848 blocks per SM (Kineto's own `blocks per SM`), 1 block fits: min(1, 0.848) x 384 / 2048
    threads = 15.9 % -> 16 % (Kineto rounds to a whole percent)."""
    path = _path("ds_train_h800")
    raw = _raw(path)
    sel = [
        e
        for e in raw["traceEvents"]
        if e.get("cat") == "kernel"
        and e["args"].get("grid") == [112, 1, 1]
        and e["args"]["block"] == [384, 1, 1]
        and e["args"].get("registers per thread") == 168
    ]
    assert sel and all(e["args"]["est. achieved occupancy %"] == 0 for e in sel)
    assert {round(e["args"]["blocks per SM"], 4) for e in sel} == {round(112 / 132, 4)}
    names = {e["name"] for e in sel}
    rows = kernels.kernels(read_trace(path, processes=0), group_by="name_op_config")["rows"]
    hits = [r for r in rows if r["name"] in names and r.get("grid") == "[112, 1, 1]"]
    assert hits and all(r["achieved_occupancy"] == pytest.approx(0.16) for r in hits)
