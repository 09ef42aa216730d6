"""The CUPTI backend and the CUDA collector, driven through a fake `cupti` package (no GPU here).

The fake mirrors cupti-python's binding module (`from cupti import cupti`): `ActivityKind`, `CallbackDomain`,
`ActivityThreadIdType` enums with CUPTI's values, `activity_register_callbacks(requested, completed)`,
`activity_enable/disable`, `activity_flush_all`, `get_timestamp`, `get_callback_name`,
`activity_get_num_dropped_records(ctx, stream, out_ptr)`. Records are delivered as attribute objects
through the completed callback at flush time, like the real buffers.
"""

import ctypes
import enum
import importlib.machinery
import json
import sys
import threading
import time
import types
import warnings
from types import SimpleNamespace

import pytest

import profiler_core
import profiler_core.cuda as cuda
from profiler_core import ProfilerActivity, record_function, record_op
from profiler_core.cuda import collector as collector_mod
from profiler_core.cuda import cupti_backend
from profiler_core.cuda.cupti_backend import CuptiBackend, CuptiUnavailable, clean_api_name

from .conftest import DATA

OFFSET = 5_000_000  # host = cupti + OFFSET
# Callback ids and names as cupti-python's enums give them (checked by tests/test_cupti_real.py).
CBID = json.loads((DATA / "cupti" / "callback_ids.json").read_text())
CALLBACK_NAMES = {
    (1 if kind == "DRIVER" else 2, cbid): name for kind in ("DRIVER", "RUNTIME") for name, cbid in CBID[kind].items()
}


class ActivityKind(enum.IntEnum):
    MEMCPY = 1
    MEMSET = 2
    KERNEL = 3
    DRIVER = 4
    RUNTIME = 5
    CONCURRENT_KERNEL = 10
    OVERHEAD = 17
    SYNCHRONIZATION = 38
    EXTERNAL_CORRELATION = 39
    MEMORY2 = 49


class FakeCupti(types.ModuleType):
    """A stand-in for cupti-python's `cupti.cupti` module."""

    def __init__(self):
        super().__init__("cupti.cupti")
        self.ActivityKind = ActivityKind
        self.CallbackDomain = SimpleNamespace(DRIVER_API=1, RUNTIME_API=2)
        self.ActivityThreadIdType = SimpleNamespace(SYSTEM=1)
        self.registrations = 0
        self.enabled = set()
        self.thread_id_type = None
        self.pending = []
        self.dropped = 0
        self.corr = 100
        self.flushes = 0

    # --- API ---
    def activity_register_callbacks(self, requested, completed):
        self.registrations += 1
        self.requested, self.completed = requested, completed

    def set_thread_id_type(self, t):
        self.thread_id_type = t

    def activity_enable(self, kind):
        self.enabled.add(ActivityKind(kind).name)

    def activity_disable(self, kind):
        self.enabled.discard(ActivityKind(kind).name)

    def get_timestamp(self):
        return time.time_ns() - OFFSET

    def get_callback_name(self, domain, cbid):
        return CALLBACK_NAMES[(int(domain), cbid)]

    def activity_flush_all(self, flag):
        self.flushes += 1
        assert self.requested() == (8 * 1024 * 1024, 0)
        batch, self.pending = self.pending, []
        if batch:
            self.completed(batch)

    def activity_get_num_dropped_records(self, ctx, stream_id, ptr):
        ctypes.c_uint64.from_address(ptr).value = self.dropped

    # --- the fake device ---
    def thread_id(self):
        """The calling thread's id as CUPTI records it: gettid with SYSTEM, else pthread_self (32 bits)."""
        if self.thread_id_type == 1:
            return threading.get_native_id()
        return threading.get_ident() & 0xFFFFFFFF

    def launch(self, name, *, runtime=False, grid=(4, 1, 1), block=(128, 1, 1)):
        """What CUPTI would report for one kernel launched now from this thread."""
        self.corr += 1
        t = self.get_timestamp()
        kind = ActivityKind.RUNTIME if runtime else ActivityKind.DRIVER
        cbid = CBID["RUNTIME"]["cudaLaunchKernel_v7000"] if runtime else CBID["DRIVER"]["cuLaunchKernel"]
        self.pending.append(
            SimpleNamespace(
                kind=kind,
                cbid=cbid,
                start=t,
                end=t + 2000,
                process_id=4242,
                thread_id=self.thread_id(),
                correlation_id=self.corr,
                return_value=0,
            )
        )
        self.pending.append(
            SimpleNamespace(
                kind=ActivityKind.CONCURRENT_KERNEL,
                start=t + 5000,
                end=t + 9000,
                queued=0,
                submitted=0,
                device_id=0,
                context_id=1,
                stream_id=7,
                correlation_id=self.corr,
                grid_x=grid[0],
                grid_y=grid[1],
                grid_z=grid[2],
                block_x=block[0],
                block_y=block[1],
                block_z=block[2],
                registers_per_thread=32,
                static_shared_memory=0,
                dynamic_shared_memory=0,
                local_memory_per_thread=0,
                launch_type=0,
                graph_id=0,
                channel_id=0,
                name=name.encode(),
            )
        )
        return self.corr


