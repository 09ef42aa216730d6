"""Collectives behind `record_param_comms` (torch >= 2.1): one instance per collective call, named by its
`Collective name` arg in the spelling older traces used for their backend ranges (`nccl:all_reduce`), with
message bytes, group size and process group, and the NCCL kernels each call launched.

`collectives(t)` is what the distributed view aligns across workers when a trace records its collectives
with `record_param_comms` (docs/internals.md §4). Pure functions of one `TraceData`.
"""

from __future__ import annotations

import json
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
from profiler_core.trace.categories import OP_CATS

RPC = "record_param_comms"
#: how a call's members are found on the other ranks (the `how` column): by process group and sequence (a
#: record_param_comms call names both), by the backend range's name and order within the default process group, by
#: peer and order (point-to-point), by the kernel's stream, name and order (NCCL kernels and nothing else)
PG_SEQ, NAME_ORDER, PEER_TIME, STREAM_ORDER = "pg+seq", "name+order", "peer+time", "stream+name+order"
#: the group of a point-to-point call whose peer the trace does not name (the run level pairs it: PEER_TIME)
#: the backend ranges of a collective where no record_param_comms names it (gloo in torch 2.x; NCCL before 2.1)
BACKEND_PREFIXES = ("gloo:", "nccl:")
P2P_GROUP = "p2p"
#: backend range names (after the prefix) of a point-to-point call
P2P_OPS = frozenset({"send", "recv", "recv_anysource"})
FRAME_COLUMNS = (
    "how",
    "row",
    "name",
    "coll",
    "pg",
    "group_size",
    "start",
    "dur",
    "bytes",
    "is_wait",
    "kernels",
    "pg_ranks",
)
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
    # the C++ and MPI spellings that Input type and our MPI integration write
    "unsigned int": 4,
    "long int": 8,
    "long long": 8,
    "unsigned long": 8,
    "short int": 2,
    "signed char": 1,
    "unsigned char": 1,
    "complex64": 8,
    "complex128": 16,
    "complex<float>": 8,
    "complex<double>": 16,
    "mpi_float": 4,
    "mpi_double": 8,
    "mpi_int": 4,
    "mpi_long": 8,
    "mpi_char": 1,
    "mpi_byte": 1,
    "mpi_int64_t": 8,
    "mpi_long_long": 8,
    "mpi_unsigned_char": 1,
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
    rpc = np.flatnonzero(collective_call_mask(t))
    if not len(rpc):
        return backend_calls(t)
    ev = t.events
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
            "how": np.full(len(rpc), PG_SEQ, dtype=object),
            "row": rpc,
            # an MPI op keeps the trace's own name (mpi::Allreduce and mpi4py's pickling mpi::allreduce are two
            # calls), as the timeline shows it and search finds it
            "name": [n if n.startswith(MPI_PREFIX) else collective_name(c, backend) for c, n in zip(coll, names[rpc])],
            "coll": coll,
            "pg": pg,
            "group_size": t.arg("group_size", rpc).astype(np.int64),
            "start": start,
            "dur": length,
            "bytes": nbytes,
            "is_wait": is_wait,
            "kernels": n_kernels[rpc],
            "pg_ranks": pd.Series([None] * len(rpc), dtype=object),
        }
    )
    return frame, nccl[owner >= 0], owner[owner >= 0]


def _default_group(t: Any) -> tuple[str, tuple[int, ...] | None, int]:
    """(name, ranks or None, size or -1) of the process group a backend range without metadata belongs to: the
    trace's only process group, else the one distributedInfo describes as the default; else a group of the world
    (named "", as big as `world_size`)."""
    meta = getattr(t, "metadata", None) or {}
    info = meta.get("distributedInfo") if isinstance(meta, dict) else None
    info = info if isinstance(info, dict) else {}
    pgs = [g for g in info.get("pg_config") or [] if isinstance(g, dict) and "pg_name" in g]
    pick = pgs[0] if len(pgs) == 1 else next((g for g in pgs if g.get("pg_desc") == "default_pg"), None)
    world = info.get("world_size")
    size = int(world) if isinstance(world, int) and not isinstance(world, bool) else -1
    if pick is None:
        return "", None, size
    ranks = pick.get("ranks")
    if isinstance(ranks, str):
        try:
            ranks = json.loads(ranks)
        except ValueError:
            ranks = None
    ok = isinstance(ranks, list) and all(isinstance(r, int) and not isinstance(r, bool) for r in ranks)
    return str(pick["pg_name"]), tuple(ranks) if ok else None, len(ranks) if ok else size


