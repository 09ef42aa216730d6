"""PyCUDA auto-instrumentation: launches, copies, memsets, allocations and gpuarray operations as ops.

Installed by the integration registry while a profile records CPU activity and pycuda is imported;
uninstalled after, restoring every patched attribute (PyCUDA is then exactly as before: with profiling
off, no gpuscope code runs on its paths). Patch points:
- `Function._launch_kernel`, through which `__call__` and every `prepared_*` launch pass: one op per launch,
  named by the kernel's function name (learnt from `Module.get_function` while installed; launches of
  functions fetched earlier get a placeholder name that `profiler_core.cuda.link_trace` replaces with the
  kernel's name from CUPTI). Inside an `ElementwiseKernel`/`ReductionKernel` call, the kernel's own op
  (named like the kernel) is the launching op.
- module-level memcpy/memset/mem_alloc functions; gpuarray functions whose `allocator=drv.mem_alloc`
  default was bound at definition get that default swapped too.
- `GPUArray` arithmetic and transfer methods and gpuarray module functions, as `gpuarray::<name>` ops
  with the arrays as inputs (shapes with `record_shapes`).
- `DeviceMemoryPool.allocate`/`free_held`.
When the CUDA-event fallback is capturing (no CUPTI), launches and copies are also timed with events.

Hot path (DESIGN §5: < 2 us per auto-instrumented call): a launch, copy, memset or mem_alloc is a leaf op
(pycuda's C++ does not call back into Python), so in the common case (no shapes, stacks, memory, event fallback or
enclosing kernel-object call: `recording.plain_ops()`) it is recorded with `recording.begin_op`/`end_op`
(`_make_launch`, `_make_leaf`) instead of `record_op`'s context manager: the same event, with the op open
as the thread's innermost record (`current_external_id()`) while the call runs;
tests/test_pycuda_hooks.py::test_fast_path_events_match_record_op keeps the two in step. Every other case
goes through `record_op`.
"""

from __future__ import annotations

import sys
import threading

from .. import recording
from ..cuda import event_backend
from ..cuda.link import LAUNCH_PLACEHOLDER  # noqa: E402  (shared with the linker)
from ..ops import record_op

_saved: dict[str, list[tuple[object, str, object, bool]]] = {}  # group (module name) -> patches
_orig_mem_alloc = None
_lock = threading.RLock()


class _KernelCallState(threading.local):
    """Per thread: the name of the ElementwiseKernel/ReductionKernel op in progress (it owns the launches)."""

    kernel_name: str | None = None


_tls = _KernelCallState()
# Threads inside a hooked kernel-object call right now; while empty (nearly always) a launch skips the
# thread-local look-up. set.add/discard are atomic, so no lock is needed.
_in_kernel_call: set[int] = set()
_get_ident = threading.get_ident


