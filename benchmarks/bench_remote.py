"""Remote logdir benchmark: the same trace read from local disk and from S3 (a moto server on
127.0.0.1, client s3fs), serially and with the parallel byte-range reader, and a scan of a
prefix holding many workers. Prints wall times and remote / local ratios (moto is a Python
server: a real S3 endpoint is usually faster, so the ratios are an upper bound on the overhead).

    python benchmarks/bench_remote.py                       # 300k events, 256 listed objects
    python benchmarks/bench_remote.py --events 1000000 --objects 1024

Needs `pip install -e ".[test]"` (moto[server], s3fs).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)


def _timed(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--objects", type=int, default=256, help="objects under the scanned prefix")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()

    from tests import s3_server  # the tests' moto helper (skips are exceptions outside pytest)

    server = s3_server.S3Server()
    os.environ.update(server.env)
    os.environ.pop("GPUSCOPE_PARSE_PROCESSES", None)
    from profiler_core import storage
    from profiler_core.trace.read import stream
    from profiler_core.trace.read.reader import default_parse_processes, read_trace
    from tb_plugin.runs import Scanner

    try:
        with tempfile.TemporaryDirectory() as tmp:
            local = os.path.join(tmp, "worker0.1796207156519141535.pt.trace.json.gz")
            subprocess.run(
                [sys.executable, os.path.join(HERE, "gen_trace.py"), "--events", str(args.events), "--out", local],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            server.make_bucket("bench")
            url = "s3://bench/logs/run1/" + os.path.basename(local)
            fs, path = storage.filesystem(url)
            fs.put_file(local, path)
            size = os.path.getsize(local)
            workers = max(1, default_parse_processes())
            stream.PARALLEL_MIN_BYTES = 0  # split this trace whatever its size
            rows = []
            for label, procs in (("serial", 0), (f"parallel ({workers} extra processes)", workers)):
                lt = _timed(lambda procs=procs: read_trace(local, processes=procs, tune_memory=True), args.repeat)
                rt = _timed(lambda procs=procs: read_trace(url, processes=procs, tune_memory=True), args.repeat)
                rows.append((f"read_trace {label}", lt, rt))
            for i in range(args.objects):
                fs.pipe_file(f"bench/many/run1/host_rank{i:05d}.1.pt.trace.json", b'{"traceEvents": []}')
            scan = _timed(lambda: Scanner("s3://bench/many").scan(), args.repeat)
            print(f"trace: {args.events} events, {size / 1e6:.1f} MB gzip; cores: {os.cpu_count()}")
            print(f"{'':44s} {'local s':>9s} {'s3 s':>9s} {'s3/local':>9s}")
            for name, lt, rt in rows:
                print(f"{name:44s} {lt:9.2f} {rt:9.2f} {rt / lt:9.2f}")
            print(f"scan of {args.objects} objects (one listing)        {'':9s} {scan:9.3f}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
