"""Files holding several ranks' traces fused into one: trace-merging tools (TraceLens's TraceFusion, ...) give
each rank's events the pid `rank * 100000000 + pid` and an `args.rank`. Such a file is read as one part per
rank: the part of rank R is the file's events, memory records, flows and names whose pid is in
`[R * RANK_PID_STRIDE, (R + 1) * RANK_PID_STRIDE)`, with the raw pid given back (`pid - R * RANK_PID_STRIDE`),
in the file's order, and a `distributedInfo` of its own (rank R, world_size: the ranks found, or more where
the file's own says so). Events whose pid is a text label (no offset tells their rank) belong to every part.

A part is named by a path of its own, `PATH@rankR` (`part_path`): `read_trace` of such a path reads the whole
file (through the parse cache with `use_cache`; the last whole fused trace read stays in memory until each of
its ranks was taken, so reading the N parts one after another parses the file once) and gives that rank's
part. `read_trace` of the plain path of a fused file is refused with a `TraceReadError` naming the part paths,
as is a file (or part) whose ProfilerStep# ranges come from several processes without a rank offset.

The scanner (`tb_plugin/runs.py`) tells a fused file by a sniff of its first bytes (`maybe_fused`) and then
learns its ranks from one read of the whole file (`file_ranks`)."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from profiler_core import storage
from profiler_core.trace.read.decode import TraceReadError

STEP_PREFIX = "ProfilerStep#"
#: the pid offset per rank that trace-merging tools use
RANK_PID_STRIDE = 100_000_000
#: a part's path (`storage.part_path`, `storage.split_part`): the file's path and `@rankR`
part_path = storage.part_path
split_path = storage.split_part


# ------------------------------------------------------------------------------------------- sniffing
_EVENT_RANK_RE = re.compile(rb'"rank"\s*:\s*\d')
_OFFSET_PID_RE = re.compile(rb'"pid"\s*:\s*"?\d{9,}')
#: the top-level `distributedInfo` (its `rank` is the file's own, and Kineto may write it after traceEvents)
_DIST_INFO_RE = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*\}')


def maybe_fused(head: bytes) -> bool:
    """Whether the first bytes of a trace's JSON look like a fused file's: a pid of 9 digits or more (real
    pids stay below 2**22), or a `"rank"` key among the events (not the top-level `distributedInfo`'s, which
    Kineto writes before or after them). A false alarm costs one read of the file when it is first listed."""
    if _OFFSET_PID_RE.search(head):
        return True
    start = head.find(b'"traceEvents"')
    events = head[start:] if start >= 0 else head if head.lstrip()[:1] == b"[" else b""
    return _EVENT_RANK_RE.search(_DIST_INFO_RE.sub(b"", events)) is not None


# ------------------------------------------------------------------------------------------- ranks
def _pids(t: Any) -> list[np.ndarray]:
    return [np.asarray(df["pid"].to_numpy()) for df in (t.events, t.memory, t.flows, t.names) if len(df)]


def ranks_of(t: Any) -> list[int]:
    """The ranks of a fused trace (sorted), by `pid // RANK_PID_STRIDE`; [] when the trace is not fused
    (no pid at or above the stride, or one rank only)."""
    pids = _pids(t)
    if not any(len(p) and int(p.max()) >= RANK_PID_STRIDE for p in pids):
        return []
    ranks = sorted({int(r) for p in pids for r in np.unique(p[p >= 0] // RANK_PID_STRIDE)})
    return ranks if len(ranks) > 1 else []


def world_size(t: Any, ranks: list[int]) -> int:
    """The world size a part tells: the file's own `distributedInfo.world_size` where it counts every rank found,
    else the ranks found (at least the highest rank + 1)."""
    info = t.metadata.get("distributedInfo") if isinstance(t.metadata, dict) else None
    own = info.get("world_size") if isinstance(info, dict) else None
    found = max(len(ranks), max(ranks) + 1)
    return own if isinstance(own, int) and not isinstance(own, bool) and own >= found else found


def _take_sparse(col: Any, keep: np.ndarray) -> Any:
    """The sparse column `col` at the sorted row positions `keep` (unused text categories dropped)."""
    from profiler_core.trace.sparse import SparseColumn, rows_dtype

    pos = np.searchsorted(keep, col.rows)
    hit = pos < len(keep)
    hit[hit] = keep[pos[hit]] == col.rows[hit]
    rows = pos[hit].astype(rows_dtype(len(keep)))
    values = col.values[hit]
    cats = col.categories
    if cats is not None:
        used = np.unique(values)
        remap = np.zeros(len(cats), dtype=np.int32)
        remap[used] = np.arange(len(used), dtype=np.int32)
        values, cats = remap[values], cats[used]
    return SparseColumn(len(keep), rows, values, col.missing, cats)


def _take(df: Any, rank: int) -> tuple[Any, np.ndarray]:
    """The rows of the frame `df` that belong to `rank` (pid given back), and their positions."""
    import pandas as pd

    pid = np.asarray(df["pid"].to_numpy())
    keep = np.flatnonzero((pid < 0) | (pid // RANK_PID_STRIDE == rank))
    data = {}
    for c in df.columns:
        col = df[c].iloc[keep]
        if isinstance(col.dtype, pd.CategoricalDtype):
            col = col.cat.remove_unused_categories()
        data[c] = col.reset_index(drop=True)
    out = pd.DataFrame(data, columns=list(df.columns))
    # the pid given back; and the device the reader took from the pid of GPU activity without a device arg
    for c in ("pid", "device") if len(out) else ():
        if c in out.columns:
            p = out[c].to_numpy().copy()
            p[p >= rank * RANK_PID_STRIDE] -= rank * RANK_PID_STRIDE
            out[c] = p
    return out, keep


def part(t: Any, rank: int, ranks: list[int], path: str) -> Any:
    """Rank `rank`'s part of the fused trace `t` (see the module's docstring); its `path` stays the file's (the
    event look-ups read the file by the events' `idx`, their positions there)."""
    from profiler_core.trace.model import TraceData
    from profiler_core.trace.sparse import share_rows

    if rank not in ranks:
        raise TraceReadError(
            f"{path}: no rank {rank} in this file (its ranks: {', '.join(map(str, ranks)) or 'none, not fused'})"
        )
    events, keep = _take(t.events, rank)
    meta = dict(t.metadata) if isinstance(t.metadata, dict) else {}
    info = meta.get("distributedInfo")
    meta["distributedInfo"] = {
        **(info if isinstance(info, dict) else {}),
        "rank": rank,
        "world_size": world_size(t, ranks),
    }
    p = TraceData(
        path=t.path,
        metadata=meta,
        device_properties=t.device_properties,
        base_ns=t.base_ns,
        events=events,
        memory=_take(t.memory, rank)[0],
        flows=_take(t.flows, rank)[0],
        names=_take(t.names, rank)[0],
        warnings=list(t.warnings),
        labels=dict(t.labels),
        source_stat=t.source_stat,
        event_index=t.event_index,
        sparse=share_rows({c: _take_sparse(col, keep) for c, col in t.sparse.items()}),
    )
    return p


