"""Slow links: collectives whose transfer time grew over that of their peers, and the worker their groups share.

A collective's transfer time (`critical_path`: the shortest duration a member saw, so no member's waiting is in
it) is compared with the median transfer of the job's collectives of the same name, number of members and bytes
(at least MIN_PEERS of them); it grew when it is at least RATIO times that median and MIN_NS longer. A ring's
collective slows on all its members alike, so one group's collectives cannot say whose link is slow; the groups
that grew in a step can: when two or more process groups grew and exactly one worker is a member of all of them
(a 2D job: the rank's node group and its rail group), that worker's link is the suspect.

`grown(job)` -> per matched collective the ns its transfer grew by (0: it did not);
`suspect(job, k)` -> {"worker": index, "groups": [pg...], "cut": {collective: ns}, "excess_ns"} or None, for
step code `k`: `cut` holds the grown collectives of the suspect's groups in the step, what `what_if.replay`
takes off their transfer to give the step the suspect's links at the speed of their peers.
"""

from __future__ import annotations

import numpy as np

from profiler_core.analysis.comm.collectives import P2P_GROUP
from tb_plugin.run_level.critical_path import Job

RATIO = 1.5
MIN_NS = 50_000
MIN_PEERS = 3


def grown(job: Job) -> np.ndarray:
    """Per matched collective (`job.inst` row): how many ns its transfer grew over its peers' median (module
    doc), 0 where it did not; cached on the job."""
    cached = job.__dict__.get("_grown")
    if cached is not None:
        return cached
    out = np.zeros(len(job.inst))
    if len(job.inst):
        by = job.inst.groupby(["name", "members", "bytes"], sort=False)["transfer"]
        med = by.transform("median").to_numpy(np.float64)
        peers = by.transform("size").to_numpy(np.int64)
        tr = job.inst["transfer"].to_numpy(np.float64)
        ok = (peers >= MIN_PEERS) & (tr >= RATIO * med) & (tr - med >= MIN_NS)
        out[ok] = (tr - med)[ok]
    job.__dict__["_grown"] = out
    return out


def suspect(job: Job, k: int) -> dict | None:
    """The worker whose link the grown collectives of step code `k` point at (module doc), or None; cached on
    the job."""
    cache = job.__dict__.setdefault("_suspects", {})
    if k not in cache:
        cache[k] = _suspect(job, k)
    return cache[k]


def _suspect(job: Job, k: int) -> dict | None:
    g = grown(job)
    insts = np.unique(job.c_inst[(job.c_step == k) & (job.c_inst >= 0)])
    insts = insts[g[insts] > 0]
    if not len(insts):
        return None
    groups: dict[str, set[int]] = {}
    for i in insts.tolist():
        members = set(job.c_w[job.members(i)].tolist())
        key = str(job.inst["group"].iat[i])
        if key.startswith(P2P_GROUP):
            continue  # two links of a chain share one rank by construction: they cannot point at its link
        groups[key] = groups.get(key, set()) | members
    if len(groups) < 2:
        return None
    common = set.intersection(*groups.values())
    if len(common) != 1:
        return None
    (w,) = common
    cut = {int(i): float(g[i]) for i in insts.tolist() if w in set(job.c_w[job.members(i)].tolist())}
    pgs = sorted({str(job.inst["pg"].iat[i]) or str(job.inst["group"].iat[i]) for i in cut})
    return {"worker": int(w), "groups": pgs, "cut": cut, "excess_ns": float(sum(cut.values()))}
