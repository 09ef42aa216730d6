"""A pipeline-parallel job: one Kineto trace per stage (stage s = rank s), as torch.distributed.pipelining + NCCL
write them.

Each step runs `microbatches` forward and backward passes through `stages` stages in the 1F1B order (or GPipe's:
all forwards, then all backwards). Stage s runs micro-batch i's forward inside a `PP:<s>F<i>` annotation and its
backward inside `PP:<s>B<i>` (torch.distributed.pipelining's record_function names), each as `kernels` compute
kernels back to back on stream 7: a forward takes `fwd_us`, a backward `bwd_us` (times `slow_factor` on the
`slow_stage`). Activations go forward and gradients backward by P2P: the producing stage posts a `send` when its
span ends, the consuming stage a `recv` when it reaches the span that needs it; both NCCL kernels
(`ncclDevKernel_SendRecv`, one stream per direction and kind, each launched from its own CPU thread by
`record_param_comms` with `Collective name` send/recv, `Src Rank`/`Dst Rank`, `Process Group Name`/`Process Group
Ranks` of the pipeline group) run from their posting until both sides are there plus `transfer_us`, and the
consuming span starts when its recv ends.
Every stage shares one clock; step k + 1 starts STEP_GAP_US after the last stage ended step k.

With `virtual` v > 1, rank r holds stages r, r + p, ... and runs them looped breadth-first (`stage_order`).
With 0 transfer and equal stages, a 1F1B or GPipe step lasts (m + p - 1) (fwd + bwd) µs and each stage is idle
for (p - 1) (fwd + bwd) µs of it: the bubble ratio (p - 1) / (m + p - 1).

    python benchmarks/gen_distributed.py --pipeline 4:8 --out /tmp/pp_job
    python benchmarks/gen_pipeline.py --stages 4 --microbatches 8 --slow-stage 1 --out /tmp/pp_slow
    python benchmarks/gen_pipeline.py --virtual 2 --fwd-us 80 --bwd-us 160 --out /tmp/pp_interleaved
"""

from __future__ import annotations

import argparse
import gzip
import json
import os

BASE_NS = 1_790_970_000_000_000_000
PID, TID, COMM_TID, DEVICE, STREAM = 3000, 3000, 3001, 0, 7
#: the P2P streams: (collective, direction) -> stream
P2P_STREAMS = {("send", "F"): 20, ("recv", "F"): 21, ("send", "B"): 22, ("recv", "B"): 23}
SENDRECV_KERNEL = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"
FWD_KERNEL, BWD_KERNEL = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "ampere_bf16_s16816gemm_128x64"
STEP_GAP_US = 50
LAUNCH_LEAD_US = 30  # a kernel starts this long after its launch call
PG_NAME = "1"


def stage_order(
    stage: int, stages: int, microbatches: int, schedule: str = "1f1b", virtual: int = 1
) -> list[tuple[str, int, int]]:
    """The (kind "F"/"B", micro-batch, virtual stage) order rank `stage` runs: 1F1B (warm-up forwards, then one
    forward and one backward in turn, then the remaining backwards), GPipe (all forwards, then all backwards) or,
    with `virtual` > 1 stages per rank (rank r holds stages r, r + p, ...), looped breadth-first (torch's
    ScheduleLoopedBFS: every micro-batch's forward through its first stage, then its second, ...; the backwards
    in the reverse stage order)."""
    if virtual > 1:
        held = [stage + c * stages for c in range(virtual)]
        fwd = [("F", i, v) for v in held for i in range(microbatches)]
        return fwd + [("B", i, v) for v in held[::-1] for i in range(microbatches)]
    if schedule == "gpipe":
        return [("F", i, stage) for i in range(microbatches)] + [("B", i, stage) for i in range(microbatches)]
    warm = min(stages - stage - 1, microbatches)
    order = [("F", i, stage) for i in range(warm)]
    for i in range(microbatches - warm):
        order += [("F", warm + i, stage), ("B", i, stage)]
    return order + [("B", i, stage) for i in range(microbatches - warm, microbatches)]


