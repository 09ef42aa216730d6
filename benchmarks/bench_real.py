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
  * ours: TensorBoard's WSGI app with the gpuscope plugin and an empty parse cache: /runs?wait=60 (a long
    poll: answered once the files are loaded), then /overview, /operators and /kernels of every file;
  * theirs: torch-tb-profiler's `RunLoader.load()` (it computes every view while loading), run by
    the compatibility venv's python ($GPUSCOPE_COMPAT_VENV, default ROOT/.venvs/compat).
Peak memory is the largest sum of RSS over the process and all its descendants (sampled from
here every 10 ms), for both sides; CPU seconds are each process tree's after its imports. Each row
says whether its target (issue 25 item 5, `TARGETS`) is met: PASS or MISS. Then, in one more process
of ours, the CPU cost per million events of each phase of one serial read (`phases`: inflate, cut,
scan, convert, finish, views) next to the floor: inflate plus the native parser's scan, one core.

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
import profiler_core.analysis.step_breakdown, tb_plugin.views.operators, tb_plugin.views.kernels  # noqa: F401
import pandas, numpy, msgspec  # noqa: F401
from profiler_core.trace.read import reader  # noqa: F401
# what the plugin imports on its first request (it stays light at TensorBoard's start) and the test
# client's host-name encoding: imports, excluded like the rest
import tb_plugin.loader, tb_plugin.runs, tb_plugin.summaries.engine, tb_plugin.views.distributed  # noqa: F401
import profiler_core.trace.read.cache, profiler_core.cuda.occupancy, encodings.idna  # noqa: F401
# and what the plugin's warm-up thread imports once it starts (TensorBoard starts it long before a request)
import importlib, tb_plugin.handlers
for name in tb_plugin.handlers.WARM_MODULES:
    importlib.import_module(name)
P = "/data/plugin/gpuscope"
sys.stdout.write("ready\n"); sys.stdout.flush(); sys.stdin.readline()
w0 = time.perf_counter()
p = GpuscopePlugin(base_plugin.TBContext(logdir=logdir))
c = Client(application.TensorBoardWSGI([p]))
end = time.time() + 1800
while True:  # a long poll: /runs answers once the files are loaded (polling every 10 ms cost ~1 ms of GIL each)
    d = c.get(P + "/runs", query_string={{"wait": "60"}}).json
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
os.environ["GPUSCOPE_NATIVE_THREADS"] = "0"  # one serial read: every phase in this thread
from profiler_core.trace.read import columns, native, stream
from profiler_core.trace.read.reader import read_trace
from profiler_core.analysis.tables import kernels
from profiler_core.analysis.tables import operators
from profiler_core.analysis import step_breakdown as overview
import gc
gc.disable()
clock = time.process_time  # CPU seconds of this process: robust to the other load of a shared machine
ph = {{"inflate": 0.0, "cut": 0.0, "scan": 0.0, "read": 0.0, "finish": 0.0, "views": 0.0, "events": 0}}
finish = columns.Builder.finish
def timed_finish(self, *a, **k):
    t0 = clock()
    try:
        return finish(self, *a, **k)
    finally:
        ph["finish"] += clock() - t0
columns.Builder.finish = timed_finish
for path in sys.argv[1:]:
    t0 = clock()
    fast = native.available()
    blocks = stream.read_blocks(path, native.INFLATE_BLOCK, gather=False) if fast else stream.read_blocks(path)
    for _ in blocks:
        pass  # (inflated as the reader that reads it inflates)
    inflate = clock() - t0
    ph["inflate"] += inflate
    if native.available():  # the floor's parse: the C scan of each piece, at the native parser's speed
        scan, pairs, t0 = 0.0, native.scan_pairs(), clock()
        for text in native._pieces(path):
            if text.kind != "head":
                s0 = clock()
                native._native.parse_events(text.text, 1 << 62, stream.BLOCK, pairs, True)
                scan += clock() - s0
        ph["cut"] += max(0.0, clock() - t0 - scan - inflate)
        ph["scan"] += scan
    t0 = clock()
    t = read_trace(path, processes=0, tune_memory=True)
    t1 = clock()
    overview.overview(t); operators.operators(t); kernels.kernels(t)
    ph["views"] += clock() - t1
    ph["read"] += t1 - t0
    ph["events"] += len(t.events) + len(t.memory) + len(t.flows)
    del t
