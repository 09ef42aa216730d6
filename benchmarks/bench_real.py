"""Load benchmark on real traces: gpuscope vs torch-tb-profiler 0.4.3, both sides in one run.

Rows (each a run folder of one or more trace files):
  * the shared V100 ResNet-50 run (../shared/traces/kineto_resnet50_v100/num_workers_0, 2 files);
  * two real torch 2.13 CPU traces made by ../shared/tools/big_torch_trace.py with the
    compatibility venv's torch: DIR/t220k (`OUTDIR 10 2000`) and DIR/t2m (`OUTDIR 10 20000`);
    DIR is --real-dir or $GPUSCOPE_REAL_TRACES (rows whose folder is missing are skipped, with
    the command that makes them);
  * DIR/t11m, when present: ~11M real-shaped events made by gen_real_big.py from t2m (5 copies),
    ours only (load time and peak memory; torch-tb-profiler would need ~25 GB);
  * with --synthetic N, an extra row from gen_trace.py (not representative of real events).

Per row, each side in a fresh process with its imports done before the clock starts:
  * ours: TensorBoard's WSGI app with the gpuscope plugin and an empty parse cache: /runs until
    loaded, then /overview, /operators and /kernels of every file;
  * theirs: torch-tb-profiler's `RunLoader.load()` (it computes every view while loading), run by
    the compatibility venv's python ($GPUSCOPE_COMPAT_VENV, default ROOT/.venvs/compat).
Peak memory is the largest sum of RSS over the process and all its descendants (sampled from
here every 10 ms), for both sides. Then, in one more process of ours, the cost per million events
of each phase of one serial read (inflate, decode, columns, views) and the floor: one ISA-L
inflate plus one decode pass split over the cores.

    python benchmarks/bench_real.py --real-dir DIR --repeat 3
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
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
V100 = os.path.join(ROOT, "..", "shared", "traces", "kineto_resnet50_v100", "num_workers_0")
TOOL = os.path.join(ROOT, "..", "shared", "tools", "big_torch_trace.py")

OURS = r"""
import json, os, sys, time
sys.path.insert(0, {root!r})
logdir = sys.argv[1]
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client
from tb_plugin.plugin import GpuscopePlugin
import tb_plugin.views.overview, tb_plugin.views.operators, tb_plugin.views.kernels  # noqa: F401
import pandas, numpy, msgspec  # noqa: F401
from profiler_core.trace.read import reader  # noqa: F401
# what the plugin imports on its first request (it stays light at TensorBoard's start) and the test
# client's host-name encoding: imports, excluded like the rest
import tb_plugin.loader, tb_plugin.runs, tb_plugin.summaries.engine, tb_plugin.views.distributed  # noqa: F401
import profiler_core.trace.read.cache, profiler_core.cuda.occupancy, encodings.idna  # noqa: F401
P = "/data/plugin/gpuscope"
sys.stdout.write("ready\n"); sys.stdout.flush(); sys.stdin.readline()
w0 = time.perf_counter()
p = GpuscopePlugin(base_plugin.TBContext(logdir=logdir))
c = Client(application.TensorBoardWSGI([p]))
end = time.time() + 1800
while True:
    d = c.get(P + "/runs").json
    if not d["loading"] and d["runs"]:
        break
    assert time.time() < end, d
    time.sleep(0.01)
w1 = time.perf_counter()
assert not d["errors"], d["errors"]
n = 0
for run in d["runs"]:
    for worker in c.get(P + "/workers", query_string={{"run": run}}).json["workers"]:
        for span in c.get(P + "/spans", query_string={{"run": run, "worker": worker}}).json["spans"]:
            q = {{"run": run, "worker": worker, "span": span}}
            for route in ("/overview", "/operators", "/kernels"):
                r = c.get(P + route, query_string=q)
                assert r.status_code == 200, (route, r.status_code, r.data[:300])
            n += 1
w2 = time.perf_counter()
print(json.dumps({{"load_s": w1 - w0, "views_s": w2 - w1, "wall_s": w2 - w0, "files": n}}))
"""

THEIRS = r"""
import json, logging, os, sys, tempfile, time
logging.disable(logging.WARNING)
logdir = sys.argv[1]
from torch_tb_profiler import io
from torch_tb_profiler.profiler.loader import RunLoader
import torch_tb_profiler.profiler.data, torch_tb_profiler.profiler.run_generator  # noqa: F401
# what RunLoader.load() imports on its first call (its worker processes are started inside the clock)
import multiprocessing.pool, multiprocessing.managers, multiprocessing.shared_memory  # noqa: F401
import multiprocessing.popen_spawn_posix, multiprocessing.queues, multiprocessing.synchronize  # noqa: F401
sys.stdout.write("ready\n"); sys.stdout.flush(); sys.stdin.readline()
w0 = time.perf_counter()
n = 0
with tempfile.TemporaryDirectory() as tmp:
    for name in sorted(os.listdir(logdir)):
        d = os.path.join(logdir, name)
        if os.path.isdir(d):
            caches = io.Cache(tmp)
            run = RunLoader(name, d, caches).load()
            n += len(run.profiles) if hasattr(run, "profiles") else 1
