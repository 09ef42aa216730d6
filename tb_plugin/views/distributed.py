"""Distributed view: computation/communication overlap, wait vs transfer time and collective
statistics across the workers of one run and span (torch-tb-profiler's definitions).

distributed(traces: {worker: TraceData}) ->
  {"workers": {w: {"computation_us", "overlap_us", "communication_us", "other_us",
                   "transfer_us", "wait_us"}},            # mean per step
   "steps":   {step: {w: {same keys}}},                    # per step (steps in time order)
   "comm_ops": {w: [{"name", "calls", "total_bytes", "avg_bytes", "total_latency_us",
                     "avg_latency_us", "transfer_us", "avg_transfer_us"}]},
   "devices": {w: {"rank", "world_size", "backend", "gpus": {"GPU0": {"name", "memory_bytes",
                   "compute_capability"}}}},
   "notes": [text...]}
The four time parts follow torch-tb-profiler's bars and add up to the step time:
computation_us = computation not overlapped by communication, overlap_us = both at once,
communication_us = communication alone, other_us = neither. Computation is the non-communication
GPU kernels when the worker has kernels, else its CPU ops (cpu_op, ProfilerStep excluded);
communication is NCCL kernels on the GPU, else the CPU collective ranges: nccl:*/gloo:*/mpi::*
when present, else record_param_comms, else c10d::* (the wrappers of a lower tier are CPU work
that enqueues the collective).
Wait vs transfer: the k-th collective of a name is the same collective on every worker; its
transfer time is the shortest duration any worker saw (the last worker to arrive waits for
nobody), and each worker's wait time is its own duration minus that. This needs no clock
alignment between hosts.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tb_plugin.errors import BadRequest
from tb_plugin.views import common

_TIER1 = ("nccl:", "gloo:", "mpi::")
_DTYPE_BYTES = {
    "float": 4, "float32": 4, "c10::float": 4, "double": 8, "float64": 8, "half": 2, "float16": 2,
    "c10::half": 2, "bfloat16": 2, "c10::bfloat16": 2, "int": 4, "int32": 4, "unsigned int": 4,
    "uint32": 4, "long": 8, "long int": 8, "long long": 8, "int64": 8, "uint64": 8,
    "unsigned long": 8, "short": 2, "int16": 2, "uint16": 2, "short int": 2, "char": 1,
    "signed char": 1, "unsigned char": 1, "int8": 1, "uint8": 1, "bool": 1, "byte": 1,
    "complex64": 8, "c10::complex<float>": 8, "complex128": 16, "c10::complex<double>": 16,
    "mpi_float": 4, "mpi_double": 8, "mpi_int": 4, "mpi_long": 8, "mpi_char": 1, "mpi_byte": 1,
    "mpi_int64_t": 8, "mpi_long_long": 8, "mpi_unsigned_char": 1,
}
_PARTS = ("computation_us", "overlap_us", "communication_us", "other_us", "transfer_us", "wait_us")


# ------------------------------------------------------------------------------------ interval algebra
def merge_ranges(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Union of [start, end) ranges as sorted disjoint (n, 2) int64 ranges."""
    start = np.asarray(start, np.int64)
    end = np.asarray(end, np.int64)
    if not len(start):
        return np.zeros((0, 2), np.int64)
    o = np.lexsort((end, start))
    s, e = start[o], end[o]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    grp = np.cumsum(new) - 1
    out_e = np.zeros(int(new.sum()), np.int64)
    np.maximum.at(out_e, grp, e)
    return np.stack([s[new], out_e], axis=1)


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


# ---------------------------------------------------------------------------------------- per worker
def _dtype_size(name: str) -> int | None:
    return _DTYPE_BYTES.get(str(name).strip().lower())


def _shape_bytes(dims: str, types: str) -> int | None:
    """Π shape × dtype bytes summed over the tensor inputs (torch-tb-profiler's message size)."""
    import json
    try:
        d = json.loads(dims) if dims else []
        ty = json.loads(types) if types else []
    except ValueError:
        return None
    total, found = 0, False
    for shape, tname in zip(d, ty):
        size = _dtype_size(tname)
        if size is None or not isinstance(shape, list):
            continue
        if shape and all(isinstance(x, list) for x in shape):   # TensorList
            for s in shape:
                total += int(np.prod(s)) * size if s else 0
        elif all(isinstance(x, (int, float)) for x in shape):
            total += int(np.prod(shape)) * size if shape else size
        found = True
    return total if found else None