ph["reader"] = "native" if native.enabled() else "python"
print(json.dumps(ph))
"""

#: the targets of issue 25 item 5, by a text of the row's label: (time ratio theirs / ours at least,
#: added memory ratio theirs / ours at least or None); the 11M row: first view within BIG_FIRST_VIEW_S,
#: peak (all processes, imports included) within BIG_PEAK_MB
TARGETS = {"V100": (20.0, 5.0), "220k": (30.0, None), "2.2M": (40.0, None)}
BIG_FIRST_VIEW_S, BIG_PEAK_MB = 10.0, 2048.0
#: GPUSCOPE_MAX_LOADED_BYTES of the 11M row, unless set: the default budget holds ~10.7M events
BIG_BUDGET = 8 << 30


def phases(files: list, env: dict | None = None) -> dict:
    """CPU seconds per million events of the phases of one serial read of `files` (one process, the
    reader read_trace picks) and the floor. inflate: ISA-L alone; cut: cutting the inflated text into
    pieces; scan: the C scan of the pieces; read: read_trace in all; finish: `Builder.finish` in it;
    convert: the rest of the read (the native reader: texts and columns handed over to the builder;
    the Python reader: its msgspec decoding and coercions); views: overview, operators and kernels;
    floor: inflate + scan (the native parser's speed, one core)."""
    p = subprocess.run(
        [sys.executable, "-c", PHASES.format(root=ROOT), *files],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-3000:])
    ph = json.loads(p.stdout.strip().splitlines()[-1])
    m = ph["events"] / 1e6
    native = ph["reader"] == "native"
    convert = ph["read"] - ph["finish"] - ph["inflate"] - (ph["cut"] + ph["scan"] if native else 0.0)
    out = {"reader": ph["reader"], "events": ph["events"]}
    for key, v in (
        ("inflate", ph["inflate"]),
        ("cut", ph["cut"]),
        ("scan", ph["scan"]),
        ("convert", max(0.0, convert)),
        ("finish", ph["finish"]),
        ("read", ph["read"]),
        ("views", ph["views"]),
        ("total", ph["read"] + ph["views"]),
        ("floor", ph["inflate"] + ph["scan"]),
    ):
        out[key] = round(v / m, 3)
    return out


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


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process `pid` has used so far, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
    cpu0 = _cpu_s(proc.pid)
    proc.stdin.write("go\n")
    proc.stdin.flush()
    peak = base
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        peak = max(peak, _tree_rss_kb(proc.pid))
        time.sleep(0.01)
    proc.returncode = os.waitstatus_to_exitcode(status)
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{python} failed:\n{err[-3000:]}")
    res = json.loads(out.strip().splitlines()[-1])
    # CPU seconds after the imports: the process's, its threads' and its reaped children's (their workers)
    res["cpu_s"] = usage.ru_utime + usage.ru_stime - cpu0
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
    elif real:
        print(
            "skipped the 11M row: make it with python benchmarks/gen_real_big.py DIR/t2m/*.gz "
            "DIR/t11m/big.pt.trace.json.gz 5"
        )
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
    ap.add_argument("--phases", default="1", help="0: skip the per-phase costs")
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
        if "11M" in label and not env.get("GPUSCOPE_MAX_LOADED_BYTES"):
            env["GPUSCOPE_MAX_LOADED_BYTES"] = str(BIG_BUDGET)  # its 11M events are beyond the default budget
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
        ph = phases(_files(run_dir), env) if args.phases != "0" else None
        shutil.rmtree(logdir, ignore_errors=True)
        table.append((label, ours, theirs, ph))

    _report(table, cores)


def _target(label: str) -> tuple[float, float | None] | None:
    return next((t for key, t in TARGETS.items() if key in label), None)


