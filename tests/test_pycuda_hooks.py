"""PyCUDA hooks' bookkeeping on a fake pycuda: ops per launch path, copies, allocations, clean removal."""

import threading

import numpy as np
import pytest

from profiler_core import integrations, record_op, recording
from profiler_core.cuda import event_backend
from profiler_core.cuda.convert import convert_records
from profiler_core.cuda.link import LAUNCH_PLACEHOLDER, link_gpu_to_ops
from profiler_core.integrations import pycuda_hooks

from .test_pycuda_fake_module import LOG, fake_pycuda  # noqa: F401 (fixture)


def _snapshot(mods):
    """Every attribute of the fake's modules and classes, plus function defaults, by identity."""
    snap = {}
    for mname, mod in mods.items():
        for k, v in vars(mod).items():
            snap[(mname, k)] = v
            if isinstance(v, type):
                for ck, cv in vars(v).items():
                    snap[(mname, k, ck)] = cv
                    if hasattr(cv, "__defaults__"):
                        snap[(mname, k, ck, "defaults")] = cv.__defaults__
            elif hasattr(v, "__defaults__"):
                snap[(mname, k, "defaults")] = v.__defaults__
    return snap


def _ops(session):
    out = []
    for buf in session.buffers:
        for t0, t1, name, ext, _cat, args, _stack in buf.events:
            out.append({"name": name, "ext": ext, "t0": t0, "t1": t1, "args": args or {}, "tid": buf.tid})
    return sorted(out, key=lambda o: (o["t0"], -o["t1"]))


def _children(ops, parent):
    inside = [o for o in ops if o is not parent and parent["t0"] <= o["t0"] and o["t1"] <= parent["t1"]]
    return [o["name"] for o in inside]


@pytest.fixture
def session():
    s = recording.Session(record_shapes=True)
    recording.start_session(s)
    yield s
    if recording.active_session() is s:
        recording.stop_session()


def test_install_uninstall_restores_pycuda_exactly(fake_pycuda):
    before = _snapshot(fake_pycuda)
    pycuda_hooks.install()
    assert pycuda_hooks.is_installed()
    drv, ga = fake_pycuda["pycuda.driver"], fake_pycuda["pycuda.gpuarray"]
    assert drv.Function._launch_kernel is not before[("pycuda.driver", "Function", "_launch_kernel")]
    assert ga.GPUArray.__init__.__defaults__ == (drv.mem_alloc,)  # the swapped allocator default
    pycuda_hooks.uninstall()
    assert not pycuda_hooks.is_installed()
    after = _snapshot(fake_pycuda)
    assert after.keys() == before.keys()
    changed = [k for k in before if after[k] is not before[k] and after[k] != before[k]]
    assert changed == []


def test_installed_but_not_recording_passes_straight_through(fake_pycuda):
    drv = fake_pycuda["pycuda.driver"]
    pycuda_hooks.install()
    f = drv.Module().get_function("k")
    f(grid=(1, 1), block=(32, 1, 1))
    drv.memcpy_htod(0, np.zeros(4, np.float32))
    assert [e[0] for e in LOG] == ["launch", "htod"]
    assert recording.active_session() is None


def test_every_launch_path_is_one_op_named_by_the_function(fake_pycuda, session):
    drv = fake_pycuda["pycuda.driver"]
    pycuda_hooks.install()
    f = drv.Module().get_function("add_kernel")
    f(grid=(2, 1), block=(64, 1, 1))
    f.prepare("PPi").prepared_call((2, 1), (64, 1, 1))
    f.prepared_async_call((2, 1), (64, 1, 1), drv.Stream())
    f.prepared_timed_call((2, 1), (64, 1, 1))()
    recording.stop_session()
    ops = _ops(session)
    assert [o["name"] for o in ops] == ["add_kernel"] * 4
    assert [e[0] for e in LOG] == ["launch"] * 4  # the real launches still ran


