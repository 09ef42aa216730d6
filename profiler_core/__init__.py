"""profiler_core: torch.profiler's API (profile, schedule, record_function, ...) without PyTorch.

Importing it is cheap: only the hot-path ``recording`` module and the small op API load eagerly;
the profiler, handlers and FLOP registry load on first use.
"""

from .ops import operator, record_op
from .recording import record_function
from .schedule import ProfilerAction, ProfilerActivity, schedule

__all__ = [
    "profile",
    "schedule",
    "ProfilerAction",
    "ProfilerActivity",
    "record_function",
    "tensorboard_trace_handler",
    "supported_activities",
    "record_op",
    "operator",
    "register_flops_formula",
]

__version__: str  # the installed distribution's version, read on first access (profiler_core._version)

_LAZY = {
    "profile": ("profiler", "profile"),
    "supported_activities": ("profiler", "supported_activities"),
    "tensorboard_trace_handler": ("handlers", "tensorboard_trace_handler"),
    "register_flops_formula": ("flops", "register_flops_formula"),
}


def __getattr__(name: str) -> object:
    if name == "__version__":
        from ._version import get_version

        globals()[name] = value = get_version()
        return value
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f".{module}", __name__), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'profiler_core' has no attribute {name!r}")


def __dir__() -> list:
    return sorted(set(globals()) | set(__all__))
