"""Timeline helpers beside the tiles: a time range's summary, counter tracks, exact-name
occurrences and locating one event (for links to a selected event).

All times are µs relative to the trace's first event, as in `timeline`.

``range_summary(t, start_us, end_us, tracks=None)`` -> {"start_us", "end_us", "tracks": [i...],
    "events": n, "rows": [{"name", "count", "total_us", "self_us"}...]}: the events of the chosen
    tracks (all when None) that overlap the range, by name, largest total first; times are clipped
    to the range and self time excludes the (clipped) time of the events nested directly inside.
``counters(t, start_us, end_us, width_px)`` -> {"counters": [{"name", "unit": "bytes"|"fraction",
    "device", "ts_us": [...], "values": [...]}...]}: allocated and reserved memory per device (the
    memory view's curve) and, per GPU, the fraction of each pixel bucket with a kernel running.
``occurrences(t, name, limit)`` -> search-like results for one exact name, in time order.
``locate(t, idx)`` -> the search-like result for the event at traceEvents index `idx`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from profiler_core.analysis import intervals
from profiler_core.analysis.tables.timeline_tiles import tiles_for
from tb_plugin.errors import BadRequest, NotFound
from tb_plugin.params import EVENT_IDX, MAX_POINTS, OCCURRENCE_LIMIT, OCCURRENCES_OF, TRACKS, WIDTH_PX, number_param

MAX_ROWS = 1000


def _window(tl: Any, start_us: Any, end_us: Any) -> tuple[float, float]:
    a = number_param(start_us, "start_us")
    b = number_param(end_us, "end_us")
    a = 0.0 if a is None else a
    b = tl.trace_end_us if b is None else b
    if b <= a:
        raise BadRequest(f"end_us ({b}) must be greater than start_us ({a})")
    return a, b


def _tracks_param(tracks: Any, n: int) -> np.ndarray:
    chosen = TRACKS.parse(tracks)
    if chosen is None:
        return np.arange(n)
    out = np.array(chosen, dtype=np.int64)
    if len(out) and out.max() >= n:
        raise BadRequest(f"tracks must be between 0 and {n - 1}, got {out.max()}")
    return out


def range_summary(t: Any, start_us: Any = None, end_us: Any = None, tracks: Any = None) -> dict:
    """Count, total and self time by name of the chosen tracks' events overlapping [start_us, end_us], with each
    name's category (`cat`: the trace's category of its events, the most common where they differ)."""
    tl = tiles_for(t)
    a_us, b_us = _window(tl, start_us, end_us)
    chosen = _tracks_param(tracks, len(tl.tracks))
    a, b = a_us * 1e3, b_us * 1e3
    names: list[np.ndarray] = []
    totals: list[np.ndarray] = []
    selfs: list[np.ndarray] = []
    cats: list[np.ndarray] = []
    rows_of = {}
    for r in np.flatnonzero(np.isin(tl.row_track, chosen)).tolist():
        lo, hi = int(tl.row_lo[r]), int(tl.row_hi[r])
        # within a row events never overlap: ends ascend with starts
        i0 = lo + int(np.searchsorted(tl.end[lo:hi], a, side="right"))
        i1 = lo + int(np.searchsorted(tl.start[lo:hi], b, side="right"))
        if i1 > i0:
            rows_of[(int(tl.row_track[r]), int(tl.row_depth[r]))] = (i0, i1)
    for (track, depth), (i0, i1) in rows_of.items():
        s, e = tl.start[i0:i1], tl.end[i0:i1]
        clipped = np.maximum(np.minimum(e, b) - np.maximum(s, a), 0.0)
        own = clipped.copy()
        child = rows_of.get((track, depth + 1))
        if child is not None:  # subtract each child's clipped time from the event containing it
            cs, ce = tl.start[child[0] : child[1]], tl.end[child[0] : child[1]]
            cc = np.maximum(np.minimum(ce, b) - np.maximum(cs, a), 0.0)
            parent = np.searchsorted(s, cs, side="right") - 1
            ok = (parent >= 0) & (cs < e[np.maximum(parent, 0)])
            np.subtract.at(own, parent[ok], cc[ok])
        names.append(tl.name[i0:i1])
        cats.append(tl.cat[i0:i1])
        totals.append(clipped)
        selfs.append(np.maximum(own, 0.0))
    out: dict = {"start_us": a_us, "end_us": b_us, "tracks": chosen.tolist(), "events": 0, "rows": []}
    if not names:
        return out
    nm, tot, own = np.concatenate(names), np.concatenate(totals), np.concatenate(selfs)
    size = len(tl.name_table)
    count = np.bincount(nm, minlength=size)
    total = np.bincount(nm, weights=tot, minlength=size)
    selft = np.bincount(nm, weights=own, minlength=size)
    present = np.flatnonzero(count)
    order = present[np.lexsort((present, -total[present]))][:MAX_ROWS]
    # per name, its most common category: (name, cat) pairs counted, the largest count per name kept
    cat = np.concatenate(cats).astype(np.int64)
    pairs, n_pair = np.unique(nm.astype(np.int64) * (len(tl.cat_table) + 1) + cat, return_counts=True)
    p_name, p_cat = pairs // (len(tl.cat_table) + 1), pairs % (len(tl.cat_table) + 1)
    best = np.lexsort((p_cat, -n_pair, p_name))
    first = np.ones(len(best), bool)
    first[1:] = p_name[best][1:] != p_name[best][:-1]
    cat_of = dict(zip(p_name[best][first].tolist(), p_cat[best][first].tolist()))
    out["events"] = int(len(nm))
    out["rows"] = [
        {
            "name": str(tl.name_table[c]),
            "cat": str(tl.cat_table[cat_of[c]]),
            "count": int(count[c]),
            "total_us": round(float(total[c]) / 1e3, 3),
            "self_us": round(float(selft[c]) / 1e3, 3),
        }
        for c in order.tolist()
    ]
    out["truncated"] = bool(len(present) > MAX_ROWS)
    return out


def counters(t: Any, start_us: Any = None, end_us: Any = None, width_px: Any = 1000) -> dict:
    """Counter tracks for [start_us, end_us]: memory allocated/reserved per device, GPU utilization."""
    from profiler_core.analysis.stages.columns import category_mask
    from profiler_core.analysis.tables.memory_records import device_windows, downsample

    tl = tiles_for(t)
    w = WIDTH_PX.parse(width_px)
    a_us, b_us = _window(tl, start_us, end_us)
    out: list[dict] = []
    points = MAX_POINTS.parse(max(MAX_POINTS.lo, w))
    for dev, ts_w, al_w, rs_w in device_windows(t, a_us * 1e3, b_us * 1e3):
        if not len(ts_w):
            continue
        keep = downsample(ts_w, al_w, rs_w, points)
        c = {
            "ts_us": np.round(ts_w[keep] / 1e3, 3).tolist(),
            "allocated_bytes": al_w[keep].tolist(),
            "reserved_bytes": rs_w[keep].tolist(),
        }
        out.append(
            {
                "name": f"Memory allocated ({dev})",
                "unit": "bytes",
                "device": dev,
                "ts_us": c["ts_us"],
                "values": c["allocated_bytes"],
            }
        )
        if any(v > 0 for v in c["reserved_bytes"]):
            out.append(
                {
                    "name": f"Memory reserved ({dev})",
                    "unit": "bytes",
                    "device": dev,
                    "ts_us": c["ts_us"],
                    "values": c["reserved_bytes"],
                }
            )
    ev = t.events
    if len(ev):
        km = category_mask(ev, ("kernel",))
        if km.any():
            k = ev[km]
            origin = tl.origin
            s_all = (k["ts"].to_numpy(np.int64) - origin).astype(np.float64)
            e_all = s_all + np.maximum(k["dur"].to_numpy(np.int64), 0)
            dev_all = k["device"].to_numpy(np.int64)
            edges = np.linspace(a_us * 1e3, b_us * 1e3, w + 1)
            bucket = (edges[1] - edges[0]) or 1.0
            for d in sorted(set(dev_all.tolist())):
                merged = intervals.merge_ranges(s_all[dev_all == d], e_all[dev_all == d])
                ms, me = merged[:, 0], merged[:, 1]
                busy = np.diff(intervals.busy_before(ms, me, edges)) / bucket
                out.append(
                    {
                        "name": f"GPU {d} utilization",
                        "unit": "fraction",
                        "device": f"GPU {d}",
                        "ts_us": np.round(edges[:-1] / 1e3, 3).tolist(),
                        "values": np.round(np.clip(busy, 0.0, 1.0), 4).tolist(),
                    }
                )
    return {"start_us": a_us, "end_us": b_us, "counters": out}


def _result(t: Any, tl: Any, pos: np.ndarray) -> list[dict]:
    ev = t.events
    sub = ev.iloc[pos]
    idx = sub["idx"].tolist() if "idx" in sub else pos.tolist()
    tsu = np.round((sub["ts"].to_numpy(np.int64) - tl.origin) / 1e3, 3).tolist()
    du = np.round(np.maximum(sub["dur"].to_numpy(np.int64), 0) / 1e3, 3).tolist()
    return [
        {
            "name": str(n),
            "cat": str(c),
            "ts_us": s,
            "dur_us": d,
            "track": int(tl.ev_track[p]),
            "depth": int(tl.ev_depth[p]),
            "idx": int(i),
        }
        for n, c, s, d, p, i in zip(
            sub["name"].astype(str).tolist(), sub["cat"].astype(str).tolist(), tsu, du, pos.tolist(), idx
        )
    ]


def occurrences(
    t: Any,
    name: Any = None,
    limit: Any = 10000,
    of: str = "events",
    input_shape: str | None = None,
    op: str | None = None,
) -> dict:
    """Every event named exactly `name` (first `limit`), in time order, with its track and depth. `of`: "events"
    (every event of the name), "operators" (the operator table's calls of it, of `input_shape` when given) or
    "kernels" (its kernels, launched by an op named `op` when given): the calls a table row counts, so its button
    opens "occurrence 1 of 48" for a row of 48 calls."""
    if not isinstance(name, str) or not name:
        raise BadRequest("missing parameter 'name' (the exact event name)")
    lim = OCCURRENCE_LIMIT.parse(limit)
    of = OCCURRENCES_OF.parse(of)
    tl = tiles_for(t)
    ev = t.events
    if not len(ev):
        return {"name": name, "total": 0, "results": []}
    if of == "operators":
        from profiler_core.analysis.tables.operators import operator_rows

        pos = operator_rows(t, name, input_shape)
    elif of == "kernels":
        from profiler_core.analysis.tables.kernels import kernel_rows

        pos = kernel_rows(t, name, op)
    else:
        pos = np.flatnonzero((ev["name"] == name).to_numpy())
    ts = ev["ts"].to_numpy(np.int64)
    pos = pos[np.argsort(ts[pos], kind="stable")]
    return {"name": name, "total": int(len(pos)), "results": _result(t, tl, pos[:lim])}


def locate(t: Any, idx: Any = None) -> dict:
    """Where the event at traceEvents index `idx` is drawn (track, depth, times)."""
    i = EVENT_IDX.parse(idx)
    tl = tiles_for(t)
    ev = t.events
    col = ev["idx"].to_numpy(np.int64) if "idx" in ev else np.arange(len(ev))
    pos = np.flatnonzero(col == i)
    if not len(pos):
        raise NotFound(f"no drawn event has index {i}")
    return _result(t, tl, pos[:1])[0]
