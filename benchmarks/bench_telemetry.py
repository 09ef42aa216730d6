#!/usr/bin/env python3
"""The telemetry of a big job through the plugin's code (tb_plugin/telemetry.py, what /telemetry and
/telemetry/heatmap answer): 256 ranks x 100k steps by default, one straggling rank and a burst on another.

    python benchmarks/bench_telemetry.py                     # writes the job into a temporary folder
    python benchmarks/bench_telemetry.py --dir /data/job     # keeps it there (reused when present)

Four figures, each from a fresh state of the reader: **cold, JSON** (no decoded columns anywhere and no binary
twin used: every JSON line is decoded; GPUSCOPE_CACHE=0), **cold, binary** (the same, the step columns read from
each file's `.telemetry.bin` twin), **from the cache** (another process: the finished files' decoded columns read
from $GPUSCOPE_CACHE_DIR/telemetry/), **in memory** (the plugin's next request: only the heatmap's binning and the
straggler rule run; the summary is kept with the job). Each is the load, a 1000 x 256 heatmap and the /telemetry
summary; the last lines give the totals' ratios, and check that both cold reads answered the same.
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
from profiler_core.flight.recorder import _LocalSink  # noqa: E402


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
    path = Path(folder, f"h_rank{rank:05d}{format.SUFFIX}")
    sink = _LocalSink(str(path))  # the recorder's own writer: the JSON lines and their binary twin
    sink.write(format.encode_event({"k": "start", "v": 1, "rank": rank, "world": world, "worker": path.stem[:-10]}))
    enc = format.encode_step
    for first in range(0, steps, 10_000):
        lines, held = [], []
        for s in range(first, min(steps, first + 10_000)):
            rec = (s, 1.7e9 + s * 0.06, wall[s], 1.0, work[s], 900.0, wall[s] - work[s], 0.8, None, [(s, 9.1)])
            lines.append(enc(*rec))
            held.append((len(lines[-1]), rec))
        sink.write(b"".join(lines), held)
    sink.write(format.encode_event({"k": "end", "s": steps - 1}))
    sink.close()
    return path.stat().st_size


def timed(what: str, fn):
    t0 = time.perf_counter()
    out = fn()
    print(f"{what}: {time.perf_counter() - t0:.2f} s", flush=True)
    return out


def answer(logdir: str) -> tuple[float, dict, dict]:
    """(seconds, the summary, the heatmap): a load, a heatmap and a summary, as the plugin's routes do."""
    from tb_plugin import telemetry

    t0 = time.perf_counter()
    job = timed("  load", lambda: telemetry.load(logdir))
    h = timed("  heatmap 1000 x 256 (/telemetry/heatmap)", lambda: telemetry.heatmap(job, "work_ms", 1000))
    s = timed("  summary (/telemetry)", lambda: telemetry.summary(job))
    took = time.perf_counter() - t0
    chronic = [c["rank"] for c in s["chronic"]]
    occ = [(o["rank"], o["bursts"][0]["first"], o["bursts"][0]["last"]) for o in s["occasional"] if o["bursts"]]
    print(
        f"  chronic {chronic}; occasional (rank, first, last) {occ[:3]}; cells {len(h['cells'])} x "
        f"{len(h['cells'][0])} (bin {h['step_bin']} steps)"
    )
    print(f" total: {took:.2f} s", flush=True)
    return took, s, h


def fresh() -> None:
    """The reader's memory emptied (a new process)."""
    from tb_plugin import telemetry

    telemetry._files.clear()
    telemetry._jobs.clear()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=256)
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--dir", help="where the job is (written when missing)")
    p.add_argument("--cache", help="the column cache's folder (GPUSCOPE_CACHE_DIR; default: a temporary one)")
    p.add_argument("--no-cold", action="store_true", help="skip the cold JSON figure (it decodes every line: minutes)")
    p.add_argument("--processes", type=int, default=os.cpu_count() or 1, help="processes writing the job")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.dir or os.path.join(tmp, "job")
        os.makedirs(folder, exist_ok=True)
        if len(list(Path(folder).glob("*" + format.SUFFIX))) != args.ranks:
            t0 = time.perf_counter()
            with ProcessPoolExecutor(args.processes) as ex:
                size = sum(ex.map(write_rank, [(folder, r, args.ranks, args.steps) for r in range(args.ranks)]))
            wrote_s = time.perf_counter() - t0
            print(f"wrote {args.ranks} ranks x {args.steps} steps: {size / 1e9:.2f} GB in {wrote_s:.0f} s")
        os.environ["GPUSCOPE_CACHE_DIR"] = args.cache or os.path.join(tmp, "cache")
        from tb_plugin import telemetry

        took: dict[str, float] = {}
        os.environ["GPUSCOPE_CACHE"] = "0"
        if not args.no_cold:
            print("cold, JSON (every line decoded: no binary twin, no cache):")
            real, telemetry._read_binary = telemetry._read_binary, lambda path, data: None
            try:
                took["cold JSON"], s_json, h_json = answer(folder)
            finally:
                telemetry._read_binary = real
            fresh()
        print("cold, binary (the step columns from the .telemetry.bin twins, no cache):")
        took["cold binary"], s_bin, h_bin = answer(folder)
        if not args.no_cold:
            print(f"cold JSON and cold binary answer the same: {(s_json, h_json) == (s_bin, h_bin)}")
        fresh()
        os.environ["GPUSCOPE_CACHE"] = "1"
        timed("the column cache filled (read + store, or found)", lambda: telemetry.load(folder))
        fresh()
        print("from the cache (a fresh process's first request):")
        took["cache"] = answer(folder)[0]
        print("in memory (the next request):")
        took["memory"] = answer(folder)[0]
        base = took["cold binary"]
        print("totals: " + ", ".join(f"{k} {v:.2f} s ({v / base:.2f} x cold binary)" for k, v in took.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
