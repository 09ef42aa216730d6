"""Time of the single-rank critical path (profiler_core/analysis/worker/single_rank_path.py) on one trace: the whole
trace window and each of the first steps, best of `--repeat` runs (the stages it reads are computed once,
before timing).

    PYTHONPATH=. python benchmarks/bench_single_rank_path.py TRACE_OR_DIR [--steps 3] [--repeat 3]

A directory means its first *.json.gz. The 220k-event row of docs/diagnosis.md: make the trace with
`$GPUSCOPE_COMPAT_VENV/bin/python ../shared/tools/big_torch_trace.py OUT 10 2000`, then run this on OUT.
"""

from __future__ import annotations

import argparse
import glob
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from profiler_core.analysis.stages.steps import steps
    from profiler_core.analysis.worker.single_rank_path import critical_path
    from profiler_core.trace.read.reader import read_trace

    path = args.trace
    if os.path.isdir(path):
        path = sorted(glob.glob(os.path.join(path, "*.json.gz")))[0]
    t = read_trace(path, processes=0)
    n = len(steps(t))
    critical_path(t, 0 if n else None)  # the stages it reads (op tree, GPU links, steps) once
    print(f"{path}: {len(t.events)} events, {n} steps")
    for step in [None, *range(min(n, args.steps))]:
        best = float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            r = critical_path(t, step)
            best = min(best, time.perf_counter() - t0)
        what = "trace window" if step is None else f"step {step}"
        length = "-" if r["length_ns"] is None else f"{r['length_ns'] / 1e6:.2f} ms"
        print(f"  {what:>12}: {best:.3f} s, path {length}, {r['segments_total']} segments")


if __name__ == "__main__":
    main()
