"""Regenerate tests/data/hta/hta_reference.json: Holistic Trace Analysis' numbers on every shared trace.

Run with the compatibility venv (HolisticTraceAnalysis installed), from the repository root:

    $GPUSCOPE_COMPAT_VENV/bin/python tests/data/hta/make_hta_reference.py [../shared/traces]

Each trace file is analysed alone (copied into a temporary directory of its own, as rank 0). For each it
records HTA's temporal breakdown, communication/computation overlap and kernel type breakdown, or the
reason HTA's analysis does not run on it (e.g. a CPU-only trace). Keys are paths relative to the traces
folder; `fixtures` holds the same for two of tests/data/issue11/'s hand-made traces that have NCCL kernels.
tests/test_hta_agreement.py compares gpuscope's numbers with these.
"""

from __future__ import annotations

import datetime
import logging
import math
import shutil
import sys
import tempfile
from pathlib import Path

from hta_refs import hta_version, write_reference

HERE = Path(__file__).resolve().parent
FIXTURES = ("idle_gpu", "nccl_rpc_rank0")  # tests/data/issue11/, with communication kernels


def _num(v):
    v = float(v)
    return None if math.isnan(v) else v


def analyse(path: Path) -> dict:
    """HTA's three analyses on one trace file (or the reason they could not run)."""
    from hta.trace_analysis import TraceAnalysis

    out: dict = {}
    with tempfile.TemporaryDirectory() as d:
        shutil.copy(path, Path(d) / path.name)
        try:
            ta = TraceAnalysis(trace_dir=d)
        except Exception as e:  # noqa: BLE001 - recorded as the reason
            return {"error": f"TraceAnalysis: {type(e).__name__}: {e}"}
        ((rank, df),) = ta.t.traces.items()
        gpu = df[df["stream"].ne(-1)]
        out["gpu_events"] = int(len(gpu))
        if len(gpu):
            out["gpu_window"] = {
                "first_ts": _num(gpu["ts"].min()),
                "last_end": _num((gpu["ts"] + gpu["dur"]).max()),
                "min_ts_offset": _num(ta.t.min_ts),
            }
        for name, fn in (
            ("temporal_breakdown", lambda: ta.get_temporal_breakdown(visualize=False)),
            ("comm_comp_overlap", lambda: ta.get_comm_comp_overlap(visualize=False)),
            (
                "kernel_type_breakdown",
                lambda: ta.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True)[0],
            ),
        ):
            try:
                res = fn()
                out[name] = [
                    {k: (_num(v) if isinstance(v, (int, float)) else v) for k, v in row.items()}
                    for row in res.to_dict(orient="records")
                ]
            except Exception as e:  # noqa: BLE001 - recorded as the reason
                out[name] = {"error": f"{type(e).__name__}: {e}"}
    return out


def main() -> None:
    logging.disable(logging.WARNING)
    import hta

    root = Path(sys.argv[1] if len(sys.argv) > 1 else HERE.parents[2] / ".." / "shared" / "traces").resolve()
    files = sorted(p for p in root.rglob("*.pt.trace.json*") if p.is_file())
    result = {
        "provenance": {
            "tool": "HolisticTraceAnalysis",
            "version": hta_version(hta),
            "generated_by": "tests/data/hta/make_hta_reference.py",
            "python": sys.version.split()[0],
            "date": datetime.date.today().isoformat(),
            "inputs": "../shared/traces (the team's shared real traces), each file analysed alone as rank 0",
            "calls": "get_temporal_breakdown(visualize=False), get_comm_comp_overlap(visualize=False), "
            "get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True)[0]",
        },
        "traces": {},
    }
    for p in files:
        rel = p.relative_to(root).as_posix()
        print("analysing", rel, flush=True)
        result["traces"][rel] = analyse(p)
    # our own hand-made fixtures with communication kernels (the shared traces have none)
    result["fixtures"] = {}
    for name in FIXTURES:
        p = HERE.parent / "issue11" / f"{name}.pt.trace.json.gz"
        print("analysing", name, flush=True)
        result["fixtures"][name] = analyse(p)
    write_reference(result, HERE / "hta_reference.json")


if __name__ == "__main__":
    main()
