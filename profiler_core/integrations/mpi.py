"""mpi4py integration: records MPI collectives, point-to-point calls and request waits as
``mpi::<Method>`` communication ops (docs/internals.md §4) while a profile is recording.

How it intercepts: mpi4py's classes (``Comm``, ``Intracomm``, ``Request`` ...) are Cython
extension types whose attributes cannot be set (``TypeError: cannot set 'Allreduce' attribute
of immutable type``), and swapping ``MPI.COMM_WORLD`` for a subclass instance would miss every
communicator the program obtained before profiling started (``comm = MPI.COMM_WORLD`` at the
top of a script), every ``Dup``/``Split`` result and every ``Request``. So ``install()`` puts a
wrapper into the type's own ``__dict__`` (reached through ``gc.get_referents`` of its mapping
proxy) and calls ``PyType_Modified`` so CPython drops its method caches; ``uninstall()`` puts
the original function objects back, so that after profiling ``MPI.Comm.__dict__["Allreduce"]``
is again the very object mpi4py created: zero overhead when not profiling. Where that is not
possible (not CPython), the integration warns and records nothing.
"""

from __future__ import annotations

import gc
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from typing import Any

__all__ = [
    "install",
    "uninstall",
    "is_installed",
    "METHODS",
    "message_info",
    "start_timing",
    "stop_timing",
    "comm_ns",
    "original",
]

# Method tables: name -> (send position, send keyword, recv position, recv keyword,
#                         peer position, peer keyword). -1 / None: the call has no such argument.
# Collective buffer methods: (sendbuf, recvbuf); Bcast's single buffer is both.
_COLL_BUF = dict.fromkeys(
    (
        "Reduce",
        "Allreduce",
        "Allgather",
        "Allgatherv",
        "Alltoall",
        "Alltoallv",
        "Gather",
        "Gatherv",
        "Scatter",
        "Scatterv",
        "Reduce_scatter",
        "Reduce_scatter_block",
        "Scan",
        "Exscan",
        "Ireduce",
        "Iallreduce",
        "Iallgather",
        "Iallgatherv",
        "Ialltoall",
        "Ialltoallv",
        "Igather",
        "Igatherv",
        "Iscatter",
        "Iscatterv",
        "Ireduce_scatter",
        "Ireduce_scatter_block",
        "Iscan",
        "Iexscan",
    ),
    (0, "sendbuf", 1, "recvbuf", -1, None),
)
_COLL_BUF.update(dict.fromkeys(("Bcast", "Ibcast"), (0, "buf", 0, "buf", -1, None)))
_COLL_BUF.update(dict.fromkeys(("Barrier", "Ibarrier"), (-1, None, -1, None, -1, None)))
# Point-to-point buffer methods.
_P2P_BUF = dict.fromkeys(
    ("Send", "Ssend", "Bsend", "Rsend", "Isend", "Issend", "Ibsend", "Irsend"), (0, "buf", -1, None, 1, "dest")
)
_P2P_BUF.update(dict.fromkeys(("Recv", "Irecv"), (-1, None, 0, "buf", 1, "source")))
_P2P_BUF["Sendrecv"] = (0, "sendbuf", 3, "recvbuf", 1, "dest")
_P2P_BUF["Sendrecv_replace"] = (0, "buf", 0, "buf", 1, "dest")
# Pickle-based (lower-case) forms: the object is the message.
_COLL_OBJ = {"bcast": (0, "obj", -1, None, -1, None), "barrier": (-1, None, -1, None, -1, None)}
_COLL_OBJ.update(
    dict.fromkeys(
        ("reduce", "allreduce", "allgather", "alltoall", "gather", "scatter", "scan", "exscan"),
        (0, "sendobj", -1, None, -1, None),
    )
)
_P2P_OBJ = dict.fromkeys(("send", "ssend", "bsend", "isend", "issend", "ibsend"), (0, "obj", -1, None, 1, "dest"))
_P2P_OBJ.update(dict.fromkeys(("recv", "irecv"), (-1, None, 0, "buf", 1, "source")))
_P2P_OBJ["sendrecv"] = (0, "sendobj", 3, "recvbuf", 1, "dest")
# Request completion: instance methods and class methods (Waitall(requests)).
_REQ_INSTANCE = ("Wait", "Test", "wait", "test")
_REQ_CLASS = (
    "Waitall",
    "Waitany",
    "Waitsome",
    "Testall",
    "Testany",
    "Testsome",
    "waitall",
    "waitany",
    "waitsome",
    "testall",
    "testany",
    "testsome",
)

