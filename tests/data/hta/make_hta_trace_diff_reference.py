"""Regenerate tests/data/hta/hta_trace_diff_reference.json: Holistic Trace Analysis' per-name GPU event counts
and total durations (its TraceDiff summary) for the two traces HTA's own trace-diff tests compare.

Run with the compatibility venv (HolisticTraceAnalysis installed), from the repository root:

    $GPUSCOPE_COMPAT_VENV/bin/python tests/data/hta/make_hta_trace_diff_reference.py [../shared/traces]

For each trace: `LabeledTrace.get_ops_summary` (TraceDiff's per-name counts and total duration, µs) over every
GPU event of rank 0 (stream != -1), whatever its iteration: `TraceDiff.compare_traces` itself keeps only the
events of chosen iterations, while gpuscope's kernel diff covers the whole profile.
tests/test_view_kernel_diff.py::test_per_name_totals_agree_with_hta compares the kernel diff's rows with these.
"""

from __future__ import annotations

import datetime
import sys
from pathlib import Path

from hta_refs import hta_version, write_reference

HERE = Path(__file__).resolve().parent
CASES = {"base": "public/hta_diff_control", "exp": "public/hta_diff_test"}


def summary(trace_dir: Path) -> dict:
    """name -> [count, total duration µs] of every GPU event of the trace's first rank."""
    from hta.trace_diff import LabeledTrace

    lt = LabeledTrace("t", trace_dir=str(trace_dir))
    df = lt.t.get_trace(lt.ranks()[0])
    s = lt.get_ops_summary(df[df["stream"].ne(-1)]).groupby("name")[["counts", "total_duration"]].sum()
    return {str(n): [int(c), float(d)] for n, (c, d) in zip(s.index, s.to_numpy().tolist())}


def main() -> None:
    import hta

    traces = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE.parents[2].parent / "shared" / "traces"
    out = {
        "provenance": {
            "tool": "HolisticTraceAnalysis",
            "version": hta_version(hta),
            "calls": "LabeledTrace.get_ops_summary(rows of get_trace(rank 0) with stream != -1)",
            "inputs": {side: f"../shared/traces/{rel}" for side, rel in CASES.items()},
            "generated_by": "tests/data/hta/make_hta_trace_diff_reference.py",
            "python": sys.version.split()[0],
            "date": datetime.date.today().isoformat(),
        },
    }
    for side, rel in CASES.items():
        out[side] = summary(traces / rel)
    write_reference(out, HERE / "hta_trace_diff_reference.json")


if __name__ == "__main__":
    main()
