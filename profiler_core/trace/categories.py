"""Kineto event categories: the names, every old spelling of them, and the families the analysis uses.

The one owner of category names: the reader, `key_averages()`, the CUDA capture side and the plugin's
stages all take them from here (imports nothing).
"""

from __future__ import annotations

from typing import Any

CPU_OP = "cpu_op"
USER_ANNOTATION = "user_annotation"
PYTHON_FUNCTION = "python_function"
KERNEL = "kernel"
GPU_MEMCPY = "gpu_memcpy"
GPU_MEMSET = "gpu_memset"
CUDA_RUNTIME = "cuda_runtime"
CUDA_DRIVER = "cuda_driver"
GPU_USER_ANNOTATION = "gpu_user_annotation"
CUDA_SYNC = "cuda_sync"
TRACE = "trace"

#: host ranges that own work: the nodes GPU activity, runtime calls and memory records are charged to
OP_CATS = (CPU_OP, USER_ANNOTATION)
#: device work launched by a runtime/driver call (what device time sums)
GPU_ACTIVITY_CATS = (KERNEL, GPU_MEMCPY, GPU_MEMSET)
#: the host calls that launch device work (linked to it by correlation)
LAUNCH_CATS = (CUDA_RUNTIME, CUDA_DRIVER)
#: categories whose pid/tid are device/stream
DEVICE_CATS = frozenset(GPU_ACTIVITY_CATS + (GPU_USER_ANNOTATION, CUDA_SYNC))
#: host-side categories `key_averages()` turns into FunctionEvents
HOST_CATS = frozenset(OP_CATS + (PYTHON_FUNCTION,) + LAUNCH_CATS)

#: every spelling of a category, lower-cased (torch 1.8 wrote Operator, Runtime, Memcpy, ...) -> Kineto's name
SPELLINGS = {
    "operator": CPU_OP,
    CPU_OP: CPU_OP,
    USER_ANNOTATION: USER_ANNOTATION,
    PYTHON_FUNCTION: PYTHON_FUNCTION,
    "python": PYTHON_FUNCTION,
    KERNEL: KERNEL,
    "memcpy": GPU_MEMCPY,
    GPU_MEMCPY: GPU_MEMCPY,
    "memset": GPU_MEMSET,
    GPU_MEMSET: GPU_MEMSET,
    "runtime": CUDA_RUNTIME,
    CUDA_RUNTIME: CUDA_RUNTIME,
    "driver": CUDA_DRIVER,
    CUDA_DRIVER: CUDA_DRIVER,
    GPU_USER_ANNOTATION: GPU_USER_ANNOTATION,
    CUDA_SYNC: CUDA_SYNC,
    TRACE: TRACE,
}


def normalise_category(cat: Any) -> str:
    """Kineto category of any torch version -> its normalised name (unknown ones lower-cased, None -> "")."""
    if cat is None:
        return ""
    text = str(cat).lower()
    return SPELLINGS.get(text, text)
