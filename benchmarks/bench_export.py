"""Export of a 1M-event trace to .json.gz: ours vs torch 2.13's export_chrome_trace, same run.

    python benchmarks/bench_export.py [--events 1000000]

Both sides profile a loop making ``--events`` tiny record_function events (CPU only), then time
``export_chrome_trace("....pt.trace.json.gz")``. torch runs in its own interpreter (env
GPUSCOPE_TORCH_PYTHON, default .venvs/compat/bin/python in the repo). Also printed: our stop (trace-dict
assembly) time, file sizes, and a plain .json export. Target (docs/targets.md): export <= 2x torch.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap

#: torch 2.13 lives in the compat venv .ci/run builds (.venvs/compat), or $GPUSCOPE_TORCH_PYTHON
TORCH_PY = os.environ.get("GPUSCOPE_TORCH_PYTHON") or os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".venvs", "compat", "bin", "python"
)

_MEASURE = textwrap.dedent("""
    import json, os, sys, time, warnings
    warnings.simplefilter("ignore")
    n, out_dir, which = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    if which == "torch":
        import torch
        from torch.profiler import profile, record_function, ProfilerActivity
    else:
        from profiler_core import profile, record_function, ProfilerActivity
    p = profile(activities=[ProfilerActivity.CPU])
    p.start()
    for i in range(n):
        with record_function("op"):
            pass
    t = time.perf_counter(); p.stop(); stop_s = time.perf_counter() - t
    res = {"stop_s": stop_s}
    for suffix in ((".json.gz", ".json") if which != "torch" else (".json.gz",)):   # torch saves once
        path = os.path.join(out_dir, which + ".pt.trace" + suffix)
        t = time.perf_counter(); p.export_chrome_trace(path); dt = time.perf_counter() - t
        res["export" + suffix.replace(".", "_") + "_s"] = dt
        res["size" + suffix.replace(".", "_")] = os.path.getsize(path)
        os.unlink(path)
    print(json.dumps(res))
""")


def measure(python: str, which: str, n: int, out_dir: str) -> dict:
    r = subprocess.run([python, "-c", _MEASURE, str(n), out_dir, which], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{which} measurement failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuscope-bench-export-") as d:
        ours = measure(sys.executable, "ours", args.events, d)
        theirs = measure(TORCH_PY, "torch", args.events, d) if os.path.exists(TORCH_PY) else None
    mb = 1 / (1 << 20)
    print(f"events: {args.events}")
    print(f"ours  stop (trace dict): {ours['stop_s']:7.2f} s")
    print(f"ours  export .json.gz:   {ours['export_json_gz_s']:7.2f} s  ({ours['size_json_gz'] * mb:.1f} MB)")
    print(f"ours  export .json:      {ours['export_json_s']:7.2f} s  ({ours['size_json'] * mb:.1f} MB)")
    if theirs:
        print(f"torch stop:              {theirs['stop_s']:7.2f} s")
        print(f"torch export .json.gz:   {theirs['export_json_gz_s']:7.2f} s  ({theirs['size_json_gz'] * mb:.1f} MB)")
        print(
            f"ratio export .json.gz ours/torch: {ours['export_json_gz_s'] / theirs['export_json_gz_s']:.3f}"
            "   (target <= 2.0)"
        )
        print(
            f"ratio stop+export .json.gz ours/torch: "
            f"{(ours['stop_s'] + ours['export_json_gz_s']) / (theirs['stop_s'] + theirs['export_json_gz_s']):.3f}"
        )
    else:
        print(f"(torch not found at {TORCH_PY}: no ratio)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