def simulate_step(
    stages: int,
    microbatches: int,
    start: float,
    fwd: list[float],
    bwd: list[float],
    transfer: float,
    schedule: str = "1f1b",
    virtual: int = 1,
) -> tuple[dict, list[dict]]:
    """One step from `start`: the span of every (virtual stage, kind, micro-batch) and the P2P kernels, as
    ({(v, kind, i): (start, end)}, [{"stage" (the rank), "coll", "dir", "peer", "mb", "start", "end"}]). A
    virtual stage of rank s computes fwd[s] / virtual (bwd[s] / virtual)."""
    orders = [stage_order(s, stages, microbatches, schedule, virtual) for s in range(stages)]
    last = stages * virtual - 1
    pos = [0] * stages
    free = [start] * stages
    stream_free: dict[tuple[int, str, str], float] = {}
    spans: dict[tuple[int, str, int], tuple[float, float]] = {}
    p2p: list[dict] = []
    left = sum(len(o) for o in orders)
    while left:
        progressed = False
        for s in range(stages):
            while pos[s] < len(orders[s]):
                kind, i, v = orders[s][pos[s]]
                u = v - 1 if kind == "F" else v + 1  # the virtual stage whose output this span takes
                begin = free[s]
                if 0 <= u <= last:
                    if (u, kind, i) not in spans:
                        break
                    q = u % stages
                    e = max(spans[(u, kind, i)][1], stream_free.get((q, "send", kind), start))
                    f = max(free[s], stream_free.get((s, "recv", kind), start))
                    arrive = max(e, f) + transfer
                    p2p.append({"stage": q, "coll": "send", "dir": kind, "peer": s, "mb": i, "start": e, "end": arrive})
                    p2p.append({"stage": s, "coll": "recv", "dir": kind, "peer": q, "mb": i, "start": f, "end": arrive})
                    stream_free[(q, "send", kind)] = arrive
                    stream_free[(s, "recv", kind)] = arrive
                    begin = max(begin, arrive)
                elif kind == "B" and (v, "F", i) not in spans:
                    break
                length = (fwd[s] if kind == "F" else bwd[s]) / virtual
                spans[(v, kind, i)] = (begin, begin + length)
                free[s] = begin + length
                pos[s] += 1
                left -= 1
                progressed = True
        if not progressed:
            raise RuntimeError("pipeline schedule deadlocks")
    return spans, p2p


def complete(cat: str, name: str, pid: int, tid: int, ts: float, dur: float, args: dict) -> dict:
    """A Kineto complete event ("X"), times in µs rounded to the ns as Kineto writes them."""
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": round(ts, 3),
        "dur": round(dur, 3),
        "args": args,
    }


def _ev(cat: str, name: str, ts: float, dur: float, args: dict, pid: int = PID, tid: int = TID) -> dict:
    return complete(cat, name, pid, tid, ts, dur, args)


def generate_pipeline(
    out: str,
    stages: int = 4,
    microbatches: int = 8,
    steps: int = 3,
    fwd_us: float = 40.0,
    bwd_us: float = 80.0,
    kernels: int = 4,
    transfer_us: float = 5.0,
    slow_stage: int | None = None,
    slow_factor: float = 2.0,
    schedule: str = "1f1b",
    gz: bool = False,
    virtual: int = 1,
) -> list[str]:
    """Writes one trace per stage under `out` (a run folder, see the module docstring); returns the paths.
    With `virtual` > 1, each rank holds that many stages (looped breadth-first, see `stage_order`)."""
    if fwd_us / kernels / virtual < 10 or bwd_us / kernels / virtual < 10:
        raise ValueError("each kernel must last at least 10 µs (launch calls are 8 µs apart at least)")
    fwd = [fwd_us * (slow_factor if s == slow_stage else 1.0) for s in range(stages)]
    bwd = [bwd_us * (slow_factor if s == slow_stage else 1.0) for s in range(stages)]
    t = 100.0
    sim = []
    for _ in range(steps):
        spans, p2p = simulate_step(stages, microbatches, t, fwd, bwd, transfer_us, schedule, virtual)
        sim.append((t, spans, p2p))
        t = max(e for _, e in spans.values()) + STEP_GAP_US
    os.makedirs(out, exist_ok=True)
    paths = []
    for s in range(stages):
        doc = stage_trace(s, stages, sim, kernels)
        name = f"stage{s}_rank{s:05d}.{1790970000000 + s}.pt.trace.json"
        path = os.path.join(out, name + (".gz" if gz else ""))
        data = json.dumps(doc).encode()
        with open(path, "wb") as f:
            f.write(gzip.compress(data, compresslevel=1) if gz else data)
        paths.append(path)
    return paths