#: Every method name the integration wraps, for documentation and tests.
METHODS: tuple[str, ...] = (
    tuple(_COLL_BUF) + tuple(_P2P_BUF) + tuple(_COLL_OBJ) + tuple(_P2P_OBJ) + _REQ_INSTANCE + _REQ_CLASS
)

_lock = threading.Lock()
_patched: list[tuple[type, str, Any]] = []  # (class, name, original dict value), to restore
_requests: dict[int, tuple] = {}  # id(Request) -> (op name, bytes, weakref), while the request lives
_warned: set[str] = set()
_by_profile = False  # install() was called by the profiler (integrations.activate) and not undone
_timers = 0  # users of start_timing() (the flight recorder): the wrappers stay while > 0
#: nanoseconds spent inside wrapped calls while timing (one list cell: the wrappers add to it without a lock;
#: a lost update between two threads' calls costs one call's time, never a wrong total afterwards)
_comm_ns = [0]
_perf_ns = time.perf_counter_ns


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(f"gpuscope: {message}", RuntimeWarning, stacklevel=3)


# --- message description (pure, never raises; the hot path while recording) -------------------

_dtype_names: dict = {}  # dtype object -> name: numpy's dtype.name is a slow Python property


def _dtype_name(dtype: Any) -> str:
    try:
        return _dtype_names[dtype]
    except KeyError:
        pass
    except TypeError:  # unhashable dtype-like
        return str(getattr(dtype, "name", dtype))
    name = str(getattr(dtype, "name", dtype))
    if len(_dtype_names) > 256:
        _dtype_names.clear()
    _dtype_names[dtype] = name
    return name


_UNKNOWN = (-1, "", -1)


_array_types: set = set()  # types seen to have int .size/.nbytes and a .dtype (numpy, cupy, GPUArray)
_plain_types: set = set()  # types seen without them (int, dict, bytes ...): described another way


def _buffer_info(buf: Any, datatype: Any = None) -> tuple[int, str, int]:
    """(elements, dtype name, bytes) of one buffer object; (-1, "", -1) when unknown."""
    kind = type(buf)
    if kind in _array_types:
        return buf.size, _dtype_name(buf.dtype), buf.nbytes
    if kind not in _plain_types:
        try:  # numpy, cupy, pycuda GPUArray ...
            nbytes, dtype, size = buf.nbytes, buf.dtype, buf.size
            if type(nbytes) is int and type(size) is int and len(_array_types) < 64:  # noqa: E721
                _array_types.add(kind)
            return int(size), _dtype_name(dtype), int(nbytes)
        except AttributeError:
            if len(_plain_types) < 256:
                _plain_types.add(kind)  # no array attributes: skip the try next time
        except (TypeError, ValueError):
            pass
    if isinstance(buf, (bytes, bytearray, memoryview)):
        mv = memoryview(buf)
        if datatype is not None:
            size = datatype.Get_size() or 1
            return mv.nbytes // size, _datatype_name(datatype), mv.nbytes
        return mv.nbytes // (mv.itemsize or 1), "uint8" if mv.format in ("B", "c") else mv.format, mv.nbytes
    return _UNKNOWN


def _datatype_name(datatype: Any) -> str:
    name = datatype.Get_name() or ""
    return name[4:].lower() if name.startswith("MPI_") else name.lower()


