"""Benchmark the run-level answers (/diagnosis) on summaries of many collective calls per rank (issue 40 item 3).

For each row CALLS x RANKS: a small job of RANKS ranks is generated (gen_distributed.py), each rank summarized,
and its stored summary (LOGDIR/.gpuscope/summaries, where the plugin finds it) inflated to CALLS collective calls:
every call of `distributed.collectives` repeated in place (same step, same group sequence on every rank) and
`collective_calls` likewise up to `worker_facts.MAX_CALLS` (the summary's own bound; more is refused as
invalid). The summaries are valid (`summary.validate`), so the plugin serves them as `gpuscope summarize` would.

Then, through the plugin's WSGI app (werkzeug test client), in a fresh plugin per row:
- cold: the first /diagnosis once every summary is in memory (/pipeline answered first, which finds them);
- repeated: the median of 3 more identical requests;
- concurrent: 4 identical requests at once on a cold answer (the kept answers cleared first where there are
  some): the wall time until all 4 are answered.
A row whose cold request takes more than --timeout seconds is reported as "> N s" (and the rest skipped).

    PYTHONPATH=. python benchmarks/bench_run_level.py --rows 5000x8,20000x8,50000x8,200000x64 --timeout 180

2 shared cores; before: 76fa42a (no kept answers), after: the kept answers (the cold computation is unchanged):

    calls x ranks   cold before/after   repeated before/after   4 at once before/after
    5000x8          0.80 / 1.06 s       0.64 s / 0.005 s        2.15 / 0.90 s
    20000x8         2.32 / 2.93 s       2.15 s / 0.002 s        7.99 / 2.87 s
    50000x8         3.83 / 3.79 s       3.06 s / 0.004 s        11.5 / 3.43 s
    200000x64       (not run) / 115 s   (= cold) / 0.004 s      (not run) / 86.9 s

Vectorised run-level path (issue 40 item 3; before ed3f4b9, after it, one session, answers byte-identical):

    calls x ranks   cold before/after   4 at once before/after
    5000x8          0.60 / 0.26 s       0.34 / 0.22 s
    20000x8         1.26 / 0.81 s       1.15 / 0.71 s
    50000x8         1.69 / 0.74 s       1.38 / 0.73 s
    200000x64       18.8 / 5.1 s        17.7 / 4.0 s
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

P = "/data/plugin/gpuscope"
OLD = time.time() - 3600


def _repeat(values: list, k: int, n: int) -> list:
    """Each value of `values` k times in place, cut at n."""
    return [v for v in values for _ in range(k)][:n]


def inflate(s: dict, calls: int) -> dict:
    """The summary `s` with `calls` collective calls (each call repeated in place)."""
    from profiler_core.analysis.worker.worker_facts import MAX_CALLS

    d = s["distributed"]["collectives"]
    n0 = len(d["name"])
    k = -(-calls // max(1, n0))
    for key in ("name", "step", "dur", "bytes", "wait"):
        d[key] = _repeat(d[key], k, calls)
    cc = s["collective_calls"]
    m = min(calls, MAX_CALLS)
    m0 = len(cc["name"])
    kc = -(-m // max(1, m0))
    for key in ("group", "name", "step", "start", "dur", "bytes", "wait", "covered", "lead", "tail"):
        cc[key] = _repeat(cc[key], kc, m)
    cc["start"] = [x + i % kc for i, x in enumerate(cc["start"])]  # in time order, as written
    cc["dropped"] = max(0, calls - m)
    return s


def build(where: Path, calls: int, ranks: int, events: int) -> Path:
    """A logdir of one run `job` of `ranks` ranks whose stored summaries hold `calls` collective calls each."""
    import msgspec
    from gen_distributed import generate

    from tb_plugin.runs import Scanner
    from tb_plugin.summaries import schema, store
    from tb_plugin.summaries.engine import source_of
    from tb_plugin.summaries.summary import decode, encode, source_fields, summarize_path

    logdir = where / f"c{calls}_r{ranks}"
    if (logdir / ".done").exists():
        return logdir
    paths = generate(str(logdir / "job"), ranks, events=events, steps=4, seed=5)
    for p in paths:
        os.utime(p, (OLD, OLD))
    for f in Scanner(str(logdir), stable_age_s=0.0).scan()["job"].files():
        s = inflate(msgspec.to_builtins(summarize_path(f.path)), calls)
        s["source"] = source_fields(source_of(f))
        schema.check(schema.from_dict(s))
        data = encode(s)
        decode(data, source_of(f))  # the plugin accepts it
        out = store.out_path(store.default_out(str(logdir)), f.relpath)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        Path(out).write_bytes(data)
    (logdir / ".done").write_text("")
    return logdir


def _timed(fn, timeout: float) -> tuple[float | None, object]:
    """(seconds, result) of fn(), or (None, None) when it takes more than `timeout` (left running)."""
    box: list = []
    t0 = time.perf_counter()
    th = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    th.start()
    th.join(timeout)
    return (time.perf_counter() - t0, box[0]) if box else (None, None)


def row(logdir: Path, timeout: float) -> dict:
    from tensorboard.backend import application
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    import tb_plugin.plugin as plugin_mod

    flags = argparse.Namespace(gpuscope_dask_scheduler=None)
    p = plugin_mod.GpuscopePlugin(base_plugin.TBContext(logdir=str(logdir), flags=flags))
    c = Client(application.TensorBoardWSGI([p]))
    t0 = time.perf_counter()
    while True:  # every summary found (read, validated and kept in memory)
        r = c.get(f"{P}/pipeline?run=job&span=1")
        if r.status_code != 200 or "pending" not in r.json:
            break
        time.sleep(0.05)
    out: dict = {"find_s": time.perf_counter() - t0}
    url = f"{P}/diagnosis?run=job&span=1"

    def ask():
        r = Client(application.TensorBoardWSGI([p])).get(url)
        assert r.status_code == 200 and "pending" not in r.json, r.get_data()[:300]
        return r

    cold, first = _timed(ask, timeout)
    out["cold_s"] = cold
    if cold is None:
        return out
    out["answer"] = first.get_data()
    reps = []
    for _ in range(3):
        t = time.perf_counter()
        ask()
        reps.append(time.perf_counter() - t)
    out["repeated_s"] = statistics.median(reps)
    answers = getattr(p.state().summaries, "answers", None)
    if answers is not None:
        answers.clear()

    def four():
        th = [threading.Thread(target=ask) for _ in range(4)]
        for x in th:
            x.start()
        for x in th:
            x.join()
        return True

    out["concurrent4_s"], _ = _timed(four, max(timeout, 4 * cold + 30))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="5000x8,20000x8,50000x8,200000x64", help="CALLSxRANKS,...")
    ap.add_argument("--dir", default="/tmp/gpuscope_bench_run_level", help="where the logdirs are built (kept)")
    ap.add_argument("--events", type=int, default=1500, help="events per rank of the generated traces")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds a cold request may take")
    ap.add_argument("--dump", help="save each row's /diagnosis answer (bytes) as DIR/CALLSxRANKS.json, to compare")
    a = ap.parse_args(argv)
    os.environ.setdefault("GPUSCOPE_CACHE_DIR", str(Path(a.dir) / "cache"))
    print(f"{'calls x ranks':>16} {'find':>8} {'cold':>9} {'repeated':>9} {'4 at once':>10}")
    for spec in a.rows.split(","):
        calls, ranks = (int(x) for x in spec.split("x"))
        logdir = build(Path(a.dir), calls, ranks, a.events)
        res = row(logdir, a.timeout)
        if a.dump and res.get("answer") is not None:
            os.makedirs(a.dump, exist_ok=True)
            Path(a.dump, f"{spec}.json").write_bytes(res["answer"])

        def fmt(v: float | None, limit: float = a.timeout) -> str:
            return f"> {limit:.0f} s" if v is None else f"{v:.3f} s"

        print(
            f"{spec:>16} {fmt(res['find_s']):>8} {fmt(res['cold_s']):>9} "
            f"{fmt(res.get('repeated_s')) if res['cold_s'] else '-':>9} "
            f"{fmt(res.get('concurrent4_s')) if res['cold_s'] else '-':>10}",
            flush=True,
        )


if __name__ == "__main__":
    main()
