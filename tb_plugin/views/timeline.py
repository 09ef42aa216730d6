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

from typing import Any

import numpy as np

from profiler_core.analysis.stages.columns import column_codes
from profiler_core.analysis.tables.timeline_tiles import Tiles, tiles_for
from tb_plugin.errors import BadRequest
from tb_plugin.params import SEARCH_LIMIT, WIDTH_PX, number_param

MAX_FLOWS = 5000


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
    from profiler_core.analysis.gpu_idle.gpu_launches import NO_GPU, has_gpu_activity
    from profiler_core.analysis.gpu_idle.queue_length import NO_QUEUE, queue_length_counter, queue_track

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


def _flows_json(tl: Tiles, a: float, b: float, cats_out: list) -> dict:
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
    codes, table = column_codes(ev["name"])
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
