"""The stage cache: each stage computed once per trace object and kept as long as the trace lives.

`stage(*deps)` declares a stage function `f(t) -> table`; `DEPENDENCIES` maps each stage's name to the names of
the stages it reads (checked against `stages.GRAPH`, the one written list, by the tests).
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

DEPENDENCIES: dict[str, tuple[str, ...]] = {}

_cache_lock = threading.Lock()
_cache: dict[int, tuple[weakref.ref, dict]] = {}
_computing: dict[tuple[int, str], Any] = {}  # (trace id, key) -> the lock of its computation under way


def _forget(key: int) -> None:
    with _cache_lock:
        _cache.pop(key, None)


def forget(t: Any) -> None:
    """Drop every stage result cached for `t` (they are computed again on the next request)."""
    _forget(id(t))


def _lookup(t: Any, tid: int, key: str) -> tuple[bool, Any]:
    with _cache_lock:
        entry = _cache.get(tid)
        if entry is not None and entry[0]() is t and key in entry[1]:
            return True, entry[1][key]
    return False, None


def cached(t: Any, key: str, fn: Callable[[], Any]) -> Any:
    """`fn()` computed once per TraceData object `t` and `key` (weakly held: dropped with `t`). Threads asking
    for one key at once compute it once: the others wait for its value (stages depend on stages declared before
    them, so two keys never wait on each other)."""
    tid = id(t)
    found, value = _lookup(t, tid, key)
    if found:
        return value
    with _cache_lock:
        lock = _computing.setdefault((tid, key), threading.Lock())
    try:
        with lock:
            found, value = _lookup(t, tid, key)
            if found:
                return value
            value = fn()
            with _cache_lock:
                entry = _cache.get(tid)
                if entry is None or entry[0]() is not t:
                    try:
                        ref = weakref.ref(t, lambda _r, k=tid: _forget(k))
                    except TypeError:  # not weak-referenceable: no memoisation
                        return value
                    entry = (ref, {})
                    _cache[tid] = entry
                entry[1][key] = value
            return value
    finally:
        with _cache_lock:
            if _computing.get((tid, key)) is lock:  # (a thread still waiting holds its own reference)
                del _computing[(tid, key)]


def stage(*deps: Callable[..., Any]) -> Callable[[F], F]:
    """Declare a stage `f(t)`: memoised per trace under its own name; `deps` are the stages it reads."""

    def wrap(fn: F) -> F:
        name = fn.__name__
        DEPENDENCIES[name] = tuple(d.__name__ for d in deps)

        @functools.wraps(fn)
        def run(t: Any) -> Any:
            return cached(t, name, lambda: fn(t))

        return run  # type: ignore[return-value]

    return wrap
