"""Timeline frame time while panning over a generated 1M-event trace, in headless Chromium.

Starts a real `tensorboard --logdir` on a generated trace, opens the gpuscope timeline, then pans
(and zooms) frame by frame and reads the viewer's own per-frame draw time. Baselines, measured in
the same run: the 60 fps frame budget (16.7 ms) and a naive canvas renderer that draws every event
with one fillRect per frame over the same 1M events in the same browser.

    python3 benchmarks/bench_timeline_fps.py [--events 1000000] [--frames 120]

`--merged` measures the merged timeline (issue 24 item 3, "All ranks") instead: a generated job of `--ranks`
ranks (benchmarks/gen_distributed.py, `--rank-events` events each), the same pan and zoom script run first on
one rank's own timeline (rank 0: the baseline) and then on the merged timeline with all ranks chosen and the
first `--unfold` unfolded, in the same browser and run; printed side by side with merged / single ratios.

    python3 benchmarks/bench_timeline_fps.py --merged [--ranks 64] [--unfold 8] [--rank-events 20000]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("GPUSCOPE_CHROMIUM", "/usr/bin/chromium")


def million_event_trace(path: Path, n: int, threads: int = 8) -> int:
    """Writes a synthetic trace of about n complete events: nested CPU ops (a 20 µs parent with three
    5 µs children) on `threads` threads, and kernels on two GPU streams. Returns the event count."""
    names = [f"aten::op{i}" for i in range(40)]
    per_track = n // (threads + 2)
    count = 0
    with open(path, "w", encoding="utf-8") as f:
        f.write(
            '{"schemaVersion": 1, "deviceProperties": [], "displayTimeUnit": "ms", '
            '"baseTimeNanoseconds": 1700000000000000000, "traceEvents": [\n'
        )
        sep = ""
        for th in range(threads):
            t, k, buf = 0.0, 0, []
            while k < per_track:
                buf.append(
                    f'{{"ph":"X","cat":"cpu_op","name":"{names[k % 40]}","pid":1000,"tid":{2000 + th},"ts":{t:.3f},"dur":20.0}}'
                )
                for j in range(3):
                    buf.append(
                        f'{{"ph":"X","cat":"cpu_op","name":"{names[(k + j + 1) % 40]}","pid":1000,"tid":{2000 + th},"ts":{t + 1 + 6 * j:.3f},"dur":5.0}}'
                    )
                k += 4
                t += 25.0
            f.write(sep + ",\n".join(buf))
            sep = ",\n"
            count += k
        for stream in (7, 8):
            buf = [
                f'{{"ph":"X","cat":"kernel","name":"{names[k % 40]}_kernel","pid":0,"tid":{stream},"ts":{k * 6.25:.3f},"dur":4.0,'
                f'"args":{{"device":0,"stream":{stream},"correlation":{k}}}}}'
                for k in range(per_track)
            ]
            f.write(sep + ",\n".join(buf))
            count += per_track
        f.write("\n]}\n")
    return count


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_runs(api: str, proc: subprocess.Popen, timeout: float) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise SystemExit("tensorboard exited early")
        try:
            with urllib.request.urlopen(f"{api}/runs", timeout=5) as r:
                d = json.loads(r.read())
            if d.get("runs") and not d.get("loading"):
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.5)
    raise SystemExit(f"no runs after {timeout}s")


# In-page measurement: pan by `step` px per frame for `frames` frames, timing each draw.
PAN_JS = """async ([frames, step, span]) => {
  const t = window.__gpuscope.timeline; const [ta, tb] = t.extent();
  t.setView(ta, ta + (tb - ta) * span);
  await new Promise(r => setTimeout(r, 1500));   // let the tile for this zoom arrive
  const draws = [], gaps = []; let last = performance.now();
  for (let i = 0; i < frames; i++) {
    await new Promise(r => requestAnimationFrame(r));
    const now = performance.now(); gaps.push(now - last); last = now;
    t.pan(step); const t0 = performance.now(); t.draw(); draws.push(performance.now() - t0);
  }
  return {draws, gaps, fetches: t.stats.fetches, lastFetchMs: t.stats.lastFetchMs, rects: t.stats.rects};
}"""

# In-page measurement: zoom in (then out) by a constant factor per frame around the middle.
ZOOM_JS = """async ([frames]) => {
  const t = window.__gpuscope.timeline; const [ta, tb] = t.extent();
  t.setView(ta, tb);
  await new Promise(r => setTimeout(r, 1500));
  const draws = [], gaps = []; let last = performance.now();
  for (let i = 0; i < frames; i++) {
    await new Promise(r => requestAnimationFrame(r));
    const now = performance.now(); gaps.push(now - last); last = now;
    t.zoom(i < frames / 2 ? 0.9 : 1 / 0.9); const t0 = performance.now(); t.draw(); draws.push(performance.now() - t0);
  }
  return {draws, gaps, fetches: t.stats.fetches, lastFetchMs: t.stats.lastFetchMs, rects: t.stats.rects};
}"""

NAIVE_JS = """async ([n, tracks, frames]) => {
  const c = document.createElement('canvas'); c.width = 1200; c.height = 600; document.body.appendChild(c);
  const g = c.getContext('2d', {alpha: false});
  const ts = new Float64Array(n), du = new Float32Array(n), tr = new Uint8Array(n);
  const per = Math.floor(n / tracks); let end = 0;
  for (let i = 0; i < n; i++) { const k = i % per; tr[i] = Math.floor(i / per); ts[i] = k * 6.25; du[i] = 4; end = Math.max(end, ts[i] + 4); }
  const out = [];
  for (let f = 0; f < frames; f++) {
    const t0 = performance.now(), v0 = f * end / 200, sc = 1200 / end;
    g.fillStyle = '#fff'; g.fillRect(0, 0, 1200, 600);
    for (let i = 0; i < n; i++) { g.fillStyle = (i & 1) ? '#88c' : '#c88'; g.fillRect((ts[i] - v0) * sc, tr[i] * 16, du[i] * sc, 14); }
    g.getImageData(0, 0, 1, 1);   // force the raster
    out.push(performance.now() - t0);
  }
  c.remove(); return out;
}"""


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


SCENARIOS = (("whole trace", 1.0), ("1/100 of the trace", 0.01), ("1/10000 of the trace", 1e-4))


def measure(page, frames: int) -> dict[str, dict]:
    """The pan scenarios and the zoom on the page's timeline (window.__gpuscope.timeline)."""
    results = {f"pan over {label}": page.evaluate(PAN_JS, [frames, 15, span]) for label, span in SCENARIOS}
    results["zoom in and out"] = page.evaluate(ZOOM_JS, [frames])
    return results


