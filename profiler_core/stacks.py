"""with_stack: the Python call stack of each op and ``python_function`` events.

``capture_stack()`` walks the caller's frames (skipping profiler_core's own) and returns torch's
``Call stack`` string: ``"file(line): func;"`` per frame, innermost first, trailing ``;``; the line
is the frame's current line (the call site). ``PythonTracer`` installs a ``sys.setprofile`` hook
(and ``threading.setprofile`` for threads started while recording) only while a with_stack session
records, and turns call/return pairs into ``python_function`` events with ``Python id`` /
``Python parent id``; frames already running at start are opened with their current line, frames
still open at stop end at the stop time. Threads that were already running when recording started
get python_function events only on Python >= 3.12 (``threading.setprofile_all_threads``).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_name_cache: dict = {}
_path_cache: dict = {}


def _is_internal(filename: str) -> bool:
    """Frames of profiler_core itself (recording, integrations' wrappers; not samples/tests) are hidden."""
    return filename.startswith(_PKG_DIR + os.sep)


_internal_cache: dict = {}


# The profiler's control path (step/start/stop, trace assembly, on_trace_ready): everything called
# from it is hidden, as torch stops its tracer before that work. Wrappers that call user code
# (record_function, operator, integrations) only hide their own frames.
_CONTROL_FILE = os.path.join(_PKG_DIR, "profiler.py")


def _internal(code) -> bool:
    fn = code.co_filename
    r = _internal_cache.get(fn)
    if r is None:
        r = _internal_cache[fn] = _is_internal(os.path.abspath(fn)) if not fn.startswith("<") else False
    return r


def short_path(filename: str) -> str:
    """``filename`` without its longest sys.path prefix (as torch shows source locations)."""
    r = _path_cache.get(filename)
    if r is None:
        best = ""
        for p in sys.path:
            if p and filename.startswith(p.rstrip(os.sep) + os.sep) and len(p) > len(best):
                best = p.rstrip(os.sep) + os.sep
        r = _path_cache[filename] = filename[len(best) :] if best else filename
    return r


def frame_name(code, line: int | None = None) -> str:
    """torch's frame label: ``"path(line): func"`` (line defaults to the function's first line)."""
    if line is None:
        r = _name_cache.get(code)
        if r is None:
            r = _name_cache[code] = f"{short_path(code.co_filename)}({code.co_firstlineno}): {code.co_name}"
        return r
    return f"{short_path(code.co_filename)}({line}): {code.co_name}"


def capture_stack(skip: int = 1) -> str:
    """The current Python stack as torch's ``Call stack`` string (innermost first, trailing ';')."""
    f = sys._getframe(skip)
    parts = []
    while f is not None:
        code = f.f_code
        if not _internal(code):
            parts.append(frame_name(code, f.f_lineno))
        f = f.f_back
    if not parts:
        return ""
    return ";".join(parts) + ";"


class _PyState:
    """Per-thread tracer state: the open Python frames, and the profiler call being hidden (if any)."""

    __slots__ = ("stack", "hidden")

    def __init__(self) -> None:
        self.stack: list = []  # [frame_or_None, t0, name, python_id, parent_id]
        self.hidden = None  # the running frame of the profiler's own control path (step/stop...)


class PythonTracer:
    """A sys.setprofile hook recording python_function events into the session's thread buffers."""

    def __init__(self, clock: Callable[[], int], current_buffer: Callable, buffers: Callable) -> None:
        self._clock = clock
        self._current_buffer = current_buffer
        self._buffers = buffers
        self._ids = 0
        self._lock = threading.Lock()
        self._prev = None
        self._prev_threading = None

    def _next_id(self) -> int:
        self._ids += 1  # under the GIL, from the profile hook: good enough uniqueness
        return self._ids

    def _state(self):
        buf = self._current_buffer()
        if buf is None:
            return None, None
        st = buf.py
        if st is None:
            st = buf.py = _PyState()
        return buf, st

    def install(self) -> None:
        """Start tracing this thread (opening its running frames) and threads started from now on."""
        buf, st = self._state()
        if st is not None:
            frames = []
            f = sys._getframe(1)
            while f is not None:
                if not _internal(f.f_code):
                    frames.append(f)
                f = f.f_back
            now = self._clock()
            for f in reversed(frames):
                parent = st.stack[-1][3] if st.stack else None
                st.stack.append([f, now, frame_name(f.f_code, f.f_lineno), self._next_id(), parent])
        self._prev = sys.getprofile()
        self._prev_threading = threading.getprofile()
        threading.setprofile(self._hook)
        if hasattr(threading, "setprofile_all_threads"):  # 3.12+: threads already running too
            threading.setprofile_all_threads(self._hook)
        sys.setprofile(self._hook)

    def uninstall(self, stop_raw: int) -> None:
        """Stop tracing; frames still open end at ``stop_raw``."""
        if hasattr(threading, "setprofile_all_threads"):
            threading.setprofile_all_threads(None)
        sys.setprofile(self._prev)
        threading.setprofile(self._prev_threading)
        for buf in list(self._buffers()):
            st = buf.py
            if st is None:
                continue
            while st.stack:
                _, t0, name, pid_, parent = st.stack.pop()
                buf.python.append((t0, stop_raw, name, pid_, parent))

    def _hook(self, frame, event, arg) -> None:
        if event == "call":
            code = frame.f_code
            if _internal(code):
                if code.co_filename == _CONTROL_FILE:
                    buf, st = self._state()
                    if st is not None and st.hidden is None:
                        st.hidden = frame
                return
            buf, st = self._state()
            if st is not None and st.hidden is None:
                stack = st.stack
                stack.append([frame, self._clock(), frame_name(code), self._next_id(), stack[-1][3] if stack else None])
        elif event == "return":
            buf, st = self._state()
            if st is None:
                return
            if st.hidden is not None:
                if st.hidden is frame:
                    st.hidden = None
                return
            stack = st.stack
            if stack and stack[-1][0] is frame:  # frames opened before install are ignored
                _, t0, name, pyid, parent = stack.pop()
                buf.python.append((t0, self._clock(), name, pyid, parent))
        elif event == "c_call":
            if not _internal(frame.f_code):
                buf, st = self._state()
                if st is None or st.hidden is not None:
                    return
                t = self._clock()
                try:
                    name = repr(arg)
                except Exception:  # a broken __repr__ must not break the user's program
                    name = "<built-in function>"
                stack = st.stack
                stack.append([arg, t, name, self._next_id(), stack[-1][3] if stack else None])
        else:  # c_return / c_exception
            buf, st = self._state()
            if st is None or st.hidden is not None:
                return
            stack = st.stack
            if stack and stack[-1][0] is arg:
                _, t0, name, pyid, parent = stack.pop()
                buf.python.append((t0, self._clock(), name, pyid, parent))
