"""Issue 40 item 1: the time `read_trace` takes on a small hostile gzip (2,000 events and one name of
600,000 escaped quotes, longer than stream.MAX_EVENT_SCAN, plus an escaped args key), each read in a child
process killed after --timeout seconds (reported as "> TIMEOUT s").

    python benchmarks/hostile_read.py [--timeout 60] [--native 0|1]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def hostile_trace(events: int = 2000, quotes: int = 600_000) -> bytes:
    """The JSON of the issue's file: `events` events, the last one named by `quotes` escaped quotes (a string
    that the streaming reader's first exact scan window, stream.BLOCK + stream.MAX_EVENT_SCAN bytes, ends
    inside), one args key written with an escape (legal JSON the native reader used to decline) and one `ts`
    given as a string (which it declines)."""
    evs = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i % 7}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5}
        for i in range(events)
    ]
    evs[-1]["name"] = '"' * quotes
    evs[1]["args"] = {'Input "Dims"': [[1]]}
    evs[2]["ts"] = "20"
    return json.dumps({"traceEvents": evs}).encode()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--native", default=None, help="GPUSCOPE_NATIVE_READER for the read (default: as set)")
    args = ap.parse_args()
    data = hostile_trace()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "hostile.pt.trace.json.gz")
        with open(path, "wb") as f:
            f.write(gzip.compress(data))
        env = dict(os.environ, PYTHONPATH=ROOT)
        if args.native is not None:
            env["GPUSCOPE_NATIVE_READER"] = args.native
        code = (
            "import sys; from profiler_core.trace.read.reader import read_trace; "
            "t = read_trace(sys.argv[1], processes=0); print(len(t.events))"
        )
        t0 = time.perf_counter()
        try:
            out = subprocess.run(
                [sys.executable, "-c", code, path], env=env, capture_output=True, text=True, timeout=args.timeout
            )
        except subprocess.TimeoutExpired:
            print(f"{os.path.getsize(path)} bytes gzip, {len(data)} bytes JSON: > {args.timeout:g} s (killed)")
            return
        took = time.perf_counter() - t0
        what = out.stdout.strip() or out.stderr.strip()[-300:]
        print(f"{os.path.getsize(path)} bytes gzip, {len(data)} bytes JSON: {took:.2f} s (child process), {what}")


if __name__ == "__main__":
    main()
