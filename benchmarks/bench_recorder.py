#!/usr/bin/env python3
"""Overhead of the flight recorder per step against a bare loop of a 10 ms step (target: < 1 %).

    python benchmarks/bench_recorder.py            # CPU job, telemetry to a temporary folder
    python benchmarks/bench_recorder.py --mpi      # + one mpi4py Allreduce per step (a singleton MPI), timed

Two figures, both against the same 10 ms step measured in the same run:
- **in the calls**: the time spent inside the recorder's calls of a step (`rec.data()`,
  `rec.optimizer()`, `rec.step()`; with --mpi also the wrapper around Allreduce, measured against the bare call),
  the best of several repeats (the least noisy estimate of a fixed cost on a shared machine) and the median;
- **end to end**: blocks of steps run bare and recorded alternately; the median step of each (noisy on a shared
  machine: the other jobs' load moves it more than the recorder does; given to show the order of magnitude).
The step is a fixed amount of work (a numpy matmul loop calibrated to 10 ms), not a sleep or a deadline, so the
recorder's cost adds to it rather than hiding in it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from profiler_core.flight import Recorder, Rules  # noqa: E402

CLOCK = time.perf_counter_ns  # the calls' own time (a vDSO clock read: tens of ns, unlike a CPU-time clock's syscall)
A = np.random.default_rng(0).random((96, 96))


def work(n: int) -> None:
    x = A
    for _ in range(n):
        x = A @ x
        x /= x.max()


def _ms(n: int) -> float:
    times = []
    for _ in range(9):
        t0 = time.perf_counter()
        work(n)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def calibrate(target_ms: float = 10.0) -> int:
    """Matmuls for a step of `target_ms` (the median of repeats, twice refined: a loaded machine's bursts)."""
    n = 10
    while _ms(n) < 2:
        n *= 4
    for _ in range(2):
        n = max(1, round(n * target_ms / _ms(n)))
    return n


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300, help="steps per block")
    p.add_argument("--rounds", type=int, default=8, help="bare/recorded block pairs")
    p.add_argument("--flush-steps", type=int, default=1, help="the recorder's flush_steps")
    p.add_argument("--mpi", action="store_true", help="one Allreduce per step (mpi4py), timed by the recorder")
    args = p.parse_args()
    comm = buf = None
    if args.mpi:
        from mpi4py import MPI

        comm, buf = MPI.COMM_WORLD, np.ones(1024)
    n = calibrate()
    t0 = time.perf_counter()
    work(n)
    step_ms = (time.perf_counter() - t0) * 1e3

    def allreduce() -> int:
        if comm is None:
            return 0
        c0 = CLOCK()
        comm.Allreduce(MPI.IN_PLACE, buf)
        return CLOCK() - c0

    def block(rec: Recorder | None) -> tuple[list[float], list[int], list[int]]:
        steps, inside, comm_ns = [], [], []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            c = 0
            if rec is None:
                work(n)
                comm_ns.append(allreduce())
            else:
                c0 = CLOCK()
                with rec.data():
                    c += CLOCK() - c0
                    work(n // 10)
                    c0 = CLOCK()
                c += CLOCK() - c0
                work(n - n // 10 - n // 20)
                comm_ns.append(allreduce())
                c0 = CLOCK()
                with rec.optimizer():
                    c += CLOCK() - c0
                    work(n // 20)
                    c0 = CLOCK()
                rec.step()
                c += CLOCK() - c0
            inside.append(c)
            steps.append((time.perf_counter() - t0) * 1e3)
        return steps, inside, comm_ns

    bare_steps: list[float] = []
    rec_steps: list[float] = []
    inside: list[int] = []
    bare_comm: list[int] = []
    rec_comm: list[int] = []
    with tempfile.TemporaryDirectory() as d:
        rec = Recorder(d, Rules(), worker="bench", flush_steps=args.flush_steps)
        block(rec)  # warm up both paths
        block(None)
        for _ in range(args.rounds):
            s, _, cn = block(None)
            bare_steps += s
            bare_comm += cn
            s, c, cn = block(rec)
            rec_steps += s
            inside += c
            rec_comm += cn
        rec.close()
        size = os.path.getsize(rec.path)
        records = Path(rec.path).read_bytes().count(b"\n")
    best_us, med_us = min(inside) / 1e3, statistics.median(inside) / 1e3
    wrap_us = max(0.0, (statistics.median(rec_comm) - statistics.median(bare_comm)) / 1e3) if args.mpi else 0.0
    bare, recd = statistics.median(bare_steps), statistics.median(rec_steps)
    print(f"step: {step_ms:.2f} ms of numpy work ({n} matmuls of 96x96); {args.rounds} x {args.steps} steps each way")
    print(f"recorder calls per step (time inside them): best {best_us:.1f} us, median {med_us:.1f} us")
    if args.mpi:
        print(f"Allreduce wrapper (timing on): +{wrap_us:.2f} us per call (median against the bare call)")
    print(
        f"overhead in the calls: {100 * (med_us + wrap_us) / 1e3 / bare:.3f} % of the median bare step "
        f"({bare:.3f} ms)  [target < 1 %]"
    )
    print(
        f"end to end (median step): bare {bare:.3f} ms, recorded {recd:.3f} ms, ratio {recd / bare:.4f} "
        f"(noise of a shared machine included)"
    )
    print(f"telemetry: {records} lines, {size / max(1, records):.0f} bytes per line")
    return 0


if __name__ == "__main__":
    sys.exit(main())
