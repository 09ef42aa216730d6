"""Files holding several processes' traces fused into one (trace-merging tools give each rank's events the
pid `rank * 100000000 + pid` and an `args.rank`): gpuscope reads one process per file, so such a file is
refused with a clear message rather than read as one worker whose steps chain across ranks."""

from __future__ import annotations

from typing import Any

import numpy as np

from profiler_core.trace.read.decode import TraceReadError

STEP_PREFIX = "ProfilerStep#"
#: the pid offset per rank that trace-merging tools use
RANK_PID_STRIDE = 100_000_000


def step_processes(t: Any) -> list[int]:
    """The pids whose CPU ranges (cpu_op / user_annotation) include ProfilerStep# steps, sorted."""
    ev = t.events
    if len(ev) == 0:
        return []
    cat = ev["cat"]
    names = ev["name"]
    cats = set(cat.cat.categories) if hasattr(cat, "cat") else set(map(str, cat.unique()))
    if not cats & {"cpu_op", "user_annotation"}:
        return []
    if hasattr(cat, "cat"):  # by codes (a table per category; code -1, NaN, the table's last entry: False)
        cpu = np.array([c in ("cpu_op", "user_annotation") for c in cat.cat.categories] + [False])
        is_cpu = cpu[cat.cat.codes.to_numpy()]
    else:
        is_cpu = cat.isin(("cpu_op", "user_annotation")).to_numpy()
    if hasattr(names, "cat"):
        step = np.array([str(n).startswith(STEP_PREFIX) for n in names.cat.categories] + [False])
        is_step = step[names.cat.codes.to_numpy()]
    else:
        is_step = names.astype(str).str.startswith(STEP_PREFIX).to_numpy()
    pids = ev["pid"].to_numpy()[is_cpu & is_step]
    return sorted(int(p) for p in np.unique(pids))


def refuse_fused(t: Any, path: str) -> None:
    """Raise TraceReadError when ProfilerStep# ranges come from more than one process."""
    pids = step_processes(t)
    if len(pids) < 2:
        return
    shown = ", ".join(str(p) for p in pids[:6]) + (", ..." if len(pids) > 6 else "")
    ranks = sorted({p // RANK_PID_STRIDE for p in pids if p >= 0})
    how = f" (ranks {', '.join(map(str, ranks))} as pid // {RANK_PID_STRIDE:,})" if len(ranks) > 1 else ""
    raise TraceReadError(
        f"{path}: holds the steps of {len(pids)} processes fused into one file (pids {shown}){how}, as "
        "trace-merging tools write them; gpuscope reads one process per file: open each rank's own trace"
    )
