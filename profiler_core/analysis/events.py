"""FunctionEvent and FunctionEventAvg: torch.autograd.profiler_util's record types, without torch.

Field names and semantics follow torch 2.13 so that code written against
``prof.events()`` / ``prof.key_averages()`` works unchanged on our results.
"""

from __future__ import annotations

import enum
import warnings
from collections import namedtuple
from types import MappingProxyType
from typing import Any

__all__ = [
    "DeviceType",
    "Interval",
    "Kernel",
    "FunctionEvent",
    "FunctionEventAvg",
    "format_time",
    "format_memory",
]

Kernel = namedtuple("Kernel", ["name", "device", "duration"])


class DeviceType(enum.Enum):
    """The c10 device types the analysis distinguishes (values as in c10::DeviceType)."""

    CPU = 0
    CUDA = 1


class Interval:
    """A [start, end] time range in microseconds."""

    __slots__ = ("start", "end")

    def __init__(self, start: float, end: float) -> None:
        self.start = start
        self.end = end

    def elapsed_us(self) -> float:
        """Length of the interval in microseconds."""
        return self.end - self.start

    def __repr__(self) -> str:
        return f"Interval(start={self.start}, end={self.end})"


def format_time(time_us: float) -> str:
    """Format microseconds the way torch's tables do (s / ms / us, 3 decimals)."""
    if time_us >= 1e6:
        return f"{time_us / 1e6:.3f}s"
    if time_us >= 1e3:
        return f"{time_us / 1e3:.3f}ms"
    return f"{time_us:.3f}us"


def format_memory(nbytes: int) -> str:
    """Format a byte count with base-1024 units as torch's tables do."""
    kb = 1024
    mb = kb * 1024
    gb = mb * 1024
    if abs(nbytes) >= gb:
        return f"{nbytes * 1.0 / gb:.2f} GB"
    if abs(nbytes) >= mb:
        return f"{nbytes * 1.0 / mb:.2f} MB"
    if abs(nbytes) >= kb:
        return f"{nbytes * 1.0 / kb:.2f} KB"
    return f"{nbytes} B"


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"`{old}` is deprecated, please use `{new}` instead.", FutureWarning, stacklevel=3)


class _TimesMixin:
    """Averages, formatted strings and the deprecated ``cuda_*`` aliases shared by both record types."""

    __slots__ = ()

    @property
    def cpu_time(self) -> float:
        return 0.0 if self.count == 0 else 1.0 * self.cpu_time_total / self.count

    @property
    def device_time(self) -> float:
        return 0.0 if self.count == 0 else 1.0 * self.device_time_total / self.count

    @property
    def cpu_time_str(self) -> str:
        return format_time(self.cpu_time)

    @property
    def device_time_str(self) -> str:
        return format_time(self.device_time)

    @property
    def cpu_time_total_str(self) -> str:
        return format_time(self.cpu_time_total)

    @property
    def device_time_total_str(self) -> str:
        return format_time(self.device_time_total)

    @property
    def self_cpu_time_total_str(self) -> str:
        return format_time(self.self_cpu_time_total)

    @property
    def self_device_time_total_str(self) -> str:
        return format_time(self.self_device_time_total)

    # Deprecated aliases (torch emits FutureWarning for these too).
    @property
    def cuda_time(self) -> float:
        _deprecated("cuda_time", "device_time")
        return self.device_time

    @property
    def cuda_time_total(self) -> float:
        _deprecated("cuda_time_total", "device_time_total")
        return self.device_time_total

    @property
    def self_cuda_time_total(self) -> float:
        _deprecated("self_cuda_time_total", "self_device_time_total")
        return self.self_device_time_total

    @property
    def cuda_memory_usage(self) -> int:
        _deprecated("cuda_memory_usage", "device_memory_usage")
        return self.device_memory_usage

    @property
    def self_cuda_memory_usage(self) -> int:
        _deprecated("self_cuda_memory_usage", "self_device_memory_usage")
        return self.self_device_memory_usage


