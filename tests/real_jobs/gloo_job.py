"""A small real `torch.distributed` job on gloo (CPU), profiled by `torch.profiler`, with planted causes.

Run by the compat venv's python (torch 2.13 CPU), never imported by the test process::

    python gloo_job.py --out LOGDIR --run RUN --port PORT --world 4 --steps 5 \
        --collective all_reduce --plant 2:data:60 --plant 1:compute:40 --stagger 500

Each rank: a DataLoader (num_workers=0) whose items sleep --data-ms (+ a data plant's MS on that rank); a
`record_function("compute")` of --compute-ms of 256x256 matmuls (+ a compute plant's MS of extra matmuls on that
rank, in `record_function("extra_compute")` inside it); then one collective of --collective per step.
Two unprofiled warm-up steps come first (gloo's pairs connected, every rank past them together); then rank r
sleeps r * --stagger ms, and only then enters `torch.profiler.profile(schedule=schedule(wait=0, warmup=0,
active=STEPS), on_trace_ready=tensorboard_trace_handler(LOGDIR/RUN, worker_name=f"rank{r}"))`, so that
`ProfilerStep#0` (opened when the profiler is entered) starts r * STAGGER ms after rank 0's. One trace per rank.
Compute and data plants are timed by the wall clock (loop until MS have passed), so that they last MS however
the 2 shared cores are contended. What torch writes: tests/real_jobs/PROVENANCE.md.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings

import torch
import torch._inductor  # noqa: F401  (the profiler's first start imports it: 1.4 s per rank, once here before the fork)
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

N = 256  # side of the matmuls (about 1 ms each on one thread: few events)
ELEMS = 4096  # elements of the collective's tensor (all_reduce, broadcast, send/recv)
A2A_UNIT = 256  # all_to_all: rank r sends (r + 1) * (j + 1) * A2A_UNIT elements to rank j


def parse_plant(text: str) -> tuple[int, str, float]:
    rank, kind, ms = text.split(":")
    if kind not in ("data", "compute"):
        raise argparse.ArgumentTypeError(f"plant kind {kind!r}: data or compute")
    return int(rank), kind, float(ms)


def busy_matmuls(ms: float, a: torch.Tensor, b: torch.Tensor) -> int:
    """Matmuls until `ms` of wall clock have passed; how many ran."""
    end = time.perf_counter() + ms / 1e3
    n = 0
    while time.perf_counter() < end:
        torch.mm(a, b)
        n += 1
    return n


class SlowData(torch.utils.data.Dataset):
    def __init__(self, ms: float, length: int) -> None:
        self.ms, self.length = ms, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(self.ms / 1e3)
        return torch.full((N,), float(i))


def collective(kind: str, rank: int, world: int, x: torch.Tensor) -> None:
    if kind == "all_reduce":
        dist.all_reduce(x)
    elif kind == "broadcast":
        dist.broadcast(x, src=0)
    elif kind == "all_to_all":
        in_splits = [(rank + 1) * (j + 1) * A2A_UNIT for j in range(world)]
        out_splits = [(j + 1) * (rank + 1) * A2A_UNIT for j in range(world)]
        inp = torch.ones(sum(in_splits))
        out = torch.empty(sum(out_splits))
        dist.all_to_all_single(out, inp, output_split_sizes=out_splits, input_split_sizes=in_splits)
    elif kind == "sendrecv":  # a chain 0 -> 1 -> ... -> world-1
        if rank > 0:
            dist.recv(x, src=rank - 1)
        if rank < world - 1:
            dist.send(x, dst=rank + 1)
    else:
        raise ValueError(kind)


def worker(rank: int, args: argparse.Namespace) -> None:
    warnings.filterwarnings("ignore", message="Profiler won't be using warmup")
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank, world_size=args.world, timeout=_timeout()
    )
    extra = {"data": 0.0, "compute": 0.0}
    for r, kind, ms in args.plant:
        if r == rank:
            extra[kind] += ms
    warm = 2
    loader = torch.utils.data.DataLoader(
        SlowData(args.data_ms + extra["data"], warm + args.steps), batch_size=1, num_workers=0
    )
    a, b = torch.randn(N, N), torch.randn(N, N)
    x = torch.ones(ELEMS)
    batches = iter(loader)

    def one_step() -> None:
        batch = next(batches)
        with record_function("compute"):
            busy_matmuls(args.compute_ms, a, b + batch.mean())
            if extra["compute"]:
                with record_function("extra_compute"):
                    busy_matmuls(extra["compute"], a, b)
        collective(args.collective, rank, args.world, x)

    for _ in range(warm):  # unprofiled: gloo's connections used once, every rank leaves together
        one_step()
    time.sleep(rank * args.stagger / 1e3)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=0, warmup=0, active=args.steps, repeat=1),
        on_trace_ready=tensorboard_trace_handler(os.path.join(args.out, args.run), worker_name=f"rank{rank}"),
        record_shapes=True,
    ) as prof:
        for _ in range(args.steps):
            one_step()
            prof.step()
    dist.barrier()
    # torch 2.13: each gloo work carries Python thread-local objects, and gloo's thread takes the GIL to free a
    # finished one; the process group's destructor joins that thread holding the GIL (a hang at exit if the
    # thread still waits). A pause with the GIL released lets it finish first.
    time.sleep(0.2)
    dist.destroy_process_group()


def _timeout():
    import datetime

    return datetime.timedelta(seconds=60)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="the log directory (the run folder is OUT/RUN)")
    p.add_argument("--run", default="job")
    p.add_argument("--port", type=int, required=True, help="a free TCP port on 127.0.0.1 for the rendezvous")
    p.add_argument("--world", type=int, default=4)
    p.add_argument("--steps", type=int, default=5, help="profiled steps")
    p.add_argument("--collective", default="all_reduce", choices=("all_reduce", "broadcast", "all_to_all", "sendrecv"))
    p.add_argument("--plant", type=parse_plant, action="append", default=[], metavar="RANK:data|compute:MS")
    p.add_argument("--stagger", type=float, default=0.0, metavar="MS", help="rank r starts r*MS after rank 0")
    p.add_argument("--data-ms", type=float, default=2.0, help="every rank's data loading per step")
    p.add_argument("--compute-ms", type=float, default=5.0, help="every rank's matmuls per step")
    args = p.parse_args(argv)
    for r, _, _ in args.plant:
        if not 0 <= r < args.world:
            p.error(f"plant rank {r} outside world {args.world}")
    # fork: the children have torch imported already (spawn would import it once per rank, seconds each)
    mp.start_processes(worker, args=(args,), nprocs=args.world, join=True, start_method="fork")
    run = os.path.join(args.out, args.run)
    print(json.dumps({"run": run, "traces": sorted(os.listdir(run))}))


if __name__ == "__main__":
    main()
