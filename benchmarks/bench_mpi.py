#!/usr/bin/env python3
"""Overhead of the mpi4py integration per MPI call: while profiling (target < 5 us) and when not
profiling (target zero: after the profile, the methods are mpi4py's original objects again).

    python benchmarks/bench_mpi.py                 # a singleton MPI process
    mpiexec -n 2 python benchmarks/bench_mpi.py    # two ranks (rank 0 prints)

Baseline: the same call on unpatched mpi4py, measured in the same run. Each figure is the best
of several repeats of N calls (min is the least noisy estimate of the fixed cost), in CPU time of
the calling thread (``--wall`` for wall-clock time), so that other processes on a shared machine
do not inflate it.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from mpi4py import MPI

from profiler_core import ProfilerActivity, profile, schedule
from profiler_core.integrations import mpi as mpi_integration

CLOCK = time.thread_time_ns  # CPU time of this thread: the machine's other load does not inflate it


def per_call_us(fn, n: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = CLOCK()
        for _ in range(n):
            fn()
        best = min(best, (CLOCK() - t0) / n)
    return best / 1000.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=20000, help="calls per repeat")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--wall", action="store_true", help="measure wall-clock time instead of thread CPU time")
    args = ap.parse_args()
    global CLOCK
    if args.wall:
        CLOCK = time.perf_counter_ns
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    x = np.ones(16, dtype=np.float64)
    y = np.empty_like(x)
    calls = {
        "Allreduce(16 doubles)": lambda: comm.Allreduce(x, y),
        "Allreduce(IN_PLACE, [buf, DOUBLE])": lambda: comm.Allreduce(MPI.IN_PLACE, [y, MPI.DOUBLE]),
        "Bcast(16 doubles)": lambda: comm.Bcast(x, root=0),
        "Barrier()": lambda: comm.Barrier(),
        "allreduce(1) (pickle)": lambda: comm.allreduce(1),
        "Iallreduce + Wait (2 calls)": lambda: comm.Iallreduce(x, y).Wait(),
    }
    originals = {name: MPI.Comm.__dict__[name] for name in ("Allreduce", "Bcast", "Barrier", "allreduce")}
    rows = []
    for label, fn in calls.items():
        comm.Barrier()
        base = per_call_us(fn, args.n, args.repeats)
        comm.Barrier()
        # While recording: the real profiler with the integration installed.
        with profile(activities=[ProfilerActivity.CPU]):
            assert mpi_integration.is_installed()
            rec = per_call_us(fn, args.n, args.repeats)
        # A profile in a schedule's wait phase: the integration is not even installed.
        with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=10, warmup=1, active=1)):
            idle_installed = mpi_integration.is_installed()
            idle = per_call_us(fn, args.n, args.repeats)
        comm.Barrier()
        after = per_call_us(fn, args.n, args.repeats)
        rows.append((label, base, rec, idle, after))
        assert not idle_installed

    # The wrapper's own share (describing the message), with a do-nothing op recorder.
    class _Null:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    null = _Null()

    def null_op(name, *inputs, args=None):
        return null

    real = mpi_integration._resolve_core
    mpi_integration._resolve_core = lambda: ((lambda: True), null_op, (lambda: False))
    mpi_integration.install()
    own = per_call_us(calls["Allreduce(16 doubles)"], args.n, args.repeats)
    mpi_integration.uninstall()
    mpi_integration._resolve_core = real
    base_ar = rows[0][1]

    # Reference under the same machine load: the core's record_function enter+exit while recording.
    from profiler_core import record_function

    def one_record_function():
        with record_function("x"):
            pass

    with profile(activities=[ProfilerActivity.CPU]):
        rf = per_call_us(one_record_function, args.n, args.repeats)

    restored = all(MPI.Comm.__dict__[name] is obj for name, obj in originals.items())
    if rank != 0:
        return
    print(
        f"mpi4py {MPI.Get_library_version().splitlines()[0].strip()}, {comm.Get_size()} rank(s), "
        f"n={args.n} x {args.repeats} (best), {'wall-clock' if args.wall else 'thread CPU'} time"
    )
    print("overhead = profiling - baseline; 'wait phase' and 'after' are differences to the baseline too")
    print(f"{'call':38s} {'baseline':>9s} {'profiling':>10s} {'overhead':>9s} {'wait phase':>10s} {'after':>8s}")
    for label, base, rec, idle, after in rows:
        print(f"{label:38s} {base:8.2f}us {rec:9.2f}us {rec - base:8.2f}us {idle - base:9.2f}us {after - base:7.2f}us")
    print(f"wrapper alone (no-op recorder), Allreduce: {own - base_ar:.2f} us over baseline")
    print(f"after profiling, methods are mpi4py's original objects: {restored}")
    print(f"reference: record_function enter+exit while recording: {rf:.2f} us")
    worst = max((r[2] - r[1]) / (2 if "(2 calls)" in r[0] else 1) for r in rows)
    print(
        f"worst overhead while profiling: {worst:.2f} us per call = {worst / rf:.1f} x record_function "
        f"(target < 5 us): {'OK' if worst < 5 else 'OVER'}"
    )
    if comm.Get_size() > 1:
        print(
            "note: with several ranks on few cores the figures include the other ranks' scheduling; "
            "the single-process run is the clean measure of the per-call cost"
        )


if __name__ == "__main__":
    main()
