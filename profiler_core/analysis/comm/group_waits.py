"""Wait vs transfer per process group: collectives matched across workers within their process group, so that
tensor-, pipeline- and expert-parallel subgroups get a wait/transfer split too.

A process group is its `Process Group Name` with its ranks (from distributedInfo's `pg_config`, the
communicator each worker recorded), else with its `Group size`. Within a group, NCCL issues collectives in the
same order on every member, so the k-th call (in time order, `wait` calls left out) of a group on each member
is one collective. When every expected member has that call (and they agree on its name), its transfer time is
the shortest duration any member saw (the last to arrive waits for nobody) and each member's wait is its own
duration minus that; otherwise the call counts as transfer only, and a note says why. A `wait` call is waiting
time only. Expected members: the workers whose rank is in the group's ranks; else `Group size` workers; else
every worker. Pure functions of DataFrames (`worker_calls` reads one `TraceData`); times in ns.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from profiler_core.analysis.comm import collectives

CALL_COLUMNS = ("worker", "name", "pg", "pg_ranks", "group_size", "start", "dur", "is_wait")


def pg_ranks_of(info: Mapping | None) -> dict[str, tuple[int, ...]]:
    """Process group name -> its global ranks, from a trace's distributedInfo `pg_config` ({} if absent)."""
    out: dict[str, tuple[int, ...]] = {}
    for pg in (info or {}).get("pg_config") or []:
        if not isinstance(pg, dict) or "pg_name" not in pg:
            continue
        ranks = pg.get("ranks")
        if isinstance(ranks, str):
            try:
                ranks = json.loads(ranks)
            except ValueError:
                continue
        if isinstance(ranks, list) and all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
            out[str(pg["pg_name"])] = tuple(ranks)
    return out


def worker_rank(t: Any) -> int | None:
    """The worker's global rank from distributedInfo, or None."""
    info = (getattr(t, "metadata", None) or {}).get("distributedInfo")
    r = info.get("rank") if isinstance(info, dict) else None
    return int(r) if isinstance(r, int) and not isinstance(r, bool) else None


def worker_calls(t: Any, worker: str) -> pd.DataFrame:
    """One worker's collective calls (record_param_comms with a Collective name, see `collectives`), in time
    order, with the columns of CALL_COLUMNS: `pg_ranks` is a tuple of ranks or None when the trace does not
    say."""
    c = collectives.collectives(t)
    info = (getattr(t, "metadata", None) or {}).get("distributedInfo")
    ranks = pg_ranks_of(info if isinstance(info, dict) else None)
    c = c.sort_values("start", kind="stable")
    pgs = c["pg"].astype(str).tolist()
    return pd.DataFrame(
        {
            "worker": [worker] * len(c),
            "name": c["name"].astype(str).to_numpy(),
            "pg": pgs,
            "pg_ranks": pd.Series([ranks.get(g) for g in pgs], dtype=object),
            "group_size": c["group_size"].to_numpy(np.int64),
            "start": c["start"].to_numpy(np.int64),
            "dur": c["dur"].to_numpy(np.int64),
            "is_wait": c["is_wait"].to_numpy(bool),
        }
    )


def group_key(pg: str, ranks: tuple[int, ...] | None, size: int) -> str:
    """The key of a process group: its name with its ranks when known, else with its size."""
    if ranks is not None:
        return f"{pg} {list(ranks)}"
    return f"{pg} (size {size})" if size > 0 else str(pg)


def expected_members(ranks: tuple[int, ...] | list[int] | None, size: int, present: Mapping[str, int | None]) -> int:
    """How many of the `present` workers (worker -> global rank or None) a group should have: those whose rank is
    in its `ranks` (when every worker knows its rank), else `size` of them, else all of them."""
    n = len(present)
    if ranks is not None and all(v is not None for v in present.values()):
        rs = set(ranks)
        return sum(1 for v in present.values() if v in rs)
    return min(size, n) if size > 0 else n


