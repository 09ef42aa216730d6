"""CUPTI activity capture through NVIDIA's cupti-python: the ONLY module that imports `cupti`.

One process-wide instance registers the buffer callbacks once (CUPTI allows one registration per
process; re-registering is unsafe) and enables/disables the activity kinds per profiling cycle. The
completed-buffer callback copies every record into a plain dict at once (cupti-python's record objects
are views into CUPTI's buffer and must not be kept), so the rest of gpuscope never sees cupti objects.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field

from .clock import calibrate, combine
from .records import ALL_KINDS, API_KINDS, FIELDS

BUFFER_BYTES = 8 * 1024 * 1024
REQUIRED_KINDS = ("CONCURRENT_KERNEL",)  # without these the capture is pointless; the rest are optional
# API calls Kineto also drops: frequent, no GPU work, only noise in the trace.
NOISY_API = frozenset(
    {
        "cudaGetDevice",
        "cudaGetLastError",
        "cudaPeekAtLastError",
        "cudaGetDeviceCount",
        "cuCtxGetCurrent",
        "cuCtxGetDevice",
        "cuKernelGetAttribute",
        "cuFuncGetAttribute",
        "cuDevicePrimaryCtxGetState",
        "cuGetProcAddress",
        "cuGetProcAddress_v2",
        "cuDriverGetVersion",
        "cuCtxGetId",
        "cuStreamGetCaptureInfo",
        "cudaStreamGetCaptureInfo",
        "cudaStreamIsCapturing",
        "cuStreamIsCapturing",
    }
)
_VERSION_SUFFIX = re.compile(r"_v\d{4,5}$")


def clean_api_name(name: str) -> str:
    """Runtime callback names end in the version that introduced them (`cudaLaunchKernel_v7000`); drop it."""
    return _VERSION_SUFFIX.sub("", name)


def distribution_version(name: str) -> str | None:
    """The installed version of distribution `name` (e.g. "cupti-python"), or None."""
    try:
        from importlib.metadata import version  # noqa: PLC0415

        return version(name)
    except Exception:
        return None


def _loaded_libcupti(maps_path: str = "/proc/self/maps") -> list[str]:
    """Paths of the libcupti shared objects mapped into this process (cupti-python loads one lazily)."""
    try:
        with open(maps_path, encoding="utf-8", errors="replace") as f:
            paths = {line.split(None, 5)[-1].strip() for line in f if "libcupti.so" in line}
    except OSError:
        return []
    return sorted(p for p in paths if p.startswith("/") and os.path.basename(p).startswith("libcupti.so"))


def loaded_cupti_api_version() -> int | None:
    """CUPTI's API version (`cuptiGetVersion`) from the libcupti already loaded here, or None.

    cupti-python has no binding for cuptiGetVersion, so the library it loaded is asked through ctypes;
    nothing is loaded that was not loaded already.
    """
    import ctypes  # noqa: PLC0415

    for path in _loaded_libcupti():
        try:
            lib = ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 0) | ctypes.RTLD_LOCAL)
            out = ctypes.c_uint32(0)
            if lib.cuptiGetVersion(ctypes.byref(out)) == 0 and out.value:
                return int(out.value)
        except (OSError, AttributeError):
            continue
    return None


class CuptiUnavailable(RuntimeError):
    """cupti-python cannot be imported or CUPTI cannot run here (no driver, no device, a second subscriber)."""


@dataclass
class Capture:
    """What one capture cycle produced, all plain data."""

    records: list = field(default_factory=list)
    clock_offset_ns: int = 0
    dropped: int = 0
    warnings: list = field(default_factory=list)
    thread_id_type: str = "system"  # "default": API records carry pthread ids (see remap_thread_ids)


def load_cupti():
    """Import cupti-python's binding module, or raise CuptiUnavailable saying why."""
    try:
        from cupti import cupti  # noqa: PLC0415 (lazy on purpose: heavy, needs CUDA libraries)
    except Exception as exc:  # ImportError, or a library-load failure inside the package
        raise CuptiUnavailable(f"cupti-python is not importable ({type(exc).__name__}: {exc})") from exc
    return cupti


