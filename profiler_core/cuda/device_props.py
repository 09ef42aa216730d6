"""Device properties for the trace's `deviceProperties` (and the occupancy calculator), from the driver.

Queries the CUDA driver API through ctypes (`libcuda.so.1`), which every CUDA library in the process
(pycuda, cupy, cuda-bindings, torch) loads anyway, so no Python dependency is needed. `props_entry` is the
pure part: attribute values -> Kineto's dict.
"""

from __future__ import annotations

import ctypes
import ctypes.util

# CUdevice_attribute values (cuda.h).
ATTRS = {
    "maxThreadsPerBlock": 1,
    "sharedMemPerBlock": 8,
    "warpSize": 10,
    "regsPerBlock": 12,
    "numSms": 16,
    "maxThreadsPerMultiprocessor": 39,
    "computeMajor": 75,
    "computeMinor": 76,
    "sharedMemPerMultiprocessor": 81,
    "regsPerMultiprocessor": 82,
    "sharedMemPerBlockOptin": 97,
    "maxBlocksPerMultiprocessor": 106,
    "reservedSharedMemPerBlock": 111,
}
# Kineto's deviceProperties keys, in its order.
KINETO_KEYS = (
    "id",
    "name",
    "totalGlobalMem",
    "computeMajor",
    "computeMinor",
    "maxThreadsPerBlock",
    "maxThreadsPerMultiprocessor",
    "regsPerBlock",
    "regsPerMultiprocessor",
    "warpSize",
    "sharedMemPerBlock",
    "sharedMemPerMultiprocessor",
    "numSms",
    "sharedMemPerBlockOptin",
)
EXTRA_KEYS = ("reservedSharedMemPerBlock", "maxBlocksPerMultiprocessor")


def props_entry(index: int, name: str, total_mem: int, attrs: dict[str, int]) -> dict:
    """One device's properties: Kineto's keys in Kineto's order, then the extra occupancy inputs we know."""
    out = {"id": int(index), "name": str(name), "totalGlobalMem": int(total_mem)}
    for k in KINETO_KEYS[3:] + EXTRA_KEYS:
        if k in attrs:
            out[k] = int(attrs[k])
    return out


def kineto_view(props: list[dict]) -> list[dict]:
    """The entries restricted to Kineto's keys (what goes into the trace file)."""
    return [{k: p[k] for k in KINETO_KEYS if k in p} for p in props]


_libcuda = None


def libcuda():
    """The loaded and initialised driver library, or None (no driver / no device); never raises."""
    global _libcuda
    if _libcuda is not None:
        return _libcuda or None
    lib = None
    for candidate in ("libcuda.so.1", ctypes.util.find_library("cuda"), "nvcuda.dll"):
        if not candidate:
            continue
        try:
            lib = ctypes.CDLL(candidate)
            break
        except OSError:
            continue
    if lib is not None:
        try:
            if lib.cuInit(0) != 0:
                lib = None
        except Exception:
            lib = None
    _libcuda = lib if lib is not None else False
    return lib


def device_count() -> int:
    """Number of CUDA devices the driver sees (0 without a driver); never raises."""
    lib = libcuda()
    if lib is None:
        return 0
    n = ctypes.c_int(0)
    try:
        return n.value if lib.cuDeviceGetCount(ctypes.byref(n)) == 0 else 0
    except Exception:
        return 0


def query_device_properties() -> list[dict]:
    """Every visible device's properties (Kineto keys plus EXTRA_KEYS); [] without a driver."""
    lib = libcuda()
    out = []
    for i in range(device_count()):
        dev = ctypes.c_int(0)
        if lib.cuDeviceGet(ctypes.byref(dev), i) != 0:
            continue
        buf = ctypes.create_string_buffer(256)
        name = buf.value.decode(errors="replace") if lib.cuDeviceGetName(buf, 256, dev) == 0 else f"GPU {i}"
        mem = ctypes.c_size_t(0)
        fn = getattr(lib, "cuDeviceTotalMem_v2", None) or lib.cuDeviceTotalMem
        total = mem.value if fn(ctypes.byref(mem), dev) == 0 else 0
        attrs = {}
        for key, code in ATTRS.items():
            v = ctypes.c_int(0)
            if lib.cuDeviceGetAttribute(ctypes.byref(v), code, dev) == 0:
                attrs[key] = v.value
        out.append(props_entry(i, name, total, attrs))
    return out


def driver_version() -> int | None:
    """The CUDA driver's version as an int (13000 for 13.0), like Kineto's `cuda_driver_version`."""
    lib = libcuda()
    if lib is None:
        return None
    v = ctypes.c_int(0)
    try:
        return v.value if lib.cuDriverGetVersion(ctypes.byref(v)) == 0 else None
    except Exception:
        return None
