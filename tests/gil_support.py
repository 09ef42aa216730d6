"""Whether a call lets go of the GIL: the C extensions' tests ask it of their long loops."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

#: calls of `fn` before a call that holds the GIL throughout is believed: on a loaded machine the waiting thread
#: may not be scheduled at all during a short release, so one call that saw nothing proves little
ATTEMPTS = 20


def runs_without_the_gil(fn: Callable[[], Any]) -> tuple[Any, bool]:
    """`fn()`'s result, and whether another thread ran while it did, in any of up to ATTEMPTS calls (a call that
    holds the GIL throughout never lets it run: more calls only give the OS more chances to schedule it)."""
    out, during = _once(fn)
    for _ in range(ATTEMPTS - 1):
        if during:
            break
        out, during = _once(fn)
    return out, during


def _once(fn: Callable[[], Any]) -> tuple[Any, bool]:
    """With a switch interval of 1000 s the interpreter never takes the GIL from a thread by itself, so the
    waiting thread can only run if `fn` lets go of it."""
    go, ran = threading.Event(), []
    waiter = threading.Thread(target=lambda: (go.wait(), ran.append(True)))
    waiter.start()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000)
    try:
        go.set()  # the waiter wakes and waits for the GIL, which this thread keeps
        out = fn()
        during = bool(ran)  # read before this thread gives the GIL up in any other way
    finally:
        sys.setswitchinterval(interval)
        waiter.join()
    return out, during
