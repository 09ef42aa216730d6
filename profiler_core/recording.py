"""The hot path: per-thread event buffers, the clock, record_function and the recording session.

Clock: every CPU timestamp is ``time.perf_counter_ns()`` (monotonic, never goes back) taken on the
hot path; when a session starts we calibrate it once against ``time.time_ns()`` and store the
offset, so the trace holds Unix-epoch nanoseconds. ``now_ns()`` is this recording clock: the GPU
capture backends stamp with it (and calibrate CUPTI's clock against it), so a step of the wall clock
during a profile moves nothing. Drift between the two clocks is bounded by one session.

Buffers: each thread that records gets its own ``_ThreadBuffer`` (found through a
``threading.local`` that is replaced at every session start, so old buffers are never reused).
A finished event is ONE tuple ``(t0, t1, name, external_id, cat, args, stack)`` appended to the
thread's list (``args``: a record_function's string or an op's trace-args dict): about 200 bytes
per event (tuple + two ints; ``args``/``stack`` are ``None`` unless shapes, stacks or extra args
were asked for). No dict per event on the hot path.
All threads are recorded (torch records only the profiling thread by default): each gets its own
``tid`` (the OS thread id) whether it started before or after the profiler.
"""

from __future__ import annotations

import functools
import itertools
import os
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypeVar

if TYPE_CHECKING:
    from .memory import MemoryTracker
    from .stacks import PythonTracer

CAT_USER = 0  # user_annotation (record_function, ProfilerStep#N)
CAT_OP = 1  # cpu_op (record_op / operator)

_clock = time.perf_counter_ns

# --- module state read on the hot path (rebound, never mutated in place, by start/stop) -------
_active = False  # is a session recording right now?
_extras = False  # profile_memory or with_stack: take the slow path at op boundaries
_record_shapes = False
_with_flops = False
_tls = threading.local()
_ids = itertools.count(1)
_session: Session | None = None
_offset_ns = time.time_ns() - time.perf_counter_ns()


def now_ns() -> int:
    """Current time on the recording clock, as Unix-epoch nanoseconds (comparable to time.time_ns())."""
    return _clock() + _offset_ns


def is_recording() -> bool:
    """True while a profiler session records CPU activity (cheap; integrations check it first)."""
    return _active


def record_shapes_enabled() -> bool:
    """True while recording with record_shapes (or with_flops, which implies it)."""
    return _active and _record_shapes


def flops_enabled() -> bool:
    """True while recording with with_flops."""
    return _active and _with_flops


class _ThreadBuffer:
    """One thread's recorded data for one session."""

    __slots__ = ("tid", "ident", "name", "events", "memory", "python", "cur", "py")

    def __init__(self, tid: int, name: str, ident: int = 0) -> None:
        self.tid = tid
        self.ident = ident  # threading.get_ident() (pthread_self): CUPTI's default thread id
        self.name = name
        self.events: list = []  # (t0, t1, name, external_id, cat, args, stack)
        self.memory: list = []  # (ts, bytes, total_allocated)
        self.python: list = []  # (t0, t1, name, python_id, parent_id)
        self.cur = None  # innermost open Record on this thread
        self.py = None  # python call-tracer state (stacks.py), if with_stack


def _new_buffer() -> _ThreadBuffer:
    buf = _ThreadBuffer(threading.get_native_id(), threading.current_thread().name, threading.get_ident())
    session = _session
    if session is not None:
        session.buffers.append(buf)  # list.append is atomic under the GIL
    _tls.buf = buf
    return buf


def current_buffer() -> _ThreadBuffer | None:
    """This thread's buffer in the recording session (created on first use), or None if not recording."""
    if not _active:
        return None
    try:
        return _tls.buf
    except AttributeError:
        return _new_buffer()


def current_external_id() -> int | None:
    """External id of the innermost open op/annotation on this thread, or None."""
    if not _active:
        return None
    buf = getattr(_tls, "buf", None)
    if buf is None or buf.cur is None:
        return None
    return buf.cur._id


def plain_ops() -> bool:
    """True while recording with nothing attached to op boundaries (no shapes, FLOPs, stacks or
    memory): an op may then be recorded with `begin_op`/`end_op` alone (the integrations' fast path)."""
    return _active and not _extras and not _record_shapes


class _OpenOp:
    """An op opened by `begin_op`: the thread's innermost record until `end_op`."""

    __slots__ = ("_id",)
    _id: int


def begin_op(name: str, args: dict | None = None) -> tuple | None:
    """Open a ``cpu_op`` named `name` (trace args `args`) on this thread, as `Record` does when
    `plain_ops()`; returns the token for `end_op`, or None when not recording."""
    if not _active:
        return None
    try:
        buf = _tls.buf
    except AttributeError:
        buf = _new_buffer()
    op = _OpenOp()
    op._id = next(_ids)
    parent = buf.cur
    buf.cur = op
    return (buf, op, parent, name, args, _clock())


def end_op(token: tuple | None) -> None:
    """Close the op `begin_op` opened (nothing for None; dropped when recording stopped meanwhile)."""
    if token is None or not _active:
        return
    buf, op, parent, name, args, t0 = token
    buf.events.append((t0, _clock(), name, op._id, CAT_OP, args, None))
    buf.cur = parent


_R = TypeVar("_R", bound="Record")


