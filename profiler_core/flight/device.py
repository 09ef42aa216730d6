"""GPU time of each step from device events, never waiting for the device.

At every step boundary the recorder records one event on the current stream (torch.cuda.Event, CuPy's
cuda.Event or PyCUDA's driver.Event, whichever library the program already imported and initialised: this module
imports none of them). The GPU time of step s is the time between the events that open and close it, read only
once `query()` says the later event completed, one or more steps later; until then the pair waits in a bounded
queue (a pair still pending after `MAX_PENDING` newer ones is dropped, its GPU time unknown). Nothing here calls a
synchronising function (`synchronize`, `elapsed_time` of an incomplete event), so the program's asynchrony is
unchanged.
"""

from __future__ import annotations

import sys
from collections import deque
from typing import Any, Protocol

#: pairs of events waiting for the device; older ones are dropped
MAX_PENDING = 64


class Events(Protocol):
    """What the recorder needs of a device library's events."""

    name: str

    def new(self) -> Any: ...  # a timing event
    def record(self, ev: Any) -> None: ...  # on the current stream
    def done(self, ev: Any) -> bool: ...  # query(): completed, without waiting
    def elapsed_ms(self, a: Any, b: Any) -> float: ...  # both completed
    def peak_mib(self) -> float | None: ...  # device memory high-water mark, when the library gives it cheaply


class TorchEvents:
    name = "torch"

    def __init__(self, torch: Any) -> None:
        self.cuda = torch.cuda

    def new(self) -> Any:
        return self.cuda.Event(enable_timing=True)

    def record(self, ev: Any) -> None:
        ev.record()

    def done(self, ev: Any) -> bool:
        return bool(ev.query())

    def elapsed_ms(self, a: Any, b: Any) -> float:
        return float(a.elapsed_time(b))

    def peak_mib(self) -> float | None:
        return self.cuda.max_memory_allocated() / 2**20


class CupyEvents:
    name = "cupy"

    def __init__(self, cupy: Any) -> None:
        self.cupy = cupy

    def new(self) -> Any:
        return self.cupy.cuda.Event()

    def record(self, ev: Any) -> None:
        ev.record()

    def done(self, ev: Any) -> bool:
        return bool(ev.done)

    def elapsed_ms(self, a: Any, b: Any) -> float:
        return float(self.cupy.cuda.get_elapsed_time(a, b))

    def peak_mib(self) -> float | None:
        return self.cupy.get_default_memory_pool().total_bytes() / 2**20  # the pool's size: what it holds at most


class PycudaEvents:
    name = "pycuda"

    def __init__(self, driver: Any) -> None:
        self.driver = driver

    def new(self) -> Any:
        return self.driver.Event()

    def record(self, ev: Any) -> None:
        ev.record()

    def done(self, ev: Any) -> bool:
        return bool(ev.query())

    def elapsed_ms(self, a: Any, b: Any) -> float:
        return float(b.time_since(a))

    def peak_mib(self) -> float | None:
        return None


def detect() -> Events | None:
    """The events of the device library this program uses, or None (a CPU job, or no library initialised yet).
    Only libraries already imported are looked at, and only once they hold a device context (torch: CUDA
    initialised; PyCUDA: a current context; CuPy: a device present)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_initialized():
                return TorchEvents(torch)
        except Exception:
            pass
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            if cupy.cuda.runtime.getDeviceCount() > 0:
                return CupyEvents(cupy)
        except Exception:
            pass
    driver = sys.modules.get("pycuda.driver")
    if driver is not None:
        try:
            if driver.Context.get_current() is not None:
                return PycudaEvents(driver)
        except Exception:
            pass
    return None


class StepTimer:
    """Event pairs around steps, read when complete. `boundary(step)` marks the end of `step` and the start of the
    next; `ready()` gives the [(step, GPU ms)] whose closing event completed since the last call."""

    def __init__(self, events: Events) -> None:
        self.events = events
        self.pending: deque[tuple[int, Any, Any]] = deque()
        self.free: list[Any] = []
        self.last: Any = None
        self.dropped = 0

    def _event(self) -> Any:
        return self.free.pop() if self.free else self.events.new()

    def start(self) -> None:
        self.last = self._event()
        self.events.record(self.last)

    def boundary(self, step: int) -> None:
        ev = self._event()
        self.events.record(ev)
        if self.last is not None:
            self.pending.append((step, self.last, ev))
        self.last = ev
        if len(self.pending) > MAX_PENDING:
            self.pending.popleft()  # its events may still be in the stream: not reused
            self.dropped += 1

    def ready(self) -> list[tuple[int, float]]:
        out: list[tuple[int, float]] = []
        ev = self.events
        while self.pending and ev.done(self.pending[0][2]):
            step, a, b = self.pending.popleft()
            out.append((step, ev.elapsed_ms(a, b)))
            self.free.append(a)  # it opened this step and closed the one before, both read (or dropped): reusable
        return out
