"""One worker's part of the Distributed view (a summary's `distributed`, `worker_summary(t)`): its steps with
computation, communication and overlap ns, its collectives in time order with bytes, distributedInfo and GPUs;
`tb_plugin/views/distributed.py` renders the run from these parts.
The four time parts follow torch-tb-profiler's bars and add up to the step time:
computation_us = computation not overlapped by communication, overlap_us = both at once,
communication_us = communication alone, other_us = neither. Computation is the non-communication
GPU kernels when the worker has kernels, else its CPU ops (cpu_op, ProfilerStep excluded);
communication is the communication kernels on the GPU (`classify.communication_events`: NCCL, RCCL,
MSCCL, NVSHMEM, DeepEP, custom all-to-all by name, and kernels a communication op launched), else the CPU
collective ranges: nccl:*/gloo:*/mpi::* when present, else record_param_comms, else c10d::* (the wrappers
of a lower tier are CPU work that enqueues the collective)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from profiler_core.analysis import intervals
from profiler_core.analysis.comm import collectives, group_waits
from profiler_core.analysis.stages.classify import STEP_PREFIX, communication_events, communication_mask
from profiler_core.analysis.stages.columns import category_mask, name_mask
from profiler_core.analysis.stages.gpu_links import link_gpu_to_ops
from profiler_core.analysis.stages.steps import steps
from profiler_core.trace.categories import OP_CATS

_TIER1 = ("nccl:", "gloo:", "mpi::")


# ------------------------------------------------------------------------------------ interval algebra
# ---------------------------------------------------------------------------------------- per worker
def _collective_bytes(t: Any, rows: np.ndarray) -> np.ndarray:
    """Message bytes of the comm ops at `rows` (-1 when unknown): the `bytes` arg (ours), else
    In msg nelems × dtype, else input shapes × input types."""
    out = np.full(len(rows), -1, np.int64)
    if not len(rows):
        return out
    sub = t.events.iloc[rows]
    nbytes = t.arg("bytes", rows).astype(np.int64)
    out = np.where(nbytes >= 0, nbytes, -1)
    n = t.arg("in_nelems", rows).astype(np.int64)
    sizes = np.array([collectives.dtype_bytes(x) or -1 for x in t.arg("dtype", rows).astype(str).tolist()], np.int64)
    ok = (out < 0) & (n >= 0) & (sizes > 0)
    out = np.where(ok, n * sizes, out)
    if "input_dims" in sub and (out < 0).any():
        dims = sub["input_dims"].astype(str).tolist()
        types = sub["input_type"].astype(str).tolist() if "input_type" in sub else [""] * len(rows)
        for i in np.flatnonzero(out < 0).tolist():
            b = collectives.shape_bytes(dims[i], types[i])
            if b is not None:
                out[i] = b
    return out


def _worker_data(t: Any) -> dict:
    """Computation and communication ranges, collectives and steps of one worker."""
    ev = t.events
    ts = ev["ts"].to_numpy(np.int64)
    te = ts + ev["dur"].to_numpy(np.int64)
    comm = communication_events(t) if len(ev) else np.zeros(0, bool)
    by_name = communication_mask(ev).to_numpy() if len(ev) else np.zeros(0, bool)
    is_kernel = category_mask(ev, ("kernel",))
    names = ev["name"]
    cpu = category_mask(ev, OP_CATS)
    tier1 = cpu & comm & name_mask(ev, lambda n: n.startswith(_TIER1))
    tier2 = cpu & comm & name_mask(ev, lambda n: n == "record_param_comms")
    tier3 = cpu & comm & name_mask(ev, lambda n: n.startswith("c10d::"))
    cpu_coll = tier1 if tier1.any() else tier2 if tier2.any() else tier3
    comm_k = is_kernel & comm  # the communication time: every communication kernel
    nccl_k = is_kernel & by_name  # the instances: kernels of a communication family
    if is_kernel.any():
        comp = intervals.merge_ranges(ts[is_kernel & ~comm], te[is_kernel & ~comm])
    else:
        is_step = name_mask(ev, lambda n: n.startswith(STEP_PREFIX))
        ops = category_mask(ev, ("cpu_op",)) & ~is_step & ~cpu_coll
        comp = intervals.merge_ranges(ts[ops], te[ops])
    rpc = collectives.collectives(t)
    rpc = rpc[rpc["how"] == collectives.PG_SEQ]  # named by record_param_comms (backend ranges: the tiers below)
    if len(rpc) and (nccl_k.any() or not tier1.any()):  # torch >= 2.1: named record_param_comms calls
        return _worker_with_rpc(t, ev, ts, te, comp, nccl_k, comm_k, cpu_coll, rpc)
    if nccl_k.any():
        inst = np.flatnonzero(nccl_k)
        links = link_gpu_to_ops(t)
        op_of = dict(zip(links["row"].tolist(), links["op"].tolist()))
        launch = np.array([op_of.get(r, -1) for r in inst.tolist()], np.int64)
        nm = names.astype(str).to_numpy()
        inst_names = np.where(launch >= 0, nm[np.maximum(launch, 0)], nm[inst])
        bytes_ = np.where(launch >= 0, _collective_bytes(t, np.maximum(launch, 0)), -1)
    else:
        inst = np.flatnonzero(cpu_coll)
        inst_names = names.astype(str).to_numpy()[inst]
        if len(inst):  # record_param_comms: named by its Collective name arg
            coll = t.arg("coll_name", inst).astype(str)
            inst_names = np.where(
                (inst_names == "record_param_comms") & (coll != ""),
                np.char.add("record_param_comms:", coll.astype(str)),
                inst_names,
            )
        bytes_ = _collective_bytes(t, inst)
    o = np.argsort(ts[inst], kind="stable")
    coll = pd.DataFrame({"name": inst_names[o], "start": ts[inst][o], "dur": (te - ts)[inst][o], "bytes": bytes_[o]})
    if not nccl_k.any() and len(inst):
        # the calls' own process group where they name it (an MPI op: its communicator, MPI_COMM_WORLD), so the
        # views group them as the critical path does, not by name
        coll["pg"] = t.arg("pg_name", inst).astype(str)[o]
        coll["group_size"] = t.arg("group_size", inst).astype(np.int64)[o]
    commr = (
        intervals.merge_ranges(ts[comm_k], te[comm_k]) if nccl_k.any() else intervals.merge_ranges(ts[inst], te[inst])
    )
    return _worker_dict(t, comp, commr, coll)


def _worker_dict(t: Any, comp: np.ndarray, commr: np.ndarray, coll: pd.DataFrame) -> dict:
    for c, v in (("pg", ""), ("group_size", -1), ("is_wait", False)):
        if c not in coll:
            coll[c] = v
    coll["k"] = coll.groupby(["name", "pg"]).cumcount()
    st = steps(t)
    info = t.metadata.get("distributedInfo") if isinstance(getattr(t, "metadata", None), dict) else None
    return {
        "comp": comp,
        "comm": commr,
        "coll": coll,
        "steps": st,
        "info": info if isinstance(info, dict) else {},
        "props": getattr(t, "device_properties", None) or [],
    }


def _worker_with_rpc(
    t: Any,
    ev: pd.DataFrame,
    ts: np.ndarray,
    te: np.ndarray,
    comp: np.ndarray,
    nccl_k: np.ndarray,
    comm_k: np.ndarray,
    cpu_coll: np.ndarray,
    rpc: pd.DataFrame,
) -> dict:
    """Collectives named by record_param_comms (collectives.py): their NCCL kernels, or their CPU calls, are the
    instances; `wait` calls are waiting time; NCCL kernels no call launched stay instances of their own."""
    if nccl_k.any():
        commr = intervals.merge_ranges(ts[comm_k], te[comm_k])
        owned = np.zeros(len(ev), dtype=bool)
        rest = np.flatnonzero(nccl_k)
        own_rows = _owned_kernels(t, rpc)
        owned[own_rows] = True
        rest = rest[~owned[rest]]
        links = link_gpu_to_ops(t)
        op_of = np.full(len(ev), -1, np.int64)
        op_of[links["row"].to_numpy()] = links["op"].to_numpy()
        nm = ev["name"].astype(str).to_numpy()
        launch = op_of[rest]
        extra = pd.DataFrame(
            {
                "name": np.where(launch >= 0, nm[np.maximum(launch, 0)], nm[rest]),
                "start": ts[rest],
                "dur": (te - ts)[rest],
                "bytes": np.full(len(rest), -1, np.int64),
                "pg": [""] * len(rest),  # no call launched them: no process group
                "group_size": np.full(len(rest), -1, np.int64),
                "is_wait": np.zeros(len(rest), dtype=bool),
            }
        )
    else:
        commr = intervals.merge_ranges(ts[cpu_coll], te[cpu_coll])
        extra = pd.DataFrame({"name": [], "start": [], "dur": [], "bytes": []})
    mine = pd.DataFrame(
        {
            "name": rpc["name"].to_numpy(),
            "start": rpc["start"].to_numpy(np.int64),
            "dur": rpc["dur"].to_numpy(np.int64),
            "bytes": rpc["bytes"].to_numpy(np.int64),
            "pg": rpc["pg"].to_numpy(),
            "group_size": rpc["group_size"].to_numpy(np.int64),
            "is_wait": rpc["is_wait"].to_numpy(bool),
        }
    )
    coll = (
        pd.concat([mine, extra.astype({"start": np.int64, "dur": np.int64, "bytes": np.int64})], ignore_index=True)
        if len(extra)
        else mine
    )
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


# ------------------------------------------------------------------------------ per-worker summary
def worker_summary(t: Any) -> dict:
    """What the distributed view needs of one worker, as plain JSON-able lists (a few KB): its origin
    (first event's ts), its steps
    with computation, communication and overlap ns, its collectives in time order (name index, step
    index or -1, duration ns, bytes or -1), distributedInfo and GPUs."""
    d = _worker_data(t)
    st = d["steps"]
    both = intervals.intersect_ranges(d["comp"], d["comm"])
    starts = st["start"].to_numpy(np.int64)
    ends = st["end"].to_numpy(np.int64)
    comp, comm, ovl = [], [], []
    for a, b in zip(starts.tolist(), ends.tolist()):
        comp.append(intervals.total_length(intervals.clip_ranges(d["comp"], a, b)))
        comm.append(intervals.total_length(intervals.clip_ranges(d["comm"], a, b)))
        ovl.append(intervals.total_length(intervals.clip_ranges(both, a, b)))
    coll = d["coll"]
    # a collective is named per process group (record_param_comms and MPI calls carry one; others have "")
    keys = list(zip(coll["name"].astype(str).tolist(), coll["pg"].astype(str).tolist()))
    uniq = sorted(set(keys))
    code = {k2: i for i, k2 in enumerate(uniq)}
    gsize = dict.fromkeys(uniq, -1)
    for k2, g in zip(keys, coll["group_size"].to_numpy(np.int64).tolist()):
        gsize[k2] = max(gsize[k2], int(g))
    cstart = coll["start"].to_numpy(np.int64)
    # the step whose [start, end] holds the collective's start (the later one on a shared edge), else -1
    step = np.full(len(cstart), -1, np.int64)
    if len(starts):
        k = np.searchsorted(starts, cstart, side="right") - 1
        step = np.where((k >= 0) & (cstart <= ends[np.maximum(k, 0)]), k, -1)
    from profiler_core.analysis.stages.columns import trace_origin_ns

    pg_ranks = group_waits.pg_ranks_of(d["info"])
    return {
        "origin": trace_origin_ns(t),  # the zero of the other views' µs times
        "base_ns": int(getattr(t, "base_ns", 0) or 0),  # what the times count from (ns since the epoch)
        "steps": {
            "step": st["step"].astype(str).tolist(),
            "start": starts.tolist(),
            "end": ends.tolist(),
            "comp": comp,
            "comm": comm,
            "overlap": ovl,
        },
        "collectives": {
            "names": [n for n, _ in uniq],
            "pg": [g for _, g in uniq],
            "group_size": [gsize[k2] for k2 in uniq],
            "pg_ranks": [list(pg_ranks[g]) if g in pg_ranks else None for _, g in uniq],
            "name": [code[k2] for k2 in keys],
            "step": step.tolist(),
            "dur": coll["dur"].to_numpy(np.int64).tolist(),
            "bytes": coll["bytes"].to_numpy(np.int64).tolist(),
            "wait": coll["is_wait"].to_numpy(bool).astype(np.int64).tolist(),
        },
        "info": {k2: v for k2, v in d["info"].items() if isinstance(v, (str, int, float, bool)) or v is None},
        "gpus": _gpus(d["props"]),
    }