def match_in_groups(calls: pd.DataFrame, ranks: Mapping[str, int | None]) -> tuple[pd.DataFrame, list[str]]:
    """Wait and transfer of every call of every worker (`calls`: CALL_COLUMNS, each worker's calls in time
    order; `ranks`: worker -> global rank or None). Returns the calls with `group` (process group key), `seq`
    (k-th non-wait call of that group on that worker, -1 for wait calls), `members` (expected members),
    `aligned`, `transfer`, `wait` (ns); and notes on calls that could not be matched."""
    workers = sorted(set(calls["worker"]))
    present = {w: ranks.get(w) for w in workers}
    out = calls.reset_index(drop=True).copy()
    sizes = out["group_size"].to_numpy(np.int64)
    # the group key and expected members, once per distinct (name, ranks, size)
    pgs = out["pg"].to_numpy(dtype=object)  # plain objects: iterating Arrow strings costs a Python call each
    triples = list(zip(pgs, [r if isinstance(r, tuple) else None for r in out["pg_ranks"]], sizes.tolist()))
    first: dict[tuple, int] = {}
    codes = np.fromiter((first.setdefault(t, len(first)) for t in triples), np.int64, len(triples))
    uniq = list(first)
    keys = np.asarray([group_key(str(g), r, int(n)) for g, r, n in uniq], dtype=object)
    members = np.asarray([expected_members(r, int(n), present) for _, r, n in uniq], dtype=np.int64)
    out["group"] = keys[codes] if len(out) else np.asarray([], dtype=object)
    is_wait = out["is_wait"].to_numpy(bool)
    seq = np.full(len(out), -1, np.int64)
    seq[~is_wait] = out[~is_wait].groupby(["worker", "group"], sort=False).cumcount().to_numpy(np.int64)
    out["seq"] = seq
    out["members"] = members[codes] if len(out) else np.asarray([], dtype=np.int64)
    dur = out["dur"].to_numpy(np.int64)
    transfer = dur.copy()
    aligned = np.zeros(len(out), dtype=bool)
    notes: list[str] = []
    real = out[~is_wait]
    if len(real):
        gb = real.groupby(["group", "seq"], sort=True)
        agg = gb.agg(n=("dur", "size"), expected=("members", "max"), names=("name", "nunique"), tmin=("dur", "min"))
        ok = ((agg["n"] == agg["expected"]) & (agg["expected"] >= 2) & (agg["names"] == 1)).to_numpy()
        row_group = gb.ngroup().to_numpy()  # the rows' group numbers, in agg's (sorted) order
        idx = real.index.to_numpy()
        rows_ok = ok[row_group]
        aligned[idx[rows_ok]] = True
        transfer[idx[rows_ok]] = agg["tmin"].to_numpy(np.int64)[row_group[rows_ok]]
        bad = np.flatnonzero(~ok & (agg["expected"].to_numpy() >= 2))
        if len(bad):
            names_of = real[np.isin(row_group, bad)].groupby(["group", "seq"], sort=True)["name"].agg(set)
            for i in bad:
                group, k = agg.index[i]
                names = names_of[(group, k)]
                why = (
                    f"names differ ({', '.join(sorted(names))})"
                    if len(names) > 1
                    else f"{int(agg['n'].iloc[i])} of {int(agg['expected'].iloc[i])} members have it"
                )
                notes.append(f"process group {group}: call #{int(k) + 1} not matched ({why}); counted as transfer only")
    transfer[is_wait] = 0
    out["aligned"] = aligned
    out["transfer"] = transfer
    out["wait"] = dur - transfer
    return out, notes


def group_totals(matched: pd.DataFrame) -> pd.DataFrame:
    """Per (worker, group): `calls`, `transfer`, `wait` (ns), `aligned` calls; rows sorted by group, worker."""
    g = matched.assign(calls=1, aligned_calls=matched["aligned"].astype(np.int64))
    return g.groupby(["group", "worker"], sort=True)[["calls", "aligned_calls", "transfer", "wait"]].sum().reset_index()


def wait_transfer_by_group(traces: Mapping[str, Any]) -> dict:
    """Wait vs transfer per process group across the workers of one run ({worker: TraceData}): `calls` (the
    matched calls), `totals` (`group_totals`), `notes`; `reason` when no worker records its collectives."""
    calls = [worker_calls(t, w) for w, t in sorted(traces.items())]
    calls = [c for c in calls if len(c)]
    if not calls:
        return {
            "calls": None,
            "totals": None,
            "notes": [],
            "reason": "no collective calls with a Collective name (record_param_comms) in any worker",
        }
    matched, notes = match_in_groups(
        pd.concat(calls, ignore_index=True), {w: worker_rank(t) for w, t in traces.items()}
    )
    return {"calls": matched, "totals": group_totals(matched), "notes": notes, "reason": None}