class FunctionEvent(_TimesMixin):
    """One recorded operation (CPU op, annotation, Python frame, runtime call or GPU activity).

    Frequently varying fields live in slots; rarely set ones default to class attributes (an
    instance ``__dict__`` is only created when one of them is assigned), which keeps building
    hundreds of thousands of events cheap.
    """

    __slots__ = (
        "id",
        "name",
        "trace_name",
        "time_range",
        "thread",
        "fwd_thread",
        "kernels",
        "cpu_children",
        "cpu_parent",
        "input_shapes",
        "concrete_inputs",
        "stack",
        "scope",
        "use_device",
        "cpu_memory_usage",
        "device_memory_usage",
        "sequence_nr",
        "device_type",
        "device_index",
        "device_resource_id",
        "flops",
        "is_user_annotation",
        "activity_type",
        "external_id",
        "structured_input_shapes",
        "structured_input_strides",
        "input_dtypes",
        "linked_correlation_id",
        "event_metadata",
        "_device_total",
        "__dict__",
    )

    # Defaults for the rarely set fields (torch's names and meanings).
    node_id = -1
    overload_name = ""
    count = 1
    is_async = False
    is_remote = False
    is_legacy = False
    is_python_function = False
    self_cpu_percent = -1
    total_cpu_percent = -1
    total_device_percent = -1
    python_id = -1
    python_parent_id = -1
    python_module_id = -1
    flow_id = None
    flow_type = None
    flow_start = None
    kwinputs: Any = MappingProxyType({})

    def __init__(
        self,
        id: int,
        name: str,
        thread: int,
        start_us: float,
        end_us: float,
        trace_name: str | None = None,
        input_shapes: list | None = None,
        stack: list | None = None,
        device_type: DeviceType = DeviceType.CPU,
        device_index: int = 0,
        device_resource_id: int | None = None,
        *,
        fwd_thread: int | None = None,
        concrete_inputs: list | None = None,
        scope: int = 0,
        use_device: str | None = None,
        cpu_memory_usage: int = 0,
        device_memory_usage: int = 0,
        sequence_nr: int = -1,
        flops: int = 0,
        is_user_annotation: bool = False,
        activity_type: str | None = None,
        external_id: int = 0,
        **rare: Any,
    ) -> None:
        self.id = id
        self.name = name
        self.trace_name = trace_name
        self.time_range = Interval(start_us, end_us)
        self.thread = thread
        self.fwd_thread = fwd_thread
        self.kernels: list = []
        self.cpu_children: list = []
        self.cpu_parent: FunctionEvent | None = None
        self.input_shapes = input_shapes if input_shapes is not None else []
        self.concrete_inputs = concrete_inputs
        self.stack = stack if stack is not None else []
        self.scope = scope
        self.use_device = use_device
        self.cpu_memory_usage = cpu_memory_usage
        self.device_memory_usage = device_memory_usage
        self.sequence_nr = sequence_nr
        self.device_type = device_type
        self.device_index = device_index
        self.device_resource_id = thread if device_resource_id is None else device_resource_id
        self.flops = flops
        self.is_user_annotation = is_user_annotation
        self.activity_type = activity_type
        self.external_id = external_id
        self.structured_input_shapes: list | None = None
        self.structured_input_strides: list | None = None
        self.input_dtypes: list | None = None
        self.linked_correlation_id = 0
        self.event_metadata: dict | None = None
        self._device_total: float | None = None
        for key, value in rare.items():
            if key not in _RARE_FIELDS:
                raise TypeError(f"FunctionEvent() got an unexpected keyword argument {key!r}")
            setattr(self, key, value)

    def append_kernel(self, name: str, device: int, duration: float) -> None:
        """Attribute one GPU activity (kernel, memcpy, memset) launched by this CPU event."""
        if self.device_type != DeviceType.CPU:
            raise ValueError("only CPU events can own kernels")
        self.kernels.append(Kernel(name, device, duration))
        self._device_total = None

    def append_cpu_child(self, child: FunctionEvent) -> None:
        """Add a direct CPU child (used for self times)."""
        self.cpu_children.append(child)

    def set_cpu_parent(self, parent: FunctionEvent) -> None:
        """Set the direct CPU parent."""
        self.cpu_parent = parent

    @property
    def key(self) -> str:
        return self.name

    @property
    def cpu_time_total(self) -> float:
        return self.time_range.end - self.time_range.start if self.device_type == DeviceType.CPU else 0

    @property
    def self_cpu_time_total(self) -> float:
        if self.is_async or self.device_type != DeviceType.CPU:
            return 0
        return self.cpu_time_total - sum(ch.cpu_time_total for ch in self.cpu_children)

    @property
    def device_time_total(self) -> float:
        if self.is_async or not self.use_device:
            return 0
        if self.device_type != DeviceType.CPU:
            return self.time_range.end - self.time_range.start
        total = self._device_total
        if total is None:
            # Iterative post-order so deep trees don't hit the recursion limit.
            total = self._compute_device_total()
        return total

    def _compute_device_total(self) -> float:
        stack = [(self, False)]
        while stack:
            evt, done = stack.pop()
            if done:
                evt._device_total = sum(k.duration for k in evt.kernels) + sum(
                    ch._device_total for ch in evt.cpu_children
                )
            elif evt._device_total is None:
                stack.append((evt, True))
                stack.extend((ch, False) for ch in evt.cpu_children if ch._device_total is None)
        return self._device_total

    @property
    def self_device_time_total(self) -> float:
        if self.is_async or not self.use_device:
            return 0
        if self.device_type == DeviceType.CPU:
            return sum(k.duration for k in self.kernels)
        return self.time_range.end - self.time_range.start

    @property
    def self_cpu_memory_usage(self) -> int:
        if self.is_async or self.device_type != DeviceType.CPU:
            return 0
        return self.cpu_memory_usage - sum(ch.cpu_memory_usage for ch in self.cpu_children)

    @property
    def self_device_memory_usage(self) -> int:
        if self.is_async or self.device_type != DeviceType.CPU:
            return 0
        return self.device_memory_usage - sum(ch.device_memory_usage for ch in self.cpu_children)

    def __repr__(self) -> str:
        return (
            f"<FunctionEvent id={self.id} name={self.name} device_type={self.device_type} "
            f"cpu_time={self.cpu_time_str} start_us={self.time_range.start} "
            f"end_us={self.time_range.end} cpu_children={[c.id for c in self.cpu_children]} "
            f"device_time={self.device_time_str} thread={self.thread} "
            f"input_shapes={self.input_shapes} cpu_memory_usage={self.cpu_memory_usage} "
            f"device_memory_usage={self.device_memory_usage} seq_nr={self.sequence_nr}>"
        )


