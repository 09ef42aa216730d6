"""Generate an N-rank data-parallel GPU job: one Kineto trace per rank, as torch 2.x + NCCL write them.

Each rank runs the same steps: forward and backward `aten::` ops, each launching one GPU kernel
(`cudaLaunchKernel` on the CPU thread, the kernel on stream 7), gradient all-reduces in buckets
during the backward pass (`record_param_comms` with `Collective name`, `In msg nelems`,
`Out msg nelems`, `dtype`, `Group size`, `Process Group Name`, launching an
`ncclDevKernel_AllReduce_Sum_f32_RING_LL` kernel on stream 20), then optimizer ops. Ranks differ by
a realistic spread (each rank's kernels are 0-6 % slower or faster, plus per-kernel noise); one
straggler rank is slower still, so every other rank waits for it in each all-reduce: an
all-reduce's kernel ends on every rank when the last rank has arrived plus the transfer time.

    python benchmarks/gen_distributed.py --ranks 256 --events 50000 --out /tmp/job
"""

from __future__ import annotations

import argparse
import gzip
import os
import random

import msgspec
from gen_graph_job import graph_trace

BASE_NS = 1_790_900_000_000_000_000
PID, TID, DEVICE, STREAM, COMM_STREAM = 1000, 1000, 0, 7, 20
EVENTS_PER_OP = 3  # cpu_op, cudaLaunchKernel, kernel
FWD_KERNELS = [
    "ampere_sgemm_128x64_nn",
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>",
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>",
    "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8",
]
FWD_OPS = ["aten::mm", "aten::gelu", "aten::native_layer_norm", "aten::addmm"]
BWD_OPS = ["MmBackward0", "GeluBackward0", "NativeLayerNormBackward0", "AddmmBackward0"]
OPT_OP, OPT_KERNEL = "aten::_foreach_add_", "void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>"
NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def plan(events: int, steps: int, buckets: int) -> dict:
    """How many ops of each phase one step has, for about `events` events per rank."""
    ops = max(16, events // (EVENTS_PER_OP * steps))
    fwd = max(4, ops * 2 // 5)
    opt = max(2, ops // 10)
    bwd = max(buckets, ops - fwd - opt - buckets)
    return {"fwd": fwd, "bwd": bwd, "opt": opt, "buckets": buckets}


def _kernel_base(n: int, seed: int) -> list[float]:
    rnd = random.Random(seed)
    return [rnd.uniform(15.0, 60.0) for _ in range(n)]  # µs; the same model on every rank


def simulate(ranks: int, steps: int, p: dict, straggler: int, seed: int = 7) -> list[list[dict]]:
    """Per step, per rank: the GPU start time of every compute kernel and each all-reduce's
    (start, end), with the collective ending everywhere when the last rank arrived + transfer."""
    fwd_base = _kernel_base(p["fwd"], seed)
    bwd_base = _kernel_base(p["bwd"], seed + 1)
    opt_base = _kernel_base(p["opt"], seed + 2)
    rank_rnd = random.Random(seed + 3)
    factor = [1.0 + max(-0.06, min(0.06, rank_rnd.gauss(0, 0.025))) for _ in range(ranks)]
    factor[straggler] = 1.35
    per_bucket = p["bwd"] // p["buckets"]
    nelems = [6_553_600 if j < p["buckets"] - 1 else 2_097_152 for j in range(p["buckets"])]
    out: list[list[dict]] = []
    start = [0.0] * ranks
    for s in range(steps):
        noise = [random.Random(seed * 1000 + s * 7919 + r) for r in range(ranks)]
        rows = []
        for r in range(ranks):
            t = start[r] + 20.0
            ks = []
            for d in fwd_base:
                dur = d * factor[r] * noise[r].uniform(0.97, 1.03)
                ks.append(("f", t, dur))
                t += dur + 1.0
            arrivals = []
            for i, d in enumerate(bwd_base):
                dur = d * factor[r] * noise[r].uniform(0.97, 1.03)
                ks.append(("b", t, dur))
                t += dur + 1.0
                if (i + 1) % per_bucket == 0 and len(arrivals) < p["buckets"]:
                    arrivals.append(t)
            while len(arrivals) < p["buckets"]:
                arrivals.append(t)
            rows.append({"ks": ks, "arrivals": arrivals, "compute_end": t})
        coll_end = []
        prev = 0.0
        for j in range(p["buckets"]):
            last = max(rows[r]["arrivals"][j] for r in range(ranks))
            transfer = nelems[j] * 4 / 120e3 * (1 + 0.02 * (j % 3))  # bytes / (120 GB/s) in µs
            prev = max(last, prev) + transfer
            coll_end.append(prev)
        for r in range(ranks):
            row = rows[r]
            colls = []
            pend = 0.0
            for j in range(p["buckets"]):
                cs = max(row["arrivals"][j], pend)
                colls.append((cs, coll_end[j], nelems[j]))
                pend = coll_end[j]
            t = max(row["compute_end"], coll_end[-1]) + 2.0
            for d in opt_base:
                dur = d * factor[r] * noise[r].uniform(0.97, 1.03)
                row["ks"].append(("o", t, dur))
                t += dur + 1.0
            row["colls"] = colls
            row["end"] = t + 10.0
            start[r] = row["end"] + 5.0
        out.append(rows)
    return out


def rank_trace(rank: int, ranks: int, steps_sim: list[list[dict]], p: dict) -> dict:
    """The Kineto trace of one rank from the simulation."""
    ev: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": PID, "tid": TID, "args": {"name": "thread 1 (python)"}},
        {"ph": "M", "name": "process_name", "pid": DEVICE, "tid": 0, "args": {"name": "GPU 0"}},
    ]
    corr = 1
    ext = 1
    per_bucket = p["bwd"] // p["buckets"]

    def launch(
        op_name: str,
        kname: str,
        gpu_ts: float,
        gpu_dur: float,
        stream: int,
        op_args: dict | None = None,
        grid=(1024, 1, 1),
        block=(256, 1, 1),
    ) -> None:
        nonlocal corr, ext
        cpu_ts = gpu_ts - 30.0
        a = {"External id": ext, "Record function id": 0, "Ev Idx": len(ev)}
        if op_args:
            a.update(op_args)
        ev.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": op_name,
                "pid": PID,
                "tid": TID,
                "ts": round(cpu_ts, 3),
                "dur": 9.0,
                "args": a,
            }
        )
        ev.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": PID,
                "tid": TID,
                "ts": round(cpu_ts + 2.0, 3),
                "dur": 5.0,
                "args": {"External id": ext, "correlation": corr, "cbid": 211},
            }
        )
        ev.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": kname,
                "pid": DEVICE,
                "tid": stream,
                "ts": round(gpu_ts, 3),
                "dur": round(gpu_dur, 3),
                "args": {
                    "External id": ext,
                    "correlation": corr,
                    "device": DEVICE,
                    "stream": stream,
                    "grid": list(grid),
                    "block": list(block),
                    "registers per thread": 64,
                    "shared memory": 16384,
                    "blocks per SM": 7.76,
                    "warps per SM": 62.1,
                    "est. achieved occupancy %": 48,
                },
            }
        )
        corr += 1
        ext += 1

    for s, rows in enumerate(steps_sim):
        row = rows[rank]
        ks = row["ks"]
        first = ks[0][1] - 40.0
        ev.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{s + 1}",
                "pid": PID,
                "tid": TID,
                "ts": round(first, 3),
                "dur": round(row["end"] - first - 35.0, 3),
                "args": {"External id": ext},
            }
        )
        ext += 1
        bi = 0
        nb = 0
        for kind, ts, dur in ks:
            if kind == "f":
                name = FWD_OPS[int(ts) % len(FWD_OPS)]
                launch(name, FWD_KERNELS[FWD_OPS.index(name)], ts, dur, STREAM)
            elif kind == "b":
                name = BWD_OPS[int(ts) % len(BWD_OPS)]
                launch(name, FWD_KERNELS[BWD_OPS.index(name)], ts, dur, STREAM)
                nb += 1
                if nb % per_bucket == 0 and bi < len(row["colls"]):
                    cs, ce, n = row["colls"][bi]
                    launch(
                        "record_param_comms",
                        NCCL_KERNEL,
                        cs,
                        ce - cs,
                        COMM_STREAM,
                        {
                            "Collective name": "allreduce",
                            "In msg nelems": n,
                            "Out msg nelems": n,
                            "dtype": "Float",
                            "Group size": ranks,
                            "Process Group Name": "0",
                            "Process Group Description": "default_pg",
                            "In split size": "[]",
                            "Out split size": "[]",
                            "Global rank start": 0,
                            "Global rank stride": 1,
                        },
                        grid=(2, 1, 1),
                        block=(640, 1, 1),
                    )
                    bi += 1
            else:
                launch(OPT_OP, OPT_KERNEL, ts, dur, STREAM)
        while bi < len(row["colls"]):
            cs, ce, n = row["colls"][bi]
            launch(
                "record_param_comms",
                NCCL_KERNEL,
                cs,
                ce - cs,
                COMM_STREAM,
                {
                    "Collective name": "allreduce",
                    "In msg nelems": n,
                    "Out msg nelems": n,
                    "dtype": "Float",
                    "Group size": ranks,
                    "Process Group Name": "0",
                },
                grid=(2, 1, 1),
                block=(640, 1, 1),
            )
            bi += 1
        ev.append(
            {
                "ph": "i",
                "s": "t",
                "cat": "cpu_instant_event",
                "name": "[memory]",
                "pid": PID,
                "tid": TID,
                "ts": round(first + 1.0, 3),
                "args": {
                    "Device Type": 1,
                    "Device Id": 0,
                    "Addr": 1 << 32,
                    "Bytes": 1 << 28,
                    "Total Allocated": (6 << 30) + rank * (1 << 20),
                    "Total Reserved": 8 << 30,
                },
            }
        )
    ev.sort(key=lambda e: e.get("ts", -1))
    return {
        "schemaVersion": 1,
        "deviceProperties": [
            {
                "id": 0,
                "name": "NVIDIA H100 80GB HBM3",
                "totalGlobalMem": 85_031_714_816,
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
        ],
        "distributedInfo": {
            "backend": "nccl",
            "rank": rank,
            "world_size": ranks,
            "pg_count": 1,
            "pg_config": [
                {
                    "pg_name": "0",
                    "pg_desc": "default_pg",
                    "backend_config": "cuda:nccl",
                    "pg_size": ranks,
                    "ranks": "all",
                }
            ],
            "nccl_version": "2.21.5",
        },
        "record_shapes": 0,
        "with_stack": 0,
        "trace_id": f"{rank:032x}",
        "traceEvents": ev,
        "traceName": f"node{rank // 8}_rank{rank:05d}",
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": BASE_NS,
    }


def generate(
    out: str,
    ranks: int,
    events: int = 50_000,
    steps: int = 10,
    buckets: int = 12,
    straggler: int | None = None,
    seed: int = 7,
    gz: bool = True,
    cuda_graph: dict | None = None,
) -> list[str]:
    """Writes one trace per rank under `out` (a run folder); returns the paths. With `cuda_graph` (options of
    `gen_graph_job.graph_trace`: capture, ids, layers; replays = steps - 1), the CUDA-graph job instead."""
    straggler = ranks // 3 if straggler is None else straggler
    p = plan(events, steps, buckets)
    sim = simulate(ranks, steps, p, straggler, seed) if cuda_graph is None else []
    os.makedirs(out, exist_ok=True)
    enc = msgspec.json.Encoder()
    paths = []
    for r in range(ranks):
        name = f"node{r // 8}_rank{r:05d}.{1790900000000 + r}.pt.trace.json" + (".gz" if gz else "")
        path = os.path.join(out, name)
        if cuda_graph is None:
            data = enc.encode(rank_trace(r, ranks, sim, p))
        else:
            data = enc.encode(graph_trace(r, ranks, replays=max(1, steps - 1), **cuda_graph))
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(gzip.compress(data, compresslevel=1) if gz else data)
        os.replace(tmp, path)
        paths.append(path)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="run folder to write the rank traces into")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--events", type=int, default=50_000, help="about this many events per rank")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--straggler", type=int, default=None, help="the slow rank (default ranks // 3)")
    ap.add_argument("--plain", action="store_true", help="write .json instead of .json.gz")
    ap.add_argument("--cuda-graph", action="store_true", help="a CUDA-graph job: capture in step 1, then replays")
    ap.add_argument("--graph-no-capture", action="store_true", help="CUDA-graph job: leave the capture out")
    ap.add_argument("--graph-ids", action="store_true", help="CUDA-graph job: kernels carry graph and node ids")
    ap.add_argument("--graph-layers", type=int, default=4, help="CUDA-graph job: layers of 4 ops in the graph")
    a = ap.parse_args()
    graph = None
    if a.cuda_graph:
        graph = {"capture": not a.graph_no_capture, "ids": a.graph_ids, "layers": a.graph_layers}
    paths = generate(a.out, a.ranks, a.events, a.steps, straggler=a.straggler, gz=not a.plain, cuda_graph=graph)
    print(f"wrote {len(paths)} rank traces to {a.out}")


if __name__ == "__main__":
    main()
