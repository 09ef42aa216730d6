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

Planted causes (`--plant RANK:CAUSE:MS[:STEP]`, repeatable; STEP 0-based, default every step) give the
diagnosis a known answer. With plants there is no built-in straggler (unless `--straggler` names one),
kernels are named by their position in the model (the same sequence on every rank), and each step starts
with a short `enumerate(DataLoader)#...__next__` span on every rank. Each cause delays RANK's arrival at its
next collective by MS, so every other rank waits for it there, as under NCCL:

- `data`: RANK's DataLoader span is MS longer; its GPU work starts MS later (GPU idle, host in the loader).
- `kernel`: one `SLOW_KERNEL` launch in the middle of RANK's forward pass runs MS longer.
- `sync`: in the middle of the forward pass RANK calls `aten::item` (a 4-byte D2H copy, then
  `cudaStreamSynchronize`) and the host stays blocked in the sync for MS with its GPU idle (as when the
  sync waits on work outside the trace); the next kernels start when it returns.
- `link`: a slow link on RANK. In a ring every member of a collective finishes together, so a slow link
  lengthens the collective on all its members alike and a single group's kernels cannot say whose link it
  is. What does say it in a real job is which groups are slow: the job gets a 2D layout (`subgroups`: node
  groups of the GPUs of one node, rail groups of the same GPU index across nodes, each all-reducing once per
  forward pass, node first), and every collective of a group that contains RANK takes MS / 2 longer (transfer
  time on all members, no late arrival). The slow node group and the slow rail group meet only in RANK; RANK
  also arrives MS / 2 late at its rail group's call, and its rail group arrives MS late at the world's
  gradient all-reduce, where everyone waits. The step grows by MS, as for the other causes.

With `--pipeline STAGES:MICROBATCHES`, a pipeline-parallel job instead (gen_pipeline.py).

