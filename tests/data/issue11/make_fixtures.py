"""Regenerate the small hand-made traces PROVENANCE.md lists, with their tests (plain Python, no torch):

    python3 tests/data/issue11/make_fixtures.py

Each fixture has the *shape* of a real trace that gpuscope got wrong (see PROVENANCE.md next to this file):
the same categories, names and args keys as Kineto writes them, with made-up, round numbers. Files are
gzip with mtime 0, so regenerating them gives the same bytes.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE  # where `write` puts the files (tests point it elsewhere to compare)
BASE_US = 1_700_000_000_000_000  # an absolute epoch in µs, as Kineto writes ts
CPU_PID = 4242
H100 = {
    "id": 0,
    "name": "NVIDIA H100 80GB HBM3",
    "totalGlobalMem": 85031714816,
    "computeMajor": 9,
    "computeMinor": 0,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536,
    "warpSize": 32,
    "sharedMemPerBlock": 49152,
    "numSms": 132,
    "regsPerMultiprocessor": 65536,
    "sharedMemPerBlockOptin": 232448,
    "sharedMemPerMultiprocessor": 233472,
}


def X(cat, name, ts, dur, pid=CPU_PID, tid=CPU_PID, **args):
    """One complete event; ts and dur in µs relative to BASE_US."""
    e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": BASE_US + ts, "dur": dur}
    if args:
        e["args"] = args
    return e


def launch(ts, corr, ext, name="cudaLaunchKernel", dur=4, cat="cuda_runtime", **extra):
    return X(cat, name, ts, dur, correlation=corr, **{"External id": ext}, **extra)


def kern(name, ts, dur, corr, ext=None, device=0, stream=7, cat="kernel", **extra):
    args = {"device": device, "stream": stream, "correlation": corr, **extra}
    if ext is not None:
        args["External id"] = ext
    return X(cat, name, ts, dur, pid=device, tid=stream, **args)


def write(name: str, events: list, **top) -> None:
    doc = {
        "schemaVersion": 1,
        **top,
        "traceEvents": events,
        "traceName": f"{name}.pt.trace.json",
        "baseTimeNanoseconds": 0,
    }
    raw = json.dumps(doc, indent=None, separators=(",", ":")).encode()
    with open(OUT / f"{name}.pt.trace.json.gz", "wb") as f:
        with gzip.GzipFile(fileobj=f, mode="wb", mtime=0) as gz:
            gz.write(raw)


# ------------------------------------------------------------------------------------------- item 1
def early_gpu_work() -> None:
    """A trace that starts mid-stream: the GPU is still busy with 50 kernels launched before the profiler
    started (their runtime records are not in the trace) during the first 99.865 ms of ProfilerStep#10;
    the 10 kernels step 10 launches run after them, then step 11 runs with an idle GPU."""
    ev = [
        X("user_annotation", "ProfilerStep#10", 0, 100_000),
        X("user_annotation", "ProfilerStep#11", 100_000, 100_000),
    ]
    for i in range(50):  # launched before the window: no launch event, correlation unknown to the trace
        ev.append(kern("void at::native::vectorized_elementwise_kernel<4>(...)", 5 + i * 1997.2, 1997.2, corr=10 + i))
    ext, corr = 100, 1000
    for i in range(10):  # step 10: ops launch 10 kernels; the GPU runs them after the early work
        ext += 1
        corr += 1
        ev.append(X("cpu_op", "aten::mm", 1000 + i * 9000, 50, **{"External id": ext}))
        ev.append(launch(1010 + i * 9000, corr, ext))
        ev.append(kern("sm90_xmma_gemm_f16f16_f32", 99_866 + i * 12, 12, corr, ext))
    for i in range(10):  # step 11: the GPU is idle, each kernel runs right after its launch
        ext += 1
        corr += 1
        t0 = 101_000 + i * 9000
        ev.append(X("cpu_op", "aten::mm", t0, 50, **{"External id": ext}))
        ev.append(launch(t0 + 10, corr, ext))
        ev.append(kern("sm90_xmma_gemm_f16f16_f32", t0 + 20, 500, corr, ext))
    write("early_gpu_work", ev, deviceProperties=[H100])


# ------------------------------------------------------------------------------------------- item 3
MI300X = {
    "id": 0,
    "name": "AMD Instinct MI300X",
    "totalGlobalMem": 205822885888,
    "computeMajor": 9,
    "computeMinor": 4,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536,
    "warpSize": 64,
    "sharedMemPerBlock": 65536,
    "numSms": 304,
    "maxSharedMemoryPerMultiProcessor": 65536,
}


def rocm_launches() -> None:
    """A ROCm (roctracer Kineto) trace on an MI300X: kernels launched by hipExtModuleLaunchKernel (grid is
    the global work size in work-items), by hipLaunchKernel (grid in blocks) and by hipModuleLaunchKernel
    (blocks); as Kineto writes them, the launch calls and the kernels both carry grid and block, the launch
    call also `shared memory`, and no kernel has `blocks per SM` or an occupancy."""
    ev = [X("user_annotation", "ProfilerStep#3", 0, 10_000)]
    shapes = [  # (launch call, grid as written, block, shared memory, name, dur)
        ("hipExtModuleLaunchKernel", [38_477_888, 1, 1], [256, 1, 1], 16384, "Cijk_Ailk_Bljk_BBS_BH_MT256x256x64", 900),
        ("hipHccModuleLaunchKernel", [4096, 64, 1], [64, 4, 1], 0, "triton_poi_fused_add_0", 100),
        (
            "hipLaunchKernel",
            [1216, 1, 1],
            [256, 1, 1],
            0,
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >",
            200,
        ),
        ("hipModuleLaunchKernel", [152, 1, 1], [1024, 1, 1], 65536, "rocprim_reduce_kernel", 300),
    ]
    t = 100
    for i, (call, grid, block, shm, name, dur) in enumerate(shapes):
        ext, corr = 10 + i, 100 + i
        ev.append(X("cpu_op", "aten::mm" if i == 0 else "aten::add", t, 60, **{"External id": ext}))
        ev.append(
            launch(t + 5, corr, ext, name=call, dur=20, grid=grid, block=block, **{"shared memory": shm}, kernel=name)
        )
        ev.append(kern(name, t + 2000, dur, corr, ext, stream=0, kind="Dispatch Kernel", grid=grid, block=block))
        t += 2000
    write("rocm_launches", ev, deviceProperties=[MI300X])


# ------------------------------------------------------------------------------------------- item 4
def _rpc_args(coll, nelems, dtype, rank, ext, out_nelems=None):
    return {
        "External id": ext,
        "Collective name": coll,
        "dtype": dtype,
        "In msg nelems": nelems,
        "Out msg nelems": nelems if out_nelems is None else out_nelems,
        "In split size": "[]",
        "Out split size": "[]",
        "Global rank start": 0,
        "Global rank stride": 1,
        "Group size": 2,
        "Process Group Name": "0",
        "Process Group Description": "default_pg",
        "Process Group Ranks": "[0, 1]",
        "Rank": rank,
    }


def nccl_record_param_comms() -> None:
    """Two ranks of a torch >= 2.1 DDP job on NCCL: per step 5 all_reduce and 2 broadcast collectives, each a
    `c10d::allreduce_`/`c10d::broadcast_` op around a `record_param_comms` op (Collective name, dtype, In/Out
    msg nelems, Group size, Process Group Name) that launches one `ncclDevKernel_*` on the NCCL stream, and a
    `record_param_comms` "wait" after each; compute kernels on stream 7. The launches of the broadcasts of
    step 3 are not in the trace (NCCL's cuLaunchKernelEx not captured), so those kernels have no link. Rank
    1 reaches each collective later: its NCCL kernels are shorter (rank 0 waits in its kernels)."""
    for rank in (0, 1):
        ev = []
        ext, corr = 1000, 5000
        t0 = 0
        for step in (1, 2, 3):
            ev.append(X("user_annotation", f"ProfilerStep#{step}", t0, 20_000))
            t = t0 + 100
            for i in range(7):
                coll = "allreduce" if i < 5 else "broadcast"
                ext += 2
                corr += 2
                # compute: an op launching a GEMM
                ev.append(X("cpu_op", "aten::mm", t, 100, **{"External id": ext}))
                ev.append(launch(t + 10, corr, ext))
                ev.append(kern("sm90_xmma_gemm_bf16bf16_bf16_f32", t + 50, 600, corr, ext))
                # the collective
                c_ext, c_corr = ext + 1, corr + 1
                nel = 262_144 if coll == "allreduce" else 1024
                ev.append(X("cpu_op", f"c10d::{coll}_", t + 200, 120, **{"External id": c_ext - 500}))
                ev.append(X("cpu_op", "record_param_comms", t + 205, 100, **_rpc_args(coll, nel, "Float", rank, c_ext)))
                kname = (
                    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
                    if coll == "allreduce"
                    else "ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
                )
                kdur = (300 if rank == 0 else 200) if coll == "allreduce" else (150 if rank == 0 else 100)
                if step == 3 and coll == "broadcast":  # launch not captured: no runtime event, no External id
                    ev.append(kern(kname, t + 700, kdur, c_corr, stream=20))
                else:
                    ev.append(launch(t + 250, c_corr, c_ext, name="cudaLaunchKernelExC", dur=8))
                    ev.append(kern(kname, t + 700, kdur, c_corr, c_ext, stream=20))
                # the wait on the work
                ev.append(
                    X(
                        "cpu_op",
                        "record_param_comms",
                        t + 400,
                        30 if rank == 0 else 10,
                        **_rpc_args("wait", 0, "Byte", rank, c_ext + 10000),
                    )
                )
                t += 2500
            t0 += 20_000
        info = {
            "backend": "nccl",
            "rank": rank,
            "world_size": 2,
            "pg_count": 1,
            "pg_config": [
                {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": 2, "ranks": [0, 1]}
            ],
            "nccl_version": "2.21.5",
        }
        write(f"nccl_rpc_rank{rank}", ev, deviceProperties=[H100], distributedInfo=info)


# ------------------------------------------------------------------------------------------- item 6
def idle_gpu() -> None:
    """Two 10 ms steps on one GPU with known gaps. Step 1: a 4 ms GEMM, a 1 ms copy, a 1 ms NCCL all_reduce
    kernel half overlapping the GEMM -> busy 5.5 ms, compute 4, non-compute 1.5, idle 4.5. Step 2: an 8 ms
    GEMM, a 0.5 ms copy and a 0.5 ms memset -> compute 8, non-compute 1, idle 1. Every op is a
    `user_annotation`/`cpu_op`, so the step-time breakdown's "Other" stays near zero while the GPU idles."""
    ev = []
    corr = 0
    for step, (t0, items) in enumerate(
        [
            (
                0,
                [
                    ("kernel", "sm90_xmma_gemm_f16f16_f32", 1000, 4000),
                    ("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 5500, 1000),
                    ("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 4500, 1000),
                ],
            ),
            (
                10_000,
                [
                    ("kernel", "sm90_xmma_gemm_f16f16_f32", 10_500, 8000),
                    ("gpu_memset", "Memset (Device)", 19_000, 500),
                    ("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", 18_500, 500),
                ],
            ),
        ],
        start=1,
    ):
        ev.append(X("user_annotation", f"ProfilerStep#{step}", t0, 10_000))
        ev.append(X("user_annotation", "forward", t0 + 10, 9_980))
        for cat, name, ts, dur in items:
            corr += 1
            api = {"kernel": "cudaLaunchKernel", "gpu_memcpy": "cudaMemcpyAsync", "gpu_memset": "cudaMemsetAsync"}[cat]
            ev.append(X("cpu_op", "aten::op", t0 + 20 + corr * 10, 8, **{"External id": corr}))
            ev.append(launch(t0 + 21 + corr * 10, corr, corr, name=api))
            ev.append(kern(name, ts, dur, corr, corr, cat=cat, stream=20 if "nccl" in name else 7))
    write("idle_gpu", ev, deviceProperties=[H100])


FIXTURES = [early_gpu_work, rocm_launches, nccl_record_param_comms, idle_gpu]

if __name__ == "__main__":
    for fn in FIXTURES:
        fn()
        print("wrote", fn.__name__)
