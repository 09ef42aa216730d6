"""The timeline's per-trace tiles (stage `tiles_for`): events ordered by (row, start), a row being one (track,
depth) with tracks per process and thread, GPU tracks told apart, and the flows from launches to GPU work; the
Timeline view (tb_plugin/views/timeline.py) cuts windows out of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from profiler_core.analysis.stages.columns import column_codes, trace_origin_ns
from profiler_core.analysis.stages.registry import stage
from profiler_core.trace.categories import GPU_ACTIVITY_CATS, GPU_USER_ANNOTATION

#: the categories whose events make a track a GPU track
GPU_TRACK_CATS = GPU_ACTIVITY_CATS + (GPU_USER_ANNOTATION,)


@dataclass
class Tiles:
    """Per-trace arrays, events ordered by (row, start); a row is one (track, depth)."""

    origin: int
    trace_end_us: float
    tracks: list[dict]  # JSON-ready track headers (without "rows")
    row_track: np.ndarray  # row -> track index
    row_depth: np.ndarray  # row -> depth
    row_lo: np.ndarray  # row -> first position in the arrays below
    row_hi: np.ndarray  # row -> one past last
    start: np.ndarray  # float64 ns relative to origin
    end: np.ndarray
    dur: np.ndarray
    cum: np.ndarray  # cumulative dur within the row BEFORE each event
    gkey: np.ndarray  # row * span + start (global sorted key)
    gend: np.ndarray  # row * span + end (sorted: rows never overlap inside)
    span: float
    name: np.ndarray  # name category code
    cat: np.ndarray  # cat category code
    idx: np.ndarray  # traceEvents index
    name_table: np.ndarray  # code -> str
    cat_table: np.ndarray
    ev_track: np.ndarray  # per ORIGINAL events row: track index
    ev_depth: np.ndarray  # per ORIGINAL events row: depth
    flows: dict  # arrays of complete flows (see _build_flows)
    flow_cat_table: list


def _names_lookup(t: Any) -> tuple[dict, dict, dict, dict, dict]:
    """process/thread names and sort indexes from the M events."""
    pname: dict = {}
    plabel: dict = {}
    tname: dict = {}
    psort: dict = {}
    tsort: dict = {}
    names = getattr(t, "names", None)
    if names is None or not len(names):
        return pname, plabel, tname, psort, tsort
    for pid, tid, kind, value in zip(
        names["pid"].tolist(), names["tid"].tolist(), names["kind"].astype(str).tolist(), names["value"].tolist()
    ):
        if kind == "process_name":
            pname.setdefault(pid, str(value))
        elif kind == "process_labels":
            plabel.setdefault(pid, str(value))
        elif kind == "thread_name":
            tname.setdefault((pid, tid), str(value))
        elif kind in ("process_sort_index", "thread_sort_index"):
            try:
                v = float(value)
            except (TypeError, ValueError):
                continue
            if kind == "process_sort_index":
                psort.setdefault(pid, v)
            else:
                tsort.setdefault((pid, tid), v)
    return pname, plabel, tname, psort, tsort


def _label_of(t: Any, v: int) -> str:
    labels = getattr(t, "labels", None) or {}
    return str(labels.get(v, v))


def _pair_codes(pid: np.ndarray, tid: np.ndarray) -> tuple[np.ndarray, list]:
    """Dense codes of (pid, tid) pairs (first-appearance order) and the list of pairs."""
    if not len(pid):
        return np.zeros(0, np.int64), []
    pc, pu = pd.factorize(pid)
    tc, tu = pd.factorize(tid)
    code, cu = pd.factorize(pc.astype(np.int64) * len(tu) + tc)
    return code.astype(np.int64), [(int(pu[c // len(tu)]), int(tu[c % len(tu)])) for c in cu.tolist()]


def _order_by_track_start(track: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Order by (track, start, longest first) with fast stable sorts (a 3-key lexsort is slow)."""
    n = len(ts)
    if not n:
        return np.zeros(0, np.int64)
    lo = int(ts.min())
    span = int(ts.max()) - lo + 1
    if (int(track.max()) + 1) * span >= 2**62:  # pragma: no cover - absurd time ranges
        return np.lexsort((-dur, ts, track))
    key = track * span + (ts - lo)
    o = np.argsort(key, kind="stable")
    k = key[o]
    tie = np.zeros(n, dtype=bool)
    tie[1:] = k[1:] == k[:-1]
    if tie.any():  # equal (track, start): longest first, only for the tied runs
        tie[:-1] |= tie[1:]
        pos = np.flatnonzero(tie)
        sub = o[pos]
        o[pos] = sub[np.lexsort((-dur[sub], k[pos]))]
    return o