w1 = time.perf_counter()
print(json.dumps({"load_s": w1 - w0, "views_s": 0.0, "wall_s": w1 - w0, "files": n}))
"""

PHASES = r"""
import json, os, sys, time
sys.path.insert(0, {root!r})
from profiler_core.trace.read import stream, columns
from profiler_core.trace.read.reader import read_trace
from profiler_core.trace.read.gunzip import gunzip_blocks
from tb_plugin.views import kernels, operators, overview
import gc
gc.disable()
files = sys.argv[1:]
class NoColumns(columns._Builder):  # decodes, builds nothing
    def add_chunk(self, evs, first_idx):
        pass
out = {{"inflate_s": 0.0, "cut_decode_s": 0.0, "read_s": 0.0, "views_s": 0.0, "events": 0}}
for path in files:
    t0 = time.perf_counter()
    for _ in stream._blocks(path):
        pass
    t1 = time.perf_counter()
    stream._parse_span(path, NoColumns())
    t2 = time.perf_counter()
    t = read_trace(path, processes=0, tune_memory=True)
    t3 = time.perf_counter()
    overview.overview(t); operators.operators(t); kernels.kernels(t)
    t4 = time.perf_counter()
    out["inflate_s"] += t1 - t0
    out["cut_decode_s"] += t2 - t1
    out["read_s"] += t3 - t2
    out["views_s"] += t4 - t3
    out["events"] += len(t.events) + len(t.memory) + len(t.flows)
    del t
