"""GPU check for gpuscope's CUDA capture: run once on a GPU machine (< 5 minutes), read $OUT/gpu_check.json
(without $OUT: gpuscope_gpu_check/ in the temp directory).

    OUT=/tmp/out python3 samples/gpu_check.py

What it needs: a CUDA driver and GPU; cupti-python (for CUPTI capture) and pycuda and/or cupy for the
workloads (pycuda exercises the PyCUDA hooks, cupy the runtime/driver path of any library); torch for the
reference trace (run in a child process: torch's CUPTI must not share ours). Missing pieces are reported
as skipped, never as passed. On the device machine, wheels carried in `.whl/` are installed to
/tmp/site and put on PYTHONPATH first (see the device tool's README in the tool library); this script puts the
repository root on sys.path itself, so gpuscope needs no install. msgspec (the trace writer's dependency)
must be importable for the sample's logdir check.

Checks (each a named entry in gpu_check.json, with details):
- capture: every launch (by every pycuda path, ElementwiseKernel, ReductionKernel, cupy RawKernel) yields
  one kernel event linked (External id) to the op that launched it; copies and memsets (1D and 2D, sync
  and async) carry their byte counts; each API call lies inside its op's window; GPU work starts after
  its launch; kernels on a stream are monotone; API thread ids are the OS thread id (the thread-id type
  CUPTI accepted is recorded); the trace names cupti-python's and CUPTI's versions; no clock drift
  warning; nothing dropped; a second profile cycle works.
- occupancy: our calculator vs Kineto's values on every kernel of a torch.profiler trace made in the same
  run (this device's deviceProperties + reservedSharedMemPerBlock), and the kernel arg keys vs Kineto's
  (plus our static/dynamic shared-memory split, which must add up to Kineto's total).
- fallback: the CUDA-event backend on the pycuda workload (GPUSCOPE_CUDA_BACKEND=events, child process):
  one kernel per launch, driver calls inside their op (one clock), memsets timed.
- graphs: a CUDA graph captured and replayed by cupy: the replayed kernels carry CUPTI's graph and node ids, and
  Operators gives their time to the op that captured them.
- sample: samples/pycuda_train.py writes a trace with kernels into a logdir.
- overhead: benchmarks/bench_launch.py.
Files written to $OUT: gpu_check.json, raw_records.json.gz (with provenance), gpuscope_trace.json.gz,
graph_trace.json.gz, torch_trace.json.gz, bench.json.
"""

from __future__ import annotations

import gzip
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# $OUT, else a folder in the temp directory: never the clone (the output is the device machine's to return)
OUT = Path(os.environ.get("OUT") or os.path.join(tempfile.gettempdir(), "gpuscope_gpu_check"))
T0 = time.time()
RESULTS: dict = {"checks": {}, "skipped": {}, "errors": {}, "info": {}}

SRC = r"""
extern "C" __global__ void scale(float *x, float a, int n)
{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= a; }
extern "C" __global__ void smem_heavy(float *x, int n)
{ __shared__ float buf[8192]; int i = threadIdx.x; buf[i] = i < n ? x[i] : 0.f; __syncthreads();
  if (i < n) x[i] = buf[(i + 1) % blockDim.x]; }
"""


def check(name: str, ok: bool, found=None, *, expected: str) -> bool:
    """Records check `name`; a failure says what was expected and what was found (in gpu_check.json too)."""
    RESULTS["checks"][name] = {"ok": bool(ok), "expected": expected, "found": found}
    print(f"[{'PASS' if ok else 'FAIL'}] {name}" + ("" if ok else f": expected {expected}; found {found!r}"))
    return ok


def skip(name: str, why: str) -> None:
    RESULTS["skipped"][name] = why
    print(f"[SKIP] {name}: {why}")


def section(fn):
    def run(*a, **kw):
        try:
            return fn(*a, **kw)
        except Exception as exc:
            RESULTS["errors"][fn.__name__] = "".join(traceback.format_exception(exc))[-4000:]
            print(f"[ERROR] {fn.__name__}: {type(exc).__name__}: {exc}")

    return run


def _version(dist: str):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _dump_gz(obj, name: str) -> None:
    with gzip.open(OUT / name, "wt", encoding="utf-8") as f:
        json.dump(obj, f)