def _report(table: list, cores: int) -> None:
    """The table of both sides with each row's target met or missed, then the phases per million events."""
    med = statistics.median
    print()
    print(
        f"{'trace':36} {'theirs s':>9} {'ours s':>8} {'ratio':>6} {'worst':>6} {'cpu':>6} "
        f"{'their MB':>9} {'our MB':>8} {'mem':>5} {'added':>6}  target"
    )
    verdicts = []
    for label, ours, theirs, _ph in table:
        o = med(r["wall_s"] for r in ours)
        ow = max(r["wall_s"] for r in ours)
        om = max(r["peak_mb"] for r in ours)
        target = _target(label)
        if theirs:
            t = med(r["wall_s"] for r in theirs)
            tm = med(r["peak_mb"] for r in theirs)
            # ratio: median over the paired runs; worst: the worst pairing; cpu: the same of CPU seconds
            ratio = med(b["wall_s"] / a["wall_s"] for a, b in zip(ours, theirs))
            cpu = med(b["cpu_s"] / max(a["cpu_s"], 1e-9) for a, b in zip(ours, theirs))
            added = med(r["peak_mb"] - r["base_mb"] for r in theirs) / max(
                1.0, max(r["peak_mb"] - r["base_mb"] for r in ours)
            )
            verdict = "-"
            if target is not None:
                ok = ratio >= target[0] and (target[1] is None or added >= target[1])
                want = f">= {target[0]:.0f}x" + (f", added memory >= {target[1]:.0f}x" if target[1] else "")
                verdict = f"{'PASS' if ok else 'MISS'} ({want})"
                verdicts.append((label, ok))
            print(
                f"{label:36} {t:9.2f} {o:8.2f} {ratio:5.1f}x {t / ow:5.1f}x {cpu:5.1f}x "
                f"{tm:9.0f} {om:8.0f} {tm / om:4.1f}x {added:5.1f}x  {verdict}"
            )
        else:
            verdict = "-"
            if "11M" in label:
                ok = o <= BIG_FIRST_VIEW_S and om <= BIG_PEAK_MB
                verdict = (
                    f"{'PASS' if ok else 'MISS'} (first view <= {BIG_FIRST_VIEW_S:.0f} s, peak <= {BIG_PEAK_MB:.0f} MB)"
                )
                verdicts.append((label, ok))
            dashes = " ".join(f"{'-':>{w}}" for w in (6, 6, 6, 9))
            print(f"{label:36} {'-':>9} {o:8.2f} {dashes} {om:8.0f} {'-':>5} {'-':>6}  {verdict}")
    print(
        "(ratio: median over paired runs of theirs / ours, wall time; worst: theirs / our slowest; cpu: median "
        "of theirs / ours CPU seconds, each process tree; mem: their peak / our peak, all processes; added: the "
        "same above each side's imports; the targets are on ratio and added, and for the 11M row on our "
        "median wall time and largest peak)"
    )
    print()
    print(f"ours, one serial read in one process, CPU s per million events (cores here: {cores}):")
    cols = ("inflate", "cut", "scan", "convert", "finish", "views", "total", "floor")
    print(f"{'trace':36} {'reader':>7} {'events':>9} " + " ".join(f"{c:>7}" for c in cols) + f" {'x floor':>7}")
    for label, _, _, ph in table:
        if ph is None:
            continue
        print(
            f"{label:36} {ph['reader']:>7} {ph['events']:9d} "
            + " ".join(f"{ph[c]:7.2f}" for c in cols)
            + f" {ph['read'] / max(ph['floor'], 1e-9):6.1f}x"
        )
    print(
        "(inflate: ISA-L alone; cut and scan: the native reader's cutting into pieces and its C scan; convert: "
        "the rest of the read before finish (native: texts and columns handed to the builder; Python: msgspec "
        "decoding and coercions); finish: Builder.finish; views: overview, operators, kernels; total: read + "
        "views; floor: inflate + scan, the native parser's speed on one core; x floor: read / floor)"
    )
    if verdicts:
        missed = [label for label, ok in verdicts if not ok]
        print()
        print("every target met" if not missed else f"targets missed: {'; '.join(missed)}")


if __name__ == "__main__":
    main()