class CuptiBackend:
    """The process-wide CUPTI activity capture (use `CuptiBackend.instance()`)."""

    _instance: CuptiBackend | None = None
    _instance_lock = threading.Lock()

    def __init__(self, cupti_module) -> None:
        self.cupti = cupti_module
        self._lock = threading.Lock()
        self._records: list[dict] = []
        self._active = False
        self._registered = False
        self._enabled: list = []
        self._kind_names: dict[int, str] = {}
        self._api_names: dict[tuple[str, int], str] = {}
        self._calib_start = (0, 0)
        self._start_warnings: list[str] = []
        self.thread_id_type = "system"
        self._thread_id_warning: str | None = None

    @classmethod
    def instance(cls, cupti_module=None) -> CuptiBackend:
        """The one backend of this process (created on first use; `cupti_module` is for tests)."""
        with cls._instance_lock:
            if cls._instance is None:
                cls._instance = cls(cupti_module if cupti_module is not None else load_cupti())
            return cls._instance

    @classmethod
    def _reset_for_tests(cls) -> None:
        cls._instance = None

    # ---- callbacks (run on CUPTI's thread or the flushing thread) ----
    def _buffer_requested(self):
        return BUFFER_BYTES, 0

    def _buffer_completed(self, activities) -> None:
        if not self._active:
            return
        out = []
        for a in activities:
            try:
                rec = self._copy(a)
            except Exception:  # a malformed record must never break CUPTI's thread
                continue
            if rec is not None:
                out.append(rec)
        with self._lock:
            self._records.extend(out)

    def _copy(self, a) -> dict | None:
        kind = self._kind_names.get(int(a.kind))
        if kind is None:
            return None
        fields = FIELDS["CONCURRENT_KERNEL" if kind == "KERNEL" else kind]
        rec = {"kind": kind}
        for f in fields:
            v = getattr(a, f, None)
            if isinstance(v, bytes):
                v = v.decode("utf-8", "replace")
            elif isinstance(v, int) and type(v) is not int:
                v = int(v)  # IntEnum members
            elif v is not None and not isinstance(v, (int, float, str)):
                try:
                    v = int(v)
                except (TypeError, ValueError):
                    v = str(v)
            rec[f] = v
        if kind in API_KINDS:
            name = self._api_name(kind, int(rec.get("cbid") or 0))
            if name in NOISY_API:
                return None
            rec["name"] = name
        return rec

    def _api_name(self, kind: str, cbid: int) -> str:
        key = (kind, cbid)
        name = self._api_names.get(key)
        if name is None:
            domain = (
                self.cupti.CallbackDomain.RUNTIME_API if kind == "RUNTIME" else self.cupti.CallbackDomain.DRIVER_API
            )
            try:
                raw = self.cupti.get_callback_name(domain, cbid)
                name = clean_api_name(raw.decode() if isinstance(raw, bytes) else str(raw))
            except Exception:
                name = f"{'cuda' if kind == 'RUNTIME' else 'cu'}Api(cbid={cbid})"
            self._api_names[key] = name
        return name

    def versions(self) -> dict:
        """Trace metadata on the CUPTI in use: cupti-python's version and CUPTI's API version, where known."""
        out: dict = {}
        dist = distribution_version("cupti-python")
        if dist:
            out["cupti_python_version"] = dist
        api = loaded_cupti_api_version()
        if api is not None:
            out["cupti_version"] = api  # Kineto's key: cuptiGetVersion's number
        return out

    # ---- cycle ----
    def start(self, kinds: tuple[str, ...] = ALL_KINDS) -> None:
        """Enable the activity kinds for one capture cycle (registering callbacks on first use)."""
        c = self.cupti
        try:
            if not self._registered:
                self._kind_names = {
                    int(getattr(c.ActivityKind, k)): k for k in ALL_KINDS + ("KERNEL",) if hasattr(c.ActivityKind, k)
                }
                try:  # OS thread ids (gettid), comparable with threading.get_native_id()
                    c.set_thread_id_type(c.ActivityThreadIdType.SYSTEM)
                    self.thread_id_type = "system"
                except Exception as exc:  # e.g. refused when several subscribers are allowed
                    self.thread_id_type = "default"
                    self._thread_id_warning = (
                        f"CUPTI refused OS thread ids ({type(exc).__name__}: {exc}); its records carry "
                        "pthread ids, which gpuscope maps to the recorded threads"
                    )
                c.activity_register_callbacks(self._buffer_requested, self._buffer_completed)
                self._registered = True
            with self._lock:
                self._records = []
            self._active = True
            self._enabled = []
            self._start_warnings = []
            if self._thread_id_warning:  # said once per process, on the first capture
                self._start_warnings.append(self._thread_id_warning)
                self._thread_id_warning = None
            for k in kinds:
                if not hasattr(c.ActivityKind, k):
                    continue
                try:
                    c.activity_enable(getattr(c.ActivityKind, k))
                    self._enabled.append(k)
                except Exception as exc:
                    if k in REQUIRED_KINDS:
                        raise
                    self._start_warnings.append(f"CUPTI cannot record {k} here ({exc}); left out")
            self._calib_start = calibrate(c.get_timestamp)
        except CuptiUnavailable:
            raise
        except Exception as exc:
            self._disable_all()
            self._active = False
            raise CuptiUnavailable(f"CUPTI could not start ({type(exc).__name__}: {exc})") from exc

    def _disable_all(self) -> None:
        for k in self._enabled:
            try:
                self.cupti.activity_disable(getattr(self.cupti.ActivityKind, k))
            except Exception:
                pass
        self._enabled = []

    def _dropped(self) -> int:
        c = self.cupti
        try:
            import numpy as np  # noqa: PLC0415

            out = np.zeros(1, dtype=np.uint64)
            ret = c.activity_get_num_dropped_records(0, 0, out.ctypes.data)
            return int(ret) if isinstance(ret, int) and ret else int(out[0])
        except TypeError:
            try:
                return int(c.activity_get_num_dropped_records(0, 0))
            except Exception:
                return 0
        except Exception:
            return 0

    def stop(self) -> Capture:
        """Flush every buffer, disable the kinds and hand back this cycle's records."""
        c = self.cupti
        cap = Capture(warnings=list(self._start_warnings), thread_id_type=self.thread_id_type)
        try:
            c.activity_flush_all(1)
        except Exception as exc:
            cap.warnings.append(f"CUPTI flush failed ({exc}); GPU activity may be incomplete")
        try:
            stop_cal = calibrate(c.get_timestamp)
        except Exception:
            stop_cal = None
        self._disable_all()
        self._active = False
        with self._lock:
            cap.records, self._records = self._records, []
        cap.dropped = self._dropped()
        if cap.dropped:
            cap.warnings.append(
                f"CUPTI dropped {cap.dropped} activity records (buffers full); the GPU timeline is incomplete"
            )
        cap.clock_offset_ns, drift = combine(self._calib_start, stop_cal)
        if drift > 1_000_000:
            cap.warnings.append(f"GPU and host clocks drifted {drift / 1e6:.1f} ms during the capture")
        return cap