def _c10d_kind(name: str) -> str:
    """The backend op a c10d op enqueues: "c10d::allreduce_" -> "all_reduce", "c10d::recv_" -> "recv"."""
    base = name[len("c10d::") :].rstrip("_")
    return _RENAME.get(base, base)


def _called_at(t: Any, rows: np.ndarray, op: np.ndarray) -> np.ndarray:
    """When the program called each backend range's collective: the start of the c10d op that enqueued it (the
    k-th `c10d::<op>` of a process with the k-th backend range of that op, when it starts no later), else the
    range's own start. gloo runs a collective on a worker thread, so its range starts when that thread takes it
    up, and a send's range only at the send's end (1 ms after the call in torch 2.13's traces)."""
    ev = t.events
    ts = ev["ts"].to_numpy(np.int64)
    out = ts[rows].copy()
    names = ev["name"].astype(str).to_numpy()
    cpu = category_mask(ev, OP_CATS)
    c10d = np.flatnonzero(cpu & name_mask(ev, lambda n: n.startswith("c10d::")))
    if not len(c10d):
        return out
    pid = ev["pid"].to_numpy(np.int64)
    kinds = np.asarray([_c10d_kind(n) for n in names[c10d]], dtype=object)
    for p in np.unique(pid[rows]).tolist():
        for k in set(op[pid[rows] == p].tolist()):
            mine = np.flatnonzero((pid[rows] == p) & (op == k))
            mine = mine[np.argsort(ts[rows[mine]], kind="stable")]
            calls = c10d[(pid[c10d] == p) & (kinds == k)]
            calls = calls[np.argsort(ts[calls], kind="stable")]
            if len(calls) != len(mine):
                continue  # not one call per range: the order cannot pair them
            at = ts[calls]
            out[mine] = np.where(at <= ts[rows[mine]], at, ts[rows[mine]])
    return out


def shape_bytes(dims: str, types: str) -> int | None:
    """Π shape x dtype bytes summed over an op's tensor inputs (`Input Dims`, `Input type` as JSON texts; a
    TensorList counts each tensor): torch-tb-profiler's message size; None when they name no sized tensor."""
    try:
        d = json.loads(dims) if dims else []
        ty = json.loads(types) if types else []
    except ValueError:
        return None
    total, found = 0, False
    for shape, tname in zip(d, ty):
        size = dtype_bytes(tname)
        if size is None or not isinstance(shape, list):
            continue
        if shape and all(isinstance(x, list) for x in shape):  # TensorList
            for one in shape:
                total += int(np.prod(one)) * size if one else 0
        elif all(isinstance(x, (int, float)) for x in shape):
            total += int(np.prod(shape)) * size if shape else size
        found = True
    return total if found else None


def _input_bytes(t: Any, rows: np.ndarray) -> np.ndarray:
    """Bytes of the tensors a backend range names (`shape_bytes`; -1 when they do not say)."""
    out = np.full(len(rows), -1, np.int64)
    if not len(rows) or "input_dims" not in t.events:
        return out
    dims = t.events["input_dims"].astype(str).to_numpy()[rows]
    types = t.events["input_type"].astype(str).to_numpy()[rows] if "input_type" in t.events else [""] * len(rows)
    for i, (d, ty) in enumerate(zip(dims.tolist(), list(types))):
        b = shape_bytes(d, ty)
        if b is not None:
            out[i] = b
    return out


