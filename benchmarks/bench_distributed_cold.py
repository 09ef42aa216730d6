"""The Distributed view from a cold start, next to `gpuscope diagnose` on the same run and machine.

A logdir as users have it: the shared public traces (../shared/traces/public, one run each, real) beside two
generated jobs, `small` (4 ranks, ~17 KB each) and `wide` (64 ranks). Nothing is summarized or cached. For each job:

- the CLI: `gpuscope diagnose LOGDIR JOB` on its own copy of the logdir (the same symlinks) and an empty cache;
- the view: a freshly started `tensorboard --logdir`, asked what the page asks (runs, workers, spans), then
  `/distributed` polled as the page polls it (after 0.2, 0.4, 0.8 s, then every second) until nothing is
  pending; the seconds from the first request, and each poll's
  progress line (done of total, the estimate of the seconds left) against what it took in the end.

    python benchmarks/bench_distributed_cold.py                      # both jobs
    python benchmarks/bench_distributed_cold.py --jobs small --wide-events 4000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from gen_distributed import generate  # noqa: E402

PUBLIC = ROOT.parent / "shared" / "traces" / "public"


def _env(cache: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["GPUSCOPE_CACHE_DIR"] = str(cache)
    return env


def build(base: Path, wide_events: int, jobs: list[str]) -> Path:
    """The logdir of symlinks (public runs) and the generated jobs (made once under base/gen)."""
    gen = base / "gen"
    if "small" in jobs and not (gen / "small").is_dir():
        generate(str(gen / "small"), 4, events=400, steps=4)
    if "wide" in jobs and not (gen / f"wide{wide_events}").is_dir():
        generate(str(gen / f"wide{wide_events}"), 64, events=wide_events, steps=6)
    logdir = Path(tempfile.mkdtemp(dir=base, prefix="logdir-"))
    if PUBLIC.is_dir():
        for p in sorted(PUBLIC.iterdir()):
            if p.is_dir():
                (logdir / p.name).symlink_to(p)
    if "small" in jobs:
        (logdir / "small").symlink_to(gen / "small")
    if "wide" in jobs:
        (logdir / "wide").symlink_to(gen / f"wide{wide_events}")
    return logdir


def cli(copy: Path, run: str, cache: Path) -> float:
    """Seconds of `gpuscope diagnose` on a copy of the logdir (its summaries are written into it)."""
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "tb_plugin.summaries.cli", "diagnose", str(copy), run],
        env=_env(cache),
        capture_output=True,
        text=True,
    )
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(r.stdout[-2000:] + r.stderr[-3000:])
    return dt


def _get(url: str, timeout: float = 600) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def view(logdir: Path, run: str, cache: Path) -> tuple[float, list[tuple[float, dict]]]:
    """Seconds from the first request to a /distributed answer with nothing pending, and each poll's progress."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(logdir.parent / f"tensorboard-{run}.log", "wb")  # noqa: SIM115 - the server's lifetime
    proc = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1", "--port", str(port)],
        env=_env(cache),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    api = f"http://127.0.0.1:{port}/data/plugin/gpuscope"
    try:
        while True:
            try:
                _get(f"http://127.0.0.1:{port}/data/plugins_listing", timeout=5)
                break
            except OSError:
                if proc.poll() is not None:
                    raise SystemExit(log.name) from None
                time.sleep(0.2)
        t0 = time.perf_counter()
        while run not in _get(f"{api}/runs")["runs"]:
            time.sleep(0.5)
        q = urllib.parse.quote
        workers = _get(f"{api}/workers?run={q(run)}")["workers"]
        spans = _get(f"{api}/spans?run={q(run)}&worker={q(workers[0])}")["spans"]
        polls: list[tuple[float, dict]] = []
        while True:
            d = _get(f"{api}/distributed?run={q(run)}&span={q(spans[-1])}&partial=1")  # as the page asks
            now = time.perf_counter() - t0
            if not d.get("pending"):
                return now, polls
            prog = dict(d.get("progress") or {})
            prog.setdefault("done", len(d.get("workers") or {}))
            prog.setdefault("total", len(d.get("workers") or {}) + len(d["pending"]))
            polls.append((now, prog))
            time.sleep(min(1.0, 0.2 * 2 ** (len(polls) - 1)))  # the page's pendingPollMs
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default=os.path.join(tempfile.gettempdir(), "gpuscope-bench-dist-cold"))
    ap.add_argument("--jobs", nargs="+", default=["small", "wide"], choices=["small", "wide"])
    ap.add_argument("--wide-events", type=int, default=20_000)
    a = ap.parse_args()
    base = Path(a.base)
    base.mkdir(parents=True, exist_ok=True)
    logdir = build(base, a.wide_events, a.jobs)
    time.sleep(2.1)  # older than the scanner's stable age
    runs = sum(1 for _ in logdir.iterdir())
    print(f"logdir: {runs} runs ({'with' if PUBLIC.is_dir() else 'without'} the shared public traces)")
    for job in a.jobs:
        files = sorted((logdir / job).glob("*.pt.trace.json*"))
        size = sum(p.stat().st_size for p in files)
        cache = Path(tempfile.mkdtemp(dir=base, prefix="cache-"))
        copy = build(base, a.wide_events, a.jobs)
        t_cli = cli(copy, job, cache)
        shutil.rmtree(copy)
        shutil.rmtree(cache)
        cache = Path(tempfile.mkdtemp(dir=base, prefix="cache-"))
        t_view, polls = view(logdir, job, cache)
        shutil.rmtree(cache)
        print(f"{job}: {len(files)} ranks, {size / 1e6:.2f} MB gzip")
        print(f"  gpuscope diagnose (cold):      {t_cli:6.1f} s")
        print(f"  Distributed view (cold start): {t_view:6.1f} s   view / CLI = {t_view / t_cli:.2f}")
        for t, p in polls[:: max(1, len(polls) // 8)]:
            eta = p.get("eta_s")
            said = f"about {eta:.0f} s left" if isinstance(eta, (int, float)) else "no estimate"
            done = f"{p.get('done')} of {p.get('total')} summarized"
            print(f"    at {t:5.1f} s: {done}, {said} (took {t_view - t:.0f} s)")
    shutil.rmtree(logdir)


if __name__ == "__main__":
    main()