print(json.dumps(out))
"""


def _tree_rss_kb(pid: int) -> int:
    """RSS of `pid` and every descendant (kB), read from /proc."""
    page_kb = os.sysconf("SC_PAGE_SIZE") // 1024
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * page_kb
        except (OSError, ValueError, IndexError):
            continue
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return total


def _measure(python: str, code: str, args: list, env: dict) -> dict:
    """Run `code` in a fresh process: wait for its imports, then time it and sample its tree's RSS."""
    proc = subprocess.Popen(
        [python, "-c", code, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        raise RuntimeError(f"{python} did not start:\n{line}{proc.stderr.read()[-3000:]}")
    base = _tree_rss_kb(proc.pid)
    proc.stdin.write("go\n")
    proc.stdin.flush()
    peak = base
    while proc.poll() is None:
        peak = max(peak, _tree_rss_kb(proc.pid))
        time.sleep(0.01)
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{python} failed:\n{err[-3000:]}")
    res = json.loads(out.strip().splitlines()[-1])
    res["peak_mb"] = peak / 1024
    res["base_mb"] = base / 1024  # after the imports, before the clock started
    return res


def _rows(args: argparse.Namespace) -> list:
    rows = [("V100 ResNet-50 (2 files)", os.path.normpath(V100))]
    real = args.real_dir or os.environ.get("GPUSCOPE_REAL_TRACES")
    for label, sub, steps_ops in (
        ("torch 2.13 CPU, 220k events", "t220k", "10 2000"),
        ("torch 2.13 CPU, 2.2M events", "t2m", "10 20000"),
    ):
        path = os.path.join(real, sub) if real else None
        if path and os.path.isdir(path):
            rows.append((label, path))
        else:
            print(
                f"skipped {label}: make it with $GPUSCOPE_COMPAT_VENV/bin/python "
                f"{os.path.normpath(TOOL)} DIR/{sub} {steps_ops}, then pass --real-dir DIR"
            )
    big = os.path.join(real, "t11m") if real else None
    if big and os.path.isdir(big):  # ours only: torch-tb-profiler would need ~25 GB here
        rows.append(("real-shaped, 11M events (ours only)", big))
    if args.synthetic:
        path = os.path.join(args.workdir, "synthetic", f"bench_{args.synthetic}.1.pt.trace.json.gz")
        if not os.path.exists(path):
            sys.path.insert(0, HERE)
            from gen_trace import generate

            os.makedirs(os.path.dirname(path), exist_ok=True)
            generate(path, args.synthetic)
        rows.append((f"synthetic (gen_trace.py), {args.synthetic} events", os.path.dirname(path)))
    return [r for r in rows if os.path.isdir(r[1])]


def _files(run_dir: str) -> list:
    out = []
    for dirpath, _, names in os.walk(run_dir):
        out += [os.path.join(dirpath, n) for n in sorted(names) if ".pt.trace.json" in n]
    return out


def _as_logdir(run_dir: str, workdir: str) -> str:
    """A logdir holding the run as its only run (links to its files), as both sides expect."""
    logdir = tempfile.mkdtemp(prefix="logdir-", dir=workdir)
    run = os.path.join(logdir, os.path.basename(os.path.normpath(run_dir)) or "run")
    os.mkdir(run)
    for path in _files(run_dir):
        os.symlink(os.path.abspath(path), os.path.join(run, os.path.basename(path)))
    return logdir


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--real-dir", help="folder holding t220k/ and t2m/ (env GPUSCOPE_REAL_TRACES)")
    ap.add_argument("--synthetic", type=int, default=0, help="also a synthetic row of N events")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each side per row")
    ap.add_argument("--only", help="rows whose label contains this text")
    ap.add_argument("--theirs", default="1", help="0: skip torch-tb-profiler")
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "gpuscope-bench-real"))
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    venv = os.environ.get("GPUSCOPE_COMPAT_VENV", os.path.join(ROOT, ".venvs", "compat"))
    tbp = os.path.join(venv, "bin", "python")
    if args.theirs != "0" and not os.path.exists(tbp):
        print(f"no torch-tb-profiler python at {tbp} (set GPUSCOPE_COMPAT_VENV): theirs skipped")
        args.theirs = "0"
    cores = os.cpu_count() or 1
    table = []
    for label, run_dir in _rows(args):
        if args.only and args.only not in label:
            continue
        logdir = _as_logdir(run_dir, args.workdir)
        env = dict(os.environ, PYTHONPATH=ROOT)
        ours, theirs = [], []
        for _ in range(args.repeat):  # alternate the sides so that noise hits both alike
            env["GPUSCOPE_CACHE_DIR"] = cache_dir = tempfile.mkdtemp(prefix="cache-", dir=args.workdir)
            ours.append(_measure(sys.executable, OURS.format(root=ROOT), [logdir], env))
            shutil.rmtree(cache_dir, ignore_errors=True)
            print(f"{label}: ours   {json.dumps(ours[-1])}", flush=True)
            if args.theirs != "0" and "ours only" not in label:
                tenv = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
                theirs.append(_measure(tbp, THEIRS, [logdir], tenv))
                print(f"{label}: theirs {json.dumps(theirs[-1])}", flush=True)
        ph = None
        if "ours only" not in label:
            ph_proc = subprocess.run(
                [sys.executable, "-c", PHASES.format(root=ROOT), *_files(run_dir)],
                capture_output=True,
                text=True,
                env=env,
                check=False,
            )
            if ph_proc.returncode != 0:
                raise RuntimeError(ph_proc.stderr[-3000:])
            ph = json.loads(ph_proc.stdout.strip().splitlines()[-1])
        shutil.rmtree(logdir, ignore_errors=True)
        table.append((label, ours, theirs, ph))

    med = statistics.median
    print()
    print(
        f"{'trace':34} {'theirs s':>9} {'ours s':>8} {'ratio':>6} {'worst':>6} "
        f"{'their MB':>9} {'our MB':>8} {'mem':>6} {'added':>6}"
    )
    for label, ours, theirs, _ph in table:
        o = med(r["wall_s"] for r in ours)
        ow = max(r["wall_s"] for r in ours)
        om = max(r["peak_mb"] for r in ours)
        if theirs:
            t = med(r["wall_s"] for r in theirs)
            tm = med(r["peak_mb"] for r in theirs)
            # ratio: median over the paired runs; worst: the worst pairing
            ratios = [b["wall_s"] / a["wall_s"] for a, b in zip(ours, theirs)]
            added = med(r["peak_mb"] - r["base_mb"] for r in theirs) / max(
                1.0, max(r["peak_mb"] - r["base_mb"] for r in ours)
            )
            print(
                f"{label:34} {t:9.2f} {o:8.2f} {med(ratios):5.1f}x {t / ow:5.1f}x "
                f"{tm:9.0f} {om:8.0f} {tm / om:5.1f}x {added:5.1f}x"
            )
        else:
            print(f"{label:34} {'-':>9} {o:8.2f} {'-':>6} {'-':>6} {'-':>9} {om:8.0f}")
    print(
        "(ratio: median over paired runs of theirs / ours; worst: theirs / our slowest; mem: "
        "their peak / our peak, all processes; added: the same above each side's imports)"
    )
    print()
    print(f"ours, one serial read in one process, s per million events (cores here: {cores}):")
    print(
        f"{'trace':34} {'events':>9} {'inflate':>8} {'decode':>7} {'columns':>8} {'views':>6} {'total':>6} {'floor':>6}"
    )
    for label, _, _, ph in table:
        if ph is None:
            continue
        m = ph["events"] / 1e6
        inflate = ph["inflate_s"]
        decode = max(0.0, ph["cut_decode_s"] - inflate)
        cols = max(0.0, ph["read_s"] - ph["cut_decode_s"])
        floor = inflate + decode / cores
        print(
            f"{label:34} {ph['events']:9d} {inflate / m:8.2f} {decode / m:7.2f} {cols / m:8.2f} "
            f"{ph['views_s'] / m:6.2f} {(ph['read_s'] + ph['views_s']) / m:6.2f} {floor / m:6.2f}"
        )
    print(
        "(decode: cutting and msgspec into structs; columns: the rest of read_trace; floor: inflate + decode / cores)"
    )


if __name__ == "__main__":
    main()