H800 = {
    "id": 0,
    "name": "NVIDIA H800",
    "totalGlobalMem": 84943110144,
    "computeMajor": 9,
    "computeMinor": 0,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536,
    "regsPerMultiprocessor": 65536,
    "warpSize": 32,
    "sharedMemPerBlock": 49152,
    "sharedMemPerMultiprocessor": 233472,
    "numSms": 132,
    "sharedMemPerBlockOptin": 232448,
    "reservedSharedMemPerBlock": 1024,
}


@pytest.fixture
def fake_cupti(monkeypatch):
    fake = FakeCupti()
    pkg = types.ModuleType("cupti")
    pkg.__spec__ = importlib.machinery.ModuleSpec("cupti", None)
    pkg.cupti = fake
    monkeypatch.setitem(sys.modules, "cupti", pkg)
    monkeypatch.setitem(sys.modules, "cupti.cupti", fake)
    monkeypatch.setattr(collector_mod, "query_device_properties", lambda: [dict(H800)])
    monkeypatch.setattr(cuda, "_available", True)
    monkeypatch.setattr(cupti_backend, "distribution_version", {"cupti-python": "13.0.1"}.get)
    CuptiBackend._reset_for_tests()
    yield fake
    CuptiBackend._reset_for_tests()


def test_backend_cycles_register_once_and_copy_records_to_plain_dicts(fake_cupti):
    be = CuptiBackend.instance()
    for cycle in range(3):
        be.start()
        assert fake_cupti.enabled >= {
            "CONCURRENT_KERNEL",
            "MEMCPY",
            "MEMSET",
            "RUNTIME",
            "DRIVER",
            "SYNCHRONIZATION",
            "MEMORY2",
            "EXTERNAL_CORRELATION",
            "OVERHEAD",
        }
        corr = fake_cupti.launch(f"k{cycle}")
        cap = be.stop()
        assert fake_cupti.enabled == set()
        assert {r["kind"] for r in cap.records} == {"DRIVER", "CONCURRENT_KERNEL"}
        k = next(r for r in cap.records if r["kind"] == "CONCURRENT_KERNEL")
        assert k["name"] == f"k{cycle}" and k["correlation_id"] == corr and type(k["start"]) is int
        assert all(type(v) in (int, float, str) or v is None for r in cap.records for v in r.values())
        api = next(r for r in cap.records if r["kind"] == "DRIVER")
        assert api["name"] == "cuLaunchKernel" and api["thread_id"] == threading.get_native_id()
        assert abs(cap.clock_offset_ns - OFFSET) < 2_000_000
        assert cap.warnings == []
    assert fake_cupti.registrations == 1 and fake_cupti.thread_id_type == 1
    # records delivered while no cycle runs are not kept for the next one
    fake_cupti.launch("late")
    fake_cupti.activity_flush_all(0)
    be.start()
    assert be.stop().records == []


def test_dropped_records_and_noisy_api_calls(fake_cupti):
    be = CuptiBackend.instance()
    be.start()
    fake_cupti.pending.append(
        SimpleNamespace(
            kind=ActivityKind.RUNTIME,
            cbid=CBID["RUNTIME"]["cudaGetLastError_v3020"],
            start=1,
            end=2,
            process_id=1,
            thread_id=1,
            correlation_id=1,
            return_value=0,
        )
    )
    fake_cupti.dropped = 17
    cap = be.stop()
    assert cap.records == []  # cudaGetLastError is noise, as in Kineto
    assert any("dropped 17 activity records" in w for w in cap.warnings)


def test_api_names_lose_their_version_suffix():
    assert clean_api_name("cudaLaunchKernel_v7000") == "cudaLaunchKernel"
    assert clean_api_name("cudaStreamSynchronize_v3020") == "cudaStreamSynchronize"
    assert clean_api_name("cuMemcpyHtoD_v2") == "cuMemcpyHtoD_v2"