_COPIES = {  # name: (copy kind, src kind, dst kind, bytes from args, stream arg index, driver API name)
    "memcpy_htod": (1, 1, 3, lambda a: _nbytes(a[1]), None, "cuMemcpyHtoD_v2"),
    "memcpy_htod_async": (1, 2, 3, lambda a: _nbytes(a[1]), 2, "cuMemcpyHtoDAsync_v2"),
    "memcpy_dtoh": (2, 3, 1, lambda a: _nbytes(a[0]), None, "cuMemcpyDtoH_v2"),
    "memcpy_dtoh_async": (2, 3, 2, lambda a: _nbytes(a[0]), 2, "cuMemcpyDtoHAsync_v2"),
    "memcpy_dtod": (8, 3, 3, lambda a: int(a[2]), None, "cuMemcpyDtoD_v2"),
    "memcpy_dtod_async": (8, 3, 3, lambda a: int(a[2]), 3, "cuMemcpyDtoDAsync_v2"),
    "memcpy_peer": (10, 3, 3, lambda a: int(a[2]), None, "cuMemcpyPeer"),
    "memcpy_peer_async": (10, 3, 3, lambda a: int(a[2]), 5, "cuMemcpyPeerAsync"),
    # CUDA arrays (memory kind 4): memcpy_atod(dest, ary, index, len), memcpy_dtoa(ary, index, src, len),
    # memcpy_atoa(dest, dest_index, src, src_index, len)
    "memcpy_atod": (6, 4, 3, lambda a: int(a[3]), None, "cuMemcpyAtoD_v2"),
    "memcpy_dtoa": (7, 3, 4, lambda a: int(a[3]), None, "cuMemcpyDtoA_v2"),
    "memcpy_atoa": (5, 4, 4, lambda a: int(a[4]), None, "cuMemcpyAtoA_v2"),
}
_SETS = {  # name: (bytes per element, 2D?, stream arg index, driver API name)
    "memset_d8": (1, False, None, "cuMemsetD8_v2"),
    "memset_d16": (2, False, None, "cuMemsetD16_v2"),
    "memset_d32": (4, False, None, "cuMemsetD32_v2"),
    "memset_d8_async": (1, False, 3, "cuMemsetD8Async"),
    "memset_d16_async": (2, False, 3, "cuMemsetD16Async"),
    "memset_d32_async": (4, False, 3, "cuMemsetD32Async"),
    "memset_d2d8": (1, True, None, "cuMemsetD2D8_v2"),
    "memset_d2d16": (2, True, None, "cuMemsetD2D16_v2"),
    "memset_d2d32": (4, True, None, "cuMemsetD2D32_v2"),
    "memset_d2d8_async": (1, True, 5, "cuMemsetD2D8Async"),
    "memset_d2d16_async": (2, True, 5, "cuMemsetD2D16Async"),
    "memset_d2d32_async": (4, True, 5, "cuMemsetD2D32Async"),
}
_GPUARRAY_METHODS = (
    "__add__",
    "__radd__",
    "__sub__",
    "__rsub__",
    "__mul__",
    "__rmul__",
    "__truediv__",
    "__rtruediv__",
    "__div__",
    "__rdiv__",
    "__neg__",
    "__iadd__",
    "__isub__",
    "__imul__",
    "__itruediv__",
    "__pow__",
    "__rpow__",
    "__abs__",
    "fill",
    "astype",
    "get",
    "set",
    "get_async",
    "set_async",
    "copy",
    "reshape",
    "ravel",
    "view",
    "conj",
    "mul_add",
    "_axpbyz",
    "_axpbz",
    "_elwise_multiply",
    "_div",
    "_rdiv_scalar",
)
_GPUARRAY_FUNCTIONS = (
    "to_gpu",
    "to_gpu_async",
    "empty",
    "zeros",
    "ones",
    "empty_like",
    "zeros_like",
    "ones_like",
    "arange",
    "take",
    "dot",
    "vdot",
    "sum",
    "subset_dot",
    "max",
    "min",
    "minimum",
    "maximum",
    "if_positive",
    "concatenate",
    "stack",
    "transpose",
    "reshape",
)


def _nbytes(x) -> int:
    n = getattr(x, "nbytes", None)
    if n is None:
        try:
            n = memoryview(x).nbytes
        except TypeError:
            n = 0
    return int(n)


def _patch(owner, attr: str, new, group: str = "pycuda.driver") -> None:
    """Replace owner.attr, remembering how to put it back (a class attribute or an inherited one)."""
    try:
        own = attr in vars(owner) or attr.startswith("__") and attr.endswith("defaults__")
    except TypeError:
        own = True
    orig = getattr(owner, attr) if attr.endswith("defaults__") or attr not in vars(owner) else vars(owner)[attr]
    _saved.setdefault(group, []).append((owner, attr, orig, own))
    setattr(owner, attr, new)


def _stream_arg(args, kwargs, index):
    if index is None:
        return None
    if "stream" in kwargs:
        return kwargs["stream"]
    return args[index] if len(args) > index else None


# ---- launches ----------------------------------------------------------------------------------
def _kernel_fields(func, name: str, grid, block, shared) -> dict:
    """Launch configuration for the CUDA-event fallback (CUPTI reports it itself)."""
    grid = tuple(grid) + (1,) * (3 - len(grid))
    block = tuple(block) + (1,) * (3 - len(block))
    cache = func.__dict__ if hasattr(func, "__dict__") else {}
    if "_gpuscope_attrs" not in cache:
        try:
            cache["_gpuscope_attrs"] = (int(func.num_regs), int(func.shared_size_bytes))
        except Exception:
            cache["_gpuscope_attrs"] = (0, 0)
    regs, static = cache["_gpuscope_attrs"]
    return {
        "name": name if name != LAUNCH_PLACEHOLDER else "kernel",
        "grid_x": grid[0],
        "grid_y": grid[1],
        "grid_z": grid[2],
        "block_x": block[0],
        "block_y": block[1],
        "block_z": block[2],
        "registers_per_thread": regs,
        "static_shared_memory": static,
        "dynamic_shared_memory": int(shared or 0),
    }


