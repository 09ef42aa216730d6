"""Plugin load benchmark: gpuscope vs torch-tb-profiler 0.4.3 on the same large trace, one run.

Times (wall and CPU) and peak RSS of, each in a fresh process:
  * gpuscope cold: read_trace as the plugin calls it (on 2+ cores it starts parser processes,
    inside the timed region) + overview + operators + kernels views (no cache);
    peak RSS is sampled as the sum over this process and its parser processes;
  * gpuscope warm: the same trace opened from the on-disk cache (+ the same views);
  * torch-tb-profiler: RunProfileData.parse + RunGenerator.generate_run_profile (its load
    computes every view at once), run with the interpreter of a separate venv.
and prints ratios (ours / theirs), ours as the median of --repeat runs. The trace is made by
gen_trace.py unless --trace is given.

    python benchmarks/bench_load.py                        # 2M events, torch-tb-profiler from .venvs/compat
    python benchmarks/bench_load.py --events 200000 --tbp-python none
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
#: torch-tb-profiler 0.4.3 lives in the compat venv .ci/run builds, or $GPUSCOPE_TBP_PYTHON
DEFAULT_TBP = os.environ.get("GPUSCOPE_TBP_PYTHON") or os.path.join(ROOT, ".venvs", "compat", "bin", "python")

OURS = r"""
import json, os, resource, sys, threading, time
sys.path.insert(0, {root!r})
path, mode = sys.argv[1], sys.argv[2]
from profiler_core.trace.read import cache
from profiler_core.trace.read.reader import default_parse_processes, read_trace
from profiler_core.analysis.tables import kernels
from profiler_core.analysis.tables import operators
from profiler_core.analysis import step_breakdown as overview

def rss_kb(pid):
    try:
        with open(f"/proc/{{pid}}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    except (OSError, ValueError, IndexError):
        return 0

def children(pid):
    try:
        with open(f"/proc/{{pid}}/task/{{pid}}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []

peak = [0]
done = threading.Event()

def sample():  # peak of this process plus its parser processes, summed at each instant
    me = os.getpid()
    while not done.is_set():
        peak[0] = max(peak[0], rss_kb(me) + sum(rss_kb(c) for c in children(me)))
        done.wait(0.005)

threading.Thread(target=sample, daemon=True).start()
w0, c0 = time.perf_counter(), time.process_time()
# the plugin's loader makes this same call (tb_plugin/loader.py); "warm" must find the cache entry
t = read_trace(path, processes=default_parse_processes(), use_cache=mode == "warm",
               store=lambda p, t: sys.exit("no cache entry"), tune_memory=True)
w1, c1 = time.perf_counter(), time.process_time()
overview.overview(t); operators.operators(t); kernels.kernels(t)
w2, c2 = time.perf_counter(), time.process_time()
done.set()
if mode == "cold":
    cache.store(path, t)
print(json.dumps({{"load_s": w1 - w0, "views_s": w2 - w1, "wall_s": w2 - w0,
                  "cpu_s": c2 - c0, "events": len(t.events),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "peak_rss_all_mb": peak[0] / 1024}}))
"""

THEIRS = r"""
import json, logging, resource, sys, tempfile, time
logging.disable(logging.WARNING)
path = sys.argv[1]
from torch_tb_profiler.profiler.data import RunProfileData
from torch_tb_profiler.profiler.run_generator import RunGenerator
w0, c0 = time.perf_counter(), time.process_time()
with tempfile.TemporaryDirectory() as tmp:
    data = RunProfileData.parse("worker0", 1, path, tmp)
    w1 = time.perf_counter()
    profile = RunGenerator("worker0", 1, data).generate_run_profile()
w2, c2 = time.perf_counter(), time.process_time()
print(json.dumps({"load_s": w1 - w0, "views_s": w2 - w1, "wall_s": w2 - w0, "cpu_s": c2 - c0,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _run(python: str, code: str, *args: str, env: dict | None = None) -> dict:
    proc = subprocess.run([python, "-c", code, *args], capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{python} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", help="an existing trace (default: generate one)")
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "gpuscope-bench"))
    ap.add_argument("--repeat", type=int, default=3, help="runs of ours (median reported)")
    ap.add_argument(
        "--tbp-python", default=DEFAULT_TBP, help="python of a venv with torch-tb-profiler 0.4.3 ('none' to skip)"
    )
    args = ap.parse_args()

    os.makedirs(args.workdir, exist_ok=True)
    path = args.trace
    if path is None:
        path = os.path.join(args.workdir, f"bench_{args.events}.1796207156519141535.pt.trace.json.gz")
        if not os.path.exists(path):
            sys.path.insert(0, HERE)
            from gen_trace import generate

            print(f"generating {path} ...", flush=True)
            generate(path, args.events)
    size_mb = os.path.getsize(path) / 1e6
    print(f"trace: {path} ({size_mb:.1f} MB on disk)", flush=True)

    code = OURS.format(root=ROOT)
    env = dict(os.environ)
    colds, warms = [], []
    for _i in range(args.repeat):  # each in a fresh process with an empty cache
        env["GPUSCOPE_CACHE_DIR"] = cache_dir = tempfile.mkdtemp(prefix="cache-", dir=args.workdir)
        colds.append(_run(sys.executable, code, path, "cold", env=env))
        print(f"gpuscope cold : {json.dumps(colds[-1])}", flush=True)
        warms.append(_run(sys.executable, code, path, "warm", env=env))
        print(f"gpuscope warm : {json.dumps(warms[-1])}", flush=True)
        shutil.rmtree(cache_dir, ignore_errors=True)

    theirs = None
    if args.tbp_python != "none":
        if not os.path.exists(args.tbp_python):
            print(f"torch-tb-profiler python {args.tbp_python} not found: skipped")
        else:
            theirs = _run(args.tbp_python, THEIRS, path)
            print(f"tb-profiler   : {json.dumps(theirs)}", flush=True)

    def median(runs: list, key: str) -> float:
        return statistics.median(r[key] for r in runs)

    cold_wall, worst = median(colds, "wall_s"), max(r["wall_s"] for r in colds)
    peak_all = max(r["peak_rss_all_mb"] for r in colds)
    print()
    print(f"events: {colds[0]['events']}   runs of ours: {len(colds)} (median, and the worst)")
    print(
        f"second open from cache: load {median(warms, 'load_s'):.2f} s (target < 1 s), "
        f"with views {median(warms, 'wall_s'):.2f} s"
    )
    print(
        f"ours cold: load {median(colds, 'load_s'):.2f} s + views {median(colds, 'views_s'):.2f} s"
        f" = {cold_wall:.2f} s (worst {worst:.2f} s); peak RSS {peak_all:.0f} MB with the parser"
        f" processes, {max(r['peak_rss_mb'] for r in colds):.0f} MB in the main process"
    )
    if theirs:
        print(
            f"time   (load + overview + operators + kernels): ours {cold_wall:.2f} s vs "
            f"torch-tb-profiler {theirs['wall_s']:.1f} s -> ratio 1/{theirs['wall_s'] / cold_wall:.1f}"
            f" (worst of ours 1/{theirs['wall_s'] / worst:.1f}; target <= 1/20)"
        )
        print(f"cpu    : ours {median(colds, 'cpu_s'):.1f} s (main process) vs {theirs['cpu_s']:.1f} s")
        print(
            f"peak RSS: ours {peak_all:.0f} MB (all processes) vs {theirs['peak_rss_mb']:.0f} MB -> "
            f"ratio 1/{theirs['peak_rss_mb'] / peak_all:.1f} (target <= 1/5)"
        )


if __name__ == "__main__":
    main()
