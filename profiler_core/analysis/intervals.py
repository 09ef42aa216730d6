"""Time intervals: the one boundary rule (`holds`) and union, intersection, clipping and coverage of ranges.

Every range is half-open, [start, end): a time equal to a range's end is outside it. That is the rule torch
builds its op tree by (`EventList._populate_cpu_children`: an event starting at its parent's end is not its
child) and torch-tb-profiler attributes memory records by; so an event starting where an op ends belongs to
whatever encloses (or follows) that op, and a zero-length range holds nothing. Times are int64 ns.
"""

from __future__ import annotations

import numpy as np

from ..trace.boundary import holds

__all__ = [
    "holds",
    "merge_ranges",
    "intersect_ranges",
    "subtract_ranges",
    "clip_ranges",
    "total_length",
    "union_length",
    "coverage",
    "covered",
    "paint",
    "merged",
    "merged_where",
    "prepare",
    "union_in",
    "busy_before",
]


def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of [start, end) intervals (at least one) as sorted disjoint (starts, ends), empty ones kept."""
    if len(starts) > 1 and not bool((starts[1:] >= starts[:-1]).all()):
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    new = np.ones(len(starts), dtype=bool)
    new[1:] = starts[1:] > reach[:-1]
    first = np.flatnonzero(new)
    return starts[first], reach[np.append(first[1:], len(starts)) - 1]


def merge_ranges(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Union of [start, end) ranges as sorted disjoint (n, 2) int64 ranges."""
    start = np.asarray(start, np.int64)
    end = np.asarray(end, np.int64)
    if not len(start):
        return np.zeros((0, 2), np.int64)
    return np.stack(_union(start, end), axis=1)


def intersect_ranges(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Intersection of two sorted disjoint range lists."""
    if not len(a) or not len(b):
        return np.zeros((0, 2), np.int64)
    pts = np.concatenate([a[:, 0], a[:, 1], b[:, 0], b[:, 1]])
    d = np.concatenate([np.ones(len(a)), -np.ones(len(a)), np.ones(len(b)), -np.ones(len(b))]).astype(np.int64)
    o = np.lexsort((d, pts))
    pts, d = pts[o], d[o]
    cover = np.cumsum(d)
    i = np.flatnonzero(cover == 2)
    out = np.stack([pts[i], pts[i + 1]], axis=1)
    return out[out[:, 1] > out[:, 0]]


def subtract_ranges(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The parts of sorted disjoint ranges `a` outside sorted disjoint ranges `b`."""
    if not len(a) or not len(b):
        return a
    lo = min(int(a[0, 0]), int(b[0, 0]))
    hi = max(int(a[-1, 1]), int(b[-1, 1]))
    gaps = np.stack([np.concatenate(([lo], b[:, 1])), np.concatenate((b[:, 0], [hi]))], axis=1)
    return intersect_ranges(a, gaps[gaps[:, 1] > gaps[:, 0]])


def clip_ranges(r: np.ndarray, a: int, b: int) -> np.ndarray:
    """Sorted disjoint ranges cut to [a, b] (binary search: cost independent of the list length)."""
    if not len(r):
        return r
    i = np.searchsorted(r[:, 1], a, side="right")
    j = np.searchsorted(r[:, 0], b, side="left")
    out = r[i:j].copy()
    if len(out):
        out[0, 0] = max(out[0, 0], a)
        out[-1, 1] = min(out[-1, 1], b)
    return out[out[:, 1] > out[:, 0]]


def total_length(r: np.ndarray) -> int:
    """Summed length of disjoint ranges."""
    return int((r[:, 1] - r[:, 0]).sum()) if len(r) else 0


def union_length(starts: np.ndarray, ends: np.ndarray) -> int:
    """Length of the union of [start, end) intervals."""
    if len(starts) == 0:
        return 0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order].astype(np.int64), ends[order].astype(np.int64)
    reach = np.maximum.accumulate(e)
    prev = np.concatenate(([np.iinfo(np.int64).min], reach[:-1]))
    return int(np.maximum(e - np.maximum(s, prev), 0).sum())