class Record:
    """Base of record_function and ops (subclasses set `_cat`): one open event on the hot path."""

    __slots__ = ("name", "args", "_buf", "_t0", "_id", "_parent", "_stack")
    _cat = CAT_USER
    _stack: str | None

    def __init__(self, name: str, args: Any = None) -> None:
        self.name = name
        self.args = args

    def __enter__(self: _R) -> _R:
        if _active:
            try:
                buf = _tls.buf
            except AttributeError:
                buf = _new_buffer()
            self._id = next(_ids)
            self._parent = buf.cur
            buf.cur = self
            self._buf = buf
            if _extras:
                self._stack = None
                session = _session
                if session is not None:
                    session.on_enter(self, buf)
            self._t0 = _clock()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        # Only records entered while recording and closing while recording are kept: one that
        # spans the end of the window is dropped (as Kineto drops it).
        if _active:
            try:
                buf = self._buf
            except AttributeError:  # entered before recording started
                return False
            # (a reused object keeps a stale _buf from an older window: appending to that
            # finished buffer is harmless, so _buf is not reset here -- one write less)
            if buf is not None:
                if _extras:
                    session = _session
                    if session is not None:
                        session.on_exit(self, buf)
                    buf.events.append(
                        (self._t0, _clock(), self.name, self._id, self._cat, self.args, getattr(self, "_stack", None))
                    )
                else:
                    buf.events.append((self._t0, _clock(), self.name, self._id, self._cat, self.args, None))
                buf.cur = self._parent
        return False


class record_function(Record):
    """Label a block of code: ``with record_function("name"):`` or ``@record_function("name")``.

    Recorded as a ``user_annotation`` event on the calling thread while a profiler records;
    costs one attribute check otherwise. ``args`` (a string, as in torch) is kept as an input.
    """

    __slots__ = ()

    def __call__(self, *a: Any, **kw: Any) -> Any:
        """Decorator form: a fresh record per call (thread- and recursion-safe).

        Bare ``@record_function`` (no name) is a call of the decorated function, named by its
        __qualname__; torch would silently return a wrapper of the first argument instead.
        """
        name = self.name
        if type(name) is not str and callable(name):  # bare @record_function
            if not _active:
                return name(*a, **kw)
            with record_function(getattr(name, "__qualname__", None) or repr(name), self.args):
                return name(*a, **kw)
        if len(a) != 1 or kw or not callable(a[0]):
            raise TypeError(
                f"record_function({name!r}) used as a decorator takes one function, got "
                f"{', '.join(type(x).__name__ for x in a) or 'no arguments'}"
                f"{' and keyword arguments' if kw else ''}"
            )
        func = a[0]
        args = self.args

        @functools.wraps(func)
        def wrapper(*a: Any, **kw: Any) -> Any:
            if not _active:
                return func(*a, **kw)
            with record_function(name, args):
                return func(*a, **kw)

        return wrapper


class Session:
    """One recording window: the buffers of every thread plus its start/stop times."""

    def __init__(
        self,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_flops: bool = False,
    ) -> None:
        self.record_shapes = bool(record_shapes or with_flops)
        self.profile_memory = bool(profile_memory)
        self.with_stack = bool(with_stack)
        self.with_flops = bool(with_flops)
        self.buffers: list[_ThreadBuffer] = []
        self.start_ns = 0  # epoch ns
        self.stop_ns = 0
        self.offset_ns = 0
        self.pid = os.getpid()
        self.memory: MemoryTracker | None = None  # when profile_memory
        self.tracer: PythonTracer | None = None  # when with_stack
        self.stack_capture: Callable[..., str] | None = None  # stacks.capture_stack when with_stack

    # -- slow-path hooks, called only when profile_memory or with_stack -------------------------
    def on_enter(self, rec: Record, buf: _ThreadBuffer) -> None:
        """At an op's start: capture its Python stack, close the parent's memory interval."""
        rec._stack = self.stack_capture() if self.stack_capture is not None else None
        if self.memory is not None:
            self.memory.boundary(buf)

    def on_exit(self, rec: Record, buf: _ThreadBuffer) -> None:
        """At an op's end: attribute memory changed since the last boundary to this op."""
        if self.memory is not None:
            self.memory.boundary(buf)


def start_session(session: Session) -> None:
    """Begin recording into ``session`` on every thread (replaces any session in progress)."""
    global _active, _extras, _record_shapes, _with_flops, _tls, _ids, _session, _offset_ns
    if _active:
        stop_session()
    _offset_ns = time.time_ns() - time.perf_counter_ns()
    session.offset_ns = _offset_ns
    _tls = threading.local()
    _ids = itertools.count(1)
    _session = session
    _record_shapes = session.record_shapes
    _with_flops = session.with_flops
    if session.profile_memory:
        from . import memory

        session.memory = memory.MemoryTracker(_clock)
    if session.with_stack:
        from . import stacks

        session.stack_capture = stacks.capture_stack
        session.tracer = stacks.PythonTracer(_clock, current_buffer, lambda: session.buffers)
    _extras = session.profile_memory or session.with_stack
    session.start_ns = now_ns()
    _active = True
    if session.tracer is not None:
        session.tracer.install()


def stop_session() -> Session | None:
    """Stop recording; return the finished session (None if none was recording)."""
    global _active, _extras, _session
    session = _session
    if session is None or not _active:
        return None
    stop_raw = _clock()
    if session.memory is not None:
        buf = current_buffer()
        if buf is not None:
            session.memory.boundary(buf)
    _extras = False
    _active = False
    if session.tracer is not None:
        session.tracer.uninstall(stop_raw)
    if session.memory is not None:
        session.memory.close()
    session.stop_ns = stop_raw + _offset_ns
    _session = None
    return session


def _after_fork_in_child() -> None:
    """A forked child (e.g. a data-loader worker) does not keep recording into a copy of our buffers."""
    global _active, _extras, _session, _tls
    session = _session
    _extras = False
    _active = False
    _session = None
    _tls = threading.local()
    if session is not None:
        if session.tracer is not None:
            import sys

            sys.setprofile(None)
        if session.memory is not None:
            session.memory.close()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def active_session() -> Session | None:
    """The session recording now, if any."""
    return _session if _active else None