def message_info(spec: Any, mpi: Any) -> tuple[int, str, int] | None:
    """(elements, dtype, bytes) of an mpi4py message spec (a buffer, ``[buf, datatype]``,
    ``[buf, count, datatype]``, ``[buf, counts, displs, datatype]`` ...); None for IN_PLACE/None."""
    if type(spec) in _array_types:  # the common case first
        return spec.size, _dtype_name(spec.dtype), spec.nbytes
    if spec is None or spec is mpi.IN_PLACE or spec is mpi.BOTTOM:
        return None
    try:
        if not isinstance(spec, (list, tuple)):
            return _buffer_info(spec)
        if not spec:
            return _UNKNOWN
        buf, rest = spec[0], spec[1:]
        datatype = rest[-1] if rest and isinstance(rest[-1], mpi.Datatype) else None
        if datatype is not None:
            rest = rest[:-1]
        n, dt, nb = _buffer_info(buf, datatype)
        if datatype is not None and not dt:
            dt = _datatype_name(datatype)
        count = None
        if rest:
            first = rest[0]
            if isinstance(first, int):
                count = first
            elif isinstance(first, (list, tuple)):
                # [buf, counts, displs] (vector) or [buf, (count, displ)]
                if (
                    len(rest) == 1
                    and len(first) == 2
                    and all(isinstance(v, int) for v in first)
                    and not isinstance(first, list)
                ):
                    count = first[0]
                else:
                    count = sum(int(v) for v in first)
        if count is not None:
            size = datatype.Get_size() if datatype is not None else (nb // n if n > 0 and nb >= 0 else -1)
            return count, dt, count * size if size >= 0 else -1
        return n, dt, nb
    except Exception:
        return _UNKNOWN


def _object_info(obj: Any) -> tuple[int, str, int]:
    """Pickle-based calls: array-likes are described exactly, other objects by type only."""
    if obj is None:
        return 0, "", 0
    info = _buffer_info(obj)
    return info if info[0] >= 0 else (-1, "object", -1)


def _comm_name(comm: Any) -> str:
    """The communicator's name (`MPI_COMM_WORLD`, or what `Set_name` gave it): the process group of its
    collectives; "" when it has none."""
    try:
        name = comm.Get_name()
    except Exception:
        return ""
    return name.strip() if isinstance(name, str) else ""


def _comm_args(mpi: Any, comm: Any, coll: str, layout: tuple, args: tuple, kwargs: dict, pickled: bool) -> dict:
    """The trace args of one communication call (internals.md §4)."""
    spos, skw, rpos, rkw, ppos, pkw = layout
    nargs = len(args)
    send = recv = None
    if spos >= 0:
        spec = args[spos] if nargs > spos else kwargs.get(skw)
        send = _object_info(spec) if pickled else message_info(spec, mpi)
    if rpos >= 0:
        recv = message_info(args[rpos] if nargs > rpos else kwargs.get(rkw), mpi)
    inp = send or recv
    out = recv or send
    try:
        group = comm.Get_size()
    except Exception:
        group = -1
    if inp is None:  # Barrier, or nothing describable
        out_args = {"Collective name": coll, "Group size": group}
        if spos < 0 and rpos < 0:
            out_args["bytes"] = 0
    else:
        out_args = {
            "Collective name": coll,
            "In msg nelems": inp[0],
            "Out msg nelems": out[0],
            "dtype": inp[1] or out[1],
            "Group size": group,
            "bytes": inp[2] if inp[2] >= out[2] else out[2],
        }
        if inp[0] < 0:
            del out_args["In msg nelems"]
        if out[0] < 0:
            del out_args["Out msg nelems"]
        if not out_args["dtype"]:
            del out_args["dtype"]
        if out_args["bytes"] < 0:
            del out_args["bytes"]
    if group < 0:
        del out_args["Group size"]
    if ppos < 0:
        name = _comm_name(comm)
        if name:
            out_args["Process Group Name"] = name
    if ppos >= 0:
        peer = args[ppos] if nargs > ppos else kwargs.get(pkw)
        if isinstance(peer, int):
            out_args["peer"] = peer
    return out_args


def _array_inputs(layout: tuple, args: tuple, kwargs: dict) -> tuple:
    """The array-like send/receive buffers of a call, as op inputs (``Input Dims`` with record_shapes)."""
    found: list = []
    nargs = len(args)
    for pos, kw in ((layout[0], layout[1]), (layout[2], layout[3])):
        if pos < 0:
            continue
        spec = args[pos] if nargs > pos else kwargs.get(kw)
        if isinstance(spec, (list, tuple)) and spec:
            spec = spec[0]
        if hasattr(spec, "shape") and hasattr(spec, "dtype") and (not found or found[0] is not spec):
            found.append(spec)
    return tuple(found)


# --- wrappers ---------------------------------------------------------------------------------


def _remember_request(req: Any, coll: str, op_args: dict) -> None:
    """Keep which op made a request, so that its Wait can name it; forgotten when it dies."""
    key = id(req)
    try:
        ref = weakref.ref(req, lambda _r, k=key: _requests.pop(k, None))
    except TypeError:
        return
    _requests[key] = (coll, op_args.get("bytes", -1), ref)


def _wait_args(coll: str, reqs: list) -> dict:
    out: dict = {"Collective name": coll, "Requests": len(reqs)}
    ops, total, sized = [], 0, False
    for r in reqs:
        known = _requests.get(id(r))
        if known is not None:
            ops.append(known[0])
            if known[1] >= 0:
                total, sized = total + known[1], True
    if ops:
        out["Request ops"] = ",".join(sorted(set(ops)))
    if sized:
        out["bytes"] = total
    return out


def _make_comm_wrapper(
    mpi: Any,
    orig: Callable,
    method: str,
    layout: tuple,
    pickled: bool,
    is_recording: Callable[[], bool],
    record_op: Callable,
    shapes_enabled: Callable[[], bool],
) -> Callable:
    op_name = f"mpi::{method}"
    coll = method.lower()
    returns_request = method[:1] in "Ii" and method.lower() not in ("iprobe",)

    def wrapper(self, *args, **kwargs):
        if not is_recording():
            if not _timers:
                return orig(self, *args, **kwargs)
            t0 = _perf_ns()
            try:
                return orig(self, *args, **kwargs)
            finally:
                _comm_ns[0] += _perf_ns() - t0
        t0 = _perf_ns()
        try:
            op_args = _comm_args(mpi, self, coll, layout, args, kwargs, pickled)
            if shapes_enabled():
                with record_op(op_name, *_array_inputs(layout, args, kwargs), args=op_args):
                    result = orig(self, *args, **kwargs)
            else:
                with record_op(op_name, args=op_args):
                    result = orig(self, *args, **kwargs)
        finally:
            if _timers:
                _comm_ns[0] += _perf_ns() - t0
        if returns_request and result is not None:
            _remember_request(result, coll, op_args)
        return result

    wrapper.__qualname__ = getattr(orig, "__qualname__", method)
    return _mark_wrapper(wrapper, orig, method)


def _mark_wrapper(wrapper: Callable, orig: Any, method: str) -> Callable:
    """Give ``wrapper`` the original's name and docs, and mark it as ours (uninstall checks the mark)."""
    wrapper.__name__ = method
    wrapper.__doc__ = getattr(orig, "__doc__", None)
    wrapper.__wrapped__ = orig
    wrapper._gpuscope_wrapper = True
    return wrapper


def _make_request_wrapper(
    orig: Callable, method: str, is_recording: Callable[[], bool], record_op: Callable
) -> Callable:
    op_name = f"mpi::{method}"
    coll = method.lower()

    def wrapper(self, *args, **kwargs):
        t0 = _perf_ns()
        try:
            if not is_recording():
                return orig(self, *args, **kwargs)
            with record_op(op_name, args=_wait_args(coll, [self])):
                return orig(self, *args, **kwargs)
        finally:
            if _timers:
                _comm_ns[0] += _perf_ns() - t0

    return _mark_wrapper(wrapper, orig, method)


def _make_request_classmethod(
    orig_cm: Any, method: str, is_recording: Callable[[], bool], record_op: Callable
) -> classmethod:
    op_name = f"mpi::{method}"
    coll = method.lower()

    def wrapper(cls, requests, *args, **kwargs):
        bound = orig_cm.__get__(None, cls)
        t0 = _perf_ns()
        try:
            if not is_recording():
                return bound(requests, *args, **kwargs)
            if isinstance(requests, (list, tuple)):
                reqs = requests
            else:
                try:  # an iterator: materialise it once, pass the list on
                    requests = reqs = list(requests)
                except TypeError:
                    reqs = ()
            with record_op(op_name, args=_wait_args(coll, reqs)):
                return bound(requests, *args, **kwargs)
        finally:
            if _timers:
                _comm_ns[0] += _perf_ns() - t0

    return classmethod(_mark_wrapper(wrapper, orig_cm, method))


# --- patching the extension types --------------------------------------------------------------


def _type_dict(cls: type) -> dict:
    """The real, writable dict behind ``cls.__dict__`` (CPython)."""
    (d,) = [r for r in gc.get_referents(cls.__dict__) if isinstance(r, dict)]
    return d


def _type_modified(cls: type) -> None:
    import ctypes

    ctypes.pythonapi.PyType_Modified(ctypes.py_object(cls))


def _set(cls: type, name: str, value: Any) -> None:
    _type_dict(cls)[name] = value
    _type_modified(cls)


def _resolve_core() -> tuple[Callable[[], bool], Callable, Callable[[], bool]]:
    """The core's cheap recording check, op API and record_shapes check (imported late)."""
    from profiler_core.ops import record_op
    from profiler_core.recording import is_recording, record_shapes_enabled

    return is_recording, record_op, record_shapes_enabled


def is_installed() -> bool:
    """Whether the wrappers are in place right now."""
    return bool(_patched)


def install() -> None:
    """Wrap mpi4py's communication methods (idempotent). Called by the core when recording starts."""
    global _by_profile
    with _lock:
        _by_profile = True
        _patch()


def start_timing() -> bool:
    """Count the time spent inside mpi4py's communication calls from now on (`comm_ns()`), for the flight
    recorder, whether or not a profile records; the wrappers stay until every `start_timing` had its
    `stop_timing`. False when mpi4py is not imported or cannot be wrapped (nothing is timed then)."""
    global _timers
    with _lock:
        if sys.modules.get("mpi4py.MPI") is None:
            return False
        _patch()
        if not _patched:
            return False
        _timers += 1
        return True


def stop_timing() -> None:
    """Undo one `start_timing`; the last one puts mpi4py's methods back unless a profile is recording."""
    global _timers
    with _lock:
        _timers = max(0, _timers - 1)
        if not _timers and not _by_profile:
            _restore()


def comm_ns() -> int:
    """Nanoseconds spent inside wrapped mpi4py calls while timing (a running total: callers take differences)."""
    return _comm_ns[0]


def original(obj: Any, name: str) -> Any:
    """The unwrapped method `name` of an mpi4py object's type, to call as `original(comm, "Allgather")(comm, ...)`:
    the recorder's own exchange is neither timed nor recorded in a trace."""
    for cls in type(obj).__mro__:
        fn = cls.__dict__.get(name)
        if fn is not None:
            return fn.__wrapped__ if getattr(fn, "_gpuscope_wrapper", False) else fn
    raise AttributeError(name)


def _patch() -> None:
    """Put the wrappers in place (under `_lock`; idempotent)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None:
        return
    if _patched:
        return
    if sys.implementation.name != "cpython":
        _warn_once("MPI calls are not recorded on this Python implementation (needs CPython)")
        return
    try:
        if not mpi.Is_initialized() or mpi.Is_finalized():
            from profiler_core.distinfo import MPI_NOT_INITIALISED, warn_once

            warn_once(MPI_NOT_INITIALISED)
    except Exception:
        pass
    is_recording, record_op, shapes_enabled = _resolve_core()
    comm_classes = [
        getattr(mpi, n)
        for n in ("Comm", "Intracomm", "Topocomm", "Cartcomm", "Graphcomm", "Distgraphcomm", "Intercomm")
        if hasattr(mpi, n)
    ]
    req_classes = [getattr(mpi, n) for n in ("Request", "Prequest", "Grequest") if hasattr(mpi, n)]
    try:
        for table, pickled in ((_COLL_BUF, False), (_P2P_BUF, False), (_COLL_OBJ, True), (_P2P_OBJ, True)):
            for method, layout in table.items():
                for cls in comm_classes:
                    orig = cls.__dict__.get(method)
                    if orig is None:
                        continue
                    _set(
                        cls,
                        method,
                        _make_comm_wrapper(mpi, orig, method, layout, pickled, is_recording, record_op, shapes_enabled),
                    )
                    _patched.append((cls, method, orig))
        for cls in req_classes:
            for method in _REQ_INSTANCE:
                orig = cls.__dict__.get(method)
                if orig is not None:
                    _set(cls, method, _make_request_wrapper(orig, method, is_recording, record_op))
                    _patched.append((cls, method, orig))
            for method in _REQ_CLASS:
                orig = cls.__dict__.get(method)
                if orig is not None:
                    _set(cls, method, _make_request_classmethod(orig, method, is_recording, record_op))
                    _patched.append((cls, method, orig))
    except Exception as exc:  # leave mpi4py exactly as it was rather than half-patched
        _restore()
        _warn_once(f"MPI calls are not recorded: could not wrap mpi4py ({type(exc).__name__}: {exc})")


def _restore() -> None:
    while _patched:
        cls, method, orig = _patched.pop()
        _set(cls, method, orig)


def uninstall() -> None:
    """Put mpi4py's original method objects back (unless the flight recorder still times the calls). Called by
    the core when recording stops."""
    global _by_profile
    with _lock:
        _by_profile = False
        if not _timers:
            _restore()
        _requests.clear()


def _register() -> None:
    from profiler_core import integrations

    integrations.register(integrations.Integration(module_name="mpi4py.MPI", install=install, uninstall=uninstall))


_register()
