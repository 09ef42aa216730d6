"""Memory view: allocated/reserved curves, allocation lifetimes and per-op memory statistics.

All three functions read `TraceData.memory` (the `[memory]` instant events) and accept an optional
[start_us, end_us] window (µs relative to the trace's first event, like every view). Devices are
named "CPU", "GPU0", "GPU1", ... Sizes are bytes (`_bytes`), times µs (`_us`).

memory_curve -> {"devices": [...], "default_device": "GPU0"|"CPU"|None, "start_us", "end_us",
                 "curves": {dev: {"ts_us": [...], "allocated_bytes": [...], "reserved_bytes": [...]}},
                 "peaks": {dev: {"allocated_bytes", "allocated_ts_us", "reserved_bytes", "reserved_ts_us"}},
                 "total_bytes": {dev: device memory or None}, "points": {dev: points before downsampling}}
    A curve is a step function: each point holds until the next one. Downsampling keeps, per time
    bucket, the points of minimum and maximum allocated and maximum reserved, so peaks survive.
memory_events -> {"devices": [...], "rows": {dev: [{"addr", "size_bytes", "alloc_us", "free_us",
                  "duration_us", "op"}]}}   allocations paired with their frees by address; None for
    an end outside the trace (freed after it, or allocated before it); sorted by alloc time.
memory_stats -> {"devices": [...], "rows": {dev: [{"name", "calls", "size_increase_bytes",
                 "self_size_increase_bytes", "alloc_count", "self_alloc_count", "alloc_size_bytes",
                 "self_alloc_size_bytes"}]}}   per op name; "self" counts records whose innermost
    op is the op itself, the others include its whole subtree; `calls` counts every call of the op in the window,
    those without a memory record too (torch-tb-profiler's definitions;
    size_increase = torch key_averages' "CPU Mem", self_size_increase = "Self CPU Mem").
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from profiler_core.analysis.stages.columns import codes_and_texts, trace_origin_ns
from profiler_core.analysis.stages.op_tree import op_tree
from profiler_core.analysis.tables.memory_records import (
    device_windows,
    downsample,
    memory_record_ops,
    memory_records,
)
from tb_plugin.errors import BadRequest
from tb_plugin.params import MAX_POINTS, number_param


def _window(start_us: Any, end_us: Any) -> tuple[float, float]:
    """Validated [a, b] in ns (infinite where not given)."""
    a = number_param(start_us, "start_us")
    b = number_param(end_us, "end_us")
    a = -math.inf if a is None else a * 1e3
    b = math.inf if b is None else b * 1e3
    if b < a:
        raise BadRequest(f"end_us ({end_us}) must not be less than start_us ({start_us})")
    return a, b


def _us(ns: np.ndarray) -> list:
    return np.round(ns / 1e3, 3).tolist()


def memory_curve(t: Any, start_us: float | None = None, end_us: float | None = None, max_points: int = 2000) -> dict:
    """Allocated and reserved bytes over time per device, downsampled to ~max_points keeping peaks."""
    mp = MAX_POINTS.parse(max_points)
    a, b = _window(start_us, end_us)
    _, names = memory_records(t)
    totals = _device_totals(t)
    out: dict = {
        "devices": names,
        "default_device": _default_device(names),
        "start_us": None if start_us is None else a / 1e3,
        "end_us": None if end_us is None else b / 1e3,
        "curves": {},
        "peaks": {},
        "total_bytes": {},
        "points": {},
    }
    for name, ts_w, al_w, rs_w in device_windows(t, a, b):
        keep = downsample(ts_w, al_w, rs_w, mp)
        out["curves"][name] = {
            "ts_us": _us(ts_w[keep]),
            "allocated_bytes": al_w[keep].tolist(),
            "reserved_bytes": rs_w[keep].tolist(),
        }
        out["points"][name] = int(len(ts_w))
        if len(ts_w):
            ia, ir = int(np.argmax(al_w)), int(np.argmax(rs_w))
            out["peaks"][name] = {
                "allocated_bytes": int(al_w[ia]),
                "allocated_ts_us": round(float(ts_w[ia]) / 1e3, 3),
                "reserved_bytes": int(rs_w[ir]),
                "reserved_ts_us": round(float(ts_w[ir]) / 1e3, 3),
            }
        else:
            out["peaks"][name] = {
                "allocated_bytes": 0,
                "allocated_ts_us": None,
                "reserved_bytes": 0,
                "reserved_ts_us": None,
            }
        out["total_bytes"][name] = totals.get(name)
    return out


def _default_device(names: list[str]) -> str | None:
    gpus = [n for n in names if n.startswith("GPU")]
    return gpus[0] if gpus else (names[0] if names else None)


def _device_totals(t: Any) -> dict:
    """GPU memory sizes from deviceProperties (GPUn -> bytes)."""
    out = {}
    for i, p in enumerate(getattr(t, "device_properties", None) or []):
        if isinstance(p, dict) and p.get("totalGlobalMem") is not None:
            try:
                out[f"GPU{int(p.get('id', i))}"] = int(p["totalGlobalMem"])
            except (TypeError, ValueError):
                continue
    return out


def _op_names(t: Any, op: np.ndarray) -> list:
    """Names of events at positions `op` (None where -1)."""
    if not len(op):
        return []
    names = t.events["name"].to_numpy()
    return [str(names[i]) if i >= 0 else None for i in op.tolist()]


def memory_events(t: Any, start_us: float | None = None, end_us: float | None = None) -> dict:
    """Allocations paired with their frees by address, per device, overlapping [start_us, end_us]."""
    a, b = _window(start_us, end_us)
    rec, names = memory_records(t)
    out: dict = {"devices": names, "rows": {n: [] for n in names}}
    if not len(rec):
        return out
    r = rec.reset_index(drop=True).assign(op=memory_record_ops(t))
    order = np.lexsort((np.arange(len(r)), r["ts"].to_numpy(), r["addr"].to_numpy(), r["dev"].to_numpy()))
    s = r.iloc[order].reset_index(drop=True)
    is_alloc = s["bytes"].to_numpy() > 0
    is_free = s["bytes"].to_numpy() < 0
    same_next = np.zeros(len(s), dtype=bool)
    same_next[:-1] = (s["dev"].to_numpy()[1:] == s["dev"].to_numpy()[:-1]) & (
        s["addr"].to_numpy()[1:] == s["addr"].to_numpy()[:-1]
    )
    nxt_free = np.zeros(len(s), dtype=bool)
    nxt_free[:-1] = is_free[1:]
    paired = is_alloc & same_next & nxt_free
    prev_paired = np.zeros(len(s), dtype=bool)
    prev_paired[1:] = paired[:-1]
    lone_free = is_free & ~prev_paired
    ai = np.flatnonzero(is_alloc)
    fi = np.flatnonzero(lone_free)
    ts = s["ts"].to_numpy().astype(np.float64)
    alloc_t = np.concatenate([ts[ai], np.full(len(fi), np.nan)])
    free_t = np.concatenate([np.where(paired[ai], ts[np.minimum(ai + 1, len(s) - 1)], np.nan), ts[fi]])
    size = np.concatenate([s["bytes"].to_numpy()[ai], -s["bytes"].to_numpy()[fi]])
    dev = np.concatenate([s["dev"].to_numpy()[ai], s["dev"].to_numpy()[fi]])
    addr = np.concatenate([s["addr"].to_numpy()[ai], s["addr"].to_numpy()[fi]])
    op = np.concatenate([s["op"].to_numpy()[ai], s["op"].to_numpy()[fi]])
    lo = np.where(np.isnan(alloc_t), -np.inf, alloc_t)
    hi = np.where(np.isnan(free_t), np.inf, free_t)
    keep = (hi >= a) & (lo <= b)
    idx = np.flatnonzero(keep)
    sort_t = np.where(np.isnan(alloc_t), free_t, alloc_t)
    idx = idx[np.lexsort((addr[idx], sort_t[idx], dev[idx]))]
    opn = _op_names(t, op[idx])
    dur = free_t - alloc_t

    def us(x: np.ndarray) -> list:
        r = np.round(x[idx] / 1e3, 3)
        return [None if v != v else v for v in r.tolist()]  # NaN -> None

    cols = {
        "addr": addr[idx].tolist(),
        "size_bytes": size[idx].tolist(),
        "alloc_us": us(alloc_t),
        "free_us": us(free_t),
        "duration_us": us(dur),
        "op": opn,
    }
    keys = list(cols)
    devs = dev[idx].tolist()
    for d_, *vals in zip(devs, *cols.values()):
        out["rows"][names[d_]].append(dict(zip(keys, vals)))
    return out


def memory_stats(t: Any, start_us: float | None = None, end_us: float | None = None) -> dict:
    """Per device and op name: calls, size increase, allocation count and size, self and total."""
    a, b = _window(start_us, end_us)
    rec, names = memory_records(t)
    out: dict = {"devices": names, "rows": {n: [] for n in names}}
    if not len(rec) or not len(t.events):
        return out
    tree = op_tree(t)
    node = tree[tree["is_op"].to_numpy() & (tree["merged_into"].to_numpy() < 0)]
    nrow = node["row"].to_numpy()
    nstart, nend = node["start"].to_numpy() - trace_origin_ns(t), node["end"].to_numpy() - trace_origin_ns(t)
    in_win = (nend >= a) & (nstart <= b)
    ev = t.events
    npid, ntid = ev["pid"].to_numpy(np.int64)[nrow], ev["tid"].to_numpy(np.int64)[nrow]
    name_codes, name_table = codes_and_texts(ev["name"].array)
    ncode = name_codes[nrow]
    ts = rec["ts"].to_numpy()
    rwin = (ts >= a) & (ts <= b)
    # thread codes shared by nodes and records
    both = pd.DataFrame(
        {"p": np.concatenate([npid, rec["pid"].to_numpy()]), "t": np.concatenate([ntid, rec["tid"].to_numpy()])}
    )
    g = both.groupby(["p", "t"], sort=True).ngroup().to_numpy(np.int64)
    g_node, g_rec = g[: len(nrow)], g[len(nrow) :]
    lo_t = int(min(nstart.min() if len(nstart) else 0, ts.min())) - 1
    span = int(max(nend.max() if len(nend) else 0, ts.max())) - lo_t + 2
    pos_of_row = np.full(len(ev), -1, np.int64)
    pos_of_row[nrow] = np.arange(len(nrow))
    rec_op = memory_record_ops(t)
    # calls: every call of the op in the window, as torch's key_averages and torch-tb-profiler count them (not only
    # the calls that allocated)
    all_calls = np.bincount(ncode[in_win], minlength=len(name_table))
    for code, dname in enumerate(names):
        sel = np.flatnonzero((rec["dev"].to_numpy() == code) & rwin)
        if not len(sel):
            continue
        rb = rec["bytes"].to_numpy()[sel]
        is_al = rb > 0
        # totals over each node's subtree = records of its thread inside [start, end] (prefix sums)
        key = g_rec[sel] * span + (ts[sel] - lo_t)
        o = np.argsort(key, kind="stable")
        key, rb_s, al_s = key[o], rb[o], is_al[o]
        c_inc = np.concatenate([[0], np.cumsum(rb_s)])
        c_cnt = np.concatenate([[0], np.cumsum(al_s)])
        c_siz = np.concatenate([[0], np.cumsum(np.where(al_s, rb_s, 0))])
        k0 = np.searchsorted(key, g_node * span + (nstart - lo_t), side="left")
        k1 = np.searchsorted(key, g_node * span + (nend - lo_t), side="right")
        tot_inc, tot_cnt, tot_siz = c_inc[k1] - c_inc[k0], c_cnt[k1] - c_cnt[k0], c_siz[k1] - c_siz[k0]
        # self = records whose innermost op is the node
        p = pos_of_row[np.maximum(rec_op[sel], 0)]
        has = (rec_op[sel] >= 0) & (p >= 0)
        nn = len(nrow)
        self_inc = np.bincount(p[has], weights=rb[has], minlength=nn)
        self_cnt = np.bincount(p[has], weights=is_al[has], minlength=nn)
        self_siz = np.bincount(p[has], weights=np.where(is_al, rb, 0)[has], minlength=nn)
        active = in_win & (k1 > k0)
        if not active.any():
            continue
        df = pd.DataFrame(
            {
                "name": ncode[active],
                "calls": 1,
                "size_increase_bytes": tot_inc[active],
                "self_size_increase_bytes": self_inc[active],
                "alloc_count": tot_cnt[active],
                "self_alloc_count": self_cnt[active],
                "alloc_size_bytes": tot_siz[active],
                "self_alloc_size_bytes": self_siz[active],
            }
        )
        agg = df.groupby("name", sort=False).sum()
        agg["calls"] = all_calls[agg.index.to_numpy(np.int64)]
        agg.index = [str(name_table[i]) for i in agg.index]
        agg = agg.rename_axis("name").reset_index()
        agg = agg.sort_values(["size_increase_bytes", "name"], ascending=[False, True], kind="stable")
        cols = [c for c in agg.columns if c != "name"]
        out["rows"][dname] = [
            {"name": r[0], **{c: int(v) for c, v in zip(cols, r[1:])}} for r in agg.itertuples(index=False, name=None)
        ]
    return out
