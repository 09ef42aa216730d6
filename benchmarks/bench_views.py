"""Benchmark the timeline tiles and the memory curve on a large trace.

Targets (issue 5): a fully zoomed-out timeline tile of a 2M-event trace in < 50 ms after the first
load; the memory curve with 200k memory events in < 1 s. Baselines measured in the same run:
- tile: one O(events) pass that bins every event into its pixel (np.bincount over all starts),
  i.e. what a request would cost without the precomputed per-row arrays;
- memory curve: one pandas sort of the memory records by time (the least any curve needs).

    python benchmarks/bench_views.py                    # generates a 2M-event trace (cached in /tmp)
    python benchmarks/bench_views.py --trace FILE       # any Kineto trace
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from profiler_core.trace.read.reader import read_trace  # noqa: E402
from tb_plugin.views import memory as mv  # noqa: E402
from tb_plugin.views import timeline as tv  # noqa: E402


class _Trace:
    """A TraceData look-alike sharing the events of another trace, with its own memory records."""

    def __init__(self, t, memory: pd.DataFrame) -> None:
        self.__dict__.update({k: v for k, v in t.__dict__.items() if not k.startswith("_")})
        self.memory = memory


def _timeit(fn, repeat: int = 7) -> tuple[float, object]:
    """Median wall time of `repeat` calls (the shared 2-core machine is noisy: see also _best)."""
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    _timeit.best = min(times)
    return statistics.median(times), out


def _synthetic_memory(t, n: int, seed: int = 0) -> pd.DataFrame:
    """n [memory] records spread over the trace on its busiest thread: alloc/free pairs by address."""
    rng = np.random.default_rng(seed)
    ev = t.events
    lo, hi = int(ev["ts"].min()), int((ev["ts"] + ev["dur"]).max())
    pid, tid = ev[["pid", "tid"]].value_counts().index[0]
    half = n // 2
    a_ts = np.sort(rng.integers(lo, hi, half))
    life = rng.integers(1_000, 5_000_000, half)
    f_ts = np.minimum(a_ts + life, hi)
    size = rng.integers(64, 1 << 24, half)
    ts = np.concatenate([a_ts, f_ts])
    b = np.concatenate([size, -size])
    addr = np.concatenate([np.arange(half), np.arange(half)]) * 4096 + (1 << 40)
    o = np.argsort(ts, kind="stable")
    ts, b, addr = ts[o], b[o], addr[o]
    return pd.DataFrame(
        {
            "ts": ts,
            "pid": np.int64(pid),
            "tid": np.int64(tid),
            "device_type": np.int64(1),
            "device_id": np.int64(0),
            "addr": addr,
            "bytes": b,
            "total_allocated": np.cumsum(b),
            "total_reserved": np.maximum.accumulate(np.cumsum(b)),
            "idx": np.arange(len(ts)),
        }
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", help="a Kineto trace file (default: generate one)")
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--memory-events", type=int, default=200_000)
    ap.add_argument("--width", type=int, default=1600)
    args = ap.parse_args()

    path = args.trace
    if not path:
        from benchmarks.gen_trace import generate

        d = "/tmp/gpuscope_bench_views"
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, f"worker0.{args.events}.pt.trace.json")
        if not os.path.exists(path):
            t0 = time.perf_counter()
            generate(path, args.events)
            print(f"generated {path} in {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    t = read_trace(path, tune_memory=True)
    print(f"read_trace: {len(t.events):,} events, {len(t.memory):,} memory records in {time.perf_counter() - t0:.2f} s")

    # ---- timeline
    t0 = time.perf_counter()
    tv.timeline(t, width_px=args.width)
    first = time.perf_counter() - t0
    req, out = _timeit(lambda: tv.timeline(t, width_px=args.width), repeat=15)
    req_best = _timeit.best
    enc, text = _timeit(lambda: json.dumps(out), repeat=3)
    end_us = out["trace_end_us"]
    zoom, _ = _timeit(lambda: tv.timeline(t, end_us * 0.5, end_us * 0.5 + end_us / 1000, args.width))
    srch, res = _timeit(lambda: tv.search(t, "conv", 100), repeat=3)
    ts = t.events["ts"].to_numpy(np.int64)

    def full_scan():
        lo, hi = ts[0], ts[-1] + 1
        return np.bincount(((ts - lo) * args.width // (hi - lo)).astype(np.int64), minlength=args.width)

    base, _ = _timeit(full_scan)
    rows = sum(len(tr["rows"]) for tr in out["tracks"])
    print(f"timeline first call (builds per-row arrays): {first * 1e3:.0f} ms")
    print(
        f"timeline zoomed-out tile, {args.width} px, {len(out['tracks'])} tracks, {rows} rows: "
        f"median {req * 1e3:.1f} ms, best {req_best * 1e3:.1f} ms (target < 50 ms) "
        f"+ json.dumps {enc * 1e3:.1f} ms, {len(text) / 1e6:.2f} MB; "
        f"ratio to one O(events) binning pass ({base * 1e3:.1f} ms): {req / base:.2f}x"
    )
    print(
        f"timeline zoomed-in tile (1/1000 of the trace): {zoom * 1e3:.1f} ms; "
        f"search 'conv' ({res['total']:,} matches): {srch * 1e3:.1f} ms"
    )

    # ---- memory curve
    mem = t.memory if len(t.memory) >= args.memory_events else _synthetic_memory(t, args.memory_events)
    note = "from the trace" if mem is t.memory else "synthetic, on the trace's events"
    tm = _Trace(t, mem)
    t0 = time.perf_counter()
    c = mv.memory_curve(tm)
    first_m = time.perf_counter() - t0
    again, _ = _timeit(lambda: mv.memory_curve(tm, max_points=2000), repeat=3)
    win, _ = _timeit(lambda: mv.memory_curve(tm, start_us=end_us * 0.25, end_us=end_us * 0.75), repeat=3)
    base_m, _ = _timeit(lambda: mem.sort_values("ts", kind="stable"), repeat=3)
    pts = sum(len(v["ts_us"]) for v in c["curves"].values())
    print(
        f"memory curve, {len(mem):,} records ({note}): first call {first_m * 1e3:.0f} ms (target < 1 s), "
        f"cached {again * 1e3:.1f} ms, half-window {win * 1e3:.1f} ms, {pts} points; "
        f"ratio to one pandas sort of the records ({base_m * 1e3:.1f} ms): {first_m / base_m:.1f}x"
    )


if __name__ == "__main__":
    main()
