"""What is communication (profiler_core/analysis/stages/classify.py): communication kernels by name family, with a
real kernel name per family; kernels a communication op launched; CPU collective calls whose time is host time
(NCCL: the kernels are the exchange) or the exchange itself (gloo, MPI); and on the shared real jobs, gpuscope's
classification against the independent oracle (tests/oracles/collectives.py), down to `gpuscope diagnose`."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from profiler_core.analysis import intervals
from profiler_core.analysis.stages import classify as C
from profiler_core.analysis.worker import ledger as L
from profiler_core.analysis.worker.distributed import worker_summary
from profiler_core.trace.read.reader import read_trace
from tb_plugin.summaries import cli
from tests.conftest import TRACES, missing
from tests.oracles import collectives as oracle

from .test_views_common_support import kernel, make_trace, op, runtime

US = 1000
PUBLIC = TRACES / "public"

#: a real kernel name of each family (from traces and the libraries' sources), and the family it must get
REAL_NAMES = [
    ("nccl", "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"),
    ("nccl", "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"),
    # RCCL (AMD) keeps NCCL's names: amd_mi300x_merged_4rank's only communication kernel
    ("nccl", "ncclDevKernel_Generic(ncclDevComm*, channelMasks, ncclWork*)"),
    ("rccl", "RcclKernelScalarBroadcast"),
    ("msccl", "mscclKernel_Sum_half_Simple_false(ncclDevComm*, mscclAlgo*, mscclWork*)"),
    ("msccl", "mscclKernel_Sum_hip_bfloat16_Simple"),
    ("nvshmem", "barrier_on_stream_kernel_threadgroup"),
    ("nvshmem", "void nvshmemi_init_array_kernel<int>(int*, int, int)"),
    (
        "deepep",
        "void dpsk::ep::internode::dispatch<false, 8, true, 8>(int4*, float*, long*, float*, "
        "dpsk::ep::internode::SourceMeta*, int4 const*, float const*, long const*, float const*, int*, int*)",
    ),
    ("deepep", "void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*, float*, bool const*)"),
    ("deepep", "void deep_ep::intranode::dispatch<8, 768, 6144>(int4*, float*, int*, long*)"),
    ("deepep_aux", "void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, bool*, int)"),
    ("deepep_aux", "void dpsk::ep::internode::cached_notify<false>(int, int, int, int, int*, int, int)"),
    ("deepep_aux", "void dpsk::ep::internode::notify_dispatch<false, 8>(int const*, long*, int, int const*)"),
    (
        "custom_all_reduce",
        "void vllm::cross_device_reduce_1stage<c10::BFloat16, 8>(vllm::RankData*, vllm::RankSignals)",
    ),
    ("custom_all_reduce", "aiter::cross_device_reduce_2stage<bf16,8,false>"),
    ("all_to_all", "void tutel::all_to_all_kernel<float>(float*, float const*, int, int)"),
]
#: compute kernels whose names come near a family's words: none is communication
NOT_COMM = [
    "void cub::DeviceReduceByKeyKernel<cub::DispatchReduceByKey<int*, int*>::Policy>(int*)",
    "void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_ptp128c::GemmKernel>(Params)",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float> > >()",
    "void at::native::(anonymous namespace)::max_pool_forward_nchw<c10::BFloat16, int>(int, c10::BFloat16 const*)",
    "Lattice_collision_stream_kernel",
    "batched_transpose_16x32_half",
]


@pytest.mark.parametrize("family,name", REAL_NAMES)
def test_each_family_by_a_real_kernel_name(family, name):
    assert C.comm_kernel_family(name) == family
    assert C.is_communication(name, "kernel")
    # a CPU op of that name is not a kernel: only the op names (c10d::, nccl:, ...) make a CPU op communication
    assert not C.is_communication(name, "cpu_op")


@pytest.mark.parametrize("name", NOT_COMM)
def test_compute_kernels_are_not_communication(name):
    assert C.comm_kernel_family(name) is None and not C.is_communication(name, "kernel")


def test_the_mask_follows_the_table():
    """`communication_mask` (vectorised) says what `is_communication` says of each event."""
    events = [op("ProfilerStep#1", 0, 100, cat="user_annotation"), op("deep_ep::dispatch", 1, 2)]
    events += [kernel(n, 10 + i, 1, corr=-1) for i, (_, n) in enumerate(REAL_NAMES)]
    events += [kernel(n, 50 + i, 1, corr=-1) for i, n in enumerate(NOT_COMM)]
    t = make_trace(events)
    got = C.communication_mask(t.events).to_numpy()
    want = [C.is_communication(n, c) for n, c in zip(t.events["name"].astype(str), t.events["cat"].astype(str))]
    assert got.tolist() == want
    assert int(got.sum()) == len(REAL_NAMES) + 1  # every family's kernel, and the deep_ep:: op


def test_kernel_launched_by_a_communication_op():
    """A kernel of any name launched inside a communication op (here deep_ep::combine) is communication; the same
    kernel launched by aten::mm is compute."""
    t = make_trace(
        [
            op("ProfilerStep#1", 0, 100, cat="user_annotation"),
            op("deep_ep::combine", 5, 10),
            runtime("cudaLaunchKernel", 6, 1, corr=1),
            op("aten::mm", 20, 10),
            runtime("cudaLaunchKernel", 21, 1, corr=2),
            kernel("my_moe_exchange_kernel", 30, 10, corr=1),
            kernel("my_moe_exchange_kernel", 50, 10, corr=2),
        ]
    )
    rows = {
        int(ts): bool(c)
        for ts, c, cat in zip(t.events["ts"], C.communication_events(t), t.events["cat"])
        if str(cat) == "kernel"
    }
    assert sorted(rows.values()) == [False, True]
    led = L.worker_ledger(t)
    assert _ns(led, L.EXPOSED_COMM) == [10 * US] and _ns(led, L.COMPUTE) == [10 * US]


def _ns(led: dict, bucket: str) -> list[int] | None:
    return led["buckets"][bucket]["ns"]


def nccl_call_trace(backend_kernel: bool):
    """Step [0, 100): c10d::allreduce_ [10, 40) enclosing record_param_comms [12, 38) whose launch [14, 15) starts
    an all-reduce kernel [40, 60) (NCCL: `backend_kernel`) or launches nothing (gloo: no kernel); aten::mm's
    kernel K [70, 80) launched at [62, 63)."""
    events = [
        op("ProfilerStep#1", 0, 100, cat="user_annotation"),
        op("c10d::allreduce_", 10, 30),
        op("record_param_comms", 12, 26, **{"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 1024}),
        op("aten::mm", 61, 3),
        runtime("cudaLaunchKernel", 62, 1, corr=2),
        kernel("K", 70, 10, corr=2),
    ]
    if backend_kernel:
        events += [
            runtime("cudaLaunchKernel", 14, 1, corr=1),
            kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)", 40, 20, corr=1),
        ]
    return make_trace(events)


def test_nccl_cpu_call_is_host_time():
    """With NCCL the kernel [40, 60) is the exchange (20); the CPU call [10, 40) only enqueues it: host time
    (host compute 29, its launch 1), not communication."""
    led = L.worker_ledger(nccl_call_trace(backend_kernel=True))
    assert _ns(led, L.EXPOSED_COMM) == [20 * US]
    assert _ns(led, L.HOST_COMPUTE) == [(29 + 2) * US]  # c10d's 29 outside its launch, aten::mm's 2
    assert _ns(led, L.LAUNCH_OVERHEAD) == [(1 + 1) * US]
    assert sum(v[0] for v in (e["ns"] for e in led["buckets"].values()) if v is not None) == led["wall_ns"][0]


def test_cpu_backend_call_stays_communication():
    """Without communication kernels (gloo, MPI) the CPU collective's range [10, 40) is the exchange: 30."""
    led = L.worker_ledger(nccl_call_trace(backend_kernel=False))
    assert _ns(led, L.EXPOSED_COMM) == [30 * US]
    assert _ns(led, L.HOST_COMPUTE) == [2 * US]


