"""profile_memory on the host: tracemalloc deltas at op boundaries -> ``[memory]`` instant events.

Design (cheap, no per-allocation hook): while recording with profile_memory, ``tracemalloc`` runs
(numpy's buffers are visible to it). At every op/annotation enter and exit we read the traced
total (one C call); if it changed since the last boundary, one event ``(ts, delta, total)`` is
recorded on the current thread. The enter-side event is stamped just before the child starts and
the exit-side one just before the op ends, so each delta lies inside -- and is attributed to --
the innermost op that was running when the memory changed (an op's self memory). A positive delta
is an allocation, a negative one a free. Memory allocated and freed again within one interval is
not lost to the net delta: tracemalloc's peak since the previous boundary, when above both totals,
is written as an allocation up to the peak and a free down to the current total (two events at the
boundary), so a short-lived host buffer reaches the memory curve's peak. The peak is reset at each
boundary, so this holds only where we started tracemalloc (a program's own tracemalloc peak is left
alone, and its short-lived allocations cancel out). Known limits: the total is process-wide
(threads running at once share it), and ``Addr`` is 0 (tracemalloc gives no address for a delta).
``Total Allocated`` is the traced total: memory allocated since recording started and still alive
(tracemalloc sees nothing older), unless the program already ran tracemalloc. ``Total Reserved``
is 0, as torch writes for CPU memory. Cost: tracemalloc slows every Python allocation while
recording (only then).
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable

MEMORY_EVENT_NAME = "[memory]"


class MemoryTracker:
    """Starts tracemalloc (if not already running) and turns total changes into events."""

    def __init__(self, clock: Callable[[], int]) -> None:
        self._clock = clock
        self._we_started = not tracemalloc.is_tracing()
        if self._we_started:
            tracemalloc.start(1)
        self._get = tracemalloc.get_traced_memory
        self.last = self._get()[0]
        if self._we_started:
            tracemalloc.reset_peak()

    def boundary(self, buf) -> None:
        """Record the change of traced memory since the previous boundary, on ``buf``'s thread; a peak above both
        totals as its allocation and free (see the module's docstring)."""
        cur, peak = self._get()
        if self._we_started:
            tracemalloc.reset_peak()
            if peak > max(cur, self.last):
                buf.memory.append((self._clock(), peak - self.last, peak))
                self.last = peak
        delta = cur - self.last
        if delta:
            self.last = cur
            buf.memory.append((self._clock(), delta, cur))

    def close(self) -> None:
        """Stop tracemalloc if we started it."""
        if self._we_started and tracemalloc.is_tracing():
            tracemalloc.stop()
