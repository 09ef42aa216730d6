"""Event classes by name: communication (collectives and NCCL kernels), DataLoader ranges, ProfilerStep ranges."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...trace.categories import CUDA_DRIVER, CUDA_RUNTIME, GPU_MEMCPY, GPU_MEMSET, KERNEL, PYTHON_FUNCTION, TRACE
from .columns import category_mask, name_mask

__all__ = ["is_communication", "communication_mask", "is_dataloader", "COMM_PREFIXES", "COMM_NAMES", "STEP_PREFIX"]

COMM_PREFIXES = ("nccl:", "gloo:", "c10d::", "mpi::")
COMM_NAMES = frozenset({"record_param_comms"})
_NOT_COMM_CATS = frozenset({GPU_MEMCPY, GPU_MEMSET, CUDA_RUNTIME, CUDA_DRIVER, PYTHON_FUNCTION, TRACE})
STEP_PREFIX = "ProfilerStep#"


def is_communication(name: str, cat: str) -> bool:
    """True for communication: CPU ops named nccl:*, gloo:*, c10d::*, mpi::*, record_param_comms; NCCL kernels."""
    name, cat = str(name), str(cat)
    if cat == KERNEL:
        return "nccl" in name.lower()
    if cat in _NOT_COMM_CATS:
        return False
    return name.startswith(COMM_PREFIXES) or name in COMM_NAMES


def is_dataloader(name: str) -> bool:
    """torch-tb-profiler's DataLoader ranges: `enumerate(DataLoader)#...__next__` and `enumerate(DataPipe)#...`."""
    name = str(name)
    return (name.startswith("enumerate(DataLoader)#") and name.endswith(".__next__")) or name.startswith(
        "enumerate(DataPipe)#"
    )


def communication_mask(events: pd.DataFrame) -> pd.Series:
    """Vectorised `is_communication` over an events frame (boolean Series aligned with `events`)."""
    if len(events) == 0:
        return pd.Series(np.zeros(0, dtype=bool), index=events.index)
    kernel = category_mask(events, (KERNEL,))
    nccl = name_mask(events, lambda n: "nccl" in n.lower())
    by_name = name_mask(events, lambda n: n.startswith(COMM_PREFIXES) or n in COMM_NAMES)
    excluded = category_mask(events, _NOT_COMM_CATS)
    return pd.Series(np.where(kernel, nccl, by_name & ~excluded), index=events.index)
