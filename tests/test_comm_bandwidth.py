"""Bandwidth of collectives (profiler_core/analysis/comm/bandwidth.py): NCCL-tests' bus factors, algorithm and bus
bandwidth, and the rule naming exchanges far slower than their bytes need, on cases derived by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from profiler_core.analysis.comm import bandwidth as B
from tests.conftest import TRACES, missing
from tests.oracles.collectives import collectives, load_ranks


@pytest.mark.parametrize(
    "name,kind",
    [
        ("nccl:all_reduce", "all_reduce"),
        ("allreduce_coalesced", "all_reduce"),
        ("_allgather_base", "all_gather"),
        ("allgather_into_tensor_coalesced", "all_gather"),
        ("_reduce_scatter_base", "reduce_scatter"),
        ("reduce_scatter_tensor_coalesced", "reduce_scatter"),
        ("nccl:all_to_all", "all_to_all"),
        ("alltoall_base", "all_to_all"),
        ("mpi:alltoallv", "all_to_all"),
        ("gloo:broadcast", "broadcast"),
        ("mpi:ibcast", "broadcast"),
        ("nccl:reduce", "reduce"),
        ("nccl:send", "send"),
        ("mpi:irecv", "recv"),
        ("gather", "gather"),
        ("scatter", "scatter"),
        ("barrier", None),
        ("wait", None),
        ("", None),
    ],
)
def test_kind_of_each_spelling(name, kind):
    assert B.collective_kind(name) == kind


def test_bus_factors_by_hand():
    # n = 8: all_reduce 2 x 7/8 = 1.75; all_gather, reduce_scatter, all_to_all 7/8; broadcast, reduce, send, recv 1
    kinds = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "send", "recv"]
    assert B.bus_factor(kinds, 8).tolist() == [1.75, 0.875, 0.875, 0.875, 1.0, 1.0, 1.0, 1.0]
    # n = 2: all_reduce 2 x 1/2 = 1, all_gather 1/2; one rank moves nothing over a bus: 0
    assert B.bus_factor("all_reduce", [1, 2, 4]).tolist() == [0.0, 1.0, 1.5]
    assert B.bus_factor(["all_gather", "all_gather"], [2, 4]).tolist() == [0.5, 0.75]
    # unknown kind or group size: NaN, never a guessed factor
    assert np.isnan(B.bus_factor(["barrier", "all_reduce", "all_reduce"], [8, -1, 0])).all()


def test_bandwidth_by_hand():
    # 256 MiB all-reduce in 10 ms over 8 ranks: algbw 26.8435456 GB/s, busbw x 1.75 = 46.9762048 GB/s
    alg, bus = B.bandwidth(256 * 2**20, 0.010, "nccl:all_reduce", 8)
    assert float(alg) == pytest.approx(26.8435456e9) and float(bus) == pytest.approx(46.9762048e9)
    # arrays: a 1 MB all_gather of 4 ranks in 100 us (algbw 10 GB/s, busbw 7.5 GB/s), a send (busbw = algbw),
    # unknown bytes and a zero time (NaN)
    alg, bus = B.bandwidth([1e6, 1e6, -1, 1e6], [1e-4, 1e-4, 1e-4, 0.0], ["all_gather", "send", "send", "send"], 4)
    assert alg[:2].tolist() == [1e10, 1e10] and bus[:2].tolist() == [7.5e9, 1e10]
    assert math.isnan(alg[2]) and math.isnan(alg[3]) and math.isnan(bus[2]) and math.isnan(bus[3])
    # a kind with no factor has an algorithm bandwidth and no bus bandwidth
    alg, bus = B.bandwidth(1e6, 1e-3, "barrier", 8)
    assert float(alg) == 1e9 and math.isnan(float(bus))


def test_latency_bound_rule_by_hand():
    """Rule 1: at most 64 KiB taking 100 us or more. The MoE job's 8 KB all_to_all of 2-4.5 ms is named; the
    same bytes in 20 us, or 64 KiB + 1 in 2 ms, or unknown bytes, are not."""
    got = B.latency_bound([8192, 8192, 64 * 1024, 64 * 1024 + 1, -1], [2e-3, 20e-6, 100e-6, 2e-3, 1.0])
    assert got.tolist() == [True, False, True, False, False]


def test_bandwidth_below_a_tenth_of_the_link_peak():
    """Rule 2, with the link's peak known (100 GB/s): 1 GB all-reduce over 8 ranks in 0.5 s has busbw 3.5 GB/s
    (< 10 GB/s: named); in 50 ms, 35 GB/s (not named); a 1 MB one in 50 us is too short to name (< 100 us)."""
    got = B.latency_bound([1e9, 1e9, 1e6], [0.5, 0.05, 50e-6], "all_reduce", 8, peak_gbps=100.0)
    assert got.tolist() == [True, False, False]
    # without the peak only rule 1 holds: none of them is small
    assert not B.latency_bound([1e9, 1e9, 1e6], [0.5, 0.05, 50e-6], "all_reduce", 8).any()


def _job(name: str) -> list:
    path = TRACES / "public" / name
    if not path.is_dir():
        missing(f"the shared real job {name} is not at {path}")
    return load_ranks(path)


def test_rule_on_the_exchanges_of_real_jobs():
    """On the oracle's exchange times (last member's end minus last arrival): the MoE job's 8 KB all_to_allv that
    took a millisecond or more are named, its exchanges of tens of us are not; no exchange of the MI300X DDP job
    (all-reduces of 5-27 MB at 15-80 GB/s, broadcasts of 424 B-212 KB in under 45 us) is."""
    moe = [c for c in collectives(_job("moe_a100_2rank_alltoall")) if c.bytes is not None]
    assert moe and all(0 <= (c.bytes or 0) <= B.SMALL_BYTES for c in moe)
    named = B.latency_bound([c.bytes for c in moe], [c.exchange / 1e6 for c in moe])
    assert named.tolist() == [c.exchange >= B.SLOW_US for c in moe]
    assert all(n for n, c in zip(named, moe) if c.exchange >= 1000) and not all(named)
    mi300 = [c for c in collectives(_job("amd_mi300x_merged_4rank")) if c.bytes is not None]
    assert mi300 and not B.latency_bound([c.bytes for c in mi300], [c.exchange / 1e6 for c in mi300]).any()