def test_elementwise_and_reduction_kernels_are_one_op_each(fake_pycuda, session):
    el, red = fake_pycuda["pycuda.elementwise"], fake_pycuda["pycuda.reduction"]
    ga = fake_pycuda["pycuda.gpuarray"]
    lin = el.ElementwiseKernel("float a, float *x, float *z", "z[i] = a*x[i]", name="linear_combo")
    early = red.ReductionKernel(np.float32, "0", "a+b", "x[i]", "float *x", name="early_sum")
    pycuda_hooks.install()  # after those kernels were built: pre-bound stage functions still get caught
    dot = red.ReductionKernel(np.float32, "0", "a+b", "x[i]*y[i]", "float *x, float *y", name="my_dot")
    x = ga.GPUArray((256,), np.float32)
    lin(np.float32(2), x, x)
    dot(x, x)
    early(x)
    recording.stop_session()
    names = [o["name"] for o in _ops(session)]
    assert names.count("linear_combo") == 1 and names.count("my_dot") == 1
    # built before the hooks: its name was never seen, so pycuda's default name is used
    assert names.count("reduce_kernel") == 1
    assert LAUNCH_PLACEHOLDER not in names  # the kernel's op is the launching op
    assert [e[1] for e in LOG if e[0] == "launch"] == [
        "linear_combo",
        "my_dot_stage1",
        "my_dot_stage2",
        "early_sum_stage1",
        "early_sum_stage2",
    ]
    lin_op = next(o for o in _ops(session) if o["name"] == "linear_combo")
    assert lin_op["args"]["Input Dims"][1] == [256]


def test_gpuarray_ops_copies_and_allocations(fake_pycuda, session):
    drv, ga, tools = fake_pycuda["pycuda.driver"], fake_pycuda["pycuda.gpuarray"], fake_pycuda["pycuda.tools"]
    pycuda_hooks.install()
    a = ga.to_gpu(np.ones((8, 4), np.float32))
    b = a + a
    host = b.get()
    z = ga.zeros((3,), np.float32)
    drv.memcpy_dtod(z.gpudata, a.gpudata, 12)
    drv.memset_d8_async(z.gpudata, 0, 12, drv.Stream())
    pool = tools.DeviceMemoryPool()
    pool.allocate(1 << 20)
    pool.free_held()
    recording.stop_session()
    assert host.shape == (8, 4)
    ops = _ops(session)
    by_name = {o["name"]: o for o in ops}
    to_gpu = by_name["gpuarray::to_gpu"]
    # the allocator default bound at definition was swapped: the allocation is seen inside to_gpu
    assert _children(ops, to_gpu) == ["pycuda::mem_alloc", "pycuda::memcpy_htod"]
    allocs = [o["args"]["bytes"] for o in ops if o["name"] == "pycuda::mem_alloc"]
    assert allocs == [128, 128, 12]  # to_gpu, a + a, zeros
    assert to_gpu["args"]["Input Dims"] == [[8, 4]] and to_gpu["args"]["Input type"] == ["float"]
    add = by_name["gpuarray::__add__"]
    assert add["args"]["Input Dims"] == [[8, 4], [8, 4]]
    assert _children(ops, add) == ["pycuda::mem_alloc", LAUNCH_PLACEHOLDER]  # axpbyz was fetched earlier
    assert _children(ops, by_name["gpuarray::GPUArray.get"]) == ["pycuda::memcpy_dtoh"]
    assert "pycuda::memset_d32" in _children(ops, by_name["gpuarray::zeros"])
    assert {"pycuda::memcpy_dtod", "pycuda::memset_d8_async"} <= set(by_name)
    assert by_name["pycuda::DeviceMemoryPool.allocate"]["args"]["bytes"] == 1 << 20
    assert "pycuda::DeviceMemoryPool.free_held" in by_name


def test_registry_installs_while_recording_and_removes_after(fake_pycuda):
    drv = fake_pycuda["pycuda.driver"]
    original = drv.Function._launch_kernel
    integrations.activate()
    try:
        assert drv.Function._launch_kernel is not original
        assert "pycuda.driver" in integrations.installed()
    finally:
        integrations.deactivate()
    assert drv.Function._launch_kernel is original
    assert not pycuda_hooks.is_installed()


