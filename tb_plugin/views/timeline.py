"""Timeline tiles: level-of-detail slices of a trace for the canvas timeline viewer.

The cost of a request is proportional to the pixels asked for, not to the events in the trace:
per-track arrays (sorted starts, ends, prefix sums of busy time, nesting depth) are derived once
per trace and cached on the ``TraceData`` object; a request then only binary-searches them.

JSON FORMAT (stable contract with the frontend; all times are µs relative to the trace's first
event, i.e. the same origin as every other view)
======================================================================================

``timeline(t, start_us=None, end_us=None, width_px=1000)`` returns::

    {
      "start_us": 0.0,          # the window served, exactly as requested (None = trace start/end)
      "end_us": 51234.5,
      "trace_start_us": 0.0,    # extent of the whole trace (for the overview bar / zoom limits)
      "trace_end_us": 51234.5,
      "width_px": 1000,
      "bucket_us": 51.2345,     # (end_us - start_us) / width_px: the width of one pixel bucket
      "names": ["aten::add", "ProfilerStep#3", ...],   # string table of THIS response
      "cats":  ["cpu_op", "user_annotation", ...],     # category table of THIS response
      "tracks": [                                      # ALL tracks, always, in a stable order
        {
          "index": 0,                 # position in this list (stable for a trace: flows and
                                      #   search results refer to tracks by this index)
          "id": "17289:17289",        # "pid:tid" as in the file (string pids keep their text)
          "kind": "cpu" | "gpu",      # gpu = holds kernel/memcpy/memset/gpu_user_annotation
          "pid": 17289, "tid": 17289, # numeric (see TraceData: strings map to negative codes)
          "process": "python",        # from the M process_name event ("" if none)
          "thread": "thread 17289 (python)",   # from the M thread_name event ("" if none)
          "label": "python 17289 / thread 17289 (python)",  # ready-to-draw track title
                                      #   (GPU tracks: "GPU 0 / stream 7")
          "depth_count": 5,           # number of depth rows over the WHOLE trace (track height
                                      #   is stable while panning/zooming)
          "event_count": 12345,       # events on this track in the whole trace
          "rows": [                   # only rows with something inside the window; each row
                                      #   is either "events" or "buckets" mode
            {"depth": 0, "mode": "events",
             "ts_us":  [12.5, 40.0],  # start of each event (may be < start_us: an event that
                                      #   began before the window but overlaps it is included)
             "dur_us": [20.0, 3.25],  # duration (0 for instant-like events: draw >= 1 px)
             "name":   [0, 1],        # index into "names"
             "cat":    [0, 0],        # index into "cats"
             "idx":    [118, 131]},   # event's position in the file's traceEvents (details)
            {"depth": 1, "mode": "buckets",
             "px":    [0, 1, 2, 7],   # pixel bucket number, 0..width_px-1, ascending; bucket px
                                      #   covers [start_us + px*bucket_us, start_us + (px+1)*bucket_us)
                                      #   only non-empty buckets are listed
             "count": [3, 10, 1, 2],  # events overlapping the bucket
             "busy":  [0.5, 1.0, 0.02, 0.3],   # fraction 0..1 of the bucket covered by events
                                      #   of this row (draw alpha or height from it)
             "name":  [4, 4, 2, 0],   # representative event: the one already running at the
                                      #   bucket's start, else the first one starting in it
             "cat":   [0, 0, 1, 0]}
          ]
        }, ...
      ],
      "flows": {                      # ac2g (and other s/f) flows with an end in the window, or
                                      #   crossing it; parallel arrays, one entry per flow
        "id": [42, ...], "cat": [0, ...],           # cat indexes "cats" ("ac2g", "fwdbwd")
        "from_track": [0, ...], "from_depth": [2, ...], "from_us": [10.1, ...],
        "to_track":   [3, ...], "to_depth":   [0, ...], "to_us":   [15.7, ...]
      },
      "truncated": false,             # true when flows were cut at MAX_FLOWS (5000; the
                                      #   earliest-starting ones are kept)
      "counters": [                   # Chrome-trace counter events ("ph": "C") of the CUDA queue
                                      #   length per (device, stream) (views/queue_length.py): one
                                      #   track per name "Queue length stream N", pid = device,
                                      #   tid = stream; each value holds until the track's next event
        {"ph": "C", "name": "Queue length stream 7", "pid": 0, "tid": 7, "ts": 40.0,
         "args": {"queue_length": 2}}, ...
      ],
      "counters_reason": None         # why there are no counters (no GPU activity, no launches)
    }

Counters: the change points inside the window, plus the last one before it (the value at the window's
start); a track with more than 2 * width_px changes in the window keeps, per pixel bucket, its highest value.

Rules: the window is inclusive at both ends. A row is sent as "events" (ascending ts_us) when
it has at most ``width_px`` events in the window, else as "buckets". Tracks are ordered CPU
first (by process/thread sort index from the M events, else pid/tid), then GPU (by device,
stream). Within a track, events of one depth never overlap, so a renderer can draw each row
left to right. Track ``index`` values are stable for one trace.

``search(t, query, limit=100)`` (case-insensitive name substring) returns::

    {"query": "conv", "total": 57,          # total matches in the trace
     "results": [{"name": "aten::conv2d", "cat": "cpu_op", "ts_us": 12.5, "dur_us": 20.0,
                  "track": 0, "depth": 1, "idx": 118}, ...]}   # first `limit`, in time order

An empty trace gives an empty "tracks" list and zero times; a bad parameter raises BadRequest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from profiler_core.analysis.stages.registry import stage
from profiler_core.trace.categories import GPU_ACTIVITY_CATS, GPU_USER_ANNOTATION
from tb_plugin.errors import BadRequest
from tb_plugin.params import SEARCH_LIMIT, WIDTH_PX, number_param

#: the categories whose events make a track a GPU track
GPU_TRACK_CATS = GPU_ACTIVITY_CATS + (GPU_USER_ANNOTATION,)
MAX_FLOWS = 5000


# --------------------------------------------------------------------------------------------
# per-trace derived data (computed once, cached on the TraceData object)
# --------------------------------------------------------------------------------------------
def trace_origin_ns(t: Any) -> int:
    """ts (ns) of the trace's first event: the zero of every `_us` time the views return."""
    ev = t.events
    if len(ev):
        return int(ev["ts"].min())
    mem = getattr(t, "memory", None)
    if mem is not None and len(mem):
        return int(mem["ts"].min())
    return 0


