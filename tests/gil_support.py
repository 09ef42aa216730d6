"""Whether a call lets go of the GIL: the C extensions' tests ask it of their long loops."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any


def runs_without_the_gil(fn: Callable[[], Any]) -> tuple[Any, bool]:
    """`fn()`'s result, and whether another thread ran while it did. With a switch interval of 1000 s the
    interpreter never takes the GIL from a thread by itself, so the waiting thread can only run if `fn`
    lets go of it."""
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