@section
def environment() -> None:
    info = RESULTS["info"]
    info["python"] = sys.version
    info["platform"] = platform.platform()
    info["kernel_release"] = platform.release()
    info["versions"] = {
        d: _version(d)
        for d in (
            "cupti-python",
            "pycuda",
            "cupy-cuda13x",
            "cupy-cuda12x",
            "cuda-bindings",
            "nvidia-cuda-cupti",
            "torch",
            "numpy",
            "msgspec",
        )
    }
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        info["nvidia_smi"] = smi.stdout.strip()
    except Exception as exc:
        info["nvidia_smi"] = f"unavailable: {exc}"
    import ctypes

    from profiler_core.cuda.device_props import libcuda

    lib = libcuda()
    if lib is not None:
        v = ctypes.c_int(0)
        lib.cuDriverGetVersion(ctypes.byref(v))
        info["cuda_driver_version"] = v.value
    try:
        from cupti import cupti

        info["cupti_module"] = getattr(cupti, "__file__", "?")
    except Exception as exc:
        info["cupti_module"] = f"not importable: {type(exc).__name__}: {exc}"


@section
def device_properties() -> list:
    from profiler_core.cuda import is_available
    from profiler_core.cuda.device_props import query_device_properties

    props = query_device_properties()
    RESULTS["info"]["device_properties"] = props
    check(
        "device properties read through the driver",
        bool(props) and props[0].get("numSms", 0) > 0,
        props,
        expected="deviceProperties with numSms > 0",
    )
    available = is_available()
    check(
        "profiler_core.cuda.is_available()",
        available,
        available,
        expected="True (a GPU, its driver and cupti-python)",
    )
    return props


class LaunchCounter:
    """Counts pycuda launches by wrapping Function._launch_kernel beneath gpuscope's hook."""

    def __init__(self, drv):
        self.n = 0
        self.drv, self.orig = drv, drv.Function._launch_kernel
        counter = self

        def counted(func, *a):
            counter.n += 1
            return counter.orig(func, *a)

        drv.Function._launch_kernel = counted

    def close(self):
        self.drv.Function._launch_kernel = self.orig


