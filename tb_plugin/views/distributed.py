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
from tb_plugin.views import collectives, common

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
    rpc = collectives.collectives(t)
    if len(rpc) and (nccl_k.any() or not tier1.any()):  # torch >= 2.1: named record_param_comms calls
        return _worker_with_rpc(t, ev, ts, te, comp, nccl_k, cpu_coll, rpc)
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
    return _worker_dict(t, comp, commr, coll)


def _worker_dict(t: Any, comp: np.ndarray, commr: np.ndarray, coll: pd.DataFrame) -> dict:
    for c, v in (("pg", ""), ("group_size", -1), ("is_wait", False)):
        if c not in coll:
            coll[c] = v
    coll["k"] = coll.groupby(["name", "pg"]).cumcount()
    st = common.steps(t)
    info = t.metadata.get("distributedInfo") if isinstance(getattr(t, "metadata", None), dict) else None
    return {"comp": comp, "comm": commr, "coll": coll, "steps": st, "info": info if isinstance(info, dict) else {},
            "props": getattr(t, "device_properties", None) or []}


def _worker_with_rpc(t: Any, ev: pd.DataFrame, ts: np.ndarray, te: np.ndarray, comp: np.ndarray,
                     nccl_k: np.ndarray, cpu_coll: np.ndarray, rpc: pd.DataFrame) -> dict:
    """Collectives named by record_param_comms (collectives.py): their NCCL kernels, or their CPU calls, are the
    instances; `wait` calls are waiting time; NCCL kernels no call launched stay instances of their own."""
    if nccl_k.any():
        commr = merge_ranges(ts[nccl_k], te[nccl_k])
        owned = np.zeros(len(ev), dtype=bool)
        rest = np.flatnonzero(nccl_k)
        own_rows = _owned_kernels(t, rpc)
        owned[own_rows] = True
        rest = rest[~owned[rest]]
        links = common.link_gpu_to_ops(t)
        op_of = np.full(len(ev), -1, np.int64)
        op_of[links["row"].to_numpy()] = links["op"].to_numpy()
        nm = ev["name"].astype(str).to_numpy()
        launch = op_of[rest]
        extra = pd.DataFrame({"name": np.where(launch >= 0, nm[np.maximum(launch, 0)], nm[rest]),
                              "start": ts[rest], "dur": (te - ts)[rest], "bytes": np.full(len(rest), -1, np.int64)})
    else:
        commr = merge_ranges(ts[cpu_coll], te[cpu_coll])
        extra = pd.DataFrame({"name": [], "start": [], "dur": [], "bytes": []})
    mine = pd.DataFrame({"name": rpc["name"].to_numpy(), "start": rpc["start"].to_numpy(np.int64),
                         "dur": rpc["dur"].to_numpy(np.int64), "bytes": rpc["bytes"].to_numpy(np.int64),
                         "pg": rpc["pg"].to_numpy(), "group_size": rpc["group_size"].to_numpy(np.int64),
                         "is_wait": rpc["is_wait"].to_numpy(bool)})
    coll = pd.concat([mine, extra.astype({"start": np.int64, "dur": np.int64, "bytes": np.int64})],
                     ignore_index=True) if len(extra) else mine
    coll = coll.sort_values("start", kind="stable").reset_index(drop=True)
    return _worker_dict(t, comp, commr, coll)


def _owned_kernels(t: Any, rpc: pd.DataFrame) -> np.ndarray:
    """Rows of the NCCL kernels some record_param_comms call launched."""
    return collectives.kernel_owners(t)[0]


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


