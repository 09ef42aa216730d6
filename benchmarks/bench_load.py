"""Plugin load benchmark: gpuscope vs torch-tb-profiler 0.4.3 on the same large trace, one run.

Times (wall and CPU) and peak RSS of, each in a fresh process:
  * gpuscope cold: read_trace + overview + operators + kernels views (no cache);
  * gpuscope warm: the same trace opened from the on-disk cache (+ the same views);
  * torch-tb-profiler: RunProfileData.parse + RunGenerator.generate_run_profile (its load
    computes every view at once), run with the interpreter of a separate venv.
and prints ratios (ours / theirs). The trace is made by gen_trace.py unless --trace is given.

    python benchmarks/bench_load.py                        # 2M events, /work/venvs/tbp
    python benchmarks/bench_load.py --events 200000 --tbp-python none
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_TBP = "/work/venvs/tbp/bin/python"

OURS = r"""
import json, os, resource, sys, time
sys.path.insert(0, {root!r})
path, mode = sys.argv[1], sys.argv[2]
from profiler_core.trace import cache
from profiler_core.trace.reader import read_trace
from tb_plugin.views import kernels, operators, overview
w0, c0 = time.perf_counter(), time.process_time()
t = cache.load(path) if mode == "warm" else read_trace(path)
assert t is not None, "no cache entry"
w1, c1 = time.perf_counter(), time.process_time()
overview.overview(t); operators.operators(t); kernels.kernels(t)
w2, c2 = time.perf_counter(), time.process_time()
if mode == "cold":
    cache.store(path, t)
print(json.dumps({{"load_s": w1 - w0, "views_s": w2 - w1, "wall_s": w2 - w0,
                  "cpu_s": c2 - c0, "events": len(t.events),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
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
    proc = subprocess.run([python, "-c", code, *args], capture_output=True, text=True,
                          env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{python} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", help="an existing trace (default: generate one)")
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "gpuscope-bench"))
    ap.add_argument("--tbp-python", default=DEFAULT_TBP,
                    help="python of a venv with torch-tb-profiler 0.4.3 ('none' to skip)")
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

    cache_dir = tempfile.mkdtemp(prefix="cache-", dir=args.workdir)
    env = dict(os.environ, GPUSCOPE_CACHE_DIR=cache_dir)
    code = OURS.format(root=ROOT)
    cold = _run(sys.executable, code, path, "cold", env=env)
    print(f"gpuscope cold : {json.dumps(cold)}", flush=True)
    warm = _run(sys.executable, code, path, "warm", env=env)
    print(f"gpuscope warm : {json.dumps(warm)}", flush=True)

    theirs = None
    if args.tbp_python != "none":
        if not os.path.exists(args.tbp_python):
            print(f"torch-tb-profiler python {args.tbp_python} not found: skipped")
        else:
            theirs = _run(args.tbp_python, THEIRS, path)
            print(f"tb-profiler   : {json.dumps(theirs)}", flush=True)

    print()
    print(f"events: {cold['events']}   second open from cache: load {warm['load_s']:.2f} s "
          f"(target < 1 s), with views {warm['wall_s']:.2f} s")
    if theirs:
        print(f"time   (load + overview + operators + kernels): ours {cold['wall_s']:.1f} s vs "
              f"torch-tb-profiler {theirs['wall_s']:.1f} s -> ratio 1/{theirs['wall_s'] / cold['wall_s']:.1f}"
              f" (target <= 1/20)")
        print(f"cpu    : ours {cold['cpu_s']:.1f} s vs {theirs['cpu_s']:.1f} s -> ratio "
              f"1/{theirs['cpu_s'] / cold['cpu_s']:.1f}")
        print(f"peak RSS: ours {cold['peak_rss_mb']:.0f} MB vs {theirs['peak_rss_mb']:.0f} MB -> "
              f"ratio 1/{theirs['peak_rss_mb'] / cold['peak_rss_mb']:.1f} (target <= 1/5)")
    shutil.rmtree(cache_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