def test_cuda_event_fallback_end_to_end(fake_pycuda, session):
    drv, ga = fake_pycuda["pycuda.driver"], fake_pycuda["pycuda.gpuarray"]
    pycuda_hooks.install()
    fb = event_backend.CudaEventBackend(drv)
    fb.start()
    try:
        f = drv.Module().get_function("scale")
        s = drv.Stream()
        f.prepared_async_call((4, 1), (256, 1, 1), s, shared_size=1024)
        a = ga.to_gpu(np.ones(16, np.float32))
        a.get()
    finally:
        records = fb.stop()
    recording.stop_session()
    assert event_backend.current() is None
    kinds = [r["kind"] for r in records]
    assert kinds.count("CONCURRENT_KERNEL") == 1 and kinds.count("MEMCPY") == 2 and kinds.count("DRIVER") == 3
    k = next(r for r in records if r["kind"] == "CONCURRENT_KERNEL")
    assert (
        k["name"],
        k["grid_x"],
        k["block_x"],
        k["registers_per_thread"],
        k["static_shared_memory"],
        k["dynamic_shared_memory"],
    ) == ("scale", 4, 256, 24, 512, 1024)
    assert k["end"] - k["start"] == 250_000  # fake events 0.25 ms apart
    copies = sorted(r["bytes"] for r in records if r["kind"] == "MEMCPY")
    assert copies == [64, 64]
    conv = convert_records(records, device_properties=None)
    cpu = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": o["name"],
            "pid": 0,
            "tid": o["tid"],
            "ts": o["t0"] + session.offset_ns,
            "dur": o["t1"] - o["t0"],
            "args": {"External id": o["ext"]},
        }
        for o in _ops(session)
    ]
    link_gpu_to_ops(conv.events, cpu)
    ext = {o["args"]["External id"]: o["name"] for o in cpu}
    linked = {e["name"]: ext[e["args"]["External id"]] for e in conv.events if e.get("cat") in ("kernel", "gpu_memcpy")}
    assert linked == {
        "scale": "scale",
        "Memcpy HtoD (Pageable -> Device)": "pycuda::memcpy_htod",
        "Memcpy DtoH (Device -> Pageable)": "pycuda::memcpy_dtoh",
    }


def test_event_timing_failures_never_break_the_launch(fake_pycuda, session):
    drv = fake_pycuda["pycuda.driver"]
    pycuda_hooks.install()

    class BrokenEvent:
        def record(self, stream=None):
            raise RuntimeError("invalid context")

    fb = event_backend.CudaEventBackend(SimpleDriver(BrokenEvent))
    fb.start()
    try:
        drv.Module().get_function("k")(grid=(1, 1), block=(32, 1, 1))
    finally:
        records = fb.stop()
    recording.stop_session()
    assert [e[0] for e in LOG] == ["launch"]  # the user's kernel still ran
    assert records == [] and any("invalid context" in w for w in fb.warnings)


# ---- the hot path: leaf ops recorded inline must be exactly what record_op records ------------------
def _all_events(session):
    return [e for buf in session.buffers for e in buf.events]


def test_fast_path_events_match_record_op(fake_pycuda):
    drv = fake_pycuda["pycuda.driver"]
    seen = []
    real_launch = drv.Function._launch_kernel

    def spying_launch(self, *a):  # what pycuda's C++ would be doing while the op is open
        seen.append(recording.current_external_id())
        return real_launch(self, *a)

    drv.Function._launch_kernel = spying_launch
    pycuda_hooks.install()
    s = recording.Session()  # no shapes/stacks/memory: the inline fast path
    recording.start_session(s)
    try:
        f = drv.Module().get_function("k")
        with record_op("outer"):
            outer_id = recording.current_external_id()
            f(grid=(1, 1), block=(32, 1, 1))
            assert recording.current_external_id() == outer_id  # the launch op was closed
            with record_op("ref_launch"):
                pass
            drv.memcpy_htod(0, np.zeros(4, np.float32))
            drv.mem_alloc(64)
            assert recording.current_external_id() == outer_id
            with record_op("ref_alloc", args={"bytes": 64}):
                pass
    finally:
        recording.stop_session()
    ev = {e[2]: e for e in _all_events(s)}
    assert set(ev) == {"outer", "k", "ref_launch", "pycuda::memcpy_htod", "pycuda::mem_alloc", "ref_alloc"}
    launch, ref = ev["k"], ev["ref_launch"]
    assert len(launch) == len(ref) and launch[4:] == ref[4:] == (recording.CAT_OP, None, None)
    assert ev["pycuda::memcpy_htod"][4:] == ref[4:]
    assert ev["pycuda::mem_alloc"][4:] == ev["ref_alloc"][4:] == (recording.CAT_OP, {"bytes": 64}, None)
    ids = [e[3] for e in ev.values()]
    assert len(set(ids)) == len(ids)
    assert seen == [launch[3]]  # the launch op was innermost while pycuda ran
    outer = ev["outer"]
    for e in ev.values():
        assert outer[0] <= e[0] <= e[1] <= outer[1]  # nested inside the enclosing op, t0 <= t1
    assert [e[2] for e in sorted(ev.values(), key=lambda e: e[3])] == [
        "outer",
        "k",
        "ref_launch",
        "pycuda::memcpy_htod",
        "pycuda::mem_alloc",
        "ref_alloc",
    ]


