"""GPU capture entry points (docs/internals.md §1): cheap to import, never raises without CUDA.

`is_available()` says whether CUDA activity can be captured here (a driver with a device, and either
cupti-python or pycuda installed); `make_collector(config)` returns the collector the profiler drives.
`link_trace(trace)` links a finished trace's GPU events to its CPU ops (External id, gpu_user_annotation).
Nothing heavy (cupti, pycuda, numpy) is imported until a collector is prepared.
"""

from __future__ import annotations

import importlib.util

from profiler_core import settings

_available: bool | None = None


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def is_available() -> bool:
    """Can CUDA activity be captured in this process? Cached; never raises.

    `GPUSCOPE_DISABLE_CUDA=1` forces False.
    """
    global _available
    if _available is None:
        try:
            if settings.get("GPUSCOPE_DISABLE_CUDA") or not (_has_module("cupti") or _has_module("pycuda")):
                _available = False
            else:
                from .device_props import device_count

                _available = device_count() > 0
        except Exception:
            _available = False
    return _available


def make_collector(config: dict | None = None):
    """A new CUDA collector for one profile (config holds the profile's flags)."""
    from .collector import CudaCollector

    return CudaCollector(config)


def link_trace(trace: dict) -> dict:
    """Give a finished trace's runtime/driver and GPU events the External id of their CPU op (in place)."""
    from .link import link_trace as _link

    return _link(trace)


__all__ = ["is_available", "make_collector", "link_trace"]
