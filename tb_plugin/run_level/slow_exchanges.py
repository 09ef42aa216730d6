"""Exchanges far slower than their bytes need, once every member was there: communication latency or bandwidth,
not imbalance. From the matched collectives of `critical_path.match` (their transfer is the exchange's own time:
the last end less the last arrival) and `analysis.comm.bandwidth` (the rule: `latency_bound`; the bandwidths).

`slow_exchanges(job)` -> {"count", "of", "groups": [{"name", "members", "bytes", "count", "min_ms", "max_ms",
"busbw_gbps", "late_ranks"}...], "text"} or None when no matched collective is latency-bound. `late_ranks` counts
who arrived last at them: spread over the ranks (or none waited long), the time is the exchange's, not a rank's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from profiler_core.analysis.comm import bandwidth
from tb_plugin.run_level.critical_path import Job


def slow_exchanges(job: Job) -> dict[str, Any] | None:
    """The latency-bound exchanges of a run's matched collectives, grouped by name, members and bytes (module
    doc), largest total first; None when there are none."""
    inst = job.inst
    if not len(inst):
        return None
    nbytes = inst["bytes"].to_numpy(np.int64)
    secs = inst["transfer"].to_numpy(np.float64) / 1e9
    names = inst["name"].astype(str).to_numpy()
    members = inst["members"].to_numpy(np.int64)
    slow = bandwidth.latency_bound(nbytes, secs)
    if not slow.any():
        return None
    _, bus = bandwidth.bandwidth(nbytes, secs, names, members)
    groups: list[dict[str, Any]] = []
    for key in sorted({(str(names[i]), int(members[i]), int(nbytes[i])) for i in np.flatnonzero(slow).tolist()}):
        sel = np.flatnonzero(slow & (names == key[0]) & (members == key[1]) & (nbytes == key[2]))
        late = [job.ranks[job.workers[int(w)]] for w in job.i_late[sel].tolist()]
        counts: dict[str, int] = {}
        for r in late:
            counts[str(r)] = counts.get(str(r), 0) + 1
        groups.append(
            {
                "name": key[0],
                "members": key[1],
                "bytes": key[2],
                "count": int(len(sel)),
                "of": int(((names == key[0]) & (members == key[1]) & (nbytes == key[2])).sum()),
                "min_ms": round(float(secs[sel].min()) * 1e3, 3),
                "max_ms": round(float(secs[sel].max()) * 1e3, 3),
                "total_ms": round(float(secs[sel].sum()) * 1e3, 3),
                "busbw_gbps": round(float(np.nanmedian(bus[sel])) / 1e9, 6) if np.isfinite(bus[sel]).any() else None,
                "late_ranks": counts,
            }
        )
    groups.sort(key=lambda g: -float(g["total_ms"]))
    return {"count": int(slow.sum()), "of": int(len(inst)), "groups": groups, "text": _text(groups)}


def _size(n: int) -> str:
    return f"{n / 1024:.0f} KB" if n >= 1024 else f"{n} B"


def _text(groups: list[dict]) -> str:
    """The slowest group in words: `7 of 12 nccl:all_to_allv of 8 KB (2 ranks) took 1.6-2.5 ms each once every
    member was there (bus bandwidth 0.004 GB/s): communication latency, not imbalance`."""
    g = groups[0]
    bw = f", bus bandwidth {g['busbw_gbps']:.3g} GB/s" if g["busbw_gbps"] is not None else ""
    more = f"; and {len(groups) - 1} more such groups" if len(groups) > 1 else ""
    return (
        f"{g['count']} of {g['of']} {g['name']} of {_size(g['bytes'])} ({g['members']} ranks) took "
        f"{g['min_ms']:.1f}-{g['max_ms']:.1f} ms each once every member was there{bw}: communication latency or "
        f"bandwidth, not imbalance{more}"
    )