def test_fast_path_passes_arguments_and_results_through(fake_pycuda):
    drv = fake_pycuda["pycuda.driver"]
    pycuda_hooks.install()
    s = recording.Session()
    recording.start_session(s)
    try:
        stream = drv.Stream()
        ptr = drv.mem_alloc(256)
        pitched = drv.mem_alloc_pitch(16, 4, 4)
        drv.memcpy_htod_async(ptr, np.zeros(8, np.float32), stream=stream)
        drv.memset_d8_async(ptr, 0, 12, stream)
    finally:
        recording.stop_session()
    assert isinstance(ptr, drv.DeviceAllocation) and pitched[1] == 16
    assert LOG[-2:] == [("htod_async", 32, stream), ("memset_d8_async", 12, stream)]
    ev = [(e[2], e[5]) for e in _all_events(s)]
    assert ev == [
        ("pycuda::mem_alloc", {"bytes": 256}),
        ("pycuda::mem_alloc_pitch", {"bytes": 64}),
        ("pycuda::memcpy_htod_async", None),
        ("pycuda::memset_d8_async", None),
    ]


def test_fast_path_launch_that_raises_is_recorded_and_closed(fake_pycuda):
    drv = fake_pycuda["pycuda.driver"]

    def failing_launch(self, *a):
        raise RuntimeError("cuLaunchKernel failed: invalid configuration")

    drv.Function._launch_kernel = failing_launch
    pycuda_hooks.install()
    s = recording.Session()
    recording.start_session(s)
    try:
        f = drv.Module().get_function("bad")
        with record_op("outer"):
            outer_id = recording.current_external_id()
            with pytest.raises(RuntimeError, match="invalid configuration"):
                f(grid=(1, 1), block=(32, 1, 1))
            assert recording.current_external_id() == outer_id
    finally:
        recording.stop_session()
    assert sorted(e[2] for e in _all_events(s)) == ["bad", "outer"]


def test_launch_that_spans_the_end_of_recording_is_dropped(fake_pycuda):
    drv = fake_pycuda["pycuda.driver"]
    real_launch = drv.Function._launch_kernel

    def stopping_launch(self, *a):
        recording.stop_session()
        return real_launch(self, *a)

    drv.Function._launch_kernel = stopping_launch
    pycuda_hooks.install()
    s = recording.Session()
    recording.start_session(s)
    drv.Module().get_function("k")(grid=(1, 1), block=(32, 1, 1))
    assert recording.active_session() is None
    assert _all_events(s) == [] and [e[0] for e in LOG] == ["launch"]  # like record_op: dropped, ran


@pytest.mark.parametrize("flags", [{"profile_memory": True}, {"record_shapes": True}])
def test_slow_path_sessions_still_name_launches_and_copies(fake_pycuda, flags):
    drv = fake_pycuda["pycuda.driver"]
    pycuda_hooks.install()
    s = recording.Session(**flags)
    recording.start_session(s)
    try:
        drv.Module().get_function("k")(grid=(1, 1), block=(32, 1, 1))
        drv.memcpy_htod(0, np.zeros(4, np.float32))
        drv.mem_alloc(64)
    finally:
        recording.stop_session()
    ev = {e[2]: e for e in _all_events(s)}
    assert set(ev) == {"k", "pycuda::memcpy_htod", "pycuda::mem_alloc"}
    assert ev["pycuda::mem_alloc"][5]["bytes"] == 64
    if flags.get("record_shapes"):
        assert ev["pycuda::memcpy_htod"][5]["Input Dims"] == [[], [4]]


