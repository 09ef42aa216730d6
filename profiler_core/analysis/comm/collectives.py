"""Collectives behind `record_param_comms` (torch >= 2.1): one instance per collective call, named by its
`Collective name` arg in the spelling older traces used for their backend ranges (`nccl:all_reduce`), with
message bytes, group size and process group, and the NCCL kernels each call launched.

`collectives(t)` is what the distributed view aligns across workers when a trace records its collectives
with `record_param_comms` (docs/internals.md §4). Pure functions of one `TraceData`.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from profiler_core.analysis.intervals import holds
from profiler_core.analysis.stages.classify import (  # noqa: F401 - communication_events: its owner is classify
    MPI_PREFIX,
    collective_call_mask,
    communication_events,
)
from profiler_core.analysis.stages.columns import category_mask, name_mask
from profiler_core.analysis.stages.gpu_links import launch_calls, link_gpu_to_ops
from profiler_core.analysis.stages.registry import stage

RPC = "record_param_comms"
#: `Collective name` values that are a wait on an earlier collective, not a transfer
WAIT_NAMES = frozenset({"wait", "wait_all", "waitall"})
_RENAME = {  # c10d's collective names -> the record_function names of ProcessGroupNCCL/Gloo before torch 2.1
    "allreduce": "all_reduce",
    "allreduce_coalesced": "all_reduce_coalesced",
    "allgather": "all_gather",
    "_allgather_base": "_all_gather_base",
    "allgather_coalesced": "all_gather_coalesced",
    "allgather_into_tensor_coalesced": "all_gather_into_tensor_coalesced",
    "alltoall": "all_to_all",
    "alltoall_base": "all_to_all",
}
#: NCCL kernel name fragment (ncclDevKernel_AllReduce_Sum_f32_RING_LL, ncclKernel_Broadcast_RING_LL_...) ->
#: the c10d collective names it can carry out
_KERNEL_KINDS = (
    ("allreduce", ("allreduce", "allreduce_coalesced")),
    ("allgather", ("allgather", "_allgather_base", "allgather_coalesced", "allgather_into_tensor_coalesced")),
    ("reducescatter", ("reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor_coalesced")),
    ("broadcast", ("broadcast",)),
    ("reduce", ("reduce",)),
    ("sendrecv", ("send", "recv", "alltoall", "alltoall_base", "gather", "scatter")),
)
_DTYPE_BYTES = {
    "float": 4,
    "float32": 4,
    "double": 8,
    "float64": 8,
    "half": 2,
    "float16": 2,
    "bfloat16": 2,
    "int": 4,
    "int32": 4,
    "long": 8,
    "int64": 8,
    "short": 2,
    "int16": 2,
    "char": 1,
    "int8": 1,
    "byte": 1,
    "uint8": 1,
    "bool": 1,
    "complexfloat": 8,
    "complexdouble": 16,
    "complexhalf": 4,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
}


def collective_name(coll: str, backend: str) -> str:
    """`backend:name` in the spelling of older traces' backend ranges: ("allreduce", "nccl") -> "nccl:all_reduce"."""
    coll = str(coll).strip()
    return f"{backend}:{_RENAME.get(coll, coll)}"


def dtype_bytes(name: str) -> int | None:
    """Bytes per element of a torch dtype as record_param_comms writes it ("Float", "BFloat16", ...)."""
    text = str(name).strip().lower()
    if text.startswith("c10::"):
        text = text[5:]
    return _DTYPE_BYTES.get(text)


def kernel_kind(name: str) -> str | None:
    """The collective family of an NCCL kernel name ("allreduce", "broadcast", ...), or None."""
    m = re.search(r"nccl(?:Dev)?Kernel_([A-Za-z]+)", str(name))
    if not m:
        return None
    word = m.group(1).lower()
    for kind, _ in _KERNEL_KINDS:
        if word == kind:
            return kind
    return None


def _kind_of_coll(coll: str) -> str | None:
    for kind, names in _KERNEL_KINDS:
        if coll in names:
            return kind
    return None


def backend_of(t: Any, has_nccl_kernels: bool) -> str:
    """The name prefix for a worker's collectives: nccl when NCCL kernels ran, else distributedInfo's backend,
    else c10d."""
    if has_nccl_kernels:
        return "nccl"
    meta = getattr(t, "metadata", None) or {}
    info = meta.get("distributedInfo") if isinstance(meta, dict) else None
    backend = str(info.get("backend") or "") if isinstance(info, dict) else ""
    return backend.lower() if re.fullmatch(r"[A-Za-z0-9_]+", backend) else "c10d"