Version A of a planted job, for the job diff (version B: the same flags plus `--plant`): `--plant-layout` writes
the planted layout with no cause, `--two-d` adds the node and rail groups of a `link` plant. `--rename-kernel
OLD:NEW` names every OLD kernel NEW in version B, as a library or hardware upgrade does (sm80_* -> sm90_*): the
same kernel in the same place under its op, which the job diff aligns by structure.
"""

from __future__ import annotations

import argparse
import gzip
import os
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gen_pipeline
import msgspec
from gen_graph_job import graph_trace

BASE_NS = 1_790_900_000_000_000_000
PID, TID, DEVICE, STREAM, COMM_STREAM = 1000, 1000, 0, 7, 20
HOOK_TID = TID + 1  # the thread DDP's gradient hooks launch the bucket all-reduces from
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
BROADCAST_KERNEL = "ncclDevKernel_Broadcast_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


CAUSES = ("data", "kernel", "sync", "link")
SLOW_KERNEL = FWD_KERNELS[0]  # the kernel a `kernel` plant makes slower
DATALOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
SUBGROUP_NELEMS = 1_048_576  # floats per subgroup all-reduce (activations of a 2D-parallel layer)
SUBGROUP_GBPS = {"node": 200.0, "rail": 25.0}  # NVLink inside a node, one NIC rail across nodes


@dataclass(frozen=True)
class Plant:
    """A known cause planted on one rank: `ms` milliseconds of it at step `step` (0-based), or every step."""

    rank: int
    cause: str
    ms: float
    step: int | None = None

    def __str__(self) -> str:
        return f"{self.rank}:{self.cause}:{self.ms:g}" + ("" if self.step is None else f":{self.step}")


def parse_plant(text: str) -> Plant:
    """`RANK:CAUSE:MS[:STEP]` -> Plant; ValueError with the reason when it is malformed."""
    parts = text.split(":")
    if len(parts) not in (3, 4):
        raise ValueError(f"--plant {text!r}: expected RANK:CAUSE:MS[:STEP]")
    rank, cause, ms = parts[:3]
    if cause not in CAUSES:
        raise ValueError(f"--plant {text!r}: unknown cause {cause!r} (one of {', '.join(CAUSES)})")
    try:
        plant = Plant(int(rank), cause, float(ms), int(parts[3]) if len(parts) == 4 else None)
    except ValueError:
        raise ValueError(f"--plant {text!r}: RANK and STEP must be integers, MS a number") from None
    if not plant.ms > 0:
        raise ValueError(f"--plant {text!r}: MS must be positive")
    return plant


def check_plants(plants: tuple[Plant, ...], ranks: int, steps: int) -> None:
    """ValueError with the reason when a plant names a rank or step the job does not have, or a `link`
    plant a job too small for the node and rail groups it is told apart by."""
    for pl in plants:
        if not 0 <= pl.rank < ranks:
            raise ValueError(f"plant {pl}: rank {pl.rank} is not in 0..{ranks - 1}")
        if pl.step is not None and not 0 <= pl.step < steps:
            raise ValueError(f"plant {pl}: step {pl.step} is not in 0..{steps - 1}")
        if pl.cause == "link" and (ranks < 4 or ranks % _node_size(ranks)):
            raise ValueError(f"plant {pl}: a link plant needs an even number of ranks, at least 4 (got {ranks})")


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


def _node_size(ranks: int) -> int:
    """GPUs per node in a job with a `link` plant: 8 when the ranks fill nodes of 8, else 2."""
    return 8 if ranks >= 16 and ranks % 8 == 0 else 2


def subgroups(ranks: int) -> list[tuple[str, str, list[int]]]:
    """The 2D layout of a job with a `link` plant, as torch names it (`new_group` counts from "1" on every
    rank): (pg name, description, ranks) of each node group (the GPUs of one node), then of each rail group
    (the same GPU index on every node)."""
    size = _node_size(ranks)
    nodes = ranks // size
    out = [(str(1 + n), f"node{n}", list(range(n * size, (n + 1) * size))) for n in range(nodes)]
    out += [(str(1 + nodes + g), f"rail{g}", list(range(g, ranks, size))) for g in range(size)]
    return out


def simulate(
    ranks: int,
    steps: int,
    p: dict,
    straggler: int | None,
    seed: int = 7,
    plants: tuple[Plant, ...] = (),
    layout: bool = False,
    two_d: bool = False,
    stagger: float = 0.0,
    end_skew: float = 0.0,
    broadcast_root: int | None = None,
) -> list[list[dict]]:
    """Per step, per rank: the GPU start time of every compute kernel and each all-reduce's
    (start, end), with the collective ending everywhere when the last rank arrived + transfer.
    With `plants`, each rank's step also starts with a DataLoader span (`dl`, µs), kernels are named by
    their position, and the planted causes lengthen, stall or slow what `Plant` says. `layout` gives that
    layout without plants, `two_d` the node and rail groups of a `link` plant without one (version A of a job)."""
    fwd_base = _kernel_base(p["fwd"], seed)
    bwd_base = _kernel_base(p["bwd"], seed + 1)
    opt_base = _kernel_base(p["opt"], seed + 2)
    rank_rnd = random.Random(seed + 3)
    factor = [1.0 + max(-0.06, min(0.06, rank_rnd.gauss(0, 0.025))) for _ in range(ranks)]
    if straggler is not None:
        factor[straggler] = 1.35
    per_bucket = p["bwd"] // p["buckets"]
    nelems = [6_553_600 if j < p["buckets"] - 1 else 2_097_152 for j in range(p["buckets"])]
    planted = bool(plants) or layout or two_d
    groups = subgroups(ranks) if two_d or any(pl.cause == "link" for pl in plants) else []
    mid = p["fwd"] // 2
    slow_kernel = next((i for i in range(mid, p["fwd"]) if i % len(FWD_OPS) == 0), mid)
    split = p["fwd"] // 3 if groups else p["fwd"]  # the subgroup collectives run after this many forward kernels
    out: list[list[dict]] = []
    start = [r * stagger for r in range(ranks)]  # rank r enters the first step r x stagger µs after rank 0
    for s in range(steps):
        noise = [random.Random(seed * 1000 + s * 7919 + r) for r in range(ranks)]
        extra = [dict.fromkeys(CAUSES, 0.0) for _ in range(ranks)]
        for pl in plants:
            if pl.step is None or pl.step == s:
                extra[pl.rank][pl.cause] += pl.ms * 1000.0
        rows: list[dict[str, Any]] = []
        for r in range(ranks):
            dl = 0.0
            if planted:
                dl = random.Random(seed * 31 + s * 104729 + r).uniform(100.0, 140.0) + extra[r]["data"]
            t = start[r] + 20.0 + dl
            ks: list[tuple] = []
            for i, d in enumerate(fwd_base[:split]):
                t = _forward_kernel(
                    ks, i, d * factor[r] * noise[r].uniform(0.97, 1.03), t, planted, slow_kernel, mid, extra[r]
                )
            rows.append({"ks": ks, "t": t, "dl": dl} if planted else {"ks": ks, "t": t})
        ready = [row["t"] for row in rows]  # the host launches both subgroup calls when the rank gets there
        for kind in ("node", "rail"):  # the subgroup collectives, in this order on every rank
            for name, desc, members in (g for g in groups if g[1].startswith(kind)):
                last = max(rows[m]["t"] for m in members)
                end = last + SUBGROUP_NELEMS * 4 / SUBGROUP_GBPS[kind] / 1e3
                end += max(extra[m]["link"] for m in members) / 2.0  # the slow link: half in each of its groups
                for m in members:
                    rows[m]["ks"].append(("c", rows[m]["t"], end - rows[m]["t"], (name, desc, members), ready[m]))
                    rows[m]["t"] = end + 1.0
        for r in range(ranks):
            row = rows[r]
            t = row.pop("t")
            ks = row["ks"]
            for i, d in enumerate(fwd_base[split:], start=split):
                t = _forward_kernel(
                    ks, i, d * factor[r] * noise[r].uniform(0.97, 1.03), t, planted, slow_kernel, mid, extra[r]
                )
            arrivals: list[float] = []
            for i, d in enumerate(bwd_base):
                dur = d * factor[r] * noise[r].uniform(0.97, 1.03)
                ks.append(("b", t, dur, i % len(BWD_OPS)) if planted else ("b", t, dur))
                t += dur + 1.0
                if (i + 1) % per_bucket == 0 and len(arrivals) < p["buckets"]:
                    arrivals.append(t)
            while len(arrivals) < p["buckets"]:
                arrivals.append(t)
            row["arrivals"] = arrivals
            row["compute_end"] = t
        # per bucket: each rank's kernel starts when its bucket is ready and its previous one ended; the collective
        # runs once the last member started, for its transfer; members end up to end_skew µs apart after that (a
        # random share each: the exchange's own time, not waiting); the last bucket as a broadcast (broadcast_root):
        # its root sends and is done at once, before the last member comes
        pend = [0.0] * ranks
        colls_of: list[list[tuple]] = [[] for _ in range(ranks)]
        for j in range(p["buckets"]):
            cs = [max(rows[r]["arrivals"][j], pend[r]) for r in range(ranks)]
            transfer = nelems[j] * 4 / 120e3 * (1 + 0.02 * (j % 3))  # bytes / (120 GB/s) in µs
            common = max(cs) + transfer
            kind = "broadcast" if broadcast_root is not None and j == p["buckets"] - 1 else "allreduce"
            for r in range(ranks):
                jitter = random.Random(seed * 7919 + s * 104729 + j * 131 + r).random() if end_skew else 0.0
                end = common + end_skew * jitter
                if kind == "broadcast" and r == broadcast_root:
                    end = cs[r] + 8.0
                colls_of[r].append((cs[r], end, nelems[j], rows[r]["arrivals"][j], kind))
                pend[r] = end
        for r in range(ranks):
            row = rows[r]
            colls = colls_of[r]
            pend_r = pend[r]
            t = max(row["compute_end"], pend_r) + 2.0
            for d in opt_base:
                dur = d * factor[r] * noise[r].uniform(0.97, 1.03)
                row["ks"].append(("o", t, dur, 0) if planted else ("o", t, dur))
                t += dur + 1.0
            row["colls"] = colls
            row["end"] = t + 10.0
            start[r] = row["end"] + 5.0
        out.append(rows)
    return out


def _forward_kernel(
    ks: list, i: int, dur: float, t: float, planted: bool, slow_kernel: int, mid: int, extra: dict
) -> float:
    """Appends forward kernel `i` (made longer by a `kernel` plant, followed by the stall of a `sync` plant);
    returns the GPU time after it."""
    if not planted:
        ks.append(("f", t, dur))
        return t + dur + 1.0
    if i == slow_kernel:
        dur += extra["kernel"]
    ks.append(("f", t, dur, i % len(FWD_OPS)))
    t += dur + 1.0
    if i == mid and extra["sync"] > 0:
        ks.append(("s", t, extra["sync"], None))  # D2H copy at t, the host blocked in the sync for this long
        t += extra["sync"] + 10.0
    return t


_x = gen_pipeline.complete


def rank_trace(
    rank: int, ranks: int, steps_sim: list[list[dict]], p: dict, rename: Mapping[str, str] | None = None
) -> dict:
    """The Kineto trace of one rank from the simulation; `rename` (old kernel name -> new) renames kernels."""
    renamed = dict(rename or {})
    planted = "dl" in steps_sim[0][rank]
    link = any(k[0] == "c" for k in steps_sim[0][rank]["ks"])
    ev: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": PID, "tid": TID, "args": {"name": "thread 1 (python)"}},
        {"ph": "M", "name": "thread_name", "pid": PID, "tid": HOOK_TID, "args": {"name": "thread 2 (autograd)"}},
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
        kernel_args: dict | None = None,
        cpu_ts: float | None = None,
        tid: int = TID,
    ) -> None:
        nonlocal corr, ext
        kname = renamed.get(kname, kname)
        cpu_ts = gpu_ts - 30.0 if cpu_ts is None else cpu_ts
        a = {"External id": ext, "Record function id": 0, "Ev Idx": len(ev)}
        if op_args:
            a.update(op_args)
        ev.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": op_name,
                "pid": PID,
                "tid": tid,
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
                "tid": tid,
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
                    **(kernel_args or {}),
                },
            }
        )
        corr += 1
        ext += 1

    def comm_args(n: int, pg: str, desc: str, members: list[int] | None, kind: str = "allreduce") -> dict:
        """record_param_comms args as torch 2.x + NCCL writes them (`Process Group Ranks` with plants)."""
        a = {
            "Collective name": kind,
            "In msg nelems": n,
            "Out msg nelems": n,
            "dtype": "Float",
            "Group size": len(members) if members else ranks,
            "Process Group Name": pg,
            "Process Group Description": desc,
            "In split size": "[]",
            "Out split size": "[]",
            "Global rank start": members[0] if members else 0,
            "Global rank stride": (members[1] - members[0]) if members and len(members) > 1 else 1,
        }
        if planted:
            a["Process Group Ranks"] = str(members if members else list(range(ranks)))
        return a

    def world_allreduce(coll: tuple[float, float, int, float, str], full_args: bool) -> None:
        """A DDP bucket's all-reduce (or broadcast), launched when its gradients were launched (just before the next
        backward kernel's launch); on the comm stream it starts once every rank's bucket is done and the previous
        one ended."""
        cs, ce, n, ready, kind = coll
        args = comm_args(n, "0", "default_pg", None, kind)
        if not full_args:
            args = {k: args[k] for k in ("Collective name", "In msg nelems", "Out msg nelems", "dtype", "Group size")}
            args["Process Group Name"] = "0"
        launch(
            "record_param_comms",
            NCCL_KERNEL if kind == "allreduce" else BROADCAST_KERNEL,
            cs,
            ce - cs,
            COMM_STREAM,
            args,
            grid=(2, 1, 1),
            block=(640, 1, 1),
            kernel_args=args if planted else None,
            cpu_ts=min(ready, cs) - 31.0,
            tid=HOOK_TID,
        )

    def host_sync(ts: float, stall: float) -> None:
        """`.item()` on a GPU tensor: a 4-byte D2H copy, then the host blocked in cudaStreamSynchronize."""
        nonlocal corr, ext
        cpu = ts - 30.0
        item = {"External id": ext, "Record function id": 0, "Ev Idx": len(ev)}
        ev.append(_x("cpu_op", "aten::item", PID, TID, cpu, stall + 16.0, item))
        ev.append(
            _x(
                "cpu_op",
                "aten::_local_scalar_dense",
                PID,
                TID,
                cpu + 1.0,
                stall + 14.0,
                {**item, "External id": ext + 1},
            )
        )
        ev.append(
            _x(
                "cuda_runtime",
                "cudaMemcpyAsync",
                PID,
                TID,
                cpu + 2.0,
                6.0,
                {"External id": ext + 1, "cbid": 41, "correlation": corr},
            )
        )
        copy = {
            "External id": ext + 1,
            "correlation": corr,
            "device": DEVICE,
            "context": 1,
            "stream": STREAM,
            "bytes": 4,
            "memory bandwidth (GB/s)": 0.002,
        }
        ev.append(_x("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", DEVICE, STREAM, ts, 2.0, copy))
        sync = {"External id": ext + 1, "cbid": 131, "correlation": corr + 1}
        ev.append(_x("cuda_runtime", "cudaStreamSynchronize", PID, TID, cpu + 9.0, stall + 5.0, sync))
        corr += 2
        ext += 2

    for s, rows in enumerate(steps_sim):
        row = rows[rank]
        ks = row["ks"]
        first = ks[0][1] - 40.0 - row.get("dl", 0.0)
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
        if planted:
            loader = {"External id": ext, "Record function id": 0, "Ev Idx": len(ev)}
            ev.append(_x("user_annotation", DATALOADER, PID, TID, first + 1.0, row["dl"], loader))
            ext += 1
        bi = 0
        nb = 0
        nc = 0  # subgroup calls in a row so far
        for kind, ts, dur, *which in ks:
            if kind == "f":
                k = which[0] if which else int(ts) % len(FWD_OPS)
                launch(FWD_OPS[k], FWD_KERNELS[k], ts, dur, STREAM)
            elif kind == "s":
                host_sync(ts, dur)
            elif kind == "c":
                pg, desc, members = which[0]
                args = comm_args(SUBGROUP_NELEMS, pg, desc, members)
                host = min(which[1], ts) - 20.0 + 10.0 * nc  # launched back to back, ahead of the GPU
                launch(
                    "record_param_comms", NCCL_KERNEL, ts, dur, COMM_STREAM, args, (2, 1, 1), (640, 1, 1), args, host
                )
                nc += 1
                continue
            elif kind == "b":
                k = which[0] if which else int(ts) % len(BWD_OPS)
                launch(BWD_OPS[k], FWD_KERNELS[k], ts, dur, STREAM)
                nb += 1
                if nb % per_bucket == 0 and bi < len(row["colls"]):
                    world_allreduce(row["colls"][bi], full_args=True)
                    bi += 1
            else:
                launch(OPT_OP, OPT_KERNEL, ts, dur, STREAM)
            nc = 0
        while bi < len(row["colls"]):
            world_allreduce(row["colls"][bi], full_args=planted)
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
    world = list(range(ranks))  # torch's _get_pg_config: get_process_group_ranks(pg), the world group's too
    pgs = [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": ranks, "ranks": world}]
    if link:
        pgs += [
            {"pg_name": pg, "pg_desc": desc, "backend_config": "cuda:nccl", "pg_size": len(members), "ranks": members}
            for pg, desc, members in subgroups(ranks)
            if rank in members
        ]
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
            "pg_count": len(pgs),
            "pg_config": pgs,
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


#: what `nameless` takes out of record_param_comms: the collective's name and its process group
NAMED_ARGS = (
    "Collective name",
    "Process Group Name",
    "Process Group Description",
    "Process Group Ranks",
    "Group size",
    "Global rank start",
    "Global rank stride",
)


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
    plants: tuple[Plant, ...] = (),
    clock_skew: Mapping[int, float] | None = None,
    layout: bool = False,
    two_d: bool = False,
    rename: Mapping[str, str] | None = None,
    drop: tuple[int, ...] = (),
    nameless: bool = False,
    stagger: float = 0.0,
    end_skew: float = 0.0,
    broadcast_root: int | None = None,
) -> list[str]:
    """Writes one trace per rank under `out` (a run folder); returns the paths. The slow rank is `straggler`
    (negative: none; default ranks // 3, none when `plants` are given, so that the plants are the only cause).
    With `cuda_graph` (options of `gen_graph_job.graph_trace`: capture, ids, layers; replays = steps - 1), the
    CUDA-graph job instead (no plants there). `clock_skew` (rank -> µs) adds a known error to a rank's clock:
    every timestamp of its trace moves by it, as when its host clock is off.
    `layout` (and `two_d`, the 2D node and rail groups of a `link` plant) write a planted job's layout with no
    cause: version A of a job whose version B has the plants. `rename` (old kernel name -> new) renames kernels
    (a library or hardware change: the same kernels under other names) in the data-parallel job. `drop`: ranks whose
    trace is not written (a job profiled on some ranks only: distributedInfo still says `ranks`); `nameless`: the
    record_param_comms calls carry no `Collective name` nor process group (as older torch wrote them); `stagger`
    (µs): rank r enters the first profiled step r x stagger after rank 0 (ranks started apart: the others wait for
    it at the step's first collective, with no more work to do than they); `end_skew` (µs): the members of each
    collective end up to that long apart after the last one came (each member at a random share of it, per
    collective: the exchange's own time, not waiting); `broadcast_root`: each step's last bucket is a broadcast
    from that rank, which sends and is done at once (it finishes first, before the last member comes)."""
    check_plants(plants, ranks, steps)
    if two_d and (ranks < 4 or ranks % _node_size(ranks)):
        raise ValueError(f"the 2D layout needs an even number of ranks, at least 4 (got {ranks})")
    if plants and cuda_graph is not None:
        raise ValueError("plants apply to the data-parallel job, not to the CUDA-graph job")
    if straggler is None:
        straggler = -1 if plants or layout or two_d else ranks // 3
    p = plan(events, steps, buckets)
    slow = straggler if straggler >= 0 else None
    sim = (
        simulate(ranks, steps, p, slow, seed, plants, layout, two_d, stagger, end_skew, broadcast_root)
        if cuda_graph is None
        else []
    )
    os.makedirs(out, exist_ok=True)
    enc = msgspec.json.Encoder()
    paths = []
    for r in range(ranks):
        if r in drop:
            continue
        name = f"node{r // 8}_rank{r:05d}.{1790900000000 + r}.pt.trace.json" + (".gz" if gz else "")
        path = os.path.join(out, name)
        doc = (
            rank_trace(r, ranks, sim, p, rename)
            if cuda_graph is None
            else graph_trace(r, ranks, replays=max(1, steps - 1), **cuda_graph)
        )
        if nameless:
            for e in doc["traceEvents"]:
                if e.get("name") == "record_param_comms" and isinstance(e.get("args"), dict):
                    for k in NAMED_ARGS:
                        e["args"].pop(k, None)
        skew = (clock_skew or {}).get(r, 0.0)
        if skew:
            for e in doc["traceEvents"]:
                if "ts" in e and e.get("ph") != "M":
                    e["ts"] += skew
        data = enc.encode(doc)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(gzip.compress(data, compresslevel=1) if gz else data)
        os.replace(tmp, path)
        paths.append(path)
    return paths


def parse_rename(text: str) -> tuple[str, str]:
    """`OLD:NEW` -> (OLD, NEW): kernel names, split at the first ':' followed by no ':' (C++ names hold '::')."""
    for i, ch in enumerate(text):
        if ch == ":" and text[i + 1 : i + 2] != ":" and text[i - 1 : i] != ":" and 0 < i < len(text) - 1:
            return text[:i], text[i + 1 :]
    raise ValueError(f"--rename-kernel {text!r}: expected OLD:NEW")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="run folder to write the rank traces into")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--events", type=int, default=50_000, help="about this many events per rank")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument(
        "--straggler", type=int, default=None, help="the slow rank (default ranks // 3; none with --plant; -1: none)"
    )
    ap.add_argument(
        "--plant",
        action="append",
        default=[],
        metavar="RANK:CAUSE:MS[:STEP]",
        help=f"plant MS ms of a cause ({', '.join(CAUSES)}) on RANK at step STEP (0-based; default every step); "
        "repeatable",
    )
    ap.add_argument(
        "--clock-skew",
        action="append",
        default=[],
        metavar="RANK:US",
        help="shift every timestamp of RANK's trace by US µs (a planted clock error); repeatable",
    )
    ap.add_argument(
        "--plant-layout",
        action="store_true",
        help="the layout of a planted job (DataLoader spans, kernels named by position, no straggler) with no plant: "
        "version A of a job whose version B has --plant",
    )
    ap.add_argument(
        "--two-d", action="store_true", help="the node and rail groups of a link plant, with or without one"
    )
    ap.add_argument(
        "--rename-kernel",
        action="append",
        default=[],
        metavar="OLD:NEW",
        help="name every OLD kernel NEW (a library or hardware change; version B of a job diff); repeatable",
    )
    ap.add_argument("--plain", action="store_true", help="write .json instead of .json.gz")
    ap.add_argument(
        "--drop-rank", type=int, action="append", default=[], help="leave this rank's trace out (ranks missing)"
    )
    ap.add_argument(
        "--no-collective-name",
        action="store_true",
        help="record_param_comms without Collective name or process group (an older torch)",
    )
    ap.add_argument(
        "--stagger",
        type=float,
        default=0.0,
        metavar="US",
        help="rank r enters the first step r x US µs after rank 0 (ranks started apart)",
    )
    ap.add_argument(
        "--end-skew", type=float, default=0.0, metavar="US", help="members of a collective end up to US µs apart"
    )
    ap.add_argument(
        "--broadcast-root",
        type=int,
        default=None,
        metavar="RANK",
        help="each step's last bucket: a broadcast from RANK",
    )
    ap.add_argument("--cuda-graph", action="store_true", help="a CUDA-graph job: capture in step 1, then replays")
    ap.add_argument("--graph-no-capture", action="store_true", help="CUDA-graph job: leave the capture out")
    ap.add_argument("--graph-ids", action="store_true", help="CUDA-graph job: kernels carry graph and node ids")
    ap.add_argument("--graph-layers", type=int, default=4, help="CUDA-graph job: layers of 4 ops in the graph")
    ap.add_argument(
        "--pipeline",
        type=gen_pipeline.parse_shape,
        default=None,
        metavar="STAGES:MICROBATCHES",
        help="a pipeline-parallel job (one rank per stage; --ranks is ignored)",
    )
    gen_pipeline.add_arguments(ap)
    a = ap.parse_args(argv)
    if a.pipeline:
        stages, mbs = a.pipeline
        paths = gen_pipeline.generate_pipeline(
            a.out,
            stages,
            mbs,
            a.steps,
            a.fwd_us,
            a.bwd_us,
            4,
            a.transfer_us,
            a.slow_stage,
            a.slow_factor,
            a.schedule,
            gz=not a.plain,
            virtual=a.virtual,
        )
        print(f"wrote {len(paths)} stage traces to {a.out}")
        return
    graph = None
    if a.cuda_graph:
        graph = {"capture": not a.graph_no_capture, "ids": a.graph_ids, "layers": a.graph_layers}
    try:
        plants = tuple(parse_plant(t) for t in a.plant)
        check_plants(plants, a.ranks, a.steps)
        if a.two_d and (a.ranks < 4 or a.ranks % _node_size(a.ranks)):
            raise ValueError(f"--two-d needs an even number of ranks, at least 4 (got {a.ranks})")
        if (plants or a.plant_layout or a.two_d) and graph is not None:
            raise ValueError(
                "--plant applies to the data-parallel job, not to --cuda-graph (so do --plant-layout, --two-d)"
            )
        skew = {int(r): float(us) for r, us in (t.split(":") for t in a.clock_skew)}
        rename = dict(parse_rename(t) for t in a.rename_kernel)
    except ValueError as exc:
        ap.error(str(exc))
    paths = generate(
        a.out,
        a.ranks,
        a.events,
        a.steps,
        straggler=a.straggler,
        gz=not a.plain,
        cuda_graph=graph,
        plants=plants,
        clock_skew=skew,
        layout=a.plant_layout,
        two_d=a.two_d,
        rename=rename,
        drop=tuple(a.drop_rank),
        nameless=a.no_collective_name,
        stagger=a.stagger,
        end_skew=a.end_skew,
        broadcast_root=a.broadcast_root,
    )
    print(f"wrote {len(paths)} rank traces to {a.out}")


if __name__ == "__main__":
    main()
