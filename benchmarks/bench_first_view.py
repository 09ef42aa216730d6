"""First view of a big file in a busy logdir: nine files, the big one last in the loader's queue.

Starts `tensorboard --logdir` (the plugin imported from --root, default this checkout) on a cold
parse cache, asks for the runs (which starts the background loading), then for the big run's
operators view, and prints how long the view took and how many of the nine files were loaded when
it answered (the fewer, the less the view waited for the rest of the queue).

    python benchmarks/bench_first_view.py                  # this checkout
    python benchmarks/bench_first_view.py --root ../main   # another checkout, for a before/after
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))


def write_trace(path: str, n: int) -> None:
    """A CPU trace of n ops shaped like torch's (names, External id, Input Dims)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write('{"traceEvents": [')
        for i in range(n):
            f.write(
                ("," if i else "")
                + json.dumps(
                    {
                        "ph": "X",
                        "cat": "cpu_op",
                        "name": f"aten::op{i % 97}",
                        "pid": 1,
                        "tid": 1 + i % 3,
                        "ts": i * 10.0,
                        "dur": 5.0,
                        "args": {"External id": i, "Input Dims": [[i % 7, 3]], "Input type": ["float"]},
                    }
                )
            )
        f.write("]}")
    old = time.time() - 3600
    os.utime(path, (old, old))


def get(url: str, timeout: float = 600):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read().decode("utf-8"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=os.path.dirname(HERE), help="checkout whose tb_plugin is served")
    ap.add_argument("--small", type=int, default=60_000, help="events in each of the 8 other files")
    ap.add_argument("--big", type=int, default=700_000, help="events in the big file (last in the queue)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="gpuscope-first-view-")
    logdir = os.path.join(tmp, "logdir")
    for i in range(8):
        write_trace(os.path.join(logdir, f"run{i}", "w.1.pt.trace.json"), args.small)
    write_trace(os.path.join(logdir, "z_big", "w.1.pt.trace.json"), args.big)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, GPUSCOPE_CACHE_DIR=os.path.join(tmp, "cache"), PYTHONPATH=os.path.abspath(args.root))
    log = open(os.path.join(tmp, "tb.log"), "w")  # noqa: SIM115 - open for the server process's lifetime
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tensorboard.main",
            "--logdir",
            logdir,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--load_fast=false",
        ],
        cwd=os.path.abspath(args.root),
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.time() + 120
        while time.time() < end:
            try:
                if "gpuscope" in get(f"{url}/data/plugins_listing", 5):
                    break
            except OSError:
                time.sleep(0.2)
        api = f"{url}/data/plugin/gpuscope"
        t0 = time.perf_counter()
        get(f"{api}/runs")
        rows = get(f"{api}/operators?run=z_big&worker=w&span=1")["rows"]
        dt = time.perf_counter() - t0
        prog = get(f"{api}/runs")["progress"]
        size = os.path.getsize(os.path.join(logdir, "z_big", "w.1.pt.trace.json")) / 1e6
        print(f"root {os.path.abspath(args.root)}")
        print(f"big file {size:.0f} MB ({args.big} events), 8 others of {args.small} events")
        print(
            f"first view of the big file: {dt:.2f} s ({len(rows)} operator rows); "
            f"files loaded when it answered: {prog['files_done']} of {prog['files_total']}"
        )
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


if __name__ == "__main__":
    main()