def coverage(bounds: np.ndarray, starts: np.ndarray, ends: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Per elementary segment [bounds[k], bounds[k+1]): how many (or how much weight of) intervals cover it."""
    n = len(bounds)
    if weights is None:  # sorted queries make searchsorted cache-friendly; counts do not care about order
        si = np.searchsorted(bounds, np.sort(starts, kind="stable"))  # (nearly sorted: timsort/radix)
        ei = np.searchsorted(bounds, np.sort(ends, kind="stable"))
        delta = np.bincount(si, minlength=n) - np.bincount(ei, minlength=n)
    else:
        si = np.searchsorted(bounds, starts)
        ei = np.searchsorted(bounds, ends)
        delta = np.bincount(si, weights=weights, minlength=n) - np.bincount(ei, weights=weights, minlength=n)
    return np.cumsum(delta)[:-1]


#: up to this many merged ranges, `covered` and `paint` set each range's segments as a slice (no pass over every
#: segment)
FEW_RANGES = 64


def _segment_ranges(bounds: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The merged intervals as [first segment, last segment + 1) index ranges of `bounds` (sorted, disjoint)."""
    ms, me = _union(starts, ends)
    return np.searchsorted(bounds, ms), np.searchsorted(bounds, me)


def _segments_mask(n: int, si: np.ndarray, ei: np.ndarray) -> np.ndarray:
    """Boolean per segment 0..n-1: inside one of the sorted disjoint index ranges [si, ei)."""
    if len(si) <= FEW_RANGES:
        out = np.zeros(n, dtype=bool)
        for a, b in zip(si.tolist(), ei.tolist()):
            out[a:b] = True
        return out
    # disjoint and sorted: mark [first segment, last + 1) of each, then a running sum
    delta = np.zeros(n + 1, dtype=np.int8)
    delta[si] = 1
    delta[ei] -= 1  # a zero-length range cancels its own start
    return np.cumsum(delta[:-1], dtype=np.int8) > 0


def covered(bounds: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per elementary segment [bounds[k], bounds[k+1]): whether any interval covers it (bounds must hold every
    start and end). Merges the intervals first, so it only searches the few merged ranges."""
    n = max(len(bounds) - 1, 0)
    if len(starts) == 0:
        return np.zeros(n, dtype=bool)
    return _segments_mask(n, *_segment_ranges(bounds, starts, ends))


def paint(out: np.ndarray, bounds: np.ndarray, starts: np.ndarray, ends: np.ndarray, value: int) -> None:
    """`out[covered(bounds, starts, ends)] = value`: a slice per merged range when they are few."""
    if len(starts) == 0:
        return
    si, ei = _segment_ranges(bounds, starts, ends)
    if len(si) <= FEW_RANGES:
        for a, b in zip(si.tolist(), ei.tolist()):
            out[a:b] = value
    else:
        out[_segments_mask(len(out), si, ei)] = value


def merged(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of [start, end) intervals as sorted, disjoint, non-touching, non-empty ranges (starts, ends).
    `covered` and `coverage` of the union equal the intervals' own on any bounds holding both: a priority sweep
    needs only these ends as its bounds (far fewer than every interval's, for nested CPU ops)."""
    if len(starts) == 0:
        return starts, ends
    ms, me = _union(starts, ends)
    keep = me > ms
    return (ms, me) if bool(keep.all()) else (ms[keep], me[keep])


#: rows per block of `merged_where`
UNION_BLOCK_ROWS = 1 << 20


def merged_where(
    ts: np.ndarray,
    dur: np.ndarray,
    mask: np.ndarray,
    window: tuple[int, int] | None = None,
    block: int = UNION_BLOCK_ROWS,
) -> tuple[np.ndarray, np.ndarray]:
    """`merged` of the intervals [ts, ts + dur) of the rows where `mask` holds; with a `window` (lo, hi), only those
    ending after lo and starting before hi, each clipped to [lo, hi]. Made a block of rows at a time (a union
    of the blocks' unions is the same union, and `merged` writes each union one way), so its temporaries are a
    block's, not the selected rows' (an 11M-event trace's CPU ops: 176 MB of times at once)."""
    parts_s, parts_e = [], []
    for a in range(0, len(mask), block):
        m = mask[a : a + block]
        s = ts[a : a + block]
        e = s + dur[a : a + block]
        if window is not None:
            lo, hi = window
            m = m & (e > lo)
            m &= s < hi
            s, e = np.clip(s[m], lo, hi), np.clip(e[m], lo, hi)
        else:
            s, e = s[m], e[m]
        if len(s):
            ms, me = merged(s, e)
            parts_s.append(ms)
            parts_e.append(me)
    if not parts_s:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return merged(np.concatenate(parts_s), np.concatenate(parts_e)) if len(parts_s) > 1 else (parts_s[0], parts_e[0])


def prepare(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Intervals sorted by start with the running maximum of their ends (for window slicing)."""
    if len(s) > 1 and not bool((s[1:] >= s[:-1]).all()):
        o = np.argsort(s, kind="stable")
        s, e = s[o], e[o]
    return s, e, np.maximum.accumulate(e) if len(e) else e


def union_in(p: tuple[np.ndarray, np.ndarray, np.ndarray], a: int, b: int) -> int:
    """Length of the union of prepared intervals clipped to [a, b) (only the overlapping slice is read)."""
    s, e, reach = p
    lo, hi = int(np.searchsorted(reach, a, side="right")), int(np.searchsorted(s, b, side="left"))
    s, e = np.clip(s[lo:hi], a, b), np.clip(e[lo:hi], a, b)
    keep = e > s
    if not keep.any():
        return 0
    s, e = s[keep], e[keep]
    reach = np.maximum.accumulate(e)
    prev = np.concatenate(([a], reach[:-1]))
    return int(np.maximum(e - np.maximum(s, prev), 0).sum())


def busy_before(starts: np.ndarray, ends: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Union busy time of sorted, merged [starts, ends) intervals before each time in x."""
    if not len(starts):
        return np.zeros(len(x))
    dur = ends - starts
    cum = np.concatenate([[0.0], np.cumsum(dur)])
    k = np.searchsorted(starts, x, side="right")  # intervals starting before x
    prev = np.maximum(k - 1, 0)
    partial = np.where(k > 0, np.clip(x - starts[prev], 0.0, dur[prev]), 0.0)
    return cum[np.maximum(k - 1, 0)] * (k > 0) + partial