def _make_launch(orig):
    # Locals bound once: this wrapper runs on every kernel launch while profiling.
    backend, in_kernel_call, placeholder, slow = event_backend, _in_kernel_call, LAUNCH_PLACEHOLDER, _launch_slow
    is_recording, plain_ops, begin_op, end_op = (
        recording.is_recording,
        recording.plain_ops,
        recording.begin_op,
        recording.end_op,
    )

    def _launch_kernel(self, grid, block, arg_buf, shared, stream):
        if not is_recording():
            return orig(self, grid, block, arg_buf, shared, stream)
        try:
            name = self.__dict__.get("_gpuscope_name", placeholder)
        except AttributeError:
            name = placeholder
        if in_kernel_call or backend._current is not None or not plain_ops():
            return slow(orig, self, name, grid, block, arg_buf, shared, stream)
        token = begin_op(name)
        try:
            return orig(self, grid, block, arg_buf, shared, stream)
        finally:
            end_op(token)

    return _launch_kernel


def _launch_slow(orig, self, name: str, grid, block, arg_buf, shared, stream):
    """A launch inside a kernel-object call, under the event fallback, or with shapes/stacks/memory."""
    fb = event_backend._current
    kernel_name = _tls.kernel_name if _in_kernel_call else None
    if kernel_name is not None:  # the ElementwiseKernel/ReductionKernel op launches it
        if fb is None:
            return orig(self, grid, block, arg_buf, shared, stream)
        with fb.span("CONCURRENT_KERNEL", stream, _kernel_fields(self, kernel_name, grid, block, shared)):
            return orig(self, grid, block, arg_buf, shared, stream)
    with record_op(name):
        if fb is None:
            return orig(self, grid, block, arg_buf, shared, stream)
        with fb.span("CONCURRENT_KERNEL", stream, _kernel_fields(self, name, grid, block, shared)):
            return orig(self, grid, block, arg_buf, shared, stream)


def _make_get_function(orig):
    def get_function(self, name):
        func = orig(self, name)
        try:
            func._gpuscope_name = name
        except Exception:
            pass
        return func

    return get_function


def _kernel_object_name(obj, default: str) -> str:
    """ElementwiseKernel: gen_kwargs["name"]; ReductionKernel: the name it was built with, if seen."""
    own = getattr(obj, "__dict__", {})
    if own.get("_gpuscope_name"):
        return own["_gpuscope_name"]
    stage1 = getattr(getattr(obj, "stage1_func", None), "__self__", None)
    fname = getattr(stage1, "__dict__", {}).get("_gpuscope_name") if stage1 is not None else None
    if fname:
        return fname[: -len("_stage1")] if fname.endswith("_stage1") else fname
    gen = getattr(obj, "gen_kwargs", None)
    if isinstance(gen, dict) and gen.get("name"):
        return str(gen["name"])
    return str(getattr(obj, "name", None) or default)


def _make_kernel_call(orig, default: str):
    def __call__(self, *args, **kwargs):
        if not recording.is_recording():
            return orig(self, *args, **kwargs)
        name = _kernel_object_name(self, default)
        with record_op(name, *args):
            prev = _tls.kernel_name
            _tls.kernel_name = name
            outermost = prev is None
            if outermost:
                _in_kernel_call.add(_get_ident())
            try:
                return orig(self, *args, **kwargs)
            finally:
                _tls.kernel_name = prev
                if outermost:
                    _in_kernel_call.discard(_get_ident())

    return __call__


# ---- copies, memsets, allocations --------------------------------------------------------------
def _make_leaf(name: str, op_name: str, orig, slow, nbytes_of=None, timed: bool = True):
    """Wrap orig as the leaf op `op_name`: recorded inline in the common case, else by slow(*args, **kwargs).

    Inline, it writes what `with record_op(op_name, args=trace_args):` writes when no shapes, stacks or
    memory are recorded, with a frame and a context manager less per call. `nbytes_of(args)` gives the
    `bytes` trace arg (allocations); `timed`: the CUDA-event fallback times this call (copies, memsets).
    """
    backend = event_backend
    is_recording, plain_ops, begin_op, end_op = (
        recording.is_recording,
        recording.plain_ops,
        recording.begin_op,
        recording.end_op,
    )

    def wrapper(*args, **kwargs):
        if not is_recording():
            return orig(*args, **kwargs)
        if not plain_ops() or (timed and backend._current is not None):
            return slow(*args, **kwargs)
        trace_args = None
        if nbytes_of is not None:
            try:
                trace_args = {"bytes": int(nbytes_of(args))}
            except Exception:
                trace_args = {"bytes": 0}
        token = begin_op(op_name, trace_args)
        try:
            return orig(*args, **kwargs)
        finally:
            end_op(token)

    wrapper.__name__ = name
    return wrapper


