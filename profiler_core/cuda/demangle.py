"""Demangle C++ kernel names (CUPTI reports `_Z...` symbols; Kineto shows the demangled form).

Uses libstdc++'s `__cxa_demangle` through ctypes when the library is present; otherwise, or when a name
does not demangle, the name is returned unchanged.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import lru_cache

_impl = None
_loaded = False


def _load():
    global _impl, _loaded
    if _loaded:
        return _impl
    _loaded = True
    for candidate in ("libstdc++.so.6", ctypes.util.find_library("stdc++"), "libc++.so.1"):
        if not candidate:
            continue
        try:
            lib = ctypes.CDLL(candidate)
            fn = lib.__cxa_demangle
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_int)]
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.free.argtypes = [ctypes.c_void_p]
        _impl = (fn, libc.free)
        break
    return _impl


@lru_cache(maxsize=8192)
def demangle(name: str) -> str:
    """The demangled C++ name, or `name` itself if it is not a mangled symbol."""
    if not name.startswith("_Z"):
        return name
    impl = _load()
    if impl is None:
        return name
    fn, free = impl
    status = ctypes.c_int(0)
    ptr = fn(name.encode("utf-8", "replace"), None, None, ctypes.byref(status))
    if not ptr or status.value != 0:
        return name
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        free(ptr)
