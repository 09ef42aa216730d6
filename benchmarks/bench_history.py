"""`gpuscope history` on a logdir of N runs x R ranks (issue 41: "a logdir of 100 runs of 64 ranks opens in seconds").

Builds the logdir once (benchmarks/gen_distributed.py, small traces: `--events`, 3 steps; runs one day apart by
their file-name timestamps; from run `--regressed-from` on, rank 1's slow kernel runs 1.5 ms longer), summarizes it
once with `gpuscope summarize --local N`, then times, each in a fresh process (`python -m tb_plugin.summaries.cli`):

  load   the baseline: every run's summaries read from disk (what history computed its rows from)
  first  `gpuscope history LOGDIR --json`, summaries on disk, no run's row kept (LOGDIR/.gpuscope/rows removed)
  cold   the same again in a fresh process: each run's row read from disk (`summaries.rows`), the summaries of
         the two runs the regression compares
  api    `gpuscope.open(LOGDIR).history()` in a fresh process (the rows the CLI kept on disk), import included
  warm   the same call again in that process: its time (the answer kept)
  rows   then `history(order="name")`: another history of the same runs (each run's row kept, `history(keep=...)`)

and prints each in seconds and as a ratio to `load`.

  python3 benchmarks/bench_history.py /tmp/hist --runs 100 --ranks 64 [--local 2] [--repeat 3] [--tree CHECKOUT]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gen_distributed as gen  # noqa: E402

DAY_MS = 86_400_000
PLANT = "1:kernel:1.5"


def build(root: Path, runs: int, ranks: int, events: int, regressed_from: int) -> None:
    """The logdir: `runs` runs of `ranks` ranks, skipped when `root/DONE` says it was built with these sizes."""
    done = root / "DONE"
    want = f"{runs} {ranks} {events} {regressed_from}"
    if done.exists() and done.read_text() == want:
        return
    for i in range(runs):
        out = root / f"run{i:03d}"
        plants = (gen.parse_plant(PLANT),) if i >= regressed_from else ()
        gen.generate(str(out), ranks, events=events, steps=3, seed=100 + i, layout=True, plants=plants)
        for p in out.glob("*.pt.trace.json.gz"):
            worker, _, rest = p.name.split(".", 2)
            p.rename(out / f"{worker}.{1790900000000 + i * DAY_MS}.{rest}")
    done.write_text(want)


def _py(code: str, tree: Path) -> list[float]:
    """Seconds of `code` (which prints them last) run in a fresh interpreter on the gpuscope of `tree`."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tree, check=True, capture_output=True, text=True
    ).stdout
    return [float(x) for x in out.strip().splitlines()[-1].split()]


LOAD = """
import time, sys
t = time.perf_counter()
from tb_plugin.runs import Scanner
from tb_plugin.summaries import store
from tb_plugin.summaries.engine import source_of
root = {root!r}
runs = Scanner(root, stable_age_s=0.0).scan()
out = root + "/.gpuscope/summaries"
n = sum(store.read(store.out_path(out, f.relpath), source_of(f)) is not None for r in runs.values() for f in r.files())
assert n, "no summary read"
print(time.perf_counter() - t)
"""

COLD = """
import time, io, contextlib
t = time.perf_counter()
from tb_plugin.summaries import cli
with contextlib.redirect_stdout(io.StringIO()):
    assert cli.main(["history", {root!r}, "--json"]) == 0
print(time.perf_counter() - t)
"""

WARM = """
import time, json
import gpuscope
t0 = time.perf_counter()
with gpuscope.open({root!r}) as prof:
    h = prof.history()
    api = time.perf_counter() - t0
    t = time.perf_counter()
    prof.history()
    dt = time.perf_counter() - t
    t = time.perf_counter()
    prof.history(order="name")
    rows = time.perf_counter() - t
print(json.dumps({{"regression": h.regression, "runs": len(h.data["runs"])}}))
print(api, dt, rows)
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root")
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--events", type=int, default=300)
    ap.add_argument("--regressed-from", type=int, default=None, help="default: 3/4 of the runs")
    ap.add_argument("--local", type=int, default=2, help="Dask workers of `gpuscope summarize`")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-warm", action="store_true", help="load and cold only (a slow tree's warm takes 3 colds)")
    ap.add_argument("--tree", default=str(ROOT), help="the gpuscope checkout timed (another commit's: before/after)")
    a = ap.parse_args(argv)
    root = Path(a.root)
    root.mkdir(parents=True, exist_ok=True)
    reg = a.regressed_from if a.regressed_from is not None else a.runs * 3 // 4
    t = time.perf_counter()
    build(root, a.runs, a.ranks, a.events, reg)
    print(f"logdir: {a.runs} runs x {a.ranks} ranks ({time.perf_counter() - t:.1f} s)", flush=True)
    t = time.perf_counter()
    from tb_plugin.summaries import cli

    args = ["summarize", str(root)] + (["--local", str(a.local)] if a.local > 1 else [])
    with open(os.devnull, "w") as null, __import__("contextlib").redirect_stdout(null):
        assert cli.main(args) == 0
    print(f"summaries: {time.perf_counter() - t:.1f} s", flush=True)
    tree = Path(a.tree)
    times: dict[str, list[float]] = {"load": [], "first": [], "cold": [], "api": [], "warm": [], "rows": []}
    for _ in range(a.repeat):
        times["load"] += _py(LOAD.format(root=str(root)), tree)
        shutil.rmtree(root / ".gpuscope" / "rows", ignore_errors=True)
        times["first"] += _py(COLD.format(root=str(root)), tree)
        times["cold"] += _py(COLD.format(root=str(root)), tree)
        if a.no_warm:
            continue
        api, warm, rows = _py(WARM.format(root=str(root)), tree)
        times["api"].append(api)
        times["warm"].append(warm)
        times["rows"].append(rows)
    best = {k: min(v) for k, v in times.items() if v}
    print(f"tree: {tree}; planted from run{reg:03d}")
    for k in best:
        print(f"{k:5s} {best[k]:8.3f} s  {best[k] / best['load']:6.2f} x load   (best of {a.repeat})")
    print(json.dumps({"runs": a.runs, "ranks": a.ranks, **{k: round(v, 3) for k, v in best.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
