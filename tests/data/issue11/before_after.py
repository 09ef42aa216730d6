"""Print the numbers issue 11's note quotes, for the fixtures of tests/data/issue11/ (run from the repository
root with the code to measure on PYTHONPATH):

    PYTHONPATH=$PWD python3 tests/data/issue11/before_after.py
"""

from __future__ import annotations

import sys
from pathlib import Path

D = Path(__file__).resolve().parent
FIX = Path("tests/data/issue11")  # read relative to the cwd: the fixtures are the same for both codes


def main() -> None:
    from profiler_core.analysis import step_breakdown as overview
    from profiler_core.analysis.stages.steps import steps
    from profiler_core.analysis.tables import kernels
    from profiler_core.trace.read.reader import read_trace
    from tb_plugin.views import distributed

    def load(name):
        return read_trace(FIX / f"{name}.pt.trace.json.gz", processes=0)

    t = load("early_gpu_work")
    st = steps(t)
    ov = overview.overview(t)
    print(
        "1 early_gpu_work: step lengths us",
        [round((e - s) / 1000, 3) for s, e in zip(st["start"], st["end"])],
        "| step 10 kernel_us",
        ov["steps"][0]["kernel_us"],
        "| average step us",
        ov["average"]["total_us"],
    )
    t = load("rocm_launches")
    rows = kernels.kernels(t)["rows"]
    print(
        "3 rocm_launches: blocks per SM",
        {r["name"][:24]: r["blocks_per_sm"] for r in rows},
        "| occupancy",
        {r["name"][:24]: r["achieved_occupancy"] for r in rows},
        "| gpu occupancy",
        overview.overview(t)["gpu"]["achieved_occupancy"],
    )
    ranks = {f"rank{r}": load(f"nccl_rpc_rank{r}") for r in (0, 1)}
    out = distributed.distributed(ranks)
    print(
        "4 nccl_rpc: rank0 comm rows",
        [(r["name"][:40], r["calls"]) for r in out["comm_ops"]["rank0"]],
        "| rank0 wait_us",
        out["workers"]["rank0"]["wait_us"],
    )
    t = load("idle_gpu")
    ov = overview.overview(t)
    tb = (ov["gpu"] or {}).get("temporal")
    print(
        "6 idle_gpu: other_us",
        ov["average"]["other_us"],
        "| temporal",
        tb["devices"][0]["average"] if tb else None,
        "| idle recommendation",
        any("idle" in r for r in ov["recommendations"]),
    )


if __name__ == "__main__":
    sys.exit(main())
