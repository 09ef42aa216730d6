"""Every analysis of a trace. At this level, torch.profiler's analysis side without torch: FunctionEvent,
EventList, key_averages, table().

``events_from_trace(trace_dict)`` reads a Kineto trace (ours or any real PyTorch one) into the
EventList that ``prof.events()`` returns; ``.key_averages().table()`` prints torch's table.
The subpackages hold the analyses the plugin's views, summaries and diagnosis share (docs/internals.md §5).
The names below load on first use, so importing a light submodule (`groupings`) costs no numpy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .build import TraceFormatError, events_from_trace
    from .eventlist import EventList
    from .events import DeviceType, FunctionEvent, FunctionEventAvg, Interval, Kernel

_NAMES = {
    "events_from_trace": "build",
    "TraceFormatError": "build",
    "EventList": "eventlist",
    "DeviceType": "events",
    "FunctionEvent": "events",
    "FunctionEventAvg": "events",
    "Interval": "events",
    "Kernel": "events",
}

__all__ = [
    "events_from_trace",
    "EventList",
    "FunctionEvent",
    "FunctionEventAvg",
    "Interval",
    "Kernel",
    "DeviceType",
    "TraceFormatError",
]


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        return getattr(importlib.import_module(f"{__name__}.{_NAMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
