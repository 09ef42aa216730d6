"""Benchmark the distributed view at scale: a generated 256-rank NCCL job of ~50k events per rank.

Reports:
- `gpuscope summarize --local 1` vs `--local 2` wall time (a Dask LocalCluster of 1 and 2 worker
  processes; every summary recomputed, --force);
- the time to open the distributed view in a freshly started `tensorboard --logdir` with the
  summaries present: the requests the page makes (runs, workers, spans, distributed), from the
  first one to the distributed answer (target < 2 s);
- then the run's diagnosis (`/diagnosis`: critical path per step, stragglers) from the same summaries;
- the TensorBoard process's peak RSS (VmHWM) after that (target < 1 GB);
- the summaries' size against the traces'.

    python benchmarks/bench_distributed.py                      # 256 ranks x 50k events in /tmp
    python benchmarks/bench_distributed.py --ranks 16 --events 5000 --logdir /tmp/small
    python benchmarks/bench_distributed.py --events 5000 --view-only   # summaries only where missing
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from gen_distributed import generate  # noqa: E402


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def summarize(logdir: Path, local: int, force: bool = True) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "tb_plugin.summaries.cli", "summarize", str(logdir), "--local", str(local)]
        + (["--force"] if force else []),
        env=_env(),
        capture_output=True,
        text=True,
    )
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(r.stdout + r.stderr[-3000:])
    print(f"  {r.stdout.strip()}")
    return dt


def _get(url: str, timeout: float = 600) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def _vm_hwm(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return -1


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) the process has used: a measure the machine's load hardly moves."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_view(logdir: Path, run: str) -> tuple[float, int, dict, float]:
    """Starts TensorBoard, opens the distributed view as the page does; (seconds, peak RSS, answer, seconds of
    the /diagnosis request after it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cache = logdir.parent / "bench-cache"  # a fresh parse cache: nothing from earlier runs
    env = _env()
    env["GPUSCOPE_CACHE_DIR"] = str(cache)
    log = open(logdir.parent / "tensorboard.log", "wb")  # noqa: SIM115 - open for the server process's lifetime
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tensorboard.main",
            "--logdir",
            str(logdir),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--load_fast=false",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    api = f"http://127.0.0.1:{port}/data/plugin/gpuscope"
    try:
        while True:  # the server is up (TensorBoard's own listing, not ours)
            try:
                _get(f"http://127.0.0.1:{port}/data/plugins_listing", timeout=5)
                break
            except OSError:
                if proc.poll() is not None:
                    raise SystemExit((logdir.parent / "tensorboard.log").read_text()[-3000:]) from None
                time.sleep(0.2)
        c0 = _cpu_s(proc.pid)
        t0 = time.perf_counter()
        runs = _get(f"{api}/runs")
        assert run in runs["runs"], runs
        t1 = time.perf_counter()
        workers = _get(f"{api}/workers?run={run}")["workers"]
        spans = _get(f"{api}/spans?run={run}&worker={workers[0]}")["spans"]
        t2 = time.perf_counter()
        d = _get(f"{api}/distributed?run={run}&span={spans[-1]}")
        dt = time.perf_counter() - t0
        print(f"  runs {t1 - t0:.2f} s, workers + spans {t2 - t1:.2f} s, distributed {dt - (t2 - t0):.2f} s")
        c1 = _cpu_s(proc.pid)
        print(f"  TensorBoard CPU time for these requests: {c1 - c0:.2f} s")
        t3 = time.perf_counter()
        try:
            diag = _get(f"{api}/diagnosis?run={run}&span={spans[-1]}")
            worst = diag.get("worst") or {}
            print(f"  diagnosis: worst straggler {worst.get('worker')}: {worst.get('why')}")
        except OSError as e:  # a gpuscope without the route
            print(f"  diagnosis: not available ({e})")
        dg = time.perf_counter() - t3
        print(f"  TensorBoard CPU time for /diagnosis: {_cpu_s(proc.pid) - c1:.2f} s")
        rss = _vm_hwm(proc.pid)
        return dt, rss, d, dg
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=256)
    ap.add_argument("--events", type=int, default=50_000)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--logdir", default="/tmp/gpuscope-bench-distributed")
    ap.add_argument("--view-only", action="store_true", help="summarize only what is missing, then open the view")
    a = ap.parse_args()
    logdir = Path(a.logdir) / "logs"
    run = logdir / "job"
    if len(list(run.glob("*.pt.trace.json*"))) != a.ranks:
        t0 = time.perf_counter()
        generate(str(run), a.ranks, events=a.events, steps=a.steps)
        print(f"generated {a.ranks} ranks x ~{a.events} events in {time.perf_counter() - t0:.0f} s")
        time.sleep(2.1)  # older than the scanner's stable age
    traces = sum(p.stat().st_size for p in run.glob("*.pt.trace.json*"))
    print(f"{a.ranks} rank traces, {traces / 1e6:.0f} MB on disk (gzip)")
    if a.view_only:
        print(f"gpuscope summarize --local 2 (missing ones only): {summarize(logdir, 2, force=False):.1f} s")
    else:
        t1 = summarize(logdir, 1)
        print(f"gpuscope summarize --local 1: {t1:.1f} s")
        t2 = summarize(logdir, 2)
        print(f"gpuscope summarize --local 2: {t2:.1f} s  (speed-up x{t1 / t2:.2f})")
    sums = list((logdir / ".gpuscope" / "summaries").rglob("*.summary.json.gz"))
    size = sum(p.stat().st_size for p in sums)
    print(f"summaries: {len(sums)} files, {size / 1e3:.0f} KB = {100 * size / traces:.3f} % of the traces")
    dt, rss, d, dg = open_view(logdir, "job")
    print(
        f"open the distributed view with summaries present: {dt:.2f} s (target < 2 s); "
        f"{len(d['workers'])} workers, {len(d['steps'])} steps, straggler {d['stragglers'][0]['worker']} "
        f"(why: {d['stragglers'][0].get('why')}, what-if {d['stragglers'][0].get('what_if_ms')} ms)"
    )
    print(f"then /diagnosis: {dg:.2f} s; view + diagnosis {dt + dg:.2f} s")
    print(f"TensorBoard peak RSS: {rss / 2**20:.0f} MiB (target < 1024 MiB)")


if __name__ == "__main__":
    main()
