"""torch.profiler's analysis side without torch: FunctionEvent, EventList, key_averages, table().

``events_from_trace(trace_dict)`` reads a Kineto trace (ours or any real PyTorch one) into the
EventList that ``prof.events()`` returns; ``.key_averages().table()`` prints torch's table.
"""

from .build import TraceFormatError, events_from_trace
from .eventlist import EventList
from .events import DeviceType, FunctionEvent, FunctionEventAvg, Interval, Kernel

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