def test_optional_kinds_that_cannot_be_enabled_are_left_out_with_a_warning(fake_cupti):
    enable = fake_cupti.activity_enable

    def picky(kind):
        if ActivityKind(kind).name == "MEMORY2":
            raise RuntimeError("CUPTI_ERROR_NOT_SUPPORTED")
        enable(kind)

    fake_cupti.activity_enable = picky
    be = CuptiBackend.instance()
    be.start()
    assert "MEMORY2" not in fake_cupti.enabled and "CONCURRENT_KERNEL" in fake_cupti.enabled
    fake_cupti.launch("k")
    cap = be.stop()
    assert len(cap.records) == 2
    assert [w for w in cap.warnings if "MEMORY2" in w and "NOT_SUPPORTED" in w]


def test_cupti_failures_become_unavailable(fake_cupti):
    def broken(kind):
        raise RuntimeError("CUDA driver is not found (libcuda.so.1)")

    fake_cupti.activity_enable = broken
    with pytest.raises(CuptiUnavailable, match="CUDA driver is not found"):
        CuptiBackend.instance().start()


def test_profile_with_cuda_links_kernels_to_their_ops(fake_cupti):
    with profiler_core.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        with record_function("step"):
            with record_op("my::matmul"):
                c1 = fake_cupti.launch("_Z6matmulPfS_S_i", grid=(264, 1, 1), block=(256, 1, 1))
            c2 = fake_cupti.launch("bias_add", runtime=True)
    trace = prof.trace
    assert trace["deviceProperties"] == [{k: v for k, v in H800.items() if k != "reservedSharedMemPerBlock"}]
    assert trace.get("trace_source") == "cupti"
    # the fake package's "installed" version; no libcupti is loaded here, so no API version is claimed
    assert trace.get("cupti_python_version") == "13.0.1" and "cupti_version" not in trace
    ev = trace["traceEvents"]
    ops = {e["name"]: e for e in ev if e.get("cat") in ("cpu_op", "user_annotation")}
    kernels = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "kernel"}
    assert kernels[c1]["name"] == "matmul(float*, float*, float*, int)"
    assert kernels[c1]["args"]["External id"] == ops["my::matmul"]["args"]["External id"]
    assert kernels[c2]["args"]["External id"] == ops["step"]["args"]["External id"]
    assert kernels[c1]["args"]["est. achieved occupancy %"] == 25
    api = {e["args"]["correlation"]: e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    assert api[c2]["cat"] == "cuda_runtime" and api[c2]["name"] == "cudaLaunchKernel"
    # GPU time is on the host clock: the kernel starts 5 µs after its launch call
    assert kernels[c1]["ts"] - api[c1]["ts"] == pytest.approx(5.0, abs=0.01)
    op = ops["my::matmul"]
    assert op["ts"] <= api[c1]["ts"] <= op["ts"] + op["dur"]
    flows = [e for e in ev if e.get("cat") == "ac2g"]
    assert sorted((f["ph"], f["id"]) for f in flows) == sorted([("s", c1), ("f", c1), ("s", c2), ("f", c2)])
    assert any(e.get("cat") == "gpu_user_annotation" and e["name"] == "step" for e in ev)
    assert {
        (e["pid"], e["tid"]) for e in ev if e.get("ph") == "M" and e["name"] == "thread_name" and e["pid"] == 0
    } == {(0, 7)}


def test_key_averages_attributes_device_time_to_the_launching_op(fake_cupti):
    with profiler_core.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with record_op("my::matmul"):
            fake_cupti.launch("_Z6matmulPfS_S_i")
            fake_cupti.launch("_Z6matmulPfS_S_i")  # each kernel runs 4 µs on the fake device
    rows = {r.key: r for r in prof.key_averages()}
    assert rows["my::matmul"].self_device_time_total == pytest.approx(8.0)
    assert rows["matmul(float*, float*, float*, int)"].count == 2
    assert "Self CUDA" in prof.key_averages().table(sort_by="self_cuda_time_total")


def test_written_trace_reads_back_with_gpu_columns(fake_cupti, tmp_path):
    from profiler_core.trace.read.reader import read_trace

    with profiler_core.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with record_op("my::matmul"):
            corr = fake_cupti.launch("_Z6matmulPfS_S_i", grid=(264, 1, 1), block=(256, 1, 1))
    t = read_trace(prof.export_chrome_trace(str(tmp_path / "w.pt.trace.json")))
    assert t.warnings == []
    [k] = t.dense_events().query("cat == 'kernel'").itertuples()
    op = t.events[t.events.name == "my::matmul"].iloc[0]
    assert (k.external_id, k.correlation, k.device, k.stream) == (op.external_id, corr, 0, 7)
    assert (k.blocks_per_sm, k.occupancy, k.grid_x, k.block_x, k.dur) == (2.0, 25.0, 264, 256, 4000)
    assert set(t.flows.ph) == {"s", "f"}
    assert "stream 7 " in set(t.names.value)


def test_profile_twice_reuses_the_one_registration(fake_cupti):
    for _ in range(2):
        with profiler_core.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            with record_op("op"):
                fake_cupti.launch("k")
        assert len([e for e in prof.trace["traceEvents"] if e.get("cat") == "kernel"]) == 1
    assert fake_cupti.registrations == 1


def test_dropped_records_reach_the_user_as_one_warning(fake_cupti):
    fake_cupti.dropped = 3
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with profiler_core.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
            fake_cupti.launch("k")
    msgs = [str(w.message) for w in caught if "dropped" in str(w.message)]
    assert len(msgs) == 1 and "3 activity records" in msgs[0]


def test_refused_os_thread_ids_warn_once_and_still_link_kernels_to_their_threads(fake_cupti):
    def refuse(t):
        raise RuntimeError("CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED")

    fake_cupti.set_thread_id_type = refuse
    said = []
    for _ in range(2):
        corr = {}

        def worker(corr=corr):
            with record_op("worker::op"):
                corr["worker"] = fake_cupti.launch("k_worker")

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with profiler_core.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                with record_op("main::op"):
                    corr["main"] = fake_cupti.launch("k_main")
                t = threading.Thread(target=worker)
                t.start()
                t.join()
        said += [str(w.message) for w in caught if "thread ids" in str(w.message)]
        ev = prof.trace["traceEvents"]
        ops = {e["name"]: e for e in ev if e.get("cat") == "cpu_op"}
        kernels = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "kernel"}
        calls = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_driver"}
        for who in ("main", "worker"):
            op = ops[f"{who}::op"]
            assert kernels[corr[who]]["args"]["External id"] == op["args"]["External id"]
            assert calls[corr[who]]["tid"] == op["tid"]  # the call sits on its thread's row
    assert len(said) == 1 and "pthread ids" in said[0]