def _first_fit_depth(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Depths for one track whose events overlap without nesting: lowest free row (slow path)."""
    row_end: list[float] = []
    out = np.empty(len(start), dtype=np.int64)
    for i, (s, e) in enumerate(zip(start.tolist(), end.tolist())):
        for d, re_ in enumerate(row_end):
            if re_ <= s:
                row_end[d] = e
                out[i] = d
                break
        else:
            out[i] = len(row_end)
            row_end.append(e)
    return out


def _build(t: Any) -> Tiles:
    """Derive the per-track, per-depth arrays of a trace (vectorised; one pass per trace)."""
    ev = t.events
    origin = trace_origin_ns(t)
    n = len(ev)
    pid = ev["pid"].to_numpy(np.int64)
    tid = ev["tid"].to_numpy(np.int64)
    ts = ev["ts"].to_numpy(np.int64) - origin
    dur = np.maximum(ev["dur"].to_numpy(np.int64), 0)
    name_code, name_table = column_codes(ev["name"]) if n else (np.zeros(0, np.int64), np.zeros(0, object))
    cat_code, cat_table = column_codes(ev["cat"]) if n else (np.zeros(0, np.int64), np.zeros(0, object))
    idx = ev["idx"].to_numpy(np.int64) if "idx" in ev else np.arange(n, dtype=np.int64)

    # tracks: (pid, tid) pairs, kind, names, order
    pname, plabel, tname, psort, tsort = _names_lookup(t)
    tr_code, tr_uniques = _pair_codes(pid, tid)
    ntr = len(tr_uniques)
    gpu_cat_codes = [i for i, c in enumerate(cat_table) if c in GPU_TRACK_CATS]
    is_gpu_ev = np.isin(cat_code, gpu_cat_codes)
    tr_gpu = np.zeros(ntr, dtype=bool)
    if ntr:
        np.logical_or.at(tr_gpu, tr_code, is_gpu_ev)
    tr_count = np.bincount(tr_code, minlength=ntr)
    info = []
    for k, (p, th) in enumerate(list(tr_uniques)):
        p, th = int(p), int(th)
        gpu = bool(tr_gpu[k])
        # string pids ("Spans", "Traces": negative codes) go after the real processes
        info.append(
            (
                1 if gpu else 0,
                psort.get(p, p if p >= 0 else 2.0**62),
                p,
                tsort.get((p, th), th if not gpu else 0),
                th,
                k,
            )
        )
    info.sort()
    order_of = np.empty(ntr, dtype=np.int64)
    tracks = []
    for new, (g, _ps, p, _ts, th, k) in enumerate(info):
        order_of[k] = new
        pn, tn = pname.get(p, ""), tname.get((p, th), "")
        pl, tl = _label_of(t, p), _label_of(t, th)
        if g:
            label = f"{plabel.get(p) or 'GPU ' + pl} / {tn or 'stream ' + tl}"
        else:
            label = f"{pn or 'process'} {pl} / {tn or 'thread ' + tl}"
        tracks.append(
            {
                "index": new,
                "id": f"{pl}:{tl}",
                "kind": "gpu" if g else "cpu",
                "pid": p,
                "tid": th,
                "process": pn,
                "thread": tn,
                "label": label,
                "depth_count": 0,
                "event_count": int(tr_count[k]),
            }
        )
    track = order_of[tr_code] if n else np.zeros(0, np.int64)

    # nesting depth: number of events of the same track still open at an event's start.
    # Times are doubled so that a zero-length event occupies half a ns and stacks correctly.
    s2 = ts * 2
    e2 = (ts + dur) * 2 + (dur == 0)
    span2 = int(e2.max()) + 2 if n else 2
    o = _order_by_track_start(track, ts, dur)
    depth_sorted = np.zeros(n, dtype=np.int64)
    if n:
        if ntr * span2 < 2**62:
            ks = track[o] * span2 + s2[o]
            ke = np.sort(track * span2 + e2)
            depth_sorted = np.arange(n, dtype=np.int64) - np.searchsorted(ke, ks, side="right")
        else:  # pragma: no cover - absurd time ranges: per-track fallback
            for k in range(ntr):
                m = track[o] == k
                oo = o[m]
                depth_sorted[m] = np.arange(len(oo)) - np.searchsorted(np.sort(e2[oo]), s2[oo], "right")
        depth_sorted = np.maximum(depth_sorted, 0)
        # verify rows never overlap (partial overlaps break nesting); repair those tracks
        ro = np.argsort(track[o] * (int(depth_sorted.max()) + 1) + depth_sorted, kind="stable")
        oo = o[ro]
        same = (track[oo][1:] == track[oo][:-1]) & (depth_sorted[ro][1:] == depth_sorted[ro][:-1])
        bad = same & (s2[oo][1:] < ((ts + dur) * 2)[oo][:-1])
        if bad.any():
            depth_of = np.empty(n, dtype=np.int64)
            depth_of[o] = depth_sorted
            for k in np.unique(track[oo][1:][bad]):
                sel = o[track[o] == k]
                depth_of[sel] = _first_fit_depth(ts[sel].astype(float), (ts + dur)[sel].astype(float))
            depth_sorted = depth_of[o]
    depth = np.empty(n, dtype=np.int64)
    depth[o] = depth_sorted

    # rows: events ordered by (track, depth, start)
    ro = o[np.argsort(track[o] * (int(depth.max()) + 1 if n else 1) + depth[o], kind="stable")] if n else o
    r_track, r_depth = track[ro], depth[ro]
    newrow = np.ones(n, dtype=bool)
    if n:
        newrow[1:] = (r_track[1:] != r_track[:-1]) | (r_depth[1:] != r_depth[:-1])
    row_lo = np.flatnonzero(newrow)
    row_hi = np.append(row_lo[1:], n).astype(np.int64)
    row_of = np.cumsum(newrow) - 1
    row_track = r_track[row_lo]
    row_depth = r_depth[row_lo]
    for k, d in zip(row_track.tolist(), row_depth.tolist()):
        tracks[k]["depth_count"] = max(tracks[k]["depth_count"], d + 1)

    start = ts[ro].astype(np.float64)
    d_ = dur[ro].astype(np.float64)
    end = start + d_
    csum = np.cumsum(d_) - d_
    cum = csum - csum[row_lo][row_of] if n else csum
    span = float(end.max()) + 1.0 if n else 1.0
    gkey = row_of * span + start
    gend = row_of * span + end
    tiles = Tiles(
        origin=origin,
        trace_end_us=(float(end.max()) / 1e3 if n else 0.0),
        tracks=tracks,
        row_track=row_track,
        row_depth=row_depth,
        row_lo=row_lo,
        row_hi=row_hi,
        start=start,
        end=end,
        dur=d_,
        cum=cum,
        gkey=gkey,
        gend=gend,
        span=span,
        name=name_code[ro],
        cat=cat_code[ro],
        idx=idx[ro],
        name_table=name_table,
        cat_table=cat_table,
        ev_track=track,
        ev_depth=depth,
        flows={},
        flow_cat_table=[],
    )
    _build_flows(t, tiles, tr_uniques, order_of)
    return tiles


def _deepest_containing(tl: Tiles, track: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Depth of the innermost event of `track` containing time x (ns rel. origin); 0 if none."""
    out = np.zeros(len(x), dtype=np.int64)
    if not len(x) or not len(tl.row_track):
        return out
    nrow = len(tl.row_track)
    max_depth = int(tl.row_depth.max()) + 1
    # row id of (track, depth) or -1
    row_id = np.full((len(tl.tracks), max_depth), -1, dtype=np.int64)
    row_id[tl.row_track, tl.row_depth] = np.arange(nrow)
    for d in range(max_depth):
        r = row_id[track, d]
        ok = r >= 0
        if not ok.any():
            continue
        i = np.searchsorted(tl.gkey, r * tl.span + x, side="right") - 1
        i = np.clip(i, 0, len(tl.gkey) - 1)
        hit = ok & (i >= tl.row_lo[np.maximum(r, 0)]) & (tl.end[i] >= x) & (tl.start[i] <= x)
        out[hit] = d
    return out


def _build_flows(t: Any, tl: Tiles, tr_uniques: Any, order_of: np.ndarray) -> None:
    """Pair s/f flow events by (cat, id) and locate both ends on tracks and depths."""
    fl = getattr(t, "flows", None)
    empty = {k: np.zeros(0, np.int64) for k in ("id", "cat", "from_track", "from_depth", "to_track", "to_depth")}
    empty.update(from_ts=np.zeros(0), to_ts=np.zeros(0))
    tl.flows = empty
    if fl is None or not len(fl) or not len(tl.tracks):
        return
    f = pd.DataFrame(
        {
            "cat": fl["cat"].astype(str).to_numpy(),
            "id": fl["id"].to_numpy(np.int64),
            "ph": fl["ph"].astype(str).to_numpy(),
            "pid": fl["pid"].to_numpy(np.int64),
            "tid": fl["tid"].to_numpy(np.int64),
            "ts": fl["ts"].to_numpy(np.int64) - tl.origin,
        }
    )
    s = f[f["ph"] == "s"].drop_duplicates(["cat", "id"], keep="first")
    e = f[f["ph"] == "f"].drop_duplicates(["cat", "id"], keep="last")
    m = s.merge(e, on=["cat", "id"], suffixes=("_s", "_f"))
    if not len(m):
        return
    key_index = pd.MultiIndex.from_tuples([tuple(map(int, u)) for u in tr_uniques], names=["pid", "tid"])

    def locate(p: np.ndarray, th: np.ndarray) -> np.ndarray:
        pos = key_index.get_indexer(pd.MultiIndex.from_arrays([p, th]))
        return np.where(pos >= 0, order_of[np.maximum(pos, 0)], -1)

    ft = locate(m["pid_s"].to_numpy(), m["tid_s"].to_numpy())
    tt = locate(m["pid_f"].to_numpy(), m["tid_f"].to_numpy())
    keep = (ft >= 0) & (tt >= 0)
    m, ft, tt = m[keep], ft[keep], tt[keep]
    fts = m["ts_s"].to_numpy(np.float64)
    tts = m["ts_f"].to_numpy(np.float64)
    cat_codes, cat_table = pd.factorize(m["cat"], sort=True)
    o = np.argsort(fts, kind="stable")
    tl.flows = {
        "id": m["id"].to_numpy(np.int64)[o],
        "cat": np.asarray(cat_codes, np.int64)[o],
        "from_track": ft[o],
        "from_depth": _deepest_containing(tl, ft, fts)[o],
        "from_ts": fts[o],
        "to_track": tt[o],
        "to_depth": _deepest_containing(tl, tt, tts)[o],
        "to_ts": tts[o],
    }
    tl.flow_cat_table = [str(c) for c in cat_table]


@stage()
def tiles_for(t: Any) -> Tiles:
    """The timeline tiles stage: the level-of-detail arrays of trace `t` (built on first use)."""
    return _build(t)