def _make_copy(name, orig, spec):
    copy_kind, src_kind, dst_kind, nbytes_of, stream_index, api = spec
    op_name = f"pycuda::{name}"

    def slow(*args, **kwargs):
        with record_op(op_name, *args):
            fb = event_backend.current()
            if fb is None:
                return orig(*args, **kwargs)
            try:
                fields = {"bytes": nbytes_of(args), "copy_kind": copy_kind, "src_kind": src_kind, "dst_kind": dst_kind}
            except Exception:
                fields = {"bytes": 0, "copy_kind": copy_kind, "src_kind": src_kind, "dst_kind": dst_kind}
            with fb.span("MEMCPY", _stream_arg(args, kwargs, stream_index), fields, api):
                return orig(*args, **kwargs)

    return _make_leaf(name, op_name, orig, slow)


def _make_set(name, orig, spec):
    width, two_d, stream_index, api = spec
    op_name = f"pycuda::{name}"

    def slow(*args, **kwargs):
        with record_op(op_name, *args):
            fb = event_backend.current()
            if fb is None:
                return orig(*args, **kwargs)
            try:
                count = int(args[3]) * int(args[4]) if two_d else int(args[2])
            except Exception:
                count = 0
            with fb.span(
                "MEMSET", _stream_arg(args, kwargs, stream_index), {"bytes": count * width, "memory_kind": 3}, api
            ):
                return orig(*args, **kwargs)

    return _make_leaf(name, op_name, orig, slow)


def _make_alloc(name, orig, nbytes_of):
    op_name = f"pycuda::{name}"

    def slow(*args, **kwargs):
        try:
            nbytes = int(nbytes_of(args))
        except Exception:
            nbytes = 0
        with record_op(op_name, args={"bytes": nbytes}):
            return orig(*args, **kwargs)

    return _make_leaf(name, op_name, orig, slow, nbytes_of, timed=False)  # the fallback doesn't time allocs


def _make_op(name, orig):
    op_name = f"gpuarray::{name}"

    def wrapper(*args, **kwargs):
        if not recording.is_recording():
            return orig(*args, **kwargs)
        with record_op(op_name, *args, **kwargs):
            return orig(*args, **kwargs)

    wrapper.__name__ = getattr(orig, "__name__", name)
    wrapper.__qualname__ = getattr(orig, "__qualname__", name)
    wrapper.__doc__ = getattr(orig, "__doc__", None)
    return wrapper


def _make_pool_op(name, orig, nbytes_of=None):
    op_name = f"pycuda::DeviceMemoryPool.{name}"

    def wrapper(self, *args, **kwargs):
        if not recording.is_recording():
            return orig(self, *args, **kwargs)
        extra = None
        if nbytes_of is not None:
            try:
                extra = {"bytes": int(nbytes_of(args))}
            except Exception:
                extra = None
        with record_op(op_name, args=extra):
            return orig(self, *args, **kwargs)

    return wrapper


def _swap_defaults(module, old, new) -> None:
    """Point `allocator=old` defaults bound at definition time (gpuarray's) at `new`, restorably."""
    targets = []
    for obj in list(vars(module).values()):
        if callable(obj) and hasattr(obj, "__defaults__"):
            targets.append(obj)
        elif isinstance(obj, type):
            targets += [m for m in vars(obj).values() if callable(m) and hasattr(m, "__defaults__")]
    for fn in targets:
        d = fn.__defaults__
        if d and any(v is old for v in d):
            _patch(fn, "__defaults__", tuple(new if v is old else v for v in d), "pycuda.gpuarray")
        kd = getattr(fn, "__kwdefaults__", None)
        if kd and any(v is old for v in kd.values()):
            _patch(fn, "__kwdefaults__", {k: (new if v is old else v) for k, v in kd.items()}, "pycuda.gpuarray")


# ---- install / uninstall (one group per pycuda module, so a module imported mid-profile is covered) ----
def _install_driver(drv) -> None:
    global _orig_mem_alloc
    g = "pycuda.driver"
    _patch(drv.Function, "_launch_kernel", _make_launch(drv.Function._launch_kernel), g)
    if hasattr(drv, "Module") and hasattr(drv.Module, "get_function"):
        _patch(drv.Module, "get_function", _make_get_function(drv.Module.get_function), g)
    for name, spec in _COPIES.items():
        if hasattr(drv, name):
            _patch(drv, name, _make_copy(name, getattr(drv, name), spec), g)
    for name, spec in _SETS.items():
        if hasattr(drv, name):
            _patch(drv, name, _make_set(name, getattr(drv, name), spec), g)
    if hasattr(drv, "mem_alloc"):
        _orig_mem_alloc = drv.mem_alloc
        _patch(drv, "mem_alloc", _make_alloc("mem_alloc", drv.mem_alloc, lambda a: a[0]), g)
    if hasattr(drv, "mem_alloc_pitch"):
        _patch(
            drv,
            "mem_alloc_pitch",
            _make_alloc("mem_alloc_pitch", drv.mem_alloc_pitch, lambda a: int(a[0]) * int(a[1])),
            g,
        )


