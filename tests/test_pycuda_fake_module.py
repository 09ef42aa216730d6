"""A fake `pycuda` package for CPU tests, mimicking the real attribute layout (pycuda 2026.1).

Real layout, from pycuda's sources: `pycuda.driver` is a module whose `Function` class has the C++ method
`_launch_kernel(grid, block, arg_buf, shared, stream)` and Python-level `__call__`/`prepared_call`/
`prepared_async_call`/`prepared_timed_call` (all ending in `_launch_kernel`) and a `__getattr__` that
maps attribute names to `get_attribute`; `Module.get_function(name)`; module-level `memcpy_*`,
`memset_*`, `mem_alloc`; `Event`, `Stream`. `pycuda.gpuarray.GPUArray(shape, dtype, allocator=drv.mem_alloc)`
binds the allocator default at definition; `GPUArray.get` copies through `drv.memcpy_dtoh` looked up on
the module; `ElementwiseKernel` keeps `gen_kwargs["name"]`; `ReductionKernel` binds
`stage1.prepared_async_call` when built; `pycuda.tools.DeviceMemoryPool.allocate/free_held`.
The fake "device" just logs what would have run.
"""

import sys
import types

import numpy as np
import pytest

LOG: list = []  # what the fake driver executed: (what, details...)


def _build():
    pycuda = types.ModuleType("pycuda")
    pycuda.__path__ = []
    drv = types.ModuleType("pycuda.driver")

    class function_attribute:  # noqa: N801 (pycuda's name)
        NUM_REGS = 4
        SHARED_SIZE_BYTES = 1

    class Function:
        def __init__(self, name):
            self._real_name = name  # the fake keeps it privately; real pycuda does not expose it

        def get_attribute(self, attr):
            return {4: 24, 1: 512}[attr]

        def __getattr__(self, name):  # like pycuda's function___getattr__
            return self.get_attribute(getattr(function_attribute, name.upper()))

        def _launch_kernel(self, grid, block, arg_buf, shared, stream):
            LOG.append(("launch", self._real_name, tuple(grid), tuple(block), shared, stream))

        def __call__(self, *args, grid=(1, 1), block=None, shared=0, stream=None):
            self._launch_kernel(grid, block, b"args", shared, stream)

        def prepare(self, arg_types):
            self.arg_format = arg_types
            return self

        def prepared_call(self, grid, block, *args, shared_size=0):
            self._launch_kernel(grid, block, b"args", shared_size, None)

        def prepared_async_call(self, grid, block, stream, *args, shared_size=0):
            self._launch_kernel(grid, block, b"args", shared_size, stream)

        def prepared_timed_call(self, grid, block, *args, shared_size=0):
            start, end = Event(), Event()
            start.record()
            self._launch_kernel(grid, block, b"args", shared_size, None)
            end.record()
            return lambda: end.time_since(start) * 1e-3

    class Module:
        def get_function(self, name):
            return Function(name)

    class DeviceAllocation(int):
        pass

    class Stream:
        _next = 0x5000

        def __init__(self):
            Stream._next += 16
            self.handle = Stream._next

        def synchronize(self):
            LOG.append(("stream_sync",))

    class Event:
        clock = [0.0]

        def record(self, stream=None):
            Event.clock[0] += 0.25  # the fake GPU advances 0.25 ms per recorded event
            self.t = Event.clock[0]
            self.stream = stream
            return self

        def synchronize(self):
            return self

        def time_since(self, other):
            return self.t - other.t

    _addr = [0x7F0000000000]

    def mem_alloc(nbytes):
        _addr[0] += 0x1000
        LOG.append(("alloc", nbytes))
        return DeviceAllocation(_addr[0])

    def mem_alloc_pitch(width, height, access_size):
        return mem_alloc(width * height), width

    def memcpy_htod(dest, src):
        LOG.append(("htod", src.nbytes))

    def memcpy_htod_async(dest, src, stream=None):
        LOG.append(("htod_async", src.nbytes, stream))

    def memcpy_dtoh(dest, src):
        LOG.append(("dtoh", dest.nbytes))

    def memcpy_dtoh_async(dest, src, stream=None):
        LOG.append(("dtoh_async", dest.nbytes, stream))

    def memcpy_dtod(dest, src, size):
        LOG.append(("dtod", size))

    def memset_d32(dest, data, count):
        LOG.append(("memset_d32", count))

    def memset_d8_async(dest, data, count, stream=None):
        LOG.append(("memset_d8_async", count, stream))

    def memcpy_dtoa(ary, index, src, len):  # noqa: A002 (pycuda's argument name)
        LOG.append(("dtoa", index, len))

    def memset_d2d16(dest, pitch, data, width, height):  # pycuda's signatures (pitch in bytes)
        LOG.append(("memset_d2d16", width, height))

    def memset_d2d32_async(dest, pitch, data, width, height, stream=None):
        LOG.append(("memset_d2d32_async", width, height, stream))

    class Context:
        @staticmethod
        def synchronize():
            LOG.append(("ctx_sync",))

    for name, obj in dict(locals()).items():
        if not name.startswith("_") or name == "_addr":
            setattr(drv, name, obj)

    ga = types.ModuleType("pycuda.gpuarray")

    class GPUArray:
        def __init__(self, shape, dtype, allocator=drv.mem_alloc):
            self.shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
            self.dtype = np.dtype(dtype)
            self.size = int(np.prod(self.shape))
            self.nbytes = self.size * self.dtype.itemsize
            self.gpudata = allocator(self.nbytes)

        def _new_like_me(self):
            return GPUArray(self.shape, self.dtype)

        def __add__(self, other):
            out = self._new_like_me()
            _axpbyz.prepared_async_call(
                (4, 1), (256, 1, 1), None, 1, self.gpudata, 1, other.gpudata, out.gpudata, self.size
            )
            return out

        def fill(self, value):
            drv.memset_d32(self.gpudata, value, self.size)
            return self

        def get(self):
            out = np.empty(self.shape, self.dtype)
            drv.memcpy_dtoh(out, self.gpudata)  # looked up on the module at call time, like pycuda
            return out

    _axpbyz = Function("axpbyz")

    def to_gpu(ary, allocator=drv.mem_alloc):
        result = GPUArray(ary.shape, ary.dtype, allocator)
        drv.memcpy_htod(result.gpudata, ary)
        return result

    def zeros(shape, dtype, allocator=drv.mem_alloc):
        return GPUArray(shape, dtype, allocator).fill(0)

    ga.GPUArray, ga.to_gpu, ga.zeros = GPUArray, to_gpu, zeros

    el = types.ModuleType("pycuda.elementwise")

    class ElementwiseKernel:
        def __init__(self, arguments, operation, name="kernel", **kwargs):
            self.gen_kwargs = dict(kwargs, name=name, operation=operation, arguments=arguments)
            self._func = Function(name)

        def __call__(self, *args, **kwargs):
            self._func.prepared_async_call((8, 1), (128, 1, 1), kwargs.get("stream"), *args)

    el.ElementwiseKernel = ElementwiseKernel

    red = types.ModuleType("pycuda.reduction")

    class ReductionKernel:
        def __init__(
            self, dtype_out, neutral, reduce_expr, map_expr=None, arguments=None, name="reduce_kernel", **kwargs
        ):
            s1, s2 = Function(name + "_stage1"), Function(name + "_stage2")
            self.stage1_func = s1.prepared_async_call  # bound at build time, as in pycuda
            self.stage2_func = s2.prepared_async_call

        def __call__(self, *args, **kwargs):
            self.stage1_func((32, 1), (512, 1, 1), kwargs.get("stream"), *args)
            self.stage2_func((1, 1), (512, 1, 1), kwargs.get("stream"))
            return GPUArray((), np.float32)

    red.ReductionKernel = ReductionKernel

    tools = types.ModuleType("pycuda.tools")

    class DeviceMemoryPool:
        def allocate(self, size):
            LOG.append(("pool_allocate", size))
            return drv.DeviceAllocation(0x1234)

        def free_held(self):
            LOG.append(("pool_free_held",))

    tools.DeviceMemoryPool = DeviceMemoryPool
    pycuda.driver, pycuda.gpuarray, pycuda.elementwise = drv, ga, el
    pycuda.reduction, pycuda.tools = red, tools
    return {
        "pycuda": pycuda,
        "pycuda.driver": drv,
        "pycuda.gpuarray": ga,
        "pycuda.elementwise": el,
        "pycuda.reduction": red,
        "pycuda.tools": tools,
    }


@pytest.fixture
def fake_pycuda(monkeypatch):
    """Insert the fake pycuda package into sys.modules for one test; yields the module dict."""
    mods = _build()
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    LOG.clear()
    yield mods
    from profiler_core.integrations import pycuda_hooks

    pycuda_hooks.uninstall()


def test_fake_launch_paths_all_reach_launch_kernel(fake_pycuda):
    drv = fake_pycuda["pycuda.driver"]
    f = drv.Module().get_function("k")
    f(grid=(2, 1), block=(32, 1, 1))
    f.prepared_call((2, 1), (32, 1, 1))
    f.prepared_async_call((2, 1), (32, 1, 1), drv.Stream())
    f.prepared_timed_call((2, 1), (32, 1, 1))()
    assert [e[0] for e in LOG] == ["launch"] * 4
    assert f.num_regs == 24 and f.shared_size_bytes == 512
