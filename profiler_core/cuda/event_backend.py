"""Fallback capture without CUPTI: CUDA events around PyCUDA's launches, copies and memsets.

The PyCUDA hooks call `current()` and, when a fallback capture is running, wrap each launch/copy in
`span(...)`: a start and an end event recorded on the work's stream. At stop the events are resolved
against an anchor event (recorded once, with the host time taken right after it completed) into the same
plain records CUPTI would give (kernel/memcpy/memset plus a made-up driver API record for the call), so
the ordinary converter turns them into trace events. Traces made this way are marked
`"trace_source": "cuda_events"`.
Limits: events time the stream's queue (a kernel waiting behind earlier work looks longer), cost two API
calls per launch, see nothing launched by other libraries (cuBLAS, cupy, torch), and the single anchor can
drift over very long windows.
"""

from __future__ import annotations

import itertools
import os
import threading
from contextlib import contextmanager

from ..recording import now_ns

_current: CudaEventBackend | None = None


def current() -> CudaEventBackend | None:
    """The running fallback capture, or None (the hooks' cheap check)."""
    return _current


_DRIVER_NAME = {"CONCURRENT_KERNEL": "cuLaunchKernel", "MEMSET": "cuMemsetD8", "MEMCPY": "cuMemcpy"}


class CudaEventBackend:
    """Times PyCUDA work with CUDA events; `drv` is `pycuda.driver` (or a stand-in in tests)."""

    def __init__(self, drv) -> None:
        self.drv = drv
        self._pending: list[tuple] = []
        self._lock = threading.Lock()
        self._anchor = None
        self._anchor_host_ns = 0
        self._corr = itertools.count(1)
        self._streams: dict[int, int] = {}
        self.warnings: list[str] = []

    def start(self) -> None:
        """Begin timing; the anchor is taken now if a context is current, else at the first timed call."""
        global _current
        self._pending = []
        self._anchor = None
        try:
            self._ensure_anchor()
        except Exception:
            self._anchor = None
        _current = self

    def _ensure_anchor(self) -> None:
        if self._anchor is None:
            ev = self.drv.Event()
            ev.record()
            ev.synchronize()
            self._anchor_host_ns = now_ns()
            self._anchor = ev

    def _stream_id(self, stream) -> int:
        if stream is None:
            return 7  # the legacy default stream, numbered as CUPTI numbers it
        handle = int(getattr(stream, "handle", id(stream)))
        return self._streams.setdefault(handle, 100 + len(self._streams))

    @contextmanager
    def span(self, kind: str, stream, fields: dict, api_name: str | None = None):
        """Time the work issued inside the block on `stream` as one record of `kind` (CUPTI's kind name)."""
        try:
            self._ensure_anchor()
            start, end = self.drv.Event(), self.drv.Event()
            start.record(stream) if stream is not None else start.record()
        except Exception as exc:  # never break the user's launch because timing failed
            self.warnings.append(f"CUDA event timing failed ({exc})")
            yield
            return
        t0 = now_ns()
        try:
            yield
        finally:
            t1 = now_ns()
            try:
                end.record(stream) if stream is not None else end.record()
                with self._lock:
                    self._pending.append(
                        (kind, fields, self._stream_id(stream), start, end, t0, t1, threading.get_native_id(), api_name)
                    )
            except Exception as exc:
                self.warnings.append(f"CUDA event timing failed ({exc})")

    def stop(self) -> list[dict]:
        """Resolve every pending span into plain records (recording-clock ns, so no calibration is needed)."""
        global _current
        if _current is self:
            _current = None
        with self._lock:
            pending, self._pending = self._pending, []
        out, pid = [], os.getpid()
        for kind, fields, stream_id, start, end, t0, t1, tid, api_name in pending:
            try:
                end.synchronize()
                begin_ns = self._anchor_host_ns + int(start.time_since(self._anchor) * 1e6)
                dur_ns = int(end.time_since(start) * 1e6)
            except Exception as exc:
                self.warnings.append(f"could not read a CUDA event ({exc})")
                continue
            corr = next(self._corr)
            rec = {
                "kind": kind,
                "start": begin_ns,
                "end": begin_ns + max(0, dur_ns),
                "device_id": fields.pop("device_id", 0),
                "context_id": 1,
                "stream_id": stream_id,
                "correlation_id": corr,
            }
            rec.update(fields)
            out.append(rec)
            out.append(
                {
                    "kind": "DRIVER",
                    "name": api_name or _DRIVER_NAME.get(kind, "cuLaunchKernel"),
                    "cbid": 0,
                    "start": t0,
                    "end": t1,
                    "process_id": pid,
                    "thread_id": tid,
                    "correlation_id": corr,
                    "return_value": 0,
                }
            )
        return out