def figures(r: dict) -> dict[str, float]:
    """Draw-time percentiles (ms) and frames per second from the rAF intervals (those before each measurement's
    first frame already left out)."""
    gaps = r["gaps"]
    return {
        "draw_p50": statistics.median(r["draws"]),
        "draw_p95": pct(r["draws"], 0.95),
        "draw_max": max(r["draws"]),
        "frame_p50": statistics.median(gaps),
        "frame_p95": pct(gaps, 0.95),
        "fps": 1000 / statistics.mean(gaps),
    }


def launch_chromium(p):
    """Debian's Chromium through Playwright, with the flags it needs as root and offline."""
    return p.chromium.launch(
        executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
    )


def start_tensorboard(d: str, log) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "tensorboard.main",
        "--logdir",
        d,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--load_fast=false",
    ]
    if os.environ.get("GPUSCOPE_DEV_BACKEND") == "1":  # frontend development only: the stand-in backend
        cmd = [sys.executable, str(ROOT / "frontend" / "dev" / "dev_server.py"), d, str(port)]
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT), f"http://127.0.0.1:{port}"


def merged_main(args: argparse.Namespace) -> None:
    """Single-rank timeline (rank 0) against the merged timeline of all ranks, `--unfold` unfolded."""
    from playwright.sync_api import sync_playwright

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gen_distributed import generate

    with tempfile.TemporaryDirectory() as d:
        t0 = time.time()
        paths = generate(str(Path(d) / "job"), args.ranks, events=args.rank_events, steps=args.steps)
        old = time.time() - 3600  # complete files, not still being written
        for p in paths:
            os.utime(p, (old, old))
        print(f"generated {args.ranks} ranks x ~{args.rank_events:,} events in {time.time() - t0:.1f}s")
        log = open(Path(d) / "tb.log", "w")  # noqa: SIM115 - open for the server process's lifetime
        proc, url = start_tensorboard(d, log)
        rank0 = Path(paths[0]).name.split(".")[0]
        opened = ",".join(str(k) for k in range(min(args.unfold, args.ranks)))
        views = {
            "single rank": f"#run=job&worker={rank0}&view=timeline",
            f"merged {args.ranks} ranks, {args.unfold} unfolded": f"#run=job&view=timeline&merged=1&ranks=0-{args.ranks - 1}&open={opened}",
        }
        out: dict[str, dict[str, dict]] = {}
        sizes: dict[str, str] = {}  # the canvas: one rank's tracks may be shorter than the merged view's height
        try:
            t0 = time.time()
            wait_runs(f"{url}/data/plugin/gpuscope", proc, 900)
            with sync_playwright() as p:
                b = launch_chromium(p)
                # the views take turns, `--rounds` times, so that a busy machine slows both alike; each round opens
                # the view afresh, and its frames join the view's samples
                for rnd in range(args.rounds):
                    for name, frag in views.items():
                        page = b.new_page(viewport={"width": 1400, "height": 900})
                        page.goto(f"{url}/data/plugin_entry.html?name=gpuscope{frag}")
                        page.wait_for_selector("#view-timeline[data-ready='1']", timeout=900000)
                        page.wait_for_function("() => window.__gpuscope && window.__gpuscope.timeline", timeout=900000)
                        size = page.evaluate(
                            "() => { const r = document.querySelector('#tl-canvas canvas').getBoundingClientRect();"
                            " return [Math.round(r.width), Math.round(r.height)]; }"
                        )
                        sizes[name] = f"{size[0]}x{size[1]}"
                        print(
                            f"round {rnd + 1}, {name}: first tile after {time.time() - t0:.1f}s, canvas {sizes[name]} px"
                        )
                        for scen, r in measure(page, args.frames).items():
                            have = out.setdefault(name, {}).setdefault(scen, {"draws": [], "gaps": []})
                            have["draws"] += r["draws"]
                            have["gaps"] += r["gaps"][1:]
                        asked = page.evaluate(
                            "() => window.__gpuscope.merged ? [...window.__gpuscope.merged.requests.keys()] : null"
                        )
                        if asked is not None:
                            print(f"  ranks whose tiles were asked for: {len(asked)} of {args.ranks}")
                        page.close()
                        t0 = time.time()
                b.close()
        finally:
            proc.terminate()
            proc.wait(20)
            log.close()
    (base_name, base), (m_name, merged) = out.items()
    cols = ("fps", "frame_p50", "frame_p95", "draw_p50", "draw_p95", "draw_max")
    print(f"\n{'scenario':<34}{'view':<30}" + "".join(f"{c:>11}" for c in cols))
    worst = 0.0
    for scen in base:
        fb, fm = figures(base[scen]), figures(merged[scen])
        for name, f in ((base_name, fb), (m_name, fm)):
            print(f"{scen:<34}{name:<30}" + "".join(f"{f[c]:>11.2f}" for c in cols))
        ratio = {c: fm[c] / fb[c] if fb[c] else float("nan") for c in cols}
        print(f"{'':<34}{'merged / single':<30}" + "".join(f"{ratio[c]:>10.2f}x" for c in cols))
        worst = max(worst, fm["draw_p95"])
    print("canvas (CSS px): " + ", ".join(f"{k} {v}" for k, v in sizes.items()))
    fps_b = statistics.mean(figures(r)["fps"] for r in base.values())
    fps_m = statistics.mean(figures(r)["fps"] for r in merged.values())
    print(
        f"RESULT: merged {fps_m:.0f} fps vs single-rank {fps_b:.0f} fps (mean over the scenarios, "
        f"{fps_m / fps_b:.2f}x); merged worst p95 draw {worst:.2f} ms = {worst / (1000 / 60):.2f}x the 60 fps budget"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--frames", type=int, default=120)
    ap.add_argument("--merged", action="store_true", help="single-rank vs merged timeline of a generated job")
    ap.add_argument("--ranks", type=int, default=64, help="--merged: ranks of the generated job")
    ap.add_argument("--unfold", type=int, default=8, help="--merged: ranks unfolded (the first ones)")
    ap.add_argument("--rank-events", type=int, default=20_000, help="--merged: about this many events per rank")
    ap.add_argument("--steps", type=int, default=4, help="--merged: steps per rank")
    ap.add_argument("--rounds", type=int, default=3, help="--merged: measurements of each view, taking turns")
    args = ap.parse_args()
    if args.merged:
        merged_main(args)
        return
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as d:
        run = Path(d) / "million"
        run.mkdir()
        t0 = time.time()
        n = million_event_trace(run / "bench.1700000000000.pt.trace.json", args.events)
        print(f"generated {n:,} events in {time.time() - t0:.1f}s")
        log = open(Path(d) / "tb.log", "w")  # noqa: SIM115 - open for the server process's lifetime
        proc, url = start_tensorboard(d, log)
        try:
            t0 = time.time()
            wait_runs(f"{url}/data/plugin/gpuscope", proc, 600)
            with sync_playwright() as p:
                b = launch_chromium(p)
                page = b.new_page(viewport={"width": 1400, "height": 900})
                page.goto(f"{url}/data/plugin_entry.html?name=gpuscope#run=million&view=timeline")
                page.wait_for_selector("#view-timeline[data-ready='1']", timeout=600000)
                print(f"backend load + first timeline tile: {time.time() - t0:.1f}s")
                results = {}
                for label, span in (("whole trace", 1.0), ("1/100 of the trace", 0.01), ("1/10000 of the trace", 1e-4)):
                    r = page.evaluate(PAN_JS, [args.frames, 15, span])
                    results[label] = r
                    print(
                        f"pan over {label:>22}: draw median {statistics.median(r['draws']):6.2f} ms, p95 {pct(r['draws'], 0.95):6.2f} ms, "
                        f"max {max(r['draws']):6.2f} ms; rAF interval median {statistics.median(r['gaps'][1:]):5.1f} ms "
                        f"({1000 / statistics.mean(r['gaps'][1:]):.0f} fps); rects/frame {r['rects']}; tile fetches {r['fetches']} "
                        f"(last {r['lastFetchMs']:.0f} ms)"
                    )
                r = page.evaluate(ZOOM_JS, [args.frames])
                results["zoom in and out"] = r
                print(
                    f"zoom x0.9 per frame, in then out: draw median {statistics.median(r['draws']):6.2f} ms, p95 {pct(r['draws'], 0.95):6.2f} ms, "
                    f"max {max(r['draws']):6.2f} ms; rAF interval median {statistics.median(r['gaps'][1:]):5.1f} ms "
                    f"({1000 / statistics.mean(r['gaps'][1:]):.0f} fps); tile fetches {r['fetches']}"
                )
                naive = page.evaluate(NAIVE_JS, [n, 10, 5])
                b.close()
        finally:
            proc.terminate()
            proc.wait(20)
            log.close()
    worst = max(pct(r["draws"], 0.95) for r in results.values())
    nv = statistics.median(naive)
    print(f"baseline naive fillRect per event ({n:,} events): median {nv:.0f} ms/frame")
    print(
        f"RESULT: worst p95 draw {worst:.2f} ms = {worst / (1000 / 60):.2f}x the 60 fps budget (16.7 ms); "
        f"{nv / worst:.0f}x faster than the naive renderer"
    )


if __name__ == "__main__":
    main()