def _enclosing(t: Any, ops: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """For each event at `rows`, the position of the op among `ops` (one thread's non-nested ranges) on the
    same pid/tid whose range holds the event's start (`intervals.holds`: start <= t < end); -1 if none."""
    ev = t.events
    out = np.full(len(rows), -1, np.int64)
    if not len(ops) or not len(rows):
        return out
    ts = ev["ts"].to_numpy(np.int64)
    te = ts + ev["dur"].to_numpy(np.int64)
    pid, tid = ev["pid"].to_numpy(np.int64), ev["tid"].to_numpy(np.int64)
    for p, q in set(zip(pid[ops].tolist(), tid[ops].tolist())):
        mine = ops[(pid[ops] == p) & (tid[ops] == q)]
        mine = mine[np.argsort(ts[mine], kind="stable")]
        sel = np.flatnonzero((pid[rows] == p) & (tid[rows] == q))
        if not len(sel):
            continue
        k = np.searchsorted(ts[mine], ts[rows[sel]], side="right") - 1
        at = mine[np.maximum(k, 0)]
        ok = (k >= 0) & holds(ts[at], te[at], ts[rows[sel]])
        out[sel[ok]] = mine[k[ok]]
    return out


def _analyse(t: Any) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    ev = t.events
    cols = ["row", "name", "coll", "pg", "group_size", "start", "dur", "bytes", "is_wait", "kernels"]
    none = np.zeros(0, np.int64)
    rpc = np.flatnonzero(collective_call_mask(t))
    if not len(rpc):
        return pd.DataFrame({c: [] for c in cols}), none, none
    ts = ev["ts"].to_numpy(np.int64)
    dur = ev["dur"].to_numpy(np.int64)
    names = ev["name"].astype(str).to_numpy()
    coll = t.arg("coll_name", rpc).astype(str)
    is_wait = np.isin(np.char.lower(coll.astype(str)), list(WAIT_NAMES))
    kmask = category_mask(ev, ("kernel",)) & name_mask(ev, lambda n: "nccl" in n.lower())
    nccl = np.flatnonzero(kmask)
    backend = backend_of(t, len(nccl) > 0)

    # NCCL kernels -> the record_param_comms call that launched them (launch inside its range, same thread)
    owner = np.full(len(nccl), -1, np.int64)
    if len(nccl):
        launch = launch_calls(t, nccl)
        has = launch >= 0
        owner[has] = _enclosing(t, rpc[~is_wait], launch[has])
        # launches not in the trace: the k-th unowned kernel of a family goes to the k-th call of that family
        # that owns no kernel (both in time order)
        owned = np.zeros(len(ev), dtype=bool)
        owned[owner[owner >= 0]] = True
        calls = rpc[~is_wait]
        call_kind = np.array([_kind_of_coll(c) for c in t.arg("coll_name", calls).astype(str)], object)
        k_kind = np.array([kernel_kind(n) for n in names[nccl]], object)
        for kind in {k for k in k_kind[owner < 0].tolist() if k}:
            free_k = np.flatnonzero((owner < 0) & (k_kind == kind))
            free_c = calls[(call_kind == kind) & ~owned[calls]]
            free_c = free_c[np.argsort(ts[free_c], kind="stable")]
            free_k = free_k[np.argsort(ts[nccl[free_k]], kind="stable")]
            m = min(len(free_k), len(free_c))
            owner[free_k[:m]] = free_c[:m]
    n_kernels = np.zeros(len(ev), np.int64)
    k_start = np.full(len(ev), np.iinfo(np.int64).max)
    k_end = np.full(len(ev), np.iinfo(np.int64).min)
    k_busy = np.zeros(len(ev), np.int64)
    if (owner >= 0).any():
        o, kr = owner[owner >= 0], nccl[owner >= 0]
        np.add.at(n_kernels, o, 1)
        np.minimum.at(k_start, o, ts[kr])
        np.maximum.at(k_end, o, ts[kr] + dur[kr])
        np.add.at(k_busy, o, dur[kr])
    on_gpu = n_kernels[rpc] > 0
    start = np.where(on_gpu, k_start[rpc], ts[rpc])
    length = np.where(on_gpu, k_busy[rpc], dur[rpc])
    size = np.array([dtype_bytes(d) or -1 for d in t.arg("dtype", rpc).astype(str)], np.int64)
    nel = np.maximum(t.arg("in_nelems", rpc).astype(np.int64), t.arg("out_nelems", rpc).astype(np.int64))
    nbytes = np.where((size > 0) & (nel >= 0) & ~is_wait, nel * size, -1)
    pg = t.arg("pg_name", rpc)
    frame = pd.DataFrame(
        {
            "row": rpc,
            "name": [
                collective_name(c, "mpi" if n.startswith(MPI_PREFIX) else backend) for c, n in zip(coll, names[rpc])
            ],
            "coll": coll,
            "pg": pg,
            "group_size": t.arg("group_size", rpc).astype(np.int64),
            "start": start,
            "dur": length,
            "bytes": nbytes,
            "is_wait": is_wait,
            "kernels": n_kernels[rpc],
        }
    )
    return frame, nccl[owner >= 0], owner[owner >= 0]


@stage(link_gpu_to_ops)
def collective_analysis(t: Any) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """The collectives stage: (`collectives`' frame, NCCL kernel rows, the record_param_comms row owning each)."""
    return _analyse(t)


def collectives(t: Any) -> pd.DataFrame:
    """One row per collective call (`classify.is_collective_call`: a record_param_comms op that names its
    collective, or an `mpi::` op of a collective MPI method), in event order: `row`, `name` (`nccl:all_reduce`;
    `mpi:all_reduce` for an MPI op), `coll` (the raw `Collective name`), `pg` (process group name, "" if absent),
    `group_size` (-1 if absent), `start`/`dur` (ns: the NCCL kernels it launched, start of the first and
    their summed time, else the CPU call), `bytes` (max(In, Out msg nelems) x dtype size; -1 unknown or a
    wait), `is_wait` (a `wait` collective: time spent waiting), `kernels` (NCCL kernels it launched, found by
    the launch call inside its range, else by order among kernels of the same family)."""
    return collective_analysis(t)[0]


def kernel_owners(t: Any) -> tuple[np.ndarray, np.ndarray]:
    """(rows of the NCCL kernels a record_param_comms call launched, the row of that call), as `collectives`
    assigns them."""
    _, rows, owners = collective_analysis(t)
    return rows, owners
