"""A real `torch.distributed` job on gloo (CPU) with the flight recorder: the torch path of the recorder.

Run by the compat venv's python (torch 2.13 CPU) with this checkout on PYTHONPATH, never imported by the test
process::

    python flight_gloo_job.py --out LOGDIR --port PORT --world 4 --steps 120 --plant 2:30:60-90

Each rank: a DataLoader (num_workers=0) whose item i sleeps --data-ms (+ the plant's MS on the planted rank when i
is in FROM..TO-1), 3 ms of matmuls in `record_function("compute")`, one `dist.all_reduce` per step (--ddp: the
backward of a DDP linear layer instead, its gradients all-reduced by DDP through `rec.ddp_comm_hook()`). The recorder
(`Recorder(LOGDIR, Rules(step_factor=None, rank_ms=15, ...), worker=f"rank{r}")`) times the data loading, hooks
torch.distributed (its all_reduce, and the exchange through `all_gather`), and captures with torch.profiler (torch
is imported: `capture="auto"`), into LOGDIR/capture_step*/.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import time
import warnings

import torch
import torch._inductor  # noqa: F401  (the profiler's first start imports it: once here before the fork)
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import record_function

from profiler_core.flight import Recorder, Rules

N = 256


class SlowData(torch.utils.data.Dataset):
    def __init__(self, ms: float, plant_ms: float, window: range, length: int) -> None:
        self.ms, self.plant_ms, self.window, self.length = ms, plant_ms, window, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> torch.Tensor:
        end = time.perf_counter() + (self.ms + (self.plant_ms if i in self.window else 0.0)) / 1e3
        while time.perf_counter() < end:  # wall-clock: lasts MS however the cores are contended
            time.sleep(0.0005)
        return torch.full((N,), float(i))


def worker(rank: int, args: argparse.Namespace) -> None:
    warnings.filterwarnings("ignore", message="Profiler won't be using warmup")
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{args.port}",
        rank=rank,
        world_size=args.world,
        timeout=datetime.timedelta(seconds=60),
    )
    p_rank, p_ms, p_steps = args.plant
    window = range(*p_steps) if rank == p_rank else range(0)
    loader = torch.utils.data.DataLoader(
        SlowData(args.data_ms, p_ms, window, args.steps), batch_size=None, num_workers=0
    )
    a, b = torch.randn(N, N), torch.randn(N, N)
    x = torch.ones(4096)
    rec = Recorder(
        args.out,
        Rules(step_factor=None, rank_ms=15.0, rank_steps=5, exchange_every=10, capture_steps=3),
        worker=f"rank{rank}",
    )
    model = None
    if args.ddp:  # DDP all-reduces the gradients from C++: timed through its public communication hook
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(N, N))
        model.register_comm_hook(None, rec.ddp_comm_hook())
    batches = iter(loader)
    for _ in range(args.steps):
        with rec.data():
            batch = next(batches)
        with record_function("compute"):
            end = time.perf_counter() + 0.003
            while time.perf_counter() < end:
                a @ (b + batch.mean())
        if model is not None:
            model(batch[None, :]).sum().backward()
        else:
            dist.all_reduce(x)
        rec.step()
    rec.close()
    dist.barrier()
    # torch 2.13: each gloo work carries Python thread-local objects, and gloo's thread takes the GIL to free a
    # finished one; the process group's destructor joins that thread holding the GIL (a hang at exit if the
    # thread still waits). A pause with the GIL released lets it finish first.
    time.sleep(0.2)
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--world", type=int, default=4)
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--data-ms", type=float, default=1.0)
    p.add_argument("--plant", default="2:30:60-90", help="RANK:MS:FROM-TO")
    p.add_argument("--ddp", action="store_true", help="a DDP model's backward instead of an explicit all_reduce")
    args = p.parse_args()
    r, ms, span = args.plant.split(":")
    lo, hi = span.split("-")
    args.plant = (int(r), float(ms), (int(lo), int(hi)))
    mp.start_processes(worker, args=(args,), nprocs=args.world, join=True, start_method="fork")
    print(json.dumps({"out": args.out, "files": sorted(os.listdir(args.out))}))


if __name__ == "__main__":
    main()