def distributed(traces: dict) -> dict:
    """The distributed view over the workers of one run and span (worker name -> TraceData)."""
    if not isinstance(traces, dict) or not traces:
        raise BadRequest("distributed view needs at least one worker trace")
    notes: list[str] = []
    workers = sorted(traces)
    data = {w: _worker_data(traces[w]) for w in workers}
    if len(workers) == 1:
        notes.append(f"only one worker ({workers[0]}): no wait time can be measured")
    for w in workers:
        if not len(data[w]["coll"]):
            notes.append(f"worker {w} has no communication ops")

    # align collectives: (name, k) across workers; transfer = shortest duration seen
    all_coll = pd.concat([d["coll"].assign(worker=w) for w, d in data.items()], ignore_index=True)
    if len(all_coll):
        grp = all_coll.groupby(["name", "pg", "k"], sort=False)
        nworkers = grp["worker"].transform("nunique")
        shortest = grp["dur"].transform("min")
        aligned = nworkers.to_numpy() == len(workers)
        all_coll["transfer"] = np.where(aligned, shortest.to_numpy(), all_coll["dur"].to_numpy())
        all_coll["transfer"] = np.where(all_coll["is_wait"].to_numpy(bool), 0, all_coll["transfer"].to_numpy())
        all_coll["wait"] = all_coll["dur"] - all_coll["transfer"]
        if len(workers) > 1:
            counts = all_coll.groupby(["worker", "name"]).size().unstack(fill_value=0).reindex(workers, fill_value=0)
            for name in counts.columns:
                col = counts[name]
                if col.nunique() > 1:
                    desc = ", ".join(f"{w}: {int(col.get(w, 0))}" for w in workers)
                    notes.append(f"{name} was called a different number of times per worker ({desc}); "
                                 f"calls without a partner on every worker count as transfer only")
    else:
        all_coll["transfer"] = pd.Series(dtype=np.int64)
        all_coll["wait"] = pd.Series(dtype=np.int64)

    step_names = {w: data[w]["steps"]["step"].astype(str).tolist() for w in workers}
    if len({tuple(s) for s in step_names.values()}) > 1:
        desc = "; ".join(f"{w}: {', '.join(step_names[w]) or 'none'}" for w in workers)
        notes.append(f"workers recorded different steps ({desc}); each is shown with its own steps")
    order: list[str] = []
    for w in workers:
        for s in step_names[w]:
            if s not in order:
                order.append(s)
    steps_out: dict = {s: {} for s in order}
    workers_out: dict = {}
    comm_ops: dict = {}
    for w in workers:
        d = data[w]
        mine = all_coll[all_coll["worker"] == w] if len(all_coll) else all_coll
        cstart = mine["start"].to_numpy(np.int64) if len(mine) else np.zeros(0, np.int64)
        sums = np.zeros(len(_PARTS))
        st = d["steps"]
        both = intersect_ranges(d["comp"], d["comm"])
        for s, a, b in zip(st["step"].astype(str), st["start"].to_numpy(np.int64), st["end"].to_numpy(np.int64)):
            comp = total_length(clip_ranges(d["comp"], a, b))
            comm = total_length(clip_ranges(d["comm"], a, b))
            ovl = total_length(clip_ranges(both, a, b))
            in_step = (cstart >= a) & (cstart <= b)
            tr = float(mine["transfer"].to_numpy()[in_step].sum()) if len(mine) else 0.0
            wt = float(mine["wait"].to_numpy()[in_step].sum()) if len(mine) else 0.0
            vals = [comp - ovl, ovl, comm - ovl, (b - a) + ovl - comp - comm, tr, wt]
            sums += vals
            steps_out[s][w] = {k: _r(v) for k, v in zip(_PARTS, vals)}
        n = max(len(st), 1)
        workers_out[w] = {k: _r(v / n) for k, v in zip(_PARTS, sums)}
        rows = []
        if len(mine):
            g = mine.groupby(["name", "pg"], sort=False)
            agg = pd.DataFrame({"calls": g.size(), "lat": g["dur"].sum(), "tr": g["transfer"].sum(),
                                "bytes": g["bytes"].apply(lambda x: int(x[x >= 0].sum()) if (x >= 0).any() else -1),
                                "gs": g["group_size"].max()})
            for (name, pg), r in agg.iterrows():
                calls = int(r["calls"])
                b = int(r["bytes"])
                row = {"name": str(name), "calls": calls, "total_bytes": b if b >= 0 else None,
                       "avg_bytes": (b / calls) if b >= 0 else None,
                       "total_latency_us": _r(r["lat"]), "avg_latency_us": _r(r["lat"] / calls),
                       "transfer_us": _r(r["tr"]), "avg_transfer_us": _r(r["tr"] / calls)}
                if pg or int(r["gs"]) > 0:  # record_param_comms collectives: their group
                    row["group_size"] = int(r["gs"]) if int(r["gs"]) > 0 else None
                    row["process_group"] = str(pg) or None
                rows.append(row)
        rows.sort(key=lambda x: (-x["total_latency_us"], x["name"]))
        comm_ops[w] = rows
    devices = {w: {"rank": data[w]["info"].get("rank"), "world_size": data[w]["info"].get("world_size"),
                   "backend": data[w]["info"].get("backend"), "gpus": _gpus(data[w]["props"])}
               for w in workers}
    return {"workers": workers_out, "steps": steps_out, "comm_ops": comm_ops, "devices": devices, "notes": notes}