def _install_gpuarray(ga) -> None:
    g = "pycuda.gpuarray"
    drv = sys.modules.get("pycuda.driver")
    if drv is not None and _orig_mem_alloc is not None and "pycuda.driver" in _saved:
        _swap_defaults(ga, _orig_mem_alloc, drv.mem_alloc)  # before wrapping: the wrappers have no defaults
    cls = getattr(ga, "GPUArray", None)
    if cls is not None:
        for name in _GPUARRAY_METHODS:
            if name in vars(cls):
                _patch(cls, name, _make_op(name if name.startswith("__") else f"GPUArray.{name}", vars(cls)[name]), g)
    for name in _GPUARRAY_FUNCTIONS:
        fn = vars(ga).get(name)
        if callable(fn) and not isinstance(fn, type):
            _patch(ga, name, _make_op(name, fn), g)


def _install_elementwise(el) -> None:
    if hasattr(el, "ElementwiseKernel"):
        _patch(
            el.ElementwiseKernel,
            "__call__",
            _make_kernel_call(el.ElementwiseKernel.__call__, "kernel"),
            "pycuda.elementwise",
        )


def _make_reduction_init(orig):
    def __init__(self, *args, **kwargs):
        orig(self, *args, **kwargs)
        name = kwargs.get("name", args[5] if len(args) > 5 else None)
        if name:
            try:
                self._gpuscope_name = str(name)
            except Exception:
                pass

    return __init__


def _install_reduction(red) -> None:
    if hasattr(red, "ReductionKernel"):
        cls = red.ReductionKernel
        _patch(cls, "__init__", _make_reduction_init(cls.__init__), "pycuda.reduction")
        _patch(cls, "__call__", _make_kernel_call(cls.__call__, "reduce_kernel"), "pycuda.reduction")


def _install_tools(tools) -> None:
    pool = getattr(tools, "DeviceMemoryPool", None)
    if pool is None:
        return
    if hasattr(pool, "allocate"):
        _patch(pool, "allocate", _make_pool_op("allocate", pool.allocate, lambda a: a[0]), "pycuda.tools")
    if hasattr(pool, "free_held"):
        _patch(pool, "free_held", _make_pool_op("free_held", pool.free_held), "pycuda.tools")


_INSTALLERS = {
    "pycuda.driver": _install_driver,
    "pycuda.gpuarray": _install_gpuarray,
    "pycuda.elementwise": _install_elementwise,
    "pycuda.reduction": _install_reduction,
    "pycuda.tools": _install_tools,
}


def _install_group(group: str) -> None:
    with _lock:
        if group in _saved:
            return
        module = sys.modules.get(group)
        if module is None:
            return
        if group != "pycuda.driver":
            _install_group("pycuda.driver")  # gpuarray's allocator swap needs the driver hooks
        _saved[group] = []
        try:
            _INSTALLERS[group](module)
        except Exception:
            _restore(group)
            raise


def _restore(group: str) -> None:
    for owner, attr, orig, own in reversed(_saved.pop(group, [])):
        try:
            if own:
                setattr(owner, attr, orig)
            else:
                delattr(owner, attr)
        except (AttributeError, TypeError):
            setattr(owner, attr, orig)


def install() -> None:
    """Patch every pycuda module that is imported (driver first)."""
    for group in _INSTALLERS:
        _install_group(group)


def uninstall() -> None:
    """Restore every attribute the hooks replaced, newest first."""
    with _lock:
        for group in reversed(list(_saved)):
            _restore(group)


def is_installed() -> bool:
    """Whether any hook is in place right now."""
    return bool(_saved)


def _register() -> None:
    from . import Integration, register

    for group in _INSTALLERS:
        register(Integration(group, lambda g=group: _install_group(g), lambda g=group: _restore_locked(g)))


def _restore_locked(group: str) -> None:
    with _lock:
        if group == "pycuda.driver":  # the others lean on it: take them down first
            for other in [g for g in _saved if g != group]:
                _restore(other)
        _restore(group)


_register()
