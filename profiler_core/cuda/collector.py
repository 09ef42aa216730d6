"""The CUDA collector the profiler drives: CUPTI when it works, else CUDA events around PyCUDA, else nothing.

`prepare()` picks the backend (expensive imports happen here, at warmup), `start()`/`stop()` bracket one
recording window, and `stop()` returns a CollectorResult of Kineto events in absolute host ns
(docs/internals.md §1). `stop(cpu_events=...)` additionally links GPU work to those CPU ops; the profiler
can instead call `profiler_core.cuda.link_trace(trace)` on the finished trace.
"""

from __future__ import annotations

import os
import threading

from profiler_core import settings

from ..recording import now_ns
from ..trace.write.schema import CollectorResult
from . import event_backend
from .convert import convert_records
from .cupti_backend import CuptiBackend, CuptiUnavailable
from .device_props import driver_version, kineto_view, query_device_properties
from .link import LAUNCH_PLACEHOLDER, link_gpu_to_ops

last_raw_records: dict | None = None  # the last window's raw records, when asked to keep them (GPU check)


def _process_name() -> str:
    try:
        with open("/proc/self/comm", encoding="utf-8") as f:
            return f.read().strip() or "python"
    except OSError:
        return "python"


def _recording_session():
    """The CPU recording session running now (the profiler starts it before the collector), or None."""
    from .. import recording

    return recording.active_session()


def _cpu_ops_of(session) -> list[dict]:
    """The session's ops and annotations as minimal event dicts (epoch ns), for linking; [] if unknown.

    Reads the recording buffers' documented tuples (t0, t1, name, external_id, cat, ...) in raw perf ns.
    """
    if session is None:
        return []
    out = []
    try:
        offset = int(session.offset_ns)
        for buf in list(session.buffers):
            for ev in list(buf.events):
                t0, t1, name, ext, cat = ev[:5]
                out.append(
                    {
                        "ph": "X",
                        "cat": "user_annotation" if cat == 0 else "cpu_op",
                        "name": name,
                        "pid": session.pid,
                        "tid": buf.tid,
                        "ts": t0 + offset,
                        "dur": max(0, t1 - t0),
                        "args": {"External id": ext},
                    }
                )
    except Exception:
        return []
    return out


def thread_id_map(session) -> dict[int, int]:
    """{pthread id (full and its low 32 bits): OS thread id} for every thread alive or recorded in `session`.

    CUPTI's default thread id is pthread_self(), truncated to 32 bits in its records; Python's
    threading.get_ident() is the same pthread_self(), and recorded events use the OS thread id.
    """
    pairs = [(t.ident, t.native_id) for t in threading.enumerate()]
    if session is not None:
        pairs += [(getattr(b, "ident", 0), b.tid) for b in list(session.buffers)]
    out: dict[int, int] = {}
    for ident, native in pairs:
        if ident and native:
            out[int(ident)] = int(native)
            out[int(ident) & 0xFFFFFFFF] = int(native)
    return out


def remap_thread_ids(records: list[dict], mapping: dict[int, int]) -> None:
    """Give API records captured with pthread ids the OS thread id of their thread (in place)."""
    for r in records:
        if r.get("kind") in ("RUNTIME", "DRIVER") and r.get("thread_id") is not None:
            r["thread_id"] = mapping.get(int(r["thread_id"]), r["thread_id"])


def _rename_in_session(session, cpu_events: list[dict]) -> None:
    """Carry launch-op renames (placeholder -> kernel name) back into the session before the trace is built."""
    names = {e["args"]["External id"]: e["name"] for e in cpu_events if e["name"] != LAUNCH_PLACEHOLDER}
    try:
        for buf in list(session.buffers):
            evs = buf.events
            for i, ev in enumerate(evs):
                if ev[2] == LAUNCH_PLACEHOLDER and ev[3] in names:
                    evs[i] = (ev[0], ev[1], names[ev[3]]) + tuple(ev[3:])
    except Exception:
        pass


class CudaCollector:
    """Collects GPU activity for one profile (one instance per profile; the CUPTI backend is shared)."""

    def __init__(self, config: dict | None = None, *, cupti_module=None, pycuda_driver=None) -> None:
        self.config = dict(config or {})
        self._cupti_module = cupti_module
        self._pycuda_driver = pycuda_driver
        self.source = None  # "cupti" | "cuda_events" | None
        self.backend = None
        self.props: list[dict] = []
        self.warnings: list[str] = []
        self._prepared = False
        self._window_start = 0
        self._session = None
        self._stopped_early = False

    def prepare(self) -> None:
        """Choose the backend once: CUPTI, else the CUDA-event fallback if pycuda works, else none."""
        if self._prepared:
            return
        self._prepared = True
        try:
            self.props = query_device_properties()
        except Exception as exc:
            self.warnings.append(f"could not read device properties ({exc})")
        reason = None
        if settings.get("GPUSCOPE_CUDA_BACKEND") != "events":
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
                self.warnings.append(
                    f"CUPTI unavailable ({reason}); timing PyCUDA work with CUDA "
                    "events instead (only PyCUDA launches and copies are seen)"
                )
        else:
            self.warnings.append(f"GPU activity cannot be captured: {reason}")

    def start(self) -> None:
        """Begin capturing (prepares first if the profiler skipped warmup)."""
        self.prepare()
        self._window_start = now_ns()
        self._session = _recording_session()
        if self.backend is None:
            return
        try:
            self.backend.start()
        except CuptiUnavailable as exc:
            self.warnings.append(f"{exc}; GPU activity is not in this trace")
            self.backend, self.source = None, None
            self._stopped_early = True

    def stopped_early(self) -> bool:
        """Did GPU collection stop while this window should be recording (torch's DEVICE_STOPPED)?"""
        return self._stopped_early

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
                if cap.thread_id_type != "system":
                    remap_thread_ids(records, thread_id_map(self._session))
            else:
                records = self.backend.stop()
                warnings += self.backend.warnings
                self.backend.warnings = []
        except Exception as exc:  # the user's program must never die because capture broke
            warnings.append(f"GPU capture failed at stop ({type(exc).__name__}: {exc})")
            result.warnings = warnings
            return result
        try:
            conv = convert_records(
                records,
                device_properties=self.props,
                clock_offset_ns=offset,
                pid=os.getpid(),
                process_name=_process_name(),
                window_start_ns=self._window_start,
            )
            events = conv.events
            warnings += conv.warnings
            from_session = cpu_events is None
            if from_session:
                cpu_events = _cpu_ops_of(self._session)
            if cpu_events:
                events += link_gpu_to_ops(events, cpu_events)
                if from_session:
                    _rename_in_session(self._session, cpu_events)
        except Exception as exc:  # a converter bug must not cost the user the CPU trace
            warnings.append(f"GPU records could not be converted ({type(exc).__name__}: {exc})")
            events = []
        result.events = events
        result.warnings = warnings
        result.metadata = {"trace_source": self.source}
        if self.source == "cupti":
            result.metadata.update(self.backend.versions())
        drv_version = driver_version()
        if drv_version is not None:
            result.metadata["cuda_driver_version"] = drv_version
        if self.config.get("keep_raw_records") or settings.get("GPUSCOPE_KEEP_RAW_RECORDS"):
            global last_raw_records
            last_raw_records = {
                "source": self.source,
                "clock_offset_ns": offset,
                "records": records,
                "device_properties": self.props,
            }
        return result