def stage_trace(s: int, stages: int, sim: list, kernels: int) -> dict:
    """The Kineto trace of stage (= rank) `s`."""
    ev: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": PID, "tid": TID, "args": {"name": "thread 1 (python)"}},
        {"ph": "M", "name": "process_name", "pid": DEVICE, "tid": 0, "args": {"name": "GPU 0"}},
    ]
    ids = {"ext": 1, "corr": 1}

    def launch(op: str, op_args: dict, kname: str, ts: float, dur: float, stream: int, tid: int) -> None:
        ext, corr = ids["ext"], ids["corr"]
        cpu = ts - LAUNCH_LEAD_US
        ev.append(_ev("cpu_op", op, cpu, 8.0, {"External id": ext, **op_args}, tid=tid))
        ev.append(
            _ev("cuda_runtime", "cudaLaunchKernel", cpu + 1.0, 5.0, {"External id": ext, "correlation": corr}, tid=tid)
        )
        kargs = {"External id": ext, "correlation": corr, "device": DEVICE, "stream": stream}
        ev.append(
            _ev("kernel", kname, ts, dur, {**kargs, "grid": [264, 1, 1], "block": [256, 1, 1]}, pid=DEVICE, tid=stream)
        )
        ids["ext"] += 1
        ids["corr"] += 1

    ranks = json.dumps(list(range(stages)))
    for k, (t0, spans, p2p) in enumerate(sim):
        mine = sorted((x[0], kind, i, v, x[1]) for (v, kind, i), x in spans.items() if v % stages == s)
        step_end = max(v[1] for v in spans.values()) + 10.0
        ev.append(
            _ev(
                "user_annotation", f"ProfilerStep#{k + 1}", t0 - 40.0, step_end - t0 + 40.0, {"External id": ids["ext"]}
            )
        )
        ids["ext"] += 1
        for begin, kind, i, v, end in mine:
            kd = (end - begin) / kernels
            first_cpu = begin - LAUNCH_LEAD_US
            last_cpu_end = begin + (kernels - 1) * kd - LAUNCH_LEAD_US + 8.0
            ev.append(
                _ev(
                    "user_annotation",
                    f"PP:{v}{kind}{i}",
                    first_cpu - 0.5,
                    last_cpu_end - first_cpu + 1.0,
                    {"External id": ids["ext"]},
                )
            )
            ids["ext"] += 1
            op = "aten::mm" if kind == "F" else "MmBackward0"
            for j in range(kernels):
                launch(op, {}, FWD_KERNEL if kind == "F" else BWD_KERNEL, begin + j * kd, kd, STREAM, TID)
        for p in sorted(p2p, key=lambda p: p["start"]):
            if p["stage"] != s:
                continue
            args = {
                "Collective name": p["coll"],
                "In msg nelems": 4_194_304,
                "Out msg nelems": 4_194_304,
                "dtype": "BFloat16",
                "Group size": stages,
                "Process Group Name": PG_NAME,
                "Process Group Description": "pipeline_parallel",
                "Process Group Ranks": ranks,
                "Dst Rank" if p["coll"] == "send" else "Src Rank": p["peer"],
            }
            stream = P2P_STREAMS[(p["coll"], p["dir"])]
            launch(
                "record_param_comms",
                args,
                SENDRECV_KERNEL,
                p["start"],
                p["end"] - p["start"],
                stream,
                COMM_TID + stream,
            )
    ev.sort(key=lambda e: e.get("ts", -1))
    return {
        "schemaVersion": 1,
        "deviceProperties": [
            {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85_031_714_816, "numSms": 132}
        ],
        "distributedInfo": {
            "backend": "nccl",
            "rank": s,
            "world_size": stages,
            "pg_count": 2,
            "pg_config": [
                {
                    "pg_name": "0",
                    "pg_desc": "default_pg",
                    "backend_config": "cuda:nccl",
                    "pg_size": stages,
                    "ranks": "all",
                },
                {
                    "pg_name": PG_NAME,
                    "pg_desc": "pipeline_parallel",
                    "backend_config": "cuda:nccl",
                    "pg_size": stages,
                    "ranks": ranks,
                },
            ],
            "nccl_version": "2.21.5",
        },
        "trace_id": f"{s:032x}",
        "traceEvents": ev,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": BASE_NS,
    }


def parse_shape(text: str) -> tuple[int, int]:
    """ "STAGES:MICROBATCHES" -> (stages, microbatches)."""
    try:
        a, b = text.split(":")
        stages, mbs = int(a), int(b)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected STAGES:MICROBATCHES, got {text!r}") from None
    if stages < 2 or mbs < 1:
        raise argparse.ArgumentTypeError("a pipeline needs at least 2 stages and 1 micro-batch")
    return stages, mbs


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The pipeline job's options (shared with gen_distributed.py's --pipeline)."""
    ap.add_argument("--fwd-us", type=float, default=40.0, help="pipeline job: one stage's forward of a micro-batch")
    ap.add_argument("--bwd-us", type=float, default=80.0, help="pipeline job: one stage's backward of a micro-batch")
    ap.add_argument("--transfer-us", type=float, default=5.0, help="pipeline job: one P2P transfer")
    ap.add_argument("--slow-stage", type=int, default=None, help="pipeline job: this stage computes slower")
    ap.add_argument("--slow-factor", type=float, default=2.0, help="pipeline job: how much slower")
    ap.add_argument("--schedule", choices=("1f1b", "gpipe"), default="1f1b", help="pipeline job: the schedule")
    ap.add_argument(
        "--virtual", type=int, default=1, help="pipeline job: stages per rank (> 1: looped breadth-first, interleaved)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="run folder to write the stage traces into")
    ap.add_argument("--stages", type=int, default=4)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    add_arguments(ap)
    a = ap.parse_args()
    paths = generate_pipeline(
        a.out,
        a.stages,
        a.microbatches,
        a.steps,
        a.fwd_us,
        a.bwd_us,
        4,
        a.transfer_us,
        a.slow_stage,
        a.slow_factor,
        a.schedule,
        virtual=a.virtual,
    )
    print(f"wrote {len(paths)} stage traces to {a.out}")


if __name__ == "__main__":
    main()
