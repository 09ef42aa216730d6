"""Event classes by name: communication (collective CPU ops and communication kernels: one table of kernel name
families, `COMM_KERNEL_FAMILIES`, plus the kernels a communication op launched), collective calls (what every
member of a process group calls, matched across ranks), DataLoader ranges, ProfilerStep ranges.

This module owns "what is communication": the per-worker phases, the ledger, the Distributed view and the
run-level diagnosis all read `communication_mask` / `communication_events` / `host_communication`, so a kernel
family added to the table is communication everywhere at once."""

from __future__ import annotations

import re
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
from .gpu_links import link_gpu_to_ops
from .registry import stage

__all__ = [
    "is_communication",
    "communication_mask",
    "communication_events",
    "host_communication",
    "comm_kernel_family",
    "COMM_KERNEL_FAMILIES",
    "CPU_BACKEND_PREFIXES",
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

COMM_PREFIXES = ("nccl:", "gloo:", "c10d::", "mpi::", "deep_ep::")
COMM_NAMES = frozenset({"record_param_comms"})
#: CPU communication ops of backends that move the data on the host (no communication kernels): their range is
#: the exchange itself, whatever else the worker runs
CPU_BACKEND_PREFIXES = ("gloo:", "mpi::")
_DEEPEP_NS = r"(?:deep_ep|dpsk::ep)::(?:\w+::)*"
#: Communication kernels by name family: (family, pattern searched in the kernel's name), the first match names
#: the family (MSCCL kernels take `ncclDevComm*` arguments: msccl is tried before nccl). A real kernel name of each
#: family is in tests/test_comm_kinds.py.
COMM_KERNEL_FAMILIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    # MSCCL / MSCCL++ on NCCL and RCCL: mscclKernel_Sum_half_Simple_false(ncclDevComm*, mscclAlgo*, mscclWork*)
    ("msccl", re.compile(r"msccl", re.IGNORECASE)),
    # NCCL, and RCCL (AMD) which keeps NCCL's names: ncclDevKernel_Generic(...), ncclKernel_AllReduce_RING_LL_Sum_float
    ("nccl", re.compile(r"nccl", re.IGNORECASE)),
    # RCCL's own kernels: RcclKernelScalarBroadcast, rcclKernel
    ("rccl", re.compile(r"rccl", re.IGNORECASE)),
    # NVSHMEM's kernels (nvshmemi_*) and its on-stream collectives: barrier_on_stream_kernel_threadgroup
    (
        "nvshmem",
        re.compile(
            r"nvshmem|\b(?:barrier|sync|rdxn|reduce|broadcast|alltoall|fcollect|allgather)\w*_on_stream_kernel",
            re.IGNORECASE,
        ),
    ),
    # DeepEP's expert-parallel exchange: dpsk::ep::internode::dispatch<...>, deep_ep::intranode::combine<...>
    ("deepep", re.compile(_DEEPEP_NS + r"(?:dispatch|combine)\b")),
    # DeepEP's notify and layout kernels (they exchange and prepare the counts of an exchange)
    ("deepep_aux", re.compile(_DEEPEP_NS)),
    # custom all-reduce of vLLM / AITER over peer memory: vllm::cross_device_reduce_1stage<...>
    ("custom_all_reduce", re.compile(r"cross_device_reduce_\w*stage")),
    # custom all-to-all kernels (Tutel, Megatron, hand-written MoE exchanges)
    ("all_to_all", re.compile(r"all_?to_?all", re.IGNORECASE)),
)
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


def comm_kernel_family(name: str) -> str | None:
    """The communication family of a kernel name (`COMM_KERNEL_FAMILIES`: "nccl", "deepep", ...), None for a
    kernel whose name says nothing of communication."""
    name = str(name)
    for family, pattern in COMM_KERNEL_FAMILIES:
        if pattern.search(name):
            return family
    return None


def is_communication(name: str, cat: str) -> bool:
    """True for communication by name: CPU ops named nccl:*, gloo:*, c10d::*, mpi::*, deep_ep::*,
    record_param_comms; kernels of a `COMM_KERNEL_FAMILIES` family."""
    name, cat = str(name), str(cat)
    if cat == KERNEL:
        return _is_comm_kernel_name(name)
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


def _is_comm_kernel_name(name: str) -> bool:
    return comm_kernel_family(name) is not None


def _is_comm_name(name: str) -> bool:
    return name.startswith(COMM_PREFIXES) or name in COMM_NAMES


def communication_mask(events: pd.DataFrame) -> pd.Series:
    """Vectorised `is_communication` over an events frame (boolean Series aligned with `events`): by name only;
    `communication_events(t)` adds the kernels a communication op launched."""
    if len(events) == 0:
        return pd.Series(np.zeros(0, dtype=bool), index=events.index)
    kernel = category_mask(events, (KERNEL,))
    by_family = name_mask(events, _is_comm_kernel_name)  # (module-level predicates: memoised per events frame)
    by_name = name_mask(events, _is_comm_name)
    excluded = category_mask(events, _NOT_COMM_CATS)
    return pd.Series(np.where(kernel, by_family, by_name & ~excluded), index=events.index)


@stage(link_gpu_to_ops)
def communication_events(t: Any) -> np.ndarray:
    """Boolean per event of t.events: communication by name (`communication_mask`: collective CPU ops and
    kernels of a communication family) plus every kernel a communication op launched (the innermost op of its
    launch, `link_gpu_to_ops`: a kernel of any name that a c10d::, record_param_comms, nccl: or deep_ep:: op
    launched moves the data of that op). Read-only."""
    ev = t.events
    comm = communication_mask(ev).to_numpy().copy()
    kernel = category_mask(ev, (KERNEL,))
    if kernel.any():
        links = link_gpu_to_ops(t)
        op = links["op"].to_numpy()
        linked = np.zeros(len(ev), dtype=bool)
        linked[links["row"].to_numpy()] = np.where(op >= 0, comm[np.maximum(op, 0)], False)
        comm |= kernel & linked
    comm.flags.writeable = False
    return comm


def host_communication(t: Any) -> np.ndarray:
    """Boolean per event of t.events: the CPU communication ops whose own time is communication. A backend that
    moves the data on the host (gloo:*, mpi::* ops; `CPU_BACKEND_PREFIXES`) spends the op's range in the exchange;
    where the worker's communication runs as kernels (NCCL, RCCL, DeepEP: any communication kernel in the trace),
    the c10d::, record_param_comms, nccl: and deep_ep:: ops only enqueue those kernels, so their time is host
    time (the kernels are the communication). A worker without communication kernels keeps every CPU
    communication op as communication (gloo, MPI, or a trace that did not record the GPU)."""
    ev = t.events
    comm = communication_events(t)
    cpu = category_mask(ev, OP_CATS)
    cpu_comm = comm & cpu
    if not (comm & category_mask(ev, (KERNEL,))).any():
        return cpu_comm
    return cpu_comm & name_mask(ev, _is_cpu_backend_name)


def _is_cpu_backend_name(name: str) -> bool:
    return name.startswith(CPU_BACKEND_PREFIXES)