def test_gloo_op_beside_nccl_kernels_stays_communication():
    """gloo:* and mpi::* ops move their data on the host whatever else the worker runs."""
    t = make_trace(
        [
            op("ProfilerStep#1", 0, 100, cat="user_annotation"),
            op("gloo:all_reduce", 10, 20),
            op("c10d::broadcast_", 40, 10),
            runtime("cudaLaunchKernel", 41, 1, corr=1),
            kernel("ncclDevKernel_Broadcast_RING_LL(ncclDevComm*)", 60, 10, corr=1),
        ]
    )
    host = C.host_communication(t)
    names = t.events["name"].astype(str).to_numpy()
    assert sorted(names[host].tolist()) == ["gloo:all_reduce"]
    led = L.worker_ledger(t)
    assert _ns(led, L.EXPOSED_COMM) == [(20 + 10) * US]


# ---- shared real jobs, against the oracle ---------------------------------------------------------------------


def _job(name: str) -> Path:
    path = PUBLIC / name
    if not path.is_dir():
        missing(f"the shared real job {name} is not at {path}")
    return path


def _ours_as_oracle(family: str | None) -> str | None:
    """Our families in the oracle's words: its `nccl` holds NCCL, RCCL and MSCCL names."""
    return "nccl" if family in ("nccl", "rccl", "msccl") else family