def test_a_wall_clock_step_during_the_profile_moves_no_gpu_timestamp(fake_cupti, monkeypatch):
    # CUPTI's clock and the recording clock run steadily; the wall clock steps an hour once recording has
    # started. Every timestamp the capture makes or calibrates against is the recording clock's, so the
    # trace keeps its shape: no event an hour away, kernels 5 µs after their launch, inside their op.
    from profiler_core import recording

    real = time.time_ns
    monkeypatch.setattr(time, "time_ns", lambda: real() + (3_600 * 10**9 if recording.is_recording() else 0))
    base = real() - time.perf_counter_ns() - OFFSET
    monkeypatch.setattr(fake_cupti, "get_timestamp", lambda: time.perf_counter_ns() + base)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with profiler_core.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            with record_op("my::op"):
                corr = fake_cupti.launch("k")
    assert not [str(w.message) for w in caught if "drifted" in str(w.message)]
    ev = prof.trace["traceEvents"]
    span = max(e["ts"] + e.get("dur", 0) for e in ev if e.get("ph") == "X" and e.get("cat") == "cpu_op")
    assert all(-1 <= e.get("ts", 0) <= span + 1_000 for e in ev), sorted((e.get("ts"), e.get("name")) for e in ev)[-3:]
    kernel = next(e for e in ev if e.get("cat") == "kernel" and e["args"]["correlation"] == corr)
    call = next(e for e in ev if e.get("cat") == "cuda_driver" and e["args"]["correlation"] == corr)
    op = next(e for e in ev if e.get("name") == "my::op")
    assert kernel["ts"] - call["ts"] == pytest.approx(5.0, abs=0.01)
    assert op["ts"] <= call["ts"] and call["ts"] + call["dur"] <= op["ts"] + op["dur"]
    assert kernel["args"]["External id"] == op["args"]["External id"]


def test_cupti_failing_to_start_is_torchs_device_stopped(fake_cupti):
    real_enable = fake_cupti.activity_enable
    fails = iter([True])

    def enable(kind):
        if next(fails, False):
            raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")
        real_enable(kind)

    fake_cupti.activity_enable = enable
    actions = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with profiler_core.profile(
            activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
            schedule=profiler_core.schedule(wait=0, warmup=1, active=2, repeat=2),
        ) as p:
            for _ in range(6):
                actions.append(p.current_action.name)
                p.step()
    assert actions == ["WARMUP", "RECORD", "DEVICE_STOPPED", "WARMUP", "RECORD", "RECORD_AND_SAVE"]
    assert any("stopped early at step 2" in str(w.message) for w in caught)
    assert p.trace.get("trace_source") == "cupti"  # the next cycle captured again
