"""The flight recorder's torch exchange returns only once gloo's worker thread has let go of its tensors
(`profiler_core/flight/comm.py`, `_let_go`): in torch 2.13 that thread takes the GIL to free them, and a process group
destroyed meanwhile (its destructor joins the thread holding the GIL) hangs the job at exit. Without torch here: a
fake tensor whose use count drops once "gloo's thread" has run, and one that never drops (the wait is bounded)."""

from __future__ import annotations

import threading
import time

from profiler_core.flight import comm


class _Tensor:
    """A tensor whose C++ use count is 2 until `release()` (gloo's thread dropping its reference)."""

    def __init__(self) -> None:
        self.count = 2

    def _use_count(self) -> int:
        return self.count

    def release(self) -> None:
        self.count = 1


def test_it_waits_for_the_other_thread_to_let_go():
    a, b = _Tensor(), _Tensor()
    timer = threading.Timer(0.05, lambda: (a.release(), b.release()))
    timer.start()
    comm._let_go(a, b, limit_s=30.0)
    assert a.count == b.count == 1  # returned only after the release
    timer.join()


def test_the_wait_is_bounded():
    stuck = _Tensor()
    t0 = time.monotonic()
    comm._let_go(stuck, limit_s=0.05)  # never released: it gives up rather than block the job
    assert stuck.count == 2 and time.monotonic() - t0 >= 0.05
