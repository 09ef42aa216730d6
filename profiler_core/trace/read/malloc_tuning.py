"""glibc malloc settings for reading big traces and computing views on them (Linux only).

Freshly faulted pages are the reader's and the views' largest hidden cost on virtual machines
(measured here: about 3 ms per MB first touched, 30x the cost of reusing freed memory), so the
settings keep freed memory in the process for reuse instead of handing it back at every free:

* parsing: blocks, pieces and small arrays (under PARSE_MMAP_THRESHOLD) come from the heap, and
  freed heap memory is kept (KEEP_FREED); whole-trace columns are mmapped, so freeing one returns
  it at once. On the 2M-event benchmark trace: 280K -> 100K page faults, read 5.4 s -> 4.2 s.
* views: arrays up to VIEWS_MMAP_THRESHOLD come from the kept heap, and numpy's huge-page advice
  is off (faulting in fresh huge pages cost more than the views' own work): views 1.9 s -> 0.9 s.
* one heap (ARENA_MAX) for the threads started after the loader (`share_heap`): it reads in one thread
  and the views are computed in others (two at once for a big trace); with a heap per thread each would
  fault in its own fresh pages instead of reusing what the read freed (11M-event trace, views on two
  threads: 3.9 s -> 2.5 s).

GPUSCOPE_NO_MALLOC_TUNING=1 turns all of it off.
"""

from __future__ import annotations

import sys
from typing import Any

from profiler_core import settings

PARSE_MMAP_THRESHOLD = 4 << 20
VIEWS_MMAP_THRESHOLD = 256 << 20
KEEP_FREED = 256 << 20  # M_TRIM_THRESHOLD: free heap memory kept before trimming
ARENA_MAX = 1  # M_ARENA_MAX: heaps shared by the threads
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8

_LIBC: Any = None


def libc() -> Any:
    """glibc through ctypes, or False (not Linux/glibc, or tuning turned off)."""
    global _LIBC
    if _LIBC is None:
        _LIBC = False
        if sys.platform.startswith("linux") and not settings.get("GPUSCOPE_NO_MALLOC_TUNING"):
            try:
                import ctypes

                lib = ctypes.CDLL("libc.so.6")
                lib.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
                lib.malloc_trim.argtypes = [ctypes.c_size_t]
                _LIBC = lib
            except (OSError, AttributeError):
                _LIBC = False
    return _LIBC


def _set(mmap_threshold: int) -> bool:
    lib = libc()
    if not lib:
        return False
    lib.mallopt(_M_MMAP_THRESHOLD, mmap_threshold)
    lib.mallopt(_M_TRIM_THRESHOLD, KEEP_FREED)
    return True


def share_heap() -> None:
    """One heap for the threads started from now on (see the module docstring): called before the loader
    starts its threads, since a thread keeps the heap it was given at its first allocation."""
    lib = libc()
    if lib:
        lib.mallopt(_M_ARENA_MAX, ARENA_MAX)


def tune_for_parsing() -> None:
    """Settings while a trace is parsed (see the module docstring)."""
    _set(PARSE_MMAP_THRESHOLD)


def tune_for_views() -> None:
    """Settings for computing views on a loaded trace (see the module docstring)."""
    if not _set(VIEWS_MMAP_THRESHOLD):
        return
    import numpy as np

    core = getattr(np, "_core", None) or getattr(np, "core", None)
    advise = getattr(getattr(core, "multiarray", None), "_set_madvise_hugepage", None)
    if advise is not None:
        try:
            advise(False)
        except Exception:  # noqa: BLE001 - a private numpy switch: only a speed-up
            pass


def release_memory() -> None:
    """Return freed heap memory to the OS now (glibc's malloc_trim); a no-op elsewhere."""
    lib = libc()
    if lib:
        lib.malloc_trim(0)