def _pycuda_workload():
    """[(op name, callable returning (kernels launched or None, bytes copied or None))], closer."""
    import numpy as np
    import pycuda.autoprimaryctx  # noqa: F401
    import pycuda.driver as drv
    import pycuda.gpuarray as gpuarray
    from pycuda.compiler import SourceModule
    from pycuda.elementwise import ElementwiseKernel
    from pycuda.reduction import ReductionKernel
    from pycuda.tools import DeviceMemoryPool

    counter = LaunchCounter(drv)
    n = 1 << 16
    host = np.arange(n, dtype=np.float32)
    dev = drv.mem_alloc(host.nbytes)
    dev2 = drv.mem_alloc(4096)
    mod = SourceModule(SRC, no_extern_c=True)
    f = mod.get_function("scale").prepare("Pfi")
    heavy = mod.get_function("smem_heavy")
    stream = drv.Stream()
    grid, block = ((n + 255) // 256, 1), (256, 1, 1)
    lin = ElementwiseKernel("float a, float *x, float *z", "z[i] = a * x[i]", name="check_linear")
    dot = ReductionKernel(np.float32, "0", "a+b", "x[i]*y[i]", "float *x, float *y", name="check_dot")
    pool = DeviceMemoryPool()
    x = gpuarray.to_gpu(host)

    def launches(fn):
        def run():
            before = counter.n
            fn()
            drv.Context.synchronize()
            return counter.n - before, None

        return run

    items = [
        ("check::pycuda_call", launches(lambda: f(dev, np.float32(1.0), np.int32(n), grid=grid, block=block))),
        (
            "check::pycuda_prepared_call",
            launches(lambda: f.prepared_call(grid, block, dev, np.float32(1.0), np.int32(n))),
        ),
        (
            "check::pycuda_prepared_async_call",
            launches(lambda: f.prepared_async_call(grid, block, stream, dev, np.float32(1.0), np.int32(n))),
        ),
        (
            "check::pycuda_prepared_timed_call",
            launches(lambda: f.prepared_timed_call(grid, block, dev, np.float32(1.0), np.int32(n))()),
        ),
        ("check::pycuda_smem_kernel", launches(lambda: heavy(dev, np.int32(n), grid=(4, 1), block=(256, 1, 1)))),
        ("check::elementwise", launches(lambda: lin(np.float32(2), x, x))),
        ("check::reduction", launches(lambda: dot(x, x).get())),
        ("check::gpuarray_add", launches(lambda: x + x)),
        ("check::memcpy_htod", lambda: (drv.memcpy_htod(dev, host), (0, host.nbytes))[1]),
        ("check::memcpy_dtoh", lambda: (drv.memcpy_dtoh(host, dev), (0, host.nbytes))[1]),
        (
            "check::memcpy_htod_async",
            lambda: (drv.memcpy_htod_async(dev, host, stream), stream.synchronize(), (0, host.nbytes))[2],
        ),
        ("check::memset", lambda: (drv.memset_d32(dev, 0, n), drv.Context.synchronize(), (0, 4 * n))[2]),
        (
            "check::memset_d16_async",
            lambda: (drv.memset_d16_async(dev, 0, n, stream), stream.synchronize(), (0, 2 * n))[2],
        ),
        # 2D memsets over the same linear allocation: 64 rows of 1 KiB, pitch 1 KiB
        (
            "check::memset_d2d8",
            lambda: (drv.memset_d2d8(dev, 1024, 0, 1024, 64), drv.Context.synchronize(), (0, 1024 * 64))[2],
        ),
        (
            "check::memset_d2d32_async",
            lambda: (drv.memset_d2d32_async(dev, 1024, 0, 256, 64, stream), stream.synchronize(), (0, 256 * 64 * 4))[2],
        ),
        (
            "check::memcpy_dtod_async",
            lambda: (drv.memcpy_dtod_async(dev, dev2, 4096, stream), stream.synchronize(), (0, 4096))[2],
        ),
        ("check::pool_alloc", lambda: (pool.allocate(1 << 20), (0, None))[1]),
    ]
    return items, counter.close


def _cupy_workload():
    import cupy
    import numpy as np

    k = cupy.RawKernel(SRC, "scale")
    n = 1 << 16
    a = cupy.ones(n, dtype=cupy.float32)
    host = np.ones(n, dtype=np.float32)
    k(((n + 255) // 256,), (256,), (a, np.float32(1.0), np.int32(n)))  # compile outside the window
    cupy.cuda.runtime.deviceSynchronize()

    def raw():
        k(((n + 255) // 256,), (256,), (a, np.float32(1.0), np.int32(n)))
        cupy.cuda.runtime.deviceSynchronize()
        return 1, None

    def htod():
        cupy.asarray(host)
        cupy.cuda.runtime.deviceSynchronize()
        return None, host.nbytes

    def dtoh():
        a.get()
        return 0, host.nbytes

    return [("check::cupy_raw_kernel", raw), ("check::cupy_htod", htod), ("check::cupy_dtoh", dtoh)], None


def _subtree(ops: list, root: dict) -> set:
    end = root["ts"] + root["dur"]
    return {
        o["args"]["External id"]
        for o in ops
        if o["tid"] == root["tid"] and root["ts"] <= o["ts"] and o["ts"] + o["dur"] <= end
    }


@section
def capture() -> None:
    import profiler_core
    from profiler_core import ProfilerActivity, record_op
    from profiler_core.cuda import collector as collector_mod

    os.environ["GPUSCOPE_KEEP_RAW_RECORDS"] = "1"
    items, closers = [], []
    for name, build in (("pycuda", _pycuda_workload), ("cupy", _cupy_workload)):
        try:
            its, close = build()
            items += its
            closers.append(close)
        except Exception as exc:
            skip(f"{name} workload", f"{type(exc).__name__}: {exc}")
    if not items:
        skip("capture", "neither pycuda nor cupy works here")
        return
    expected = {}
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with profiler_core.profile(
            activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True, profile_memory=True
        ) as prof:
            for name, run in items:
                with record_op(name):
                    expected[name] = run()
    RESULTS["info"]["capture_warnings"] = [str(w.message) for w in caught]
    check(
        "no clock drift between CUPTI and the recording clock",
        not any("drifted" in str(w.message) for w in caught),
        [str(w.message) for w in caught],
        expected="no warning that the clocks drifted",
    )
    for c in closers:
        if c:
            c()
    trace = prof.trace
    raw = collector_mod.last_raw_records or {}
    _dump_gz(trace, "gpuscope_trace.json.gz")
    _dump_gz(
        {"provenance": {"captured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **RESULTS["info"]}, **raw},
        "raw_records.json.gz",
    )
    check("trace source is CUPTI", trace.get("trace_source") == "cupti", trace.get("trace_source"), expected="'cupti'")
    versions = {k: trace.get(k) for k in ("cupti_python_version", "cupti_version", "cuda_driver_version")}
    RESULTS["info"]["trace_versions"] = versions
    check(
        "trace names cupti-python's version and CUPTI's API version (cuptiGetVersion)",
        versions["cupti_python_version"] == _version("cupti-python") and isinstance(versions["cupti_version"], int),
        versions,
        expected=f"cupti_python_version {_version('cupti-python')!r} and an int cupti_version",
    )
    try:
        from profiler_core.cuda.cupti_backend import CuptiBackend

        RESULTS["info"]["cupti_thread_id_type"] = CuptiBackend.instance().thread_id_type
    except Exception as exc:
        RESULTS["info"]["cupti_thread_id_type"] = f"unknown ({exc})"
    ev = trace["traceEvents"]
    ops = [e for e in ev if e.get("cat") in ("cpu_op", "user_annotation") and e.get("ph") == "X"]
    api = {e["args"]["correlation"]: e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    bad_launch, bad_bytes = {}, {}
    for name, (n_kernels, nbytes) in expected.items():
        root = next(o for o in ops if o["name"] == name)
        ids = _subtree(ops, root)
        mine = [g for g in gpu if g["args"].get("External id") in ids]
        kernels = [g for g in mine if g["cat"] == "kernel"]
        if n_kernels is not None and len(kernels) != n_kernels:
            bad_launch[name] = {"launches": n_kernels, "kernel events": len(kernels)}
        if nbytes is not None:
            got = sorted(g["args"].get("bytes") for g in mine if g["cat"] != "kernel")
            if nbytes not in got:
                bad_bytes[name] = {"expected": nbytes, "copy/memset events": got}
    check(
        "every launch yields one kernel event linked to its op",
        not bad_launch,
        bad_launch,
        expected="no launch without exactly one kernel linked to its op",
    )
    check(
        "copies and memsets carry their byte counts",
        not bad_bytes,
        bad_bytes,
        expected="no copy or memset without its bytes",
    )
    corr = [g["args"]["correlation"] for g in gpu if g["cat"] == "kernel"]
    check(
        "one kernel event per correlation id",
        len(corr) == len(set(corr)),
        {"kernel events": len(corr), "repeated ids": sorted({c for c in corr if corr.count(c) > 1})[:10]},
        expected="every correlation id on one kernel event",
    )
    by_ext = {o["args"]["External id"]: o for o in ops}
    outside = [
        a["name"]
        for a in api.values()
        if "External id" in a["args"]
        and not (
            by_ext[a["args"]["External id"]]["ts"]
            <= a["ts"]
            <= by_ext[a["args"]["External id"]]["ts"] + by_ext[a["args"]["External id"]]["dur"]
        )
    ]
    check(
        "API calls lie inside their op's window",
        not outside,
        outside[:10],
        expected="no API call outside its op's window",
    )
    early = [
        g["name"] for g in gpu if g["args"]["correlation"] in api and g["ts"] < api[g["args"]["correlation"]]["ts"]
    ]
    check(
        "GPU work starts after its launch call (clock calibration)",
        not early,
        early[:10],
        expected="no GPU work that starts before its launch call",
    )
    streams: dict = {}
    for g in sorted((g for g in gpu if g["cat"] == "kernel"), key=lambda g: g["ts"]):
        streams.setdefault((g["pid"], g["tid"]), []).append(g)
    overlap = [
        (k, a["name"], b["name"])
        for k, ks in streams.items()
        for a, b in zip(ks, ks[1:])
        if b["ts"] < a["ts"] + a["dur"] - 0.001
    ]
    check(
        "kernels on each stream are monotone, without overlap",
        not overlap,
        overlap[:5],
        expected="no two kernels of one stream overlapping",
    )
    tids = {a["tid"] for a in api.values() if "External id" in a["args"]}
    check(
        "API thread ids are OS thread ids",
        tids == {threading.get_native_id()},
        sorted(tids),
        expected=f"[{threading.get_native_id()}] (this thread's OS id)",
    )
    RESULTS["info"]["clock_offset_ns"] = raw.get("clock_offset_ns")
    RESULTS["info"]["event_counts"] = {
        c: sum(1 for e in ev if e.get("cat") == c)
        for c in (
            "kernel",
            "gpu_memcpy",
            "gpu_memset",
            "cuda_runtime",
            "cuda_driver",
            "cuda_sync",
            "gpu_user_annotation",
            "ac2g",
            "cpu_instant_event",
        )
    }
    mem = [e for e in ev if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1]
    check("device allocations appear as [memory] events", bool(mem), len(mem), expected="at least one [memory] event")
    with profiler_core.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof2:
        with record_op("check::second_cycle"):
            items[0][1]()
    k2 = [e for e in prof2.trace["traceEvents"] if e.get("cat") == "kernel"]
    check(
        "a second profile cycle captures again",
        len(k2) >= 1,
        len(k2),
        expected="at least one kernel in the second cycle",
    )


@section
def graphs() -> None:
    """A CUDA graph captured and replayed (cupy's stream capture): the replayed kernels carry CUPTI's graph and
    node ids, and the Operators view gives their time to the op that captured them, none to the launching one."""
    try:
        import cupy
        import numpy as np
    except Exception as exc:
        skip("graphs", f"cupy: {type(exc).__name__}: {exc}")
        return
    import profiler_core
    from profiler_core import ProfilerActivity, record_op
    from profiler_core.analysis.tables.operators import operators
    from profiler_core.trace.read.reader import read_trace

    k = cupy.RawKernel(SRC, "scale")
    n = 1 << 16
    a = cupy.ones(n, dtype=cupy.float32)
    args = (a, np.float32(1.0), np.int32(n))
    k(((n + 255) // 256,), (256,), args)  # compile outside the window
    cupy.cuda.runtime.deviceSynchronize()
    stream = cupy.cuda.Stream(non_blocking=True)
    nodes, replays = 3, 2
    with profiler_core.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with stream:
            with record_op("check::graph_capture"):
                stream.begin_capture()
                for _ in range(nodes):
                    k(((n + 255) // 256,), (256,), args)
                graph = stream.end_capture()
            for _ in range(replays):
                with record_op("check::graph_replay"):
                    graph.launch(stream)
            stream.synchronize()
    trace = prof.trace
    _dump_gz(trace, "graph_trace.json.gz")
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel" and str(e.get("name")).startswith("scale")]
    check(
        "graph replays: one kernel event per node and replay",
        len(kernels) == nodes * replays,
        len(kernels),
        expected=f"{nodes} nodes x {replays} replays = {nodes * replays} kernel events",
    )
    ids = [(e["args"].get("graph id"), e["args"].get("graph node id")) for e in kernels]
    check(
        "replayed kernels carry CUPTI's graph id and graph node id",
        all(g and nd for g, nd in ids),
        ids,
        expected="a graph id and a graph node id on every replayed kernel",
    )
    path = OUT / "graph_trace.json"
    path.write_text(json.dumps(trace))
    rows = {r["name"]: r for r in operators(read_trace(str(path), processes=0))["rows"]}
    total = sum(e["dur"] for e in kernels)
    got = {name: rows.get(name, {}).get("device_self_us") for name in ("check::graph_capture", "check::graph_replay")}
    check(
        "the capture op holds the replayed kernels' time, the launching op none",
        abs((got["check::graph_capture"] or 0) - total) <= 0.01 * total + 1 and not got["check::graph_replay"],
        {"kernels_us": total, **got},
        expected=f"check::graph_capture {total} us (within 1 %), check::graph_replay 0",
    )


TORCH_REF = r"""
import json, sys, torch
from torch.profiler import profile, ProfilerActivity
x = torch.randn(2048, 2048, device="cuda"); img = torch.randn(16, 64, 56, 56, device="cuda")
conv = torch.nn.Conv2d(64, 64, 3, padding=1).cuda(); ln = torch.nn.LayerNorm(2048).cuda()
def work():
    (x @ x); (x + x); torch.softmax(x, 1); x.sum(); conv(img); ln(x); torch.relu(x); x.cumsum(0)
work(); torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as p:
    for _ in range(2): work()
    torch.cuda.synchronize()
p.export_chrome_trace(sys.argv[1])
print(torch.__version__)
"""


@section
def occupancy(props: list) -> None:
    from profiler_core.cuda.occupancy import kernel_occupancy

    if not _version("torch"):
        skip("occupancy vs torch.profiler", "torch not installed")
        return
    path = Path(tempfile.mkdtemp()) / "torch_trace.json"
    out = subprocess.run([sys.executable, "-c", TORCH_REF, str(path)], capture_output=True, text=True, timeout=180)
    if out.returncode != 0:
        check(
            "torch.profiler reference trace",
            False,
            out.stderr[-2000:],
            expected="the torch.profiler child process to exit 0",
        )
        return
    ref = json.loads(path.read_text())
    _dump_gz(ref, "torch_trace.json.gz")
    ours_by_id = {p["id"]: p for p in props or []}
    kernels = [e for e in ref["traceEvents"] if e.get("cat") == "kernel"]
    keys = ("blocks per SM", "warps per SM", "est. achieved occupancy %")
    mismatches, compared = [], 0
    for e in kernels:
        a = e["args"]
        if "est. achieved occupancy %" not in a:
            continue
        dp = next((p for p in ref.get("deviceProperties", []) if p.get("id") == a.get("device")), None)
        if dp is None:
            continue
        dp = dict(dp)
        if "reservedSharedMemPerBlock" in ours_by_id.get(dp["id"], {}):
            dp["reservedSharedMemPerBlock"] = ours_by_id[dp["id"]]["reservedSharedMemPerBlock"]
        mine = kernel_occupancy(dp, a["grid"], a["block"], a["registers per thread"], a["shared memory"])
        compared += 1
        theirs = {k: a[k] for k in keys if k in a}
        if any(abs(float(mine.get(k, -1)) - float(theirs[k])) > 1e-4 * max(1.0, abs(float(theirs[k]))) for k in theirs):
            mismatches.append(
                {
                    "name": e["name"][:80],
                    "grid": a["grid"],
                    "block": a["block"],
                    "regs": a["registers per thread"],
                    "smem": a["shared memory"],
                    "kineto": theirs,
                    "ours": mine,
                }
            )
    RESULTS["info"]["torch_kernels_compared"] = compared
    check(
        "occupancy matches Kineto on every torch kernel",
        compared > 0 and not mismatches,
        {"compared": compared, "mismatches": mismatches[:20]},
        expected="kernels compared > 0 and no mismatch",
    )
    ours_path = OUT / "gpuscope_trace.json.gz"
    ours = None
    if ours_path.exists():
        with gzip.open(ours_path, "rt") as f:
            ours = f.read()
    if ours:
        our_kernel = next((e for e in json.loads(ours)["traceEvents"] if e.get("cat") == "kernel"), None)
        if our_kernel and kernels:
            ours_only = ("static shared memory", "dynamic shared memory")  # our split of Kineto's total
            missing = sorted(set(our_kernel["args"]) - set(kernels[0]["args"]) - set(ours_only))
            check(
                "our kernel arg keys are Kineto's",
                not missing,
                missing,
                expected="none of Kineto's kernel arg keys missing from ours",
            )
            a = our_kernel["args"]
            check(
                "our static + dynamic shared memory = Kineto's total",
                all(k in a for k in ours_only) and a[ours_only[0]] + a[ours_only[1]] == a.get("shared memory"),
                {k: a.get(k) for k in ("shared memory", *ours_only)},
                expected="static + dynamic shared memory == Kineto's 'shared memory'",
            )
            RESULTS["info"]["kineto_kernel_keys_we_lack"] = sorted(set(kernels[0]["args"]) - set(our_kernel["args"]))


FALLBACK_CHILD = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
import samples.gpu_check as g
import profiler_core
from profiler_core import ProfilerActivity, record_op
items, close = g._pycuda_workload()
exp = {}
with profiler_core.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for name, run in items:
        with record_op(name):
            exp[name] = run()
ev = prof.trace["traceEvents"]
k = [e for e in ev if e.get("cat") == "kernel"]
ops = {e["args"]["External id"]: e for e in ev if e.get("cat") in ("cpu_op", "user_annotation")}
calls = [e for e in ev if e.get("cat") == "cuda_driver" and "External id" in e["args"]]
outside = [c["name"] for c in calls if not (ops[c["args"]["External id"]]["ts"] <= c["ts"] and c["ts"] + c["dur"]
           <= ops[c["args"]["External id"]]["ts"] + ops[c["args"]["External id"]]["dur"])]
sets = sorted(e["args"].get("bytes") for e in ev if e.get("cat") == "gpu_memset")
print(json.dumps({"source": prof.trace.get("trace_source"), "launches": sum(v[0] or 0 for v in exp.values()),
                  "kernels": len(k), "linked": sum(1 for e in k if "External id" in e["args"]),
                  "calls_outside_their_op": outside, "memset_bytes": sets,
                  "durations_us": {e["name"]: e["dur"] for e in k}}))
"""


@section
def fallback() -> None:
    if not _version("pycuda"):
        skip("CUDA-event fallback", "pycuda not installed")
        return
    env = dict(
        os.environ,
        GPUSCOPE_CUDA_BACKEND="events",
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    )
    out = subprocess.run(
        [sys.executable, "-c", FALLBACK_CHILD, str(ROOT)], capture_output=True, text=True, timeout=180, env=env
    )
    if out.returncode != 0:
        check("CUDA-event fallback runs", False, out.stderr[-2000:], expected="the fallback's child process to exit 0")
        return
    r = json.loads(out.stdout.strip().splitlines()[-1])
    RESULTS["info"]["fallback"] = r
    check("fallback marks the trace", r["source"] == "cuda_events", r["source"], expected="'cuda_events'")
    check(
        "fallback: one kernel per pycuda launch, all linked",
        r["kernels"] == r["launches"] == r["linked"],
        r,
        expected="kernels == launches == linked",
    )
    check(
        "fallback: driver calls lie inside their op (one clock)",
        not r["calls_outside_their_op"],
        r["calls_outside_their_op"][:10],
        expected="no driver call outside its op",
    )
    check(
        "fallback: 1D and 2D memsets (sync and async) are timed",
        len(r["memset_bytes"]) >= 4,
        r["memset_bytes"],
        expected="at least 4 timed memsets",
    )


@section
def sample() -> None:
    if not _version("pycuda"):
        skip("samples/pycuda_train.py", "pycuda not installed")
        return
    logdir = Path(tempfile.mkdtemp())
    out = subprocess.run(
        [sys.executable, str(ROOT / "samples" / "pycuda_train.py"), "--logdir", str(logdir), "--steps", "8"],
        capture_output=True,
        text=True,
        timeout=180,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])),
    )
    files = sorted(logdir.rglob("*.pt.trace.json*"))
    kernels = 0
    for f in files:
        opener = gzip.open if f.suffix == ".gz" else open
        with opener(f, "rt") as fh:
            kernels += sum(1 for e in json.load(fh)["traceEvents"] if e.get("cat") == "kernel")
    check(
        "pycuda_train writes traces with kernels",
        out.returncode == 0 and files and kernels > 0,
        {"rc": out.returncode, "files": [f.name for f in files], "kernels": kernels, "stderr": out.stderr[-1500:]},
        expected="exit status 0, trace files and at least one kernel",
    )


@section
def overhead() -> None:
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_launch.py"),
            "--launches",
            "5000",
            "--json",
            str(OUT / "bench.json"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])),
    )
    RESULTS["info"]["bench_stdout"] = out.stdout[-3000:]
    RESULTS["info"]["bench_stderr"] = out.stderr[-1500:]


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    environment()
    props = device_properties() or []
    capture()
    graphs()
    occupancy(props)
    for step in (fallback, sample, overhead):
        if time.time() - T0 > 240:
            skip(step.__name__, "time budget (4 min) used up")
            continue
        step()
    RESULTS["elapsed_s"] = round(time.time() - T0, 1)
    failed = [k for k, v in RESULTS["checks"].items() if not v["ok"]]
    RESULTS["summary"] = {
        "passed": len(RESULTS["checks"]) - len(failed),
        "failed": failed,
        "skipped": list(RESULTS["skipped"]),
        "errors": list(RESULTS["errors"]),
    }
    (OUT / "gpu_check.json").write_text(json.dumps(RESULTS, indent=1, default=str))
    print(json.dumps(RESULTS["summary"], indent=1))
    print(f"details in {OUT / 'gpu_check.json'}")
    return 1 if failed or RESULTS["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