_RARE_FIELDS = frozenset(
    {
        "node_id",
        "overload_name",
        "count",
        "is_async",
        "is_remote",
        "is_legacy",
        "is_python_function",
        "linked_correlation_id",
        "event_metadata",
        "structured_input_shapes",
        "structured_input_strides",
        "input_dtypes",
        "python_id",
        "python_parent_id",
        "python_module_id",
        "flow_id",
        "flow_type",
        "flow_start",
        "kwinputs",
    }
)


class FunctionEventAvg(_TimesMixin):
    """Statistics summed over the FunctionEvents that share a key (what key_averages() returns)."""

    __slots__ = (
        "key",
        "count",
        "node_id",
        "is_async",
        "is_remote",
        "use_device",
        "cpu_time_total",
        "device_time_total",
        "self_cpu_time_total",
        "self_device_time_total",
        "input_shapes",
        "overload_name",
        "stack",
        "scope",
        "cpu_memory_usage",
        "device_memory_usage",
        "self_cpu_memory_usage",
        "self_device_memory_usage",
        "cpu_children",
        "cpu_parent",
        "device_type",
        "is_legacy",
        "flops",
        "is_user_annotation",
        "self_cpu_percent",
        "total_cpu_percent",
        "total_device_percent",
    )

    def __init__(self) -> None:
        self.key: str | None = None
        self.count = 0
        self.node_id = 0
        self.is_async = False
        self.is_remote = False
        self.use_device: str | None = None
        self.cpu_time_total: float = 0
        self.device_time_total: float = 0
        self.self_cpu_time_total: float = 0
        self.self_device_time_total: float = 0
        self.input_shapes: Any = None
        self.overload_name: str | None = None
        self.stack: list | None = None
        self.scope: int | None = None
        self.cpu_memory_usage = 0
        self.device_memory_usage = 0
        self.self_cpu_memory_usage = 0
        self.self_device_memory_usage = 0
        self.cpu_children: list | None = None
        self.cpu_parent: FunctionEvent | None = None
        self.device_type = DeviceType.CPU
        self.is_legacy = False
        self.flops = 0
        self.is_user_annotation = False
        self.self_cpu_percent = -1
        self.total_cpu_percent = -1
        self.total_device_percent = -1

    def add(self, other: FunctionEvent | FunctionEventAvg) -> FunctionEventAvg:
        """Accumulate another event (or average) with the same key."""
        if not isinstance(other, (FunctionEvent, FunctionEventAvg)):
            raise TypeError(f"can only add a FunctionEvent or FunctionEventAvg, got {type(other).__name__}")
        if self.key is None:
            self.key = other.key
            self.node_id = other.node_id
            self.is_async = other.is_async
            self.is_remote = other.is_remote
            self.cpu_parent = other.cpu_parent
            self.cpu_children = other.cpu_children
            self.overload_name = other.overload_name
            self.input_shapes = other.input_shapes
            self.stack = other.stack
            self.scope = other.scope
            self.device_type = other.device_type
            self.is_legacy = other.is_legacy
            self.use_device = other.use_device
            self.is_user_annotation = other.is_user_annotation
        elif other.key != self.key:
            raise ValueError(f"cannot add events with different keys: {other.key!r} vs {self.key!r}")
        if type(other) is FunctionEvent:
            # Same sums as below, computed in one pass over the children (hot in key_averages).
            children = other.cpu_children
            is_cpu = other.device_type is DeviceType.CPU
            tr = other.time_range
            cpu_total = tr.end - tr.start if is_cpu else 0
            self.cpu_time_total += cpu_total
            if is_cpu and not other.is_async:
                child_cpu = 0.0
                child_mem = 0
                child_dev_mem = 0
                for ch in children:
                    ctr = ch.time_range
                    if ch.device_type is DeviceType.CPU:
                        child_cpu += ctr.end - ctr.start
                    child_mem += ch.cpu_memory_usage
                    child_dev_mem += ch.device_memory_usage
                self.self_cpu_time_total += cpu_total - child_cpu if children else cpu_total
                self.self_cpu_memory_usage += other.cpu_memory_usage - child_mem
                self.self_device_memory_usage += other.device_memory_usage - child_dev_mem
            if other.use_device:
                self.device_time_total += other.device_time_total
                self.self_device_time_total += other.self_device_time_total
        else:
            self.cpu_time_total += other.cpu_time_total
            self.device_time_total += other.device_time_total
            self.self_cpu_time_total += other.self_cpu_time_total
            self.self_device_time_total += other.self_device_time_total
            self.self_cpu_memory_usage += other.self_cpu_memory_usage
            self.self_device_memory_usage += other.self_device_memory_usage
        self.cpu_memory_usage += other.cpu_memory_usage
        self.device_memory_usage += other.device_memory_usage
        self.count += other.count
        if other.flops:
            self.flops += other.flops
        return self

    def __iadd__(self, other: FunctionEvent | FunctionEventAvg) -> FunctionEventAvg:
        return self.add(other)

    def __repr__(self) -> str:
        dev = self.use_device or "cuda"
        return (
            f"<FunctionEventAvg key={self.key} self_cpu_time={self.self_cpu_time_total_str} "
            f"cpu_time={self.cpu_time_str}  self_{dev}_time={self.self_device_time_total_str} "
            f"{dev}_time={self.device_time_str} input_shapes={self.input_shapes} "
            f"cpu_memory_usage={self.cpu_memory_usage} {dev}_memory_usage={self.device_memory_usage}>"
        )
