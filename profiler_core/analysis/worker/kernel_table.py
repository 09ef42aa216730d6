"""The job diff's kernels: each worker's compute kernels per (op path, name) with their place, kept in its summary,
and two jobs' kernels aligned by the kernel diff's passes (`tables.kernel_places.align_groups`).

`project(t) -> dict`, the summary's "kernel_table" (columnar, lists that go together):
  {"steps": S,                          # the steps counted: the first `worker_facts.MAX_STEPS`
   "paths": [op path...],               # `kernel_places.kernel_places`' paths, cut at PATH_LEN characters
   "path": [i...], "name": [text...],   # per group: its path (index into paths), kernel name (cut at NAME_LEN)
   "ordinal": [k...],                   # the group's most common k (`kernel_places.NO_OP`: no op)
   "count": [n...], "total": [ns...],   # the group's kernels that start in the S steps, their summed duration
   "dropped": n, "dropped_ns": ns}      # groups left out beyond MAX_GROUPS (the smallest by total), their ns
Groups are in order of first start, the order `align_groups` pairs in. Communication kernels are left out (their
time holds waiting for other ranks, which the collective calls measure).

The job side: `per_step(table)` is one worker's ns per step by (path, name); `job_groups(tables)` one job's
groups over its workers (each (path, name) once, its most common ordinal, in order of first appearance over the
workers in the order given); `align(tables_a, tables_b)` pairs the two jobs' groups with `align_groups`, so the
job diff and the Diff view's kernel diff align kernels alike.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from profiler_core.analysis.stages.classify import communication_events
from profiler_core.analysis.stages.steps import steps
from profiler_core.analysis.tables.kernel_places import NO_OP, group_places, kernel_places
from profiler_core.analysis.worker.worker_facts import MAX_STEPS, NAME_LEN, step_of

#: groups kept per worker (the largest by total): a few tens of KB at most
MAX_GROUPS = 256
PATH_LEN = 1000
Key = tuple[str, str]


def empty() -> dict:
    """The table of a worker with no kernels (the shape, for hand-made summaries)."""
    cols = ("paths", "path", "name", "ordinal", "count", "total")
    return {"steps": 0, **{c: [] for c in cols}, "dropped": 0, "dropped_ns": 0}


def project(t: Any) -> dict:
    """One worker's compute kernels in its first MAX_STEPS steps, per (op path, name) (module doc)."""
    st = steps(t)
    starts = st["start"].to_numpy(np.int64)[:MAX_STEPS]
    ends = st["end"].to_numpy(np.int64)[:MAX_STEPS]
    out = empty()
    out["steps"] = len(starts)
    places = kernel_places(t)
    if not len(places) or not len(starts):
        return out
    rows = places["row"].to_numpy(np.int64)
    comm = communication_events(t)[rows]
    in_step = step_of(starts, ends, places["ts"].to_numpy(np.int64)) >= 0
    g = group_places(places[in_step & ~comm].reset_index(drop=True))
    if not len(g):
        return out
    g["path"] = g["path"].str.slice(0, PATH_LEN)
    g["name"] = g["name"].str.slice(0, NAME_LEN)
    if len(g) > MAX_GROUPS:
        keep = np.sort(np.argsort(-g["total"].to_numpy(np.int64), kind="stable")[:MAX_GROUPS])
        rest = np.setdiff1d(np.arange(len(g)), keep)
        out["dropped"], out["dropped_ns"] = int(len(rest)), int(g["total"].to_numpy(np.int64)[rest].sum())
        g = g.iloc[keep].reset_index(drop=True)
    codes, paths = pd.factorize(g["path"], sort=False)
    out.update(
        paths=[str(p) for p in paths],
        path=codes.tolist(),
        name=g["name"].astype(str).tolist(),
        ordinal=g["ordinal"].astype(np.int64).tolist(),
        count=g["count"].astype(np.int64).tolist(),
        total=g["total"].astype(np.int64).tolist(),
    )
    return out


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and -(1 << 63) <= x < (1 << 63)


def check(p: Any) -> None:
    """ValueError unless `p` is a kernel table (module doc): typed lists of one length, indices in range."""
    if not isinstance(p, dict):
        raise ValueError("is not an object")
    for k in ("steps", "dropped", "dropped_ns"):
        if not _is_int(p.get(k)) or p[k] < 0:
            raise ValueError(f"{k} is not a count")
    paths = p.get("paths")
    if not isinstance(paths, list) or not all(isinstance(x, str) for x in paths):
        raise ValueError("paths is not a list of texts")
    n = None
    for k in ("path", "name", "ordinal", "count", "total"):
        v = p.get(k)
        if not isinstance(v, list) or (n is not None and len(v) != n):
            raise ValueError(f"{k} is not a list of one entry per group")
        n = len(v)
    if not all(isinstance(x, str) for x in p["name"]):
        raise ValueError("name is not a list of texts")
    for k in ("path", "ordinal", "count", "total"):
        if not all(_is_int(x) for x in p[k]):
            raise ValueError(f"{k} is not a list of integers")
    if any(x < 0 or x >= len(paths) for x in p["path"]):
        raise ValueError("path out of range")
    if any(x < NO_OP for x in p["ordinal"]) or any(x < 0 for x in p["count"]) or any(x < 0 for x in p["total"]):
        raise ValueError("a negative ordinal, count or total")
