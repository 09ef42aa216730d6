#!/usr/bin/env python3
"""The telemetry of a big job through the plugin's code (tb_plugin/telemetry.py, what /telemetry and
/telemetry/heatmap answer): 256 ranks x 100k steps by default, one straggling rank and a burst on another.

    python benchmarks/bench_telemetry.py                     # writes the job into a temporary folder
    python benchmarks/bench_telemetry.py --dir /data/job     # keeps it there (reused when present)

Three figures, each from a fresh state of the reader: **cold** (no decoded columns anywhere: every JSON line is
decoded; GPUSCOPE_CACHE=0), **from the cache** (another process: the finished files' decoded columns read from
$GPUSCOPE_CACHE_DIR/telemetry/), **in memory** (the plugin's next request: only the heatmap's binning and the
straggler rule run; the summary is kept with the job). Each is the load, a 1000 x 256 heatmap and the /telemetry
summary.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from profiler_core.flight import format  # noqa: E402


def write_rank(args: tuple[str, int, int, int]) -> int:
    """One rank's telemetry file: 10 ms steps with noise; rank 7 +3 ms always; rank 100 +40 ms in a burst."""
    folder, rank, world, steps = args
    rng = np.random.default_rng(rank)
    work = 10.0 + rng.gamma(2.0, 0.2, steps)
    if rank == 7:
        work += 3.0
    if rank == 100:
        work[50_000:50_200] += 40.0
    wall = np.full(steps, 60.0)
    out = [format.encode_event({"k": "start", "v": 1, "rank": rank, "world": world, "worker": f"h_rank{rank:05d}"})]
    enc = format.encode_step
    for s in range(steps):
        out.append(enc(s, 1.7e9 + s * 0.06, wall[s], 1.0, work[s], 900.0, wall[s] - work[s], 0.8, None, [(s, 9.1)]))
    out.append(format.encode_event({"k": "end", "s": steps - 1}))
    data = b"".join(out)
    Path(folder, f"h_rank{rank:05d}{format.SUFFIX}").write_bytes(data)
    return len(data)


def timed(what: str, fn):
    t0 = time.perf_counter()
    out = fn()
    print(f"{what}: {time.perf_counter() - t0:.2f} s", flush=True)
    return out


def answer(logdir: str) -> None:
    from tb_plugin import telemetry

    job = timed("  load", lambda: telemetry.load(logdir))
    h = timed("  heatmap 1000 x 256 (/telemetry/heatmap)", lambda: telemetry.heatmap(job, "work_ms", 1000))
    s = timed("  summary (/telemetry)", lambda: telemetry.summary(job))
    chronic = [c["rank"] for c in s["chronic"]]
    occ = [(o["rank"], o["bursts"][0]["first"], o["bursts"][0]["last"]) for o in s["occasional"] if o["bursts"]]
    print(
        f"  chronic {chronic}; occasional (rank, first, last) {occ[:3]}; cells {len(h['cells'])} x "
        f"{len(h['cells'][0])} (bin {h['step_bin']} steps)"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=256)
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--dir", help="where the job is (written when missing)")
    p.add_argument("--cache", help="the column cache's folder (GPUSCOPE_CACHE_DIR; default: a temporary one)")
    p.add_argument("--no-cold", action="store_true", help="skip the cold figure (it decodes every line: minutes)")
    p.add_argument("--processes", type=int, default=os.cpu_count() or 1, help="processes writing the job")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.dir or os.path.join(tmp, "job")
        os.makedirs(folder, exist_ok=True)
        if len(list(Path(folder).glob("*" + format.SUFFIX))) != args.ranks:
            t0 = time.perf_counter()
            with ProcessPoolExecutor(args.processes) as ex:
                size = sum(ex.map(write_rank, [(folder, r, args.ranks, args.steps) for r in range(args.ranks)]))
            took = time.perf_counter() - t0
            print(f"wrote {args.ranks} ranks x {args.steps} steps: {size / 1e9:.2f} GB in {took:.0f} s")
        os.environ["GPUSCOPE_CACHE_DIR"] = args.cache or os.path.join(tmp, "cache")
        from tb_plugin import telemetry

        if not args.no_cold:
            os.environ["GPUSCOPE_CACHE"] = "0"
            print("cold (every line decoded, no cache):")
            timed(" total", lambda: answer(folder))
            telemetry._files.clear()
            telemetry._jobs.clear()
        os.environ["GPUSCOPE_CACHE"] = "1"
        timed("the column cache filled (decode + store, or found)", lambda: telemetry.load(folder))
        telemetry._files.clear()
        telemetry._jobs.clear()
        print("from the cache (a fresh process's first request):")
        timed(" total", lambda: answer(folder))
        print("in memory (the next request):")
        timed(" total", lambda: answer(folder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
