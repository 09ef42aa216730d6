"""Clock calibration: the offset that moves a device-side clock (CUPTI's) onto the recording clock.

The recording clock is `profiler_core.recording.now_ns()` (perf_counter_ns plus the session's epoch offset):
every timestamp a capture backend makes comes from it, so a step of the wall clock during a profile moves
nothing relative to the recorded ops.
"""

from __future__ import annotations

from collections.abc import Callable


def calibrate(
    device_ns: Callable[[], int], host_ns: Callable[[], int] | None = None, rounds: int = 10
) -> tuple[int, int]:
    """(offset, uncertainty) with host = device + offset, from the tightest host bracket of `rounds` reads.

    Each round reads host `a`, device `c`, host `b`; the pair with the smallest `b - a` wins and the offset
    is `(a + b) // 2 - c`, uncertain by `(b - a) // 2` ns.
    """
    if host_ns is None:
        from ..recording import now_ns as host_ns  # noqa: PLC0415
    best = None
    for _ in range(max(1, rounds)):
        a = host_ns()
        c = device_ns()
        b = host_ns()
        if best is None or b - a < best[0]:
            best = (b - a, (a + b) // 2 - c)
    width, offset = best
    return offset, max(0, width) // 2


def combine(start: tuple[int, int], stop: tuple[int, int] | None) -> tuple[int, int]:
    """One offset for a capture window from the calibrations at its start and stop: (offset, drift)."""
    if stop is None:
        return start[0], 0
    return (start[0] + stop[0]) // 2, abs(stop[0] - start[0])
