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

CALL_COLUMNS = ("worker", "name", "pg", "pg_ranks", "group_size", "start", "dur", "is_wait", "how")


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
    own = c["pg_ranks"].tolist() if "pg_ranks" in c else [None] * len(c)
    return pd.DataFrame(
        {
            "worker": [worker] * len(c),
            "name": c["name"].astype(str).to_numpy(),
            "pg": pgs,
            "pg_ranks": pd.Series(
                [o if isinstance(o, tuple) else ranks.get(g) for o, g in zip(own, pgs)], dtype=object
            ),
            "group_size": c["group_size"].to_numpy(np.int64),
            "start": c["start"].to_numpy(np.int64),
            "dur": c["dur"].to_numpy(np.int64),
            "is_wait": c["is_wait"].to_numpy(bool),
            "how": c["how"].astype(str).to_numpy() if len(c) else np.zeros(0, dtype=object),
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


def _runs(sorted_keys: np.ndarray) -> np.ndarray:
    """Where each run of equal values of `sorted_keys` starts (indices)."""
    first = np.ones(len(sorted_keys), dtype=bool)
    first[1:] = sorted_keys[1:] != sorted_keys[:-1]
    return np.flatnonzero(first)


def match_codes(
    worker: np.ndarray,
    group: np.ndarray,
    name: np.ndarray,
    dur: np.ndarray,
    is_wait: np.ndarray,
    members: np.ndarray,
    group_keys: list[str] | np.ndarray,
    names: list[str] | np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """The matching of `match_in_groups` on integer codes, one pass of sorts and segment reductions (no loop
    over the calls). Per call (each worker's calls in time order): `worker` (any code), `group` (the index of its
    key in `group_keys`, which are in sorted order), `name` (the index of its name in `names`), `dur`, `is_wait`,
    `members` (its expected members). Returns per call `seq` (-1 for wait calls), `aligned`, `transfer`, and the
    notes on the calls that could not be matched (by group key, then sequence)."""
    n = len(dur)
    seq = np.full(n, -1, np.int64)
    aligned = np.zeros(n, dtype=bool)
    transfer = np.asarray(dur, np.int64).copy()
    notes: list[str] = []
    real = np.flatnonzero(~is_wait)
    if len(real):
        # sequence: the place among the worker's calls of the same group, in row (time) order
        ng = int(group.max()) + 1
        pair = np.asarray(worker, np.int64)[real] * ng + group[real]
        o = np.argsort(pair, kind="stable")
        pos = np.arange(len(o))
        starts = np.zeros(len(o), np.int64)
        at = _runs(pair[o])
        starts[at] = at
        seq[real[o]] = pos - np.maximum.accumulate(starts)
        # one collective per (group, sequence): segments of the calls sorted by it (stably: row order within)
        kmax = int(seq[real].max()) + 1
        inst = group[real] * kmax + seq[real]
        o = np.argsort(inst, kind="stable")
        at = _runs(inst[o])
        count = np.diff(np.append(at, len(o)))
        rows = real[o]
        names_o = name[rows]
        expected = np.maximum.reduceat(members[rows], at)
        lo = np.minimum.reduceat(names_o, at)
        hi = np.maximum.reduceat(names_o, at)
        tmin = np.minimum.reduceat(transfer[rows], at)
        ok = (count == expected) & (expected >= 2) & (lo == hi)
        seg = np.repeat(np.arange(len(at)), count)  # each sorted call's collective
        rows_ok = ok[seg]
        aligned[rows[rows_ok]] = True
        transfer[rows[rows_ok]] = tmin[seg[rows_ok]]
        for i in np.flatnonzero(~ok & (expected >= 2)).tolist():  # one note per unmatched collective
            key = int(inst[o[at[i]]])
            differ = sorted({str(names[x]) for x in np.unique(names_o[at[i] : at[i] + count[i]]).tolist()})
            why = (
                f"names differ ({', '.join(differ)})"
                if lo[i] != hi[i]
                else f"{int(count[i])} of {int(expected[i])} members have it"
            )
            notes.append(
                f"process group {group_keys[key // kmax]}: call #{key % kmax + 1} not matched ({why}); "
                "counted as transfer only"
            )
    transfer[is_wait] = 0
    return seq, aligned, transfer, notes


def _codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes, uniques) of an object column whose values may be unhashable (then by their repr)."""
    try:
        codes, uniq = pd.factorize(values, use_na_sentinel=False)
    except TypeError:
        codes, uniq = pd.factorize(np.asarray([repr(v) for v in values], dtype=object), use_na_sentinel=False)
        first = np.full(len(uniq), -1, np.int64)
        first[codes[::-1]] = np.arange(len(codes))[::-1]
        return np.asarray(codes, np.int64), values[first]
    return np.asarray(codes, np.int64), np.asarray(uniq, dtype=object)


def match_in_groups(calls: pd.DataFrame, ranks: Mapping[str, int | None]) -> tuple[pd.DataFrame, list[str]]:
    """Wait and transfer of every call of every worker (`calls`: CALL_COLUMNS, each worker's calls in time
    order; `ranks`: worker -> global rank or None). Returns the calls with `group` (process group key), `seq`
    (k-th non-wait call of that group on that worker, -1 for wait calls), `members` (expected members),
    `aligned`, `transfer`, `wait` (ns); and notes on calls that could not be matched (`match_codes`)."""
    workers = sorted(set(calls["worker"]))
    present = {w: ranks.get(w) for w in workers}
    out = calls.reset_index(drop=True).copy()
    n = len(out)
    sizes = out["group_size"].to_numpy(np.int64)
    # the group key and expected members, once per distinct (name, ranks, size): codes of each column, combined
    pg_c, pg_u = _codes(out["pg"].to_numpy(dtype=object))
    rk_c, rk_u = _codes(out["pg_ranks"].to_numpy(dtype=object))
    sz_u, sz_c = np.unique(sizes, return_inverse=True)
    triple = (pg_c * max(len(rk_u), 1) + rk_c) * max(len(sz_u), 1) + sz_c.reshape(-1)
    tu, codes = np.unique(triple, return_inverse=True)
    codes = codes.reshape(-1)
    uniq = []
    for t in tu.tolist():
        rest, s = divmod(t, max(len(sz_u), 1))
        g, r = divmod(rest, max(len(rk_u), 1))
        rr = rk_u[r]
        uniq.append((pg_u[g], rr if isinstance(rr, tuple) else None, int(sz_u[s])))
    keys = np.asarray([group_key(str(g), r, int(s)) for g, r, s in uniq], dtype=object)
    members = np.asarray([expected_members(r, int(s), present) for _, r, s in uniq], dtype=np.int64)
    key_list = sorted(set(keys.tolist()))
    index = {k: i for i, k in enumerate(key_list)}
    key_code = np.asarray([index[k] for k in keys.tolist()], np.int64)
    out["group"] = keys[codes] if n else np.asarray([], dtype=object)
    is_wait = out["is_wait"].to_numpy(bool)
    w_c, _ = _codes(out["worker"].to_numpy(dtype=object))
    nm_c, nm_u = _codes(out["name"].to_numpy(dtype=object))
    member_rows = members[codes] if n else np.asarray([], dtype=np.int64)
    dur = out["dur"].to_numpy(np.int64)
    seq, aligned, transfer, notes = match_codes(
        w_c, key_code[codes] if n else np.zeros(0, np.int64), nm_c, dur, is_wait, member_rows, key_list, nm_u
    )
    out["seq"] = seq
    out["members"] = member_rows
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