# ------------------------------------------------------------------------------------------- reading
_lock = threading.Lock()
#: the last whole fused trace read: (path, its fingerprint, the trace, the ranks not taken yet)
_last: tuple[str, tuple, Any, set] | None = None


def _whole(path: str, fingerprint: tuple, read: Callable[[], Any]) -> Any:
    """The whole trace of `path` (read by `read`, or the one kept from the last read of this file version)."""
    global _last
    with _lock:
        if _last is not None and _last[0] == path and _last[1] == fingerprint:
            return _last[2]
    t = read()
    ranks = ranks_of(t)
    if ranks:
        with _lock:
            _last = (path, fingerprint, t, set(ranks))
    return t


def read_part(path: str, rank: int, fingerprint: tuple, read: Callable[[], Any]) -> Any:
    """Rank `rank`'s part of the fused file `path` (`fingerprint`: its identity now; `read()` reads it whole)."""
    global _last
    t = _whole(path, fingerprint, read)
    ranks = ranks_of(t)
    out = part(t, rank, ranks, part_path(path, rank))
    with _lock:
        if _last is not None and _last[2] is t:
            _last[3].discard(rank)
            if not _last[3]:
                _last = None  # every rank taken: the parts are the loader's now
    refuse_fused(out, part_path(path, rank))
    return out


def file_ranks(path: str, fingerprint: tuple, read: Callable[[], Any]) -> list[int]:
    """The ranks of the file at `path` ([] when it is not fused); the whole trace read stays for its parts."""
    return ranks_of(_whole(path, fingerprint, read))


# ------------------------------------------------------------------------------------------- refusal
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
    """Raise TraceReadError when `t` holds several ranks (pid offsets: its parts are read by their own paths) or
    its ProfilerStep# ranges come from more than one process."""
    ranks = ranks_of(t)
    if ranks:
        shown = ", ".join(map(str, ranks[:8])) + (", ..." if len(ranks) > 8 else "")
        raise TraceReadError(
            f"{path}: holds the events of {len(ranks)} ranks fused into one file (ranks {shown} as pid // "
            f"{RANK_PID_STRIDE:,}), as trace-merging tools write them: gpuscope lists it as one worker per rank; "
            f"read one rank as {part_path(path, ranks[0])!r}"
        )
    pids = step_processes(t)
    if len(pids) < 2:
        return
    shown = ", ".join(str(p) for p in pids[:6]) + (", ..." if len(pids) > 6 else "")
    raise TraceReadError(
        f"{path}: holds the steps of {len(pids)} processes in one file (pids {shown}) without a rank offset "
        f"(pid = rank * {RANK_PID_STRIDE:,} + pid); gpuscope reads one process per trace: open each one's own trace"
    )
