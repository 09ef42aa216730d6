"""Benchmark the job diff on two summarized runs of one logdir (e.g. 256 ranks per side).

Reports the time of `/jobdiff` in-process (a fresh plugin reading the stored summaries: the first request,
then a second one), of `job_diff` alone on summaries already in memory, and the diff's first lines. The runs
must be summarized first (`gpuscope summarize --local 2 LOGDIR`).

    python benchmarks/gen_distributed.py --ranks 256 --events 5000 --plant-layout --out /tmp/jd/a
    python benchmarks/gen_distributed.py --ranks 256 --events 5000 --plant 8:kernel:4 --out /tmp/jd/b
    gpuscope summarize --local 2 /tmp/jd
    python benchmarks/bench_jobdiff.py /tmp/jd a b
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

P = "/data/plugin/gpuscope"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("logdir")
    ap.add_argument("run_a")
    ap.add_argument("run_b")
    ap.add_argument("--lines", type=int, default=8)
    a = ap.parse_args(argv)

    from tensorboard.backend import application
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    import tb_plugin.plugin as plugin_mod
    from tb_plugin.run_level import job_diff
    from tb_plugin.summaries.cli import run_summaries

    flags = argparse.Namespace(gpuscope_dask_scheduler=None)
    t0 = time.perf_counter()
    plugin = plugin_mod.GpuscopePlugin(base_plugin.TBContext(logdir=a.logdir, flags=flags))
    client = Client(application.TensorBoardWSGI([plugin]))
    runs = client.get(f"{P}/runs?rescan=1").json
    t1 = time.perf_counter()
    got = client.get(f"{P}/jobdiff?run={a.run_a}&exp_run={a.run_b}")
    t2 = time.perf_counter()
    again = client.get(f"{P}/jobdiff?run={a.run_a}&exp_run={a.run_b}")
    t3 = time.perf_counter()
    csv_text = client.get(f"{P}/jobdiff?run={a.run_a}&exp_run={a.run_b}&format=csv")
    t4 = time.perf_counter()
    if got.status_code != 200:
        sys.exit(f"/jobdiff answered {got.status_code}: {got.json}")
    assert again.status_code == 200 and csv_text.status_code == 200
    _, sa, _ = run_summaries(a.logdir, a.run_a, "1", log=lambda m: None)
    _, sb, _ = run_summaries(a.logdir, a.run_b, "1", log=lambda m: None)
    t5 = time.perf_counter()
    res = job_diff.job_diff(sa, sb)
    t6 = time.perf_counter()
    print(f"runs: {runs['runs']}")
    print(job_diff.render_text(res, limit=a.lines), end="")
    print(f"plugin start + /runs: {t1 - t0:.2f} s")
    print(f"/jobdiff first request (summaries read from disk): {t2 - t1:.2f} s")
    print(f"/jobdiff second request: {t3 - t2:.2f} s; format=csv: {t4 - t3:.2f} s ({len(csv_text.data)} bytes)")
    print(f"job_diff alone on {len(sa)} + {len(sb)} summaries in memory: {t6 - t5:.2f} s")


if __name__ == "__main__":
    main()