def _collective_bytes(ev: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """Message bytes of the comm ops at `rows` (-1 when unknown): the `bytes` arg (ours), else
    In msg nelems × dtype, else input shapes × input types."""
    out = np.full(len(rows), -1, np.int64)
    if not len(rows):
        return out
    sub = ev.iloc[rows]
    if "bytes" in sub:
        out = np.where(sub["bytes"].to_numpy(np.int64) >= 0, sub["bytes"].to_numpy(np.int64), -1)
    if "in_nelems" in sub and "dtype" in sub:
        n = sub["in_nelems"].to_numpy(np.int64)
        sizes = np.array([_dtype_size(x) or -1 for x in sub["dtype"].astype(str).tolist()], np.int64)
        ok = (out < 0) & (n >= 0) & (sizes > 0)
        out = np.where(ok, n * sizes, out)
    if "input_dims" in sub and (out < 0).any():
        dims = sub["input_dims"].astype(str).tolist()
        types = sub["input_type"].astype(str).tolist() if "input_type" in sub else [""] * len(rows)
        for i in np.flatnonzero(out < 0).tolist():
            b = _shape_bytes(dims[i], types[i])
            if b is not None:
                out[i] = b
    return out


def _worker_data(t: Any) -> dict:
    """Computation and communication ranges, collectives and steps of one worker."""
    ev = t.events
    ts = ev["ts"].to_numpy(np.int64)
    te = ts + ev["dur"].to_numpy(np.int64)
    comm = common.communication_mask(ev).to_numpy() if len(ev) else np.zeros(0, bool)
    is_kernel = common.category_mask(ev, ("kernel",))
    names = ev["name"]
    cpu = common.category_mask(ev, common.CPU_OP_CATS)
    tier1 = cpu & comm & common.name_mask(ev, lambda n: n.startswith(_TIER1))
    tier2 = cpu & comm & common.name_mask(ev, lambda n: n == "record_param_comms")
    tier3 = cpu & comm & common.name_mask(ev, lambda n: n.startswith("c10d::"))
    cpu_coll = tier1 if tier1.any() else tier2 if tier2.any() else tier3
    nccl_k = is_kernel & comm
    if is_kernel.any():
        comp = merge_ranges(ts[is_kernel & ~comm], te[is_kernel & ~comm])
    else:
        is_step = common.name_mask(ev, lambda n: n.startswith(common.STEP_PREFIX))
        ops = common.category_mask(ev, ("cpu_op",)) & ~is_step & ~cpu_coll
        comp = merge_ranges(ts[ops], te[ops])
    if nccl_k.any():
        inst = np.flatnonzero(nccl_k)
        links = common.link_gpu_to_ops(t)
        op_of = dict(zip(links["row"].tolist(), links["op"].tolist()))
        launch = np.array([op_of.get(r, -1) for r in inst.tolist()], np.int64)
        nm = names.astype(str).to_numpy()
        inst_names = np.where(launch >= 0, nm[np.maximum(launch, 0)], nm[inst])
        bytes_ = np.where(launch >= 0, _collective_bytes(ev, np.maximum(launch, 0)), -1)
    else:
        inst = np.flatnonzero(cpu_coll)
        inst_names = names.astype(str).to_numpy()[inst]
        if "coll_name" in ev and len(inst):   # record_param_comms: named by its Collective name arg
            coll = ev["coll_name"].astype(str).to_numpy()[inst]
            inst_names = np.where((inst_names == "record_param_comms") & (coll != ""),
                                  np.char.add("record_param_comms:", coll.astype(str)), inst_names)
        bytes_ = _collective_bytes(ev, inst)
    commr = merge_ranges(ts[inst], te[inst])
    o = np.argsort(ts[inst], kind="stable")
    coll = pd.DataFrame({"name": inst_names[o], "start": ts[inst][o], "dur": (te - ts)[inst][o],
                         "bytes": bytes_[o]})
    coll["k"] = coll.groupby("name").cumcount()
    st = common.steps(t)
    info = t.metadata.get("distributedInfo") if isinstance(getattr(t, "metadata", None), dict) else None
    return {"comp": comp, "comm": commr, "coll": coll, "steps": st, "info": info if isinstance(info, dict) else {},
            "props": getattr(t, "device_properties", None) or []}


def _gpus(props: list) -> dict:
    out = {}
    for i, p in enumerate(props):
        if not isinstance(p, dict):
            continue
        try:
            key = f"GPU{int(p.get('id', i))}"
        except (TypeError, ValueError):
            key = f"GPU{i}"
        cc = None
        if p.get("computeMajor") is not None:
            cc = f"{p.get('computeMajor')}.{p.get('computeMinor', 0)}"
        out[key] = {"name": p.get("name"), "memory_bytes": p.get("totalGlobalMem"), "compute_capability": cc}
    return out


def _r(ns: float) -> float:
    return round(float(ns) / 1e3, 3)


# ------------------------------------------------------------------------------ per-worker summary
def worker_summary(t: Any) -> dict:
    """What the distributed view needs of one worker, as plain JSON-able lists (a few KB): its origin
    (first event's ts), its steps
    with computation, communication and overlap ns, its collectives in time order (name index, step
    index or -1, duration ns, bytes or -1), distributedInfo and GPUs."""
    d = _worker_data(t)
    st = d["steps"]
    both = intersect_ranges(d["comp"], d["comm"])
    starts = st["start"].to_numpy(np.int64)
    ends = st["end"].to_numpy(np.int64)
    comp, comm, ovl = [], [], []
    for a, b in zip(starts.tolist(), ends.tolist()):
        comp.append(total_length(clip_ranges(d["comp"], a, b)))
        comm.append(total_length(clip_ranges(d["comm"], a, b)))
        ovl.append(total_length(clip_ranges(both, a, b)))
    coll = d["coll"]
    names = sorted(set(coll["name"].astype(str).tolist()))
    code = {n: i for i, n in enumerate(names)}
    cstart = coll["start"].to_numpy(np.int64)
    # the step whose [start, end] holds the collective's start (the later one on a shared edge), else -1
    step = np.full(len(cstart), -1, np.int64)
    if len(starts):
        k = np.searchsorted(starts, cstart, side="right") - 1
        step = np.where((k >= 0) & (cstart <= ends[np.maximum(k, 0)]), k, -1)
    from tb_plugin.views.timeline import trace_origin_ns

    return {
        "origin": trace_origin_ns(t),   # the zero of the other views' µs times
        "steps": {"step": st["step"].astype(str).tolist(), "start": starts.tolist(), "end": ends.tolist(),
                  "comp": comp, "comm": comm, "overlap": ovl},
        "collectives": {"names": names, "name": [code[n] for n in coll["name"].astype(str).tolist()],
                        "step": step.tolist(), "dur": coll["dur"].to_numpy(np.int64).tolist(),
                        "bytes": coll["bytes"].to_numpy(np.int64).tolist()},
        "info": {k2: v for k2, v in d["info"].items() if isinstance(v, (str, int, float, bool)) or v is None},
        "gpus": _gpus(d["props"]),
    }


def _collective_frame(parts: dict, workers: list[str]) -> pd.DataFrame:
    """All workers' collectives: worker, name, k (its call number per name), step, dur, bytes."""
    frames = []
    for w in workers:
        c = parts[w].get("collectives") or {}
        names = np.asarray(c.get("names") or [], dtype=object)
        codes = np.asarray(c.get("name") or [], np.int64)
        if not len(codes):
            continue
        f = pd.DataFrame({"name": names[codes].astype(str), "step": np.asarray(c["step"], np.int64),
                          "dur": np.asarray(c["dur"], np.int64), "bytes": np.asarray(c["bytes"], np.int64)})
        f["k"] = f.groupby("name").cumcount()
        f["worker"] = w
        frames.append(f)
    if not frames:
        return pd.DataFrame({"name": pd.Series([], dtype=object), "step": pd.Series([], dtype=np.int64),
                             "dur": pd.Series([], dtype=np.int64), "bytes": pd.Series([], dtype=np.int64),
                             "k": pd.Series([], dtype=np.int64), "worker": pd.Series([], dtype=object)})
    return pd.concat(frames, ignore_index=True)


def _align(all_coll: pd.DataFrame, workers: list[str], notes: list[str]) -> pd.DataFrame:
    """Adds transfer and wait (ns) to every collective: the k-th call of a name on every worker is one
    collective; its transfer is the shortest duration any worker saw."""
    if len(all_coll):
        grp = all_coll.groupby(["name", "k"], sort=False)
        nworkers = grp["worker"].transform("nunique")
        shortest = grp["dur"].transform("min")
        aligned = nworkers.to_numpy() == len(workers)
        all_coll["transfer"] = np.where(aligned, shortest.to_numpy(), all_coll["dur"].to_numpy())
        all_coll["wait"] = all_coll["dur"] - all_coll["transfer"]
        all_coll["aligned"] = aligned
        if len(workers) > 1:
            counts = all_coll.groupby(["worker", "name"]).size().unstack(fill_value=0).reindex(workers, fill_value=0)
            for name in counts.columns:
                col = counts[name]
                if col.nunique() > 1:
                    if len(workers) <= 16:
                        desc = ", ".join(f"{w}: {int(col.get(w, 0))}" for w in workers)
                    else:
                        desc = f"from {int(col.min())} to {int(col.max())} calls"
                    notes.append(f"{name} was called a different number of times per worker ({desc}); "
                                 f"calls without a partner on every worker count as transfer only")
    else:
        all_coll["transfer"] = pd.Series(dtype=np.int64)
        all_coll["wait"] = pd.Series(dtype=np.int64)
        all_coll["aligned"] = pd.Series(dtype=bool)
    return all_coll


def _stragglers(parts: dict, workers: list[str], all_coll: pd.DataFrame, limit: int = 20) -> list[dict]:
    """(worker, step) pairs whose busy time (step time minus own wait) exceeds the step's median over
    the workers, largest excess first, each with the collective that waited longest for it."""
    if len(workers) < 2:
        return []
    rows = []
    for w in workers:
        s = parts[w]["steps"]
        for i, name in enumerate(s["step"]):
            rows.append((w, i, str(name), s["end"][i] - s["start"][i]))
    if not rows:
        return []
    f = pd.DataFrame(rows, columns=["worker", "si", "step", "length"])
    if len(all_coll):
        own = all_coll[all_coll["step"] >= 0].groupby(["worker", "step"])["wait"].sum()
        f["wait"] = [int(own.get((w, i), 0)) for w, i in zip(f["worker"], f["si"])]
    else:
        f["wait"] = 0
    f["busy"] = f["length"] - f["wait"]
    f["median"] = f.groupby("step")["busy"].transform("median")
    f["n"] = f.groupby("step")["worker"].transform("size")
    f = f[(f["n"] >= 2) & (f["busy"] > f["median"])]
    f = f.assign(excess=f["busy"] - f["median"]).sort_values(["excess", "worker"], ascending=[False, True]).head(limit)
    out = []
    coll = all_coll[all_coll["aligned"]] if len(all_coll) else all_coll
    for r in f.itertuples():
        name, waited = None, 0.0
        if len(coll):
            mine = coll[(coll["worker"] == r.worker) & (coll["step"] == r.si)]
            if len(mine):
                # the collectives this worker reached last (it waited least); others' wait on them
                keys = set(zip(mine["name"], mine["k"]))
                same = coll[[(n, k) in keys for n, k in zip(coll["name"], coll["k"])]]
                others = same[same["worker"] != r.worker].groupby(["name", "k"])["wait"].sum()
                if len(others):
                    (n, k), v = max(others.items(), key=lambda kv: kv[1])
                    name, waited = f"{n} #{int(k) + 1}", float(v)
        out.append({"worker": r.worker, "step": r.step, "busy_us": _r(r.busy), "median_us": _r(r.median),
                    "excess_us": _r(r.excess), "collective": name, "others_wait_us": _r(waited)})
    return out


def from_summaries(parts: dict) -> dict:
    """The distributed view over the workers of one run and span (worker name -> worker_summary)."""
    if not isinstance(parts, dict) or not parts:
        raise BadRequest("distributed view needs at least one worker trace")
    notes: list[str] = []
    workers = sorted(parts)
    if len(workers) == 1:
        notes.append(f"only one worker ({workers[0]}): no wait time can be measured")
    for w in workers:
        if not (parts[w].get("collectives") or {}).get("name"):
            notes.append(f"worker {w} has no communication ops")
    all_coll = _align(_collective_frame(parts, workers), workers, notes)

    step_names = {w: [str(s) for s in parts[w]["steps"]["step"]] for w in workers}
    if len({tuple(s) for s in step_names.values()}) > 1:
        if len(workers) <= 16:
            desc = "; ".join(f"{w}: {', '.join(step_names[w]) or 'none'}" for w in workers)
        else:
            desc = f"{len({tuple(s) for s in step_names.values()})} different step lists"
        notes.append(f"workers recorded different steps ({desc}); each is shown with its own steps")
    order: list[str] = []
    seen: set = set()
    for w in workers:
        for s in step_names[w]:
            if s not in seen:
                seen.add(s)
                order.append(s)
    steps_out: dict = {s: {} for s in order}
    workers_out: dict = {}
    comm_ops: dict = {}
    by_worker = dict(tuple(all_coll.groupby("worker", sort=False))) if len(all_coll) else {}
    for w in workers:
        ps = parts[w]["steps"]
        mine = by_worker.get(w)
        nsteps = len(ps["step"])
        tr_step = np.zeros(nsteps)
        wt_step = np.zeros(nsteps)
        if mine is not None and nsteps:
            inside = mine[mine["step"] >= 0]
            np.add.at(tr_step, inside["step"].to_numpy(np.int64), inside["transfer"].to_numpy(np.float64))
            np.add.at(wt_step, inside["step"].to_numpy(np.int64), inside["wait"].to_numpy(np.float64))
        sums = np.zeros(len(_PARTS))
        for i in range(nsteps):
            a, b = ps["start"][i], ps["end"][i]
            comp, comm, ovl = ps["comp"][i], ps["comm"][i], ps["overlap"][i]
            vals = [comp - ovl, ovl, comm - ovl, (b - a) + ovl - comp - comm, tr_step[i], wt_step[i]]
            sums += vals
            steps_out[str(ps["step"][i])][w] = {k: _r(v) for k, v in zip(_PARTS, vals)}
        n = max(nsteps, 1)
        workers_out[w] = {k: _r(v / n) for k, v in zip(_PARTS, sums)}
        rows = []
        if mine is not None and len(mine):
            g = mine.groupby("name", sort=False)
            known = mine["bytes"].where(mine["bytes"] >= 0)
            agg = pd.DataFrame({"calls": g.size(), "lat": g["dur"].sum(), "tr": g["transfer"].sum(),
                                "bytes": known.groupby(mine["name"], sort=False).sum(min_count=1)})
            for name, r in agg.iterrows():
                calls = int(r["calls"])
                b = int(r["bytes"]) if pd.notna(r["bytes"]) else -1
                tr = float(r["tr"])
                rows.append({"name": str(name), "calls": calls, "total_bytes": b if b >= 0 else None,
                             "avg_bytes": (b / calls) if b >= 0 else None,
                             "total_latency_us": _r(r["lat"]), "avg_latency_us": _r(r["lat"] / calls),
                             "transfer_us": _r(tr), "avg_transfer_us": _r(tr / calls),
                             # bytes per transfer time: bytes/ns is GB/s
                             "bandwidth_gbps": round(b / tr, 3) if b >= 0 and tr > 0 else None})
        rows.sort(key=lambda x: (-x["total_latency_us"], x["name"]))
        comm_ops[w] = rows
    devices = {w: {"rank": parts[w].get("info", {}).get("rank"),
                   "world_size": parts[w].get("info", {}).get("world_size"),
                   "backend": parts[w].get("info", {}).get("backend"), "gpus": parts[w].get("gpus") or {}}
               for w in workers}
    return {"workers": workers_out, "steps": steps_out, "comm_ops": comm_ops, "devices": devices,
            "stragglers": _stragglers(parts, workers, all_coll), "notes": notes}


def step_detail(parts: dict, worker: str, step: str) -> dict:
    """One worker's step: its time parts and each collective it ran there with wait and transfer."""
    workers = sorted(parts)
    if worker not in parts:
        raise BadRequest(f"unknown worker {worker!r}")
    ps = parts[worker]["steps"]
    names = [str(s) for s in ps["step"]]
    if step not in names:
        raise BadRequest(f"worker {worker!r} has no step {step!r}")
    i = names.index(step)
    all_coll = _align(_collective_frame(parts, workers), workers, [])
    mine = all_coll[(all_coll["worker"] == worker) & (all_coll["step"] == i)] if len(all_coll) else all_coll
    rows = [{"name": str(r.name), "call": int(r.k) + 1, "duration_us": _r(r.dur), "transfer_us": _r(r.transfer),
             "wait_us": _r(r.wait), "bytes": int(r.bytes) if r.bytes >= 0 else None,
             "bandwidth_gbps": round(r.bytes / r.transfer, 3) if r.bytes >= 0 and r.transfer > 0 else None}
            for r in mine.itertuples()]
    a, b = ps["start"][i], ps["end"][i]
    comp, comm, ovl = ps["comp"][i], ps["comm"][i], ps["overlap"][i]
    vals = [comp - ovl, ovl, comm - ovl, (b - a) + ovl - comp - comm,
            float(mine["transfer"].sum()) if len(mine) else 0.0, float(mine["wait"].sum()) if len(mine) else 0.0]
    origin = int(parts[worker].get("origin") or 0)
    return {"worker": worker, "step": step, "start_us": _r(a - origin), "end_us": _r(b - origin),
            "parts": {k: _r(v) for k, v in zip(_PARTS, vals)}, "collectives": rows}


def distributed(traces: dict) -> dict:
    """The distributed view over the workers of one run and span (worker name -> TraceData)."""
    if not isinstance(traces, dict) or not traces:
        raise BadRequest("distributed view needs at least one worker trace")
    return from_summaries({w: worker_summary(traces[w]) for w in traces})