@pytest.mark.parametrize(
    "job", ["ds_train_h800", "moe_a100_2rank_alltoall", "amd_mi300x_merged_4rank", "tl_mi300_ddp_resnet18"]
)
def test_families_agree_with_the_oracle_on_real_kernels(job):
    """Every kernel name of the job: gpuscope's family is the oracle's `comm_kind`."""
    names: Counter = Counter()
    for r in oracle.load_ranks(_job(job)):
        names.update(k.name for k in r.kernels())
    assert names
    differ = {n: (oracle.comm_kind(n), C.comm_kernel_family(n)) for n in names}
    differ = {n: v for n, v in differ.items() if v[0] != _ours_as_oracle(v[1])}
    assert not differ


@pytest.fixture(scope="module")
def deepep_rank() -> oracle.Rank:
    [rank] = oracle.load_ranks(_job("ds_train_h800"))
    return rank


@pytest.fixture(scope="module")
def deepep_trace():
    return read_trace(str(_job("ds_train_h800") / "train.json"))


def test_deepep_time_in_the_step_is_the_oracles(deepep_rank, deepep_trace):
    """The DeepEP kernels (dispatch, combine and their notify/layout kernels) in the ProfilerStep's host range:
    the oracle's busy time and gpuscope's communication kernels give one answer (the issue's 98.6 ms)."""
    [step] = deepep_rank.steps()
    want_ms = (
        oracle.busy_time(
            [(k.start, k.end) for k in deepep_rank.comm_kernels(("deepep", "deepep_aux"))], step.start, step.end
        )
        / 1e3
    )
    t = deepep_trace
    ev = t.events
    comm = C.communication_events(t) & (ev["cat"].astype(str).to_numpy() == "kernel")
    ts, dur = ev["ts"].to_numpy(np.int64), ev["dur"].to_numpy(np.int64)
    [s] = np.flatnonzero(ev["name"].astype(str).to_numpy() == step.name)
    lo, hi = int(ts[s]), int(ts[s] + dur[s])
    got = intervals.total_length(intervals.clip_ranges(intervals.merge_ranges(ts[comm], ts[comm] + dur[comm]), lo, hi))
    assert got / 1e6 == pytest.approx(want_ms, abs=0.002)
    # and the kernels are the same ones: the oracle's count of DeepEP kernels
    kinds = Counter(oracle.comm_kind(k.name) for k in deepep_rank.kernels())
    assert int(comm.sum()) == kinds["deepep"] + kinds["deepep_aux"]
    # the Distributed view's part: those kernels are its collectives, named by the annotations that launched them
    part = worker_summary(t)
    assert len(part["collectives"]["name"]) == int(comm.sum())


