"""The CUDA collector the profiler drives: CUPTI when it works, else CUDA events around PyCUDA, else nothing.

`prepare()` picks the backend (expensive imports happen here, at warmup), `start()`/`stop()` bracket one
recording window, and `stop()` returns a CollectorResult of Kineto events in absolute host ns
(docs/internals.md §1). `stop(cpu_events=...)` additionally links GPU work to those CPU ops; the profiler
can instead call `profiler_core.cuda.link_trace(trace)` on the finished trace.
"""
from __future__ import annotations

import os
import time

from . import event_backend
from .convert import convert_records
from .cupti_backend import CuptiBackend, CuptiUnavailable
from .device_props import kineto_view, query_device_properties
from .link import link_gpu_to_ops

try:
    from ..trace.schema import CollectorResult
except ImportError:  # the core's schema module not there yet: same shape, local stand-in
    from dataclasses import dataclass, field

    @dataclass
    class CollectorResult:  # type: ignore[no-redef]
        events: list = field(default_factory=list)
        device_properties: list = field(default_factory=list)
        metadata: dict = field(default_factory=dict)
        warnings: list = field(default_factory=list)


last_raw_records: dict | None = None   # the last window's raw records, when asked to keep them (GPU check)


def _process_name() -> str:
    try:
        with open("/proc/self/comm", encoding="utf-8") as f:
            return f.read().strip() or "python"
    except OSError:
        return "python"


class CudaCollector:
    """Collects GPU activity for one profile (one instance per profile; the CUPTI backend is shared)."""

    def __init__(self, config: dict | None = None, *, cupti_module=None, pycuda_driver=None) -> None:
        self.config = dict(config or {})
        self._cupti_module = cupti_module
        self._pycuda_driver = pycuda_driver
        self.source = None          # "cupti" | "cuda_events" | None
        self.backend = None
        self.props: list[dict] = []
        self.warnings: list[str] = []
        self._prepared = False
        self._window_start = 0

    def prepare(self) -> None:
        """Choose the backend once: CUPTI, else the CUDA-event fallback if pycuda works, else none."""
        if self._prepared:
            return
        self._prepared = True
        try:
            self.props = query_device_properties()
        except Exception as exc:
            self.warnings.append(f"gpuscope: could not read device properties ({exc})")
        reason = None
        if os.environ.get("GPUSCOPE_CUDA_BACKEND", "") != "events":
            try:
                self.backend = CuptiBackend.instance(self._cupti_module)
                self.source = "cupti"
                return
            except CuptiUnavailable as exc:
                reason = str(exc)
        drv = self._pycuda_driver
        if drv is None:
            try:
                import pycuda.driver as drv  # noqa: PLC0415
            except Exception as exc:
                drv = None
                reason = f"{reason}; pycuda is not usable either ({type(exc).__name__}: {exc})"
        if drv is not None:
            self.backend = event_backend.CudaEventBackend(drv)
            self.source = "cuda_events"
            if reason:
                self.warnings.append(f"gpuscope: CUPTI unavailable ({reason}); timing PyCUDA work with CUDA "
                                     "events instead (only PyCUDA launches and copies are seen)")
        else:
            self.warnings.append(f"gpuscope: GPU activity cannot be captured: {reason}")

    def start(self) -> None:
        """Begin capturing (prepares first if the profiler skipped warmup)."""
        self.prepare()
        self._window_start = time.time_ns()
        if self.backend is None:
            return
        try:
            self.backend.start()
        except CuptiUnavailable as exc:
            self.warnings.append(f"gpuscope: {exc}; GPU activity is not in this trace")
            self.backend, self.source = None, None

    def stop(self, cpu_events: list[dict] | None = None) -> CollectorResult:
        """End the window; return its GPU events (absolute host ns) and trace-level data."""
        warnings = list(self.warnings)
        self.warnings = []
        result = CollectorResult(device_properties=kineto_view(self.props))
        if self.backend is None:
            result.warnings = warnings
            return result
        offset = 0
        try:
            if self.source == "cupti":
                cap = self.backend.stop()
                records, offset = cap.records, cap.clock_offset_ns
                warnings += cap.warnings
            else:
                records = self.backend.stop()
                warnings += self.backend.warnings
                self.backend.warnings = []
        except Exception as exc:  # the user's program must never die because capture broke
            warnings.append(f"gpuscope: GPU capture failed at stop ({type(exc).__name__}: {exc})")
            result.warnings = warnings
            return result
        conv = convert_records(records, device_properties=self.props, clock_offset_ns=offset,
                               pid=os.getpid(), process_name=_process_name(),
                               window_start_ns=self._window_start)
        events = conv.events
        if cpu_events:
            events += link_gpu_to_ops(events, cpu_events)
        result.events = events
        result.warnings = warnings + conv.warnings
        result.metadata = {"trace_source": self.source}
        if self.config.get("keep_raw_records") or os.environ.get("GPUSCOPE_KEEP_RAW_RECORDS"):
            global last_raw_records
            last_raw_records = {"source": self.source, "clock_offset_ns": offset, "records": records,
                                "device_properties": self.props}
        return result