def backend_calls(t: Any) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """The collective calls of a trace whose collectives no record_param_comms names: its backend ranges
    (`gloo:all_reduce`, `nccl:broadcast`: BACKEND_PREFIXES) in the default process group (`_default_group`),
    matched across ranks by name and order, each from when the program called it (`_called_at`). Point-to-point
    ranges (`gloo:send`, `gloo:recv`) go to the group P2P_GROUP: their peer is only in the c10d op's `Concrete
    Inputs`, which the reader does not keep, so the run level pairs each receive with its send (PEER_TIME). The
    NCCL kernels a range launched are its GPU time (as `_analyse`). A trace with NCCL kernels and no ranges at all:
    each kernel a call, grouped by its stream and matched by name and order. The frame of `collectives`, with
    `how` saying which of these matched it."""
    ev = t.events
    none = np.zeros(0, np.int64)
    empty = pd.DataFrame({c: [] for c in FRAME_COLUMNS})
    if not len(ev):
        return empty, none, none
    ts = ev["ts"].to_numpy(np.int64)
    dur = ev["dur"].to_numpy(np.int64)
    names = ev["name"].astype(str).to_numpy()
    cpu = category_mask(ev, OP_CATS)
    rows = np.flatnonzero(cpu & name_mask(ev, lambda n: n.startswith(BACKEND_PREFIXES)))
    nccl = np.flatnonzero(category_mask(ev, ("kernel",)) & name_mask(ev, lambda n: "nccl" in n.lower()))
    pg, ranks, size = _default_group(t)
    if not len(rows):
        if not len(nccl):
            return empty, none, none
        stream = t.arg("stream", nccl).astype(np.int64)
        kinds = [kernel_kind(n) for n in names[nccl]]
        frame = pd.DataFrame(
            {
                "how": np.full(len(nccl), STREAM_ORDER, dtype=object),
                "row": nccl,
                "name": [f"nccl:{k}" if k else n for k, n in zip(kinds, names[nccl])],
                "coll": [k or "" for k in kinds],
                "pg": [f"stream {s}" for s in stream.tolist()],
                "group_size": np.full(len(nccl), size, np.int64),
                "start": ts[nccl],
                "dur": dur[nccl],
                "bytes": np.full(len(nccl), -1, np.int64),
                "is_wait": np.zeros(len(nccl), dtype=bool),
                "kernels": np.ones(len(nccl), np.int64),
                "pg_ranks": pd.Series([None] * len(nccl), dtype=object),
            }
        )
        return frame, nccl, nccl
    op = np.array([n.split(":", 1)[1] for n in names[rows]], dtype=object)
    p2p = np.isin(op, list(P2P_OPS))
    owner = np.full(len(nccl), -1, np.int64)
    if len(nccl):
        launch = launch_calls(t, nccl)
        has = launch >= 0
        owner[has] = _enclosing(t, rows, launch[has])
    n_kernels = np.zeros(len(ev), np.int64)
    k_start = np.full(len(ev), np.iinfo(np.int64).max)
    k_busy = np.zeros(len(ev), np.int64)
    if (owner >= 0).any():
        o, kr = owner[owner >= 0], nccl[owner >= 0]
        np.add.at(n_kernels, o, 1)
        np.minimum.at(k_start, o, ts[kr])
        np.add.at(k_busy, o, dur[kr])
    on_gpu = n_kernels[rows] > 0
    called = _called_at(t, rows, op)
    how = np.where(p2p, PEER_TIME, NAME_ORDER).astype(object)
    group = np.where(p2p, P2P_GROUP, pg).astype(object)
    group_ranks = [None if x else ranks for x in p2p.tolist()]
    name = names[rows]
    sizes = np.where(p2p, 2, size).astype(np.int64)
    frame = pd.DataFrame(
        {
            "how": np.asarray(how, dtype=object),
            "row": rows,
            "name": name,
            "coll": op,
            "pg": group,
            "group_size": np.asarray(sizes, np.int64),
            "start": np.where(on_gpu, k_start[rows], called),
            "dur": np.where(on_gpu, k_busy[rows], ts[rows] + dur[rows] - called),
            "bytes": _input_bytes(t, rows),
            "is_wait": np.zeros(len(rows), dtype=bool),
            "kernels": n_kernels[rows],
            "pg_ranks": pd.Series(group_ranks, dtype=object),
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
    an MPI op's own name, `mpi::Allreduce`), `coll` (the raw `Collective name`), `pg` (process group name, "" if
    absent),
    `group_size` (-1 if absent), `start`/`dur` (ns: the NCCL kernels it launched, start of the first and
    their summed time, else the CPU call), `bytes` (max(In, Out msg nelems) x dtype size; -1 unknown or a
    wait), `is_wait` (a `wait` collective: time spent waiting), `kernels` (NCCL kernels it launched, found by
    the launch call inside its range, else by order among kernels of the same family), `how` (PG_SEQ; a trace
    without record_param_comms: its backend ranges, `backend_calls`, with the other ways), `pg_ranks` (the group's
    ranks when the call itself says, else None: distributedInfo's `pg_config` names them)."""
    return collective_analysis(t)[0]


def kernel_owners(t: Any) -> tuple[np.ndarray, np.ndarray]:
    """(rows of the NCCL kernels a record_param_comms call launched, the row of that call), as `collectives`
    assigns them."""
    _, rows, owners = collective_analysis(t)
    return rows, owners