def _diagnose(logdir: Path, run: str) -> dict:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(["diagnose", str(logdir), run, "--json"])
    assert rc in (0, None), err.getvalue()
    return json.loads(out.getvalue())


def _logdir(tmp_path: Path, job: str, name: str) -> Path:
    """A logdir of one run holding the shared trace as a worker's file (a link: nothing copied)."""
    src = next(p for p in sorted(_job(job).iterdir()) if p.is_file())
    run = tmp_path / "logs" / job
    run.mkdir(parents=True)
    (run / name).symlink_to(src)
    return run.parent


def _exposed(rep: dict) -> dict:
    [bucket] = [b for b in rep["ledger"]["critical"]["buckets"] if b["key"] == L.EXPOSED_COMM]
    return bucket


def _summary(logdir: Path) -> dict:
    [path] = list((logdir / ".gpuscope").rglob("*.summary.json.gz"))
    return json.loads(gzip.decompress(path.read_bytes()))


def test_diagnose_counts_deepep_as_communication(tmp_path, deepep_rank):
    logdir = _logdir(tmp_path, "ds_train_h800", "rank0.pt.trace.json")
    rep = _diagnose(logdir, "ds_train_h800")
    text = json.dumps(rep)
    assert L.NO_COMM not in text and "no collectives" not in text
    exposed = _exposed(rep)
    assert exposed["reason"] is None and exposed["ms"] > 0
    s = _summary(logdir)
    kinds = Counter(oracle.comm_kind(k.name) for k in deepep_rank.kernels())
    # every DeepEP kernel is a communication instance of the worker, and its step holds at least their busy time
    assert len(s["distributed"]["collectives"]["name"]) == kinds["deepep"] + kinds["deepep_aux"]
    [step] = deepep_rank.steps()
    in_step = oracle.busy_time(
        [(k.start, k.end) for k in deepep_rank.comm_kernels(("deepep", "deepep_aux"))], step.start, step.end
    )
    assert s["distributed"]["steps"]["comm"][0] / 1e3 >= in_step - 1
    assert s["phases"]["comm"][0] == s["distributed"]["steps"]["comm"][0]


def test_diagnose_compute_only_trace_has_no_communication(tmp_path):
    """The twin: a trace with no communication kernel nor collective op (the oracle finds none) gets none."""
    job = "tl_mi300_ddp_resnet18"
    ranks = oracle.load_ranks(_job(job))
    assert not any(oracle.comm_kind(k.name) for r in ranks for k in r.kernels())
    logdir = _logdir(tmp_path, job, "rank0.pt.trace.json.gz")
    rep = _diagnose(logdir, job)
    exposed = _exposed(rep)
    assert exposed["ms"] is None and exposed["reason"] == L.NO_COMM
    s = _summary(logdir)
    assert s["distributed"]["collectives"]["name"] == [] and not any(s["distributed"]["steps"]["comm"])


def test_nccl_host_calls_are_not_exposed_communication_on_a_real_job():
    """moe_a100_2rank_alltoall (NCCL all_to_allv, no ProfilerStep: the window is the step): each rank's exposed
    communication is exactly its communication kernels' time that no other GPU work covers, as the oracle reads
    the raw events; the CPU time of its c10d::/record_param_comms calls is not in it."""
    for r in oracle.load_ranks(_job("moe_a100_2rank_alltoall")):
        comm = [(k.start, k.end) for k in r.kernels() if oracle.comm_kind(k.name)]
        other = [(k.start, k.end) for k in r.kernels() if not oracle.comm_kind(k.name)]
        other += [
            (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
            for e in r.events
            if e.get("ph") == "X" and e.get("cat") in ("gpu_memcpy", "gpu_memset")
        ]
        lo, hi = float("-inf"), float("inf")
        want_us = oracle.busy_time(comm + other, lo, hi) - oracle.busy_time(other, lo, hi)
        led = L.worker_ledger(read_trace(r.source))
        exposed = _ns(led, L.EXPOSED_COMM)
        assert len(led["steps"]) == 1 and exposed is not None
        assert exposed[0] / 1e3 == pytest.approx(want_us, abs=0.002)