def test_kernel_object_call_on_one_thread_does_not_capture_other_threads_launches(fake_pycuda):
    drv, el = fake_pycuda["pycuda.driver"], fake_pycuda["pycuda.elementwise"]
    entered, release = threading.Event(), threading.Event()
    real_call = el.ElementwiseKernel.__call__

    def slow_call(self, *a, **kw):  # the kernel object's call is still running on its thread
        entered.set()
        release.wait(5)
        return real_call(self, *a, **kw)

    el.ElementwiseKernel.__call__ = slow_call
    lin = el.ElementwiseKernel("float *x", "x[i] = 0", name="zero_it")
    pycuda_hooks.install()
    s = recording.Session()
    recording.start_session(s)
    try:
        worker = threading.Thread(target=lin, args=(1,))
        worker.start()
        assert entered.wait(5)
        assert pycuda_hooks._in_kernel_call  # the worker is inside a kernel-object call
        drv.Module().get_function("mine")(grid=(1, 1), block=(32, 1, 1))  # this thread: its own op
        release.set()
        worker.join(5)
    finally:
        release.set()
        recording.stop_session()
    assert not pycuda_hooks._in_kernel_call
    names = sorted(e[2] for e in _all_events(s))
    assert names == ["mine", "zero_it"]  # the worker's launch belongs to its kernel op
    assert [e[1] for e in LOG if e[0] == "launch"] == ["mine", "zero_it"]


class SimpleDriver:
    def __init__(self, event_cls):
        self.Event = event_cls


def test_2d_memsets_and_array_copies_are_ops_and_timed(fake_pycuda, session):
    drv = fake_pycuda["pycuda.driver"]
    pycuda_hooks.install()
    fb = event_backend.CudaEventBackend(drv)
    fb.start()
    try:
        s = drv.Stream()
        drv.memset_d2d16(0, 64, 7, 16, 3)
        drv.memset_d2d32_async(0, 128, 7, 8, 5, s)
        drv.memcpy_dtoa(object(), 0, 0, 96)
    finally:
        records = fb.stop()
        pycuda_hooks.uninstall()
    recording.stop_session()
    assert [o["name"] for o in _ops(session)] == [
        "pycuda::memset_d2d16",
        "pycuda::memset_d2d32_async",
        "pycuda::memcpy_dtoa",
    ]
    [copy] = [r for r in records if r["kind"] == "MEMCPY"]
    assert (copy["bytes"], copy["copy_kind"], copy["dst_kind"]) == (96, 7, 4)  # DtoA, into an array
    sets = [(r["bytes"], r["stream_id"]) for r in records if r["kind"] == "MEMSET"]
    assert sets[0] == (16 * 3 * 2, 7) and sets[1][0] == 8 * 5 * 4 and sets[1][1] != 7  # on the given stream
    api = [r["name"] for r in records if r["kind"] == "DRIVER"]
    assert api == ["cuMemsetD2D16_v2", "cuMemsetD2D32Async", "cuMemcpyDtoA_v2"]
    assert ("memset_d2d32_async", 8, 5, s) in LOG


def test_cuda_event_fallback_ignores_a_wall_clock_step(fake_pycuda, session, monkeypatch):
    # The wall clock steps an hour forward once recording started (NTP, a VM resume, a pause between two
    # reads): every timestamp the fallback makes is on the recording clock, so calls stay inside their ops.
    import time as time_mod

    real = time_mod.time_ns
    monkeypatch.setattr(time_mod, "time_ns", lambda: real() + 3_600 * 10**9)
    drv = fake_pycuda["pycuda.driver"]
    pycuda_hooks.install()
    fb = event_backend.CudaEventBackend(drv)
    fb.start()
    try:
        with record_op("outer"):
            drv.Module().get_function("scale")((4, 1), block=(64, 1, 1))
    finally:
        records = fb.stop()
        pycuda_hooks.uninstall()
    recording.stop_session()
    ops = {o["name"]: o for o in _ops(session)}
    call = next(r for r in records if r["kind"] == "DRIVER")
    launch = ops["scale"]
    assert launch["t0"] + session.offset_ns <= call["start"] <= call["end"] <= launch["t1"] + session.offset_ns
    conv = convert_records(records, device_properties=None)
    cpu = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": o["name"],
            "pid": 0,
            "tid": o["tid"],
            "ts": o["t0"] + session.offset_ns,
            "dur": o["t1"] - o["t0"],
            "args": {"External id": o["ext"]},
        }
        for o in ops.values()
    ]
    link_gpu_to_ops(conv.events, cpu)
    [kernel] = [e for e in conv.events if e.get("cat") == "kernel"]
    assert kernel["args"]["External id"] == launch["ext"]
