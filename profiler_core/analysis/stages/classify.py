"""Event classes by name: communication (collectives and NCCL kernels), collective calls (what every member of a
process group calls, matched across ranks), DataLoader ranges, ProfilerStep ranges."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...trace.categories import (
    CUDA_DRIVER,
    CUDA_RUNTIME,
    GPU_MEMCPY,
    GPU_MEMSET,
    KERNEL,
    OP_CATS,
    PYTHON_FUNCTION,
    TRACE,
)
from .columns import category_mask, name_mask

__all__ = [
    "is_communication",
    "communication_mask",
    "is_collective_call",
    "collective_call_mask",
    "is_dataloader",
    "is_step_name",
    "COMM_PREFIXES",
    "COMM_NAMES",
    "MPI_PREFIX",
    "MPI_COLLECTIVES",
    "STEP_PREFIX",
]

COMM_PREFIXES = ("nccl:", "gloo:", "c10d::", "mpi::")
COMM_NAMES = frozenset({"record_param_comms"})
_NOT_COMM_CATS = frozenset({GPU_MEMCPY, GPU_MEMSET, CUDA_RUNTIME, CUDA_DRIVER, PYTHON_FUNCTION, TRACE})
STEP_PREFIX = "ProfilerStep#"
MPI_PREFIX = "mpi::"
#: MPI methods every member of a communicator calls, as our MPI integration writes them in `Collective name` (the
#: method in lower case); point-to-point calls and request completions (wait, test) are not among them
MPI_COLLECTIVES = frozenset(
    pre + m
    for pre in ("", "i")
    for m in (
        "allreduce",
        "reduce",
        "allgather",
        "allgatherv",
        "alltoall",
        "alltoallv",
        "gather",
        "gatherv",
        "scatter",
        "scatterv",
        "reduce_scatter",
        "reduce_scatter_block",
        "scan",
        "exscan",
        "bcast",
        "barrier",
    )
)


def is_communication(name: str, cat: str) -> bool:
    """True for communication: CPU ops named nccl:*, gloo:*, c10d::*, mpi::*, record_param_comms; NCCL kernels."""
    name, cat = str(name), str(cat)
    if cat == KERNEL:
        return "nccl" in name.lower()
    if cat in _NOT_COMM_CATS:
        return False
    return name.startswith(COMM_PREFIXES) or name in COMM_NAMES


def is_collective_call(name: str, coll: str) -> bool:
    """True for a collective call (`coll`: its `Collective name` arg, "" when absent): a `record_param_comms` op
    that names its collective, or an `mpi::` op of a collective MPI method (`MPI_COLLECTIVES`)."""
    name, coll = str(name), str(coll).strip()
    if name in COMM_NAMES:
        return coll != ""
    return name.startswith(MPI_PREFIX) and coll.lower() in MPI_COLLECTIVES


def collective_call_mask(t: Any) -> np.ndarray:
    """Vectorised `is_collective_call` over the CPU ops of a trace (boolean array aligned with `t.events`)."""
    events = t.events
    out = np.zeros(len(events), dtype=bool)
    rows = t.arg_rows("coll_name")  # a collective call names its collective: only these rows can be one
    if not len(rows):
        return out
    coll = [str(c).strip() for c in t.arg("coll_name", rows)]
    rpc = name_mask(events, lambda n: n in COMM_NAMES)[rows] & np.array([c != "" for c in coll], dtype=bool)
    mpi = name_mask(events, lambda n: n.startswith(MPI_PREFIX))[rows] & np.array(
        [c.lower() in MPI_COLLECTIVES for c in coll], dtype=bool
    )
    out[rows] = category_mask(events, OP_CATS)[rows] & (rpc | mpi)
    return out


def is_dataloader(name: str) -> bool:
    """torch-tb-profiler's DataLoader ranges: `enumerate(DataLoader)#...__next__` and `enumerate(DataPipe)#...`."""
    name = str(name)
    return (name.startswith("enumerate(DataLoader)#") and name.endswith(".__next__")) or name.startswith(
        "enumerate(DataPipe)#"
    )


def is_step_name(name: str) -> bool:
    """A ProfilerStep range's name (`ProfilerStep#5`)."""
    return str(name).startswith(STEP_PREFIX)


def _is_nccl_name(name: str) -> bool:
    return "nccl" in name.lower()


def _is_comm_name(name: str) -> bool:
    return name.startswith(COMM_PREFIXES) or name in COMM_NAMES


def communication_mask(events: pd.DataFrame) -> pd.Series:
    """Vectorised `is_communication` over an events frame (boolean Series aligned with `events`)."""
    if len(events) == 0:
        return pd.Series(np.zeros(0, dtype=bool), index=events.index)
    kernel = category_mask(events, (KERNEL,))
    nccl = name_mask(events, _is_nccl_name)  # (module-level predicates: memoised per events frame)
    by_name = name_mask(events, _is_comm_name)
    excluded = category_mask(events, _NOT_COMM_CATS)
    return pd.Series(np.where(kernel, nccl, by_name & ~excluded), index=events.index)