@dataclass
class _Tiles:
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


def _codes(col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes and the string table of a (categorical or plain) column."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return col.cat.codes.to_numpy(np.int64), np.asarray(col.cat.categories.astype(str), dtype=object)
    codes, uniques = pd.factorize(col.astype(str), sort=False)
    return codes.astype(np.int64), np.asarray(uniques, dtype=object)


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


def _build(t: Any) -> _Tiles:
    """Derive the per-track, per-depth arrays of a trace (vectorised; one pass per trace)."""
    ev = t.events
    origin = trace_origin_ns(t)
    n = len(ev)
    pid = ev["pid"].to_numpy(np.int64)
    tid = ev["tid"].to_numpy(np.int64)
    ts = ev["ts"].to_numpy(np.int64) - origin
    dur = np.maximum(ev["dur"].to_numpy(np.int64), 0)
    name_code, name_table = _codes(ev["name"]) if n else (np.zeros(0, np.int64), np.zeros(0, object))
    cat_code, cat_table = _codes(ev["cat"]) if n else (np.zeros(0, np.int64), np.zeros(0, object))
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
    tiles = _Tiles(
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


def _deepest_containing(tl: _Tiles, track: np.ndarray, x: np.ndarray) -> np.ndarray:
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


def _build_flows(t: Any, tl: _Tiles, tr_uniques: Any, order_of: np.ndarray) -> None:
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
def tiles_for(t: Any) -> _Tiles:
    """The timeline tiles stage: the level-of-detail arrays of trace `t` (built on first use)."""
    return _build(t)


# --------------------------------------------------------------------------------------------
# requests
# --------------------------------------------------------------------------------------------
def timeline(t: Any, start_us: float | None = None, end_us: float | None = None, width_px: int = 1000) -> dict:
    """One level-of-detail tile of the whole trace for [start_us, end_us] at width_px pixels."""
    w = WIDTH_PX.parse(width_px)
    tl = tiles_for(t)
    a_us = number_param(start_us, "start_us")
    b_us = number_param(end_us, "end_us")
    a_us = 0.0 if a_us is None else a_us
    b_us = tl.trace_end_us if b_us is None else b_us
    if b_us <= a_us:
        if start_us is None and end_us is None:
            b_us = a_us + 1.0  # empty or instant-only trace
        else:
            raise BadRequest(f"end_us ({b_us}) must be greater than start_us ({a_us})")
    a, b = a_us * 1e3, b_us * 1e3
    bucket = (b - a) / w
    tracks = [dict(h, rows=[]) for h in tl.tracks]
    used_names: list[np.ndarray] = []
    used_cats: list[np.ndarray] = []
    nrow = len(tl.row_track)
    pending: list[tuple[int, dict]] = []  # (row, row-json) for name/cat remapping later
    if nrow:
        rows = np.arange(nrow)
        lo = np.searchsorted(tl.gend, rows * tl.span + a, side="left")
        lo = np.maximum(lo, tl.row_lo)
        hi = np.searchsorted(tl.gkey, rows * tl.span + b, side="right")
        hi = np.minimum(hi, tl.row_hi)
        cnt = hi - lo
        ev_rows = np.flatnonzero((cnt > 0) & (cnt <= w))
        bk_rows = np.flatnonzero(cnt > w)
        for r in ev_rows.tolist():
            sl = slice(int(lo[r]), int(hi[r]))
            nm, ct = tl.name[sl], tl.cat[sl]
            used_names.append(nm)
            used_cats.append(ct)
            pending.append(
                (
                    r,
                    {
                        "depth": int(tl.row_depth[r]),
                        "mode": "events",
                        "ts_us": np.round(tl.start[sl] / 1e3, 3).tolist(),
                        "dur_us": np.round(tl.dur[sl] / 1e3, 3).tolist(),
                        "name": nm,
                        "cat": ct,
                        "idx": tl.idx[sl].tolist(),
                    },
                )
            )
        if len(bk_rows):
            edges = a + bucket * np.arange(w + 1)
            rr = bk_rows[:, None]
            rlo, rhi = tl.row_lo[rr], tl.row_hi[rr]
            # one binary search per edge: L = first event of the row starting at or after the edge
            L = np.searchsorted(tl.gkey, rr * tl.span + edges[None, :], side="left")
            L = np.minimum(np.maximum(L, rlo), rhi)
            prev = np.clip(L - 1, 0, len(tl.gkey) - 1)  # last event starting before the edge
            has_prev = rlo < L
            running = has_prev & (tl.end[prev] > edges[None, :])  # still open at the edge
            busy_before = np.where(
                has_prev, tl.cum[prev] + np.clip(edges[None, :] - tl.start[prev], 0.0, tl.dur[prev]), 0.0
            )
            busy = np.diff(busy_before, axis=1) / bucket
            gone = L - running  # events over before the edge
            count = np.maximum(L[:, 1:] - gone[:, :-1], 0)
            # representative: the event open at the bucket start, else the first starting inside
            rep = np.where(running[:, :-1], prev[:, :-1], np.clip(L[:, :-1], 0, len(tl.gkey) - 1))
            for j, r in enumerate(bk_rows.tolist()):
                px = np.flatnonzero(count[j] > 0)
                rp = rep[j, px]
                nm, ct = tl.name[rp], tl.cat[rp]
                used_names.append(nm)
                used_cats.append(ct)
                pending.append(
                    (
                        r,
                        {
                            "depth": int(tl.row_depth[r]),
                            "mode": "buckets",
                            "px": px.tolist(),
                            "count": count[j, px].tolist(),
                            "busy": np.round(np.clip(busy[j, px], 0.0, 1.0), 4).tolist(),
                            "name": nm,
                            "cat": ct,
                        },
                    )
                )
    names_used, name_remap = _used(used_names, len(tl.name_table))
    cats_used, cat_remap = _used(used_cats, len(tl.cat_table))
    pending.sort(key=lambda p: (int(tl.row_track[p[0]]), p[1]["depth"]))
    for r, row in pending:
        row["name"] = name_remap[row["name"]].tolist()
        row["cat"] = cat_remap[row["cat"]].tolist()
        tracks[int(tl.row_track[r])]["rows"].append(row)
    cats_out = [str(c) for c in tl.cat_table[cats_used]] if len(cats_used) else []
    return {
        "start_us": a_us,
        "end_us": b_us,
        "trace_start_us": 0.0,
        "trace_end_us": round(tl.trace_end_us, 3),
        "width_px": w,
        "bucket_us": bucket / 1e3,
        "names": [str(x) for x in tl.name_table[names_used]] if len(names_used) else [],
        "cats": cats_out,
        "tracks": tracks,
        **_flows_json(tl, a, b, cats_out),
        **_counters_json(t, tl.origin, a, b, w),
    }


def _counters_json(t: Any, origin: int, a: float, b: float, width_px: int) -> dict:
    """The queue length counter events within [a, b] (ns rel. origin), see the module docstring."""
    from .gpu_launches import NO_GPU, has_gpu_activity
    from .queue_length import NO_QUEUE, queue_length_counter, queue_track

    series = queue_track(t)
    if not len(series):
        return {"counters": [], "counters_reason": NO_QUEUE if has_gpu_activity(t) else NO_GPU}
    ts = series["ts"].to_numpy(np.int64) - origin
    q = series["queue_length"].to_numpy(np.int64)
    dev, stream = series["device"].to_numpy(np.int64), series["stream"].to_numpy(np.int64)
    edges = np.flatnonzero(np.diff(dev) | np.diff(stream)) + 1  # the series is in (device, stream, ts) order
    keep: list[np.ndarray] = []
    bucket = (b - a) / width_px
    for lo, hi in zip(np.concatenate([[0], edges]), np.concatenate([edges, [len(ts)]])):
        i0 = lo + int(np.searchsorted(ts[lo:hi], a, side="left"))
        i1 = lo + int(np.searchsorted(ts[lo:hi], b, side="right"))
        if i0 > lo:
            keep.append(np.array([i0 - 1]))  # the value at the window's start
        sel = np.arange(i0, i1)
        if len(sel) > 2 * width_px:  # per pixel, the highest value (the first of equals)
            px = ((ts[sel] - a) // bucket).astype(np.int64)
            order = np.lexsort((sel, -q[sel], px))
            first = np.ones(len(order), dtype=bool)
            first[1:] = px[order][1:] != px[order][:-1]
            sel = np.sort(sel[order[first]])
        keep.append(sel)
    rows = np.concatenate(keep) if keep else np.zeros(0, np.int64)
    return {"counters": queue_length_counter(series.iloc[rows], base_ns=-origin), "counters_reason": None}


def _used(parts: list, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Codes present in `parts` (sorted) and a code -> position-in-that-list lookup array."""
    present = np.zeros(size, dtype=bool)
    for p in parts:
        present[p] = True
    used = np.flatnonzero(present)
    remap = np.full(size, -1, np.int64)
    remap[used] = np.arange(len(used))
    return used, remap


def _flows_json(tl: _Tiles, a: float, b: float, cats_out: list) -> dict:
    """Flows crossing [a, b] (ns rel. origin) as parallel arrays; flow cats join 'cats'."""
    f = tl.flows
    lo_t = np.minimum(f["from_ts"], f["to_ts"])
    hi_t = np.maximum(f["from_ts"], f["to_ts"])
    sel = np.flatnonzero((lo_t <= b) & (hi_t >= a))
    truncated = len(sel) > MAX_FLOWS
    sel = sel[:MAX_FLOWS]
    remap = np.zeros(len(tl.flow_cat_table), np.int64)  # flow cat code -> index in cats_out
    for c, name in enumerate(tl.flow_cat_table):
        if name not in cats_out:
            cats_out.append(name)
        remap[c] = cats_out.index(name)
    return {
        "flows": {
            "id": f["id"][sel].tolist(),
            "cat": remap[f["cat"][sel]].tolist(),
            "from_track": f["from_track"][sel].tolist(),
            "from_depth": f["from_depth"][sel].tolist(),
            "from_us": np.round(f["from_ts"][sel] / 1e3, 3).tolist(),
            "to_track": f["to_track"][sel].tolist(),
            "to_depth": f["to_depth"][sel].tolist(),
            "to_us": np.round(f["to_ts"][sel] / 1e3, 3).tolist(),
        },
        "truncated": bool(truncated),
    }


def search(t: Any, query: str, limit: int = 100) -> dict:
    """Events whose name contains `query` (case-insensitive): total count and the first `limit`."""
    if not isinstance(query, str) or not query.strip():
        raise BadRequest("query must be a non-empty string")
    lim = SEARCH_LIMIT.parse(limit)
    tl = tiles_for(t)
    ev = t.events
    if not len(ev):
        return {"query": query, "total": 0, "results": []}
    codes, table = _codes(ev["name"])
    q = query.strip().lower()
    hit_codes = [i for i, s in enumerate(table.tolist()) if q in str(s).lower()]
    mask = np.isin(codes, hit_codes)
    pos = np.flatnonzero(mask)
    total = int(len(pos))
    ts = ev["ts"].to_numpy(np.int64)
    pos = pos[np.argsort(ts[pos], kind="stable")][:lim]
    sub = ev.iloc[pos]
    names = sub["name"].astype(str).tolist()
    cats = sub["cat"].astype(str).tolist()
    tsu = np.round((sub["ts"].to_numpy(np.int64) - tl.origin) / 1e3, 3).tolist()
    du = np.round(sub["dur"].to_numpy(np.int64) / 1e3, 3).tolist()
    idx = sub["idx"].tolist() if "idx" in sub else pos.tolist()
    results = [
        {
            "name": n,
            "cat": c,
            "ts_us": s,
            "dur_us": d,
            "track": int(tl.ev_track[p]),
            "depth": int(tl.ev_depth[p]),
            "idx": int(i),
        }
        for n, c, s, d, p, i in zip(names, cats, tsu, du, pos.tolist(), idx)
    ]
    return {"query": query, "total": total, "results": results}
