"""Launch overhead of an empty kernel under gpuscope vs without, and vs torch.profiler's per-kernel overhead.

    python benchmarks/bench_launch.py [--launches 10000] [--json out.json]

Measured in one run on one GPU:
- `plain`: empty-kernel launches with no profiler (pycuda `Function.__call__` if pycuda is there, else a
  cupy RawKernel), per launch;
- `gpuscope`: the same under `profiler_core.profile(activities=[CPU, CUDA])` (CUPTI, plus the PyCUDA op
  hook when launched through pycuda);
- `torch`: in a separate process (torch's CUPTI must not share ours), a 1-element in-place `add_` (one
  kernel per call) with and without `torch.profiler` (CPU+CUDA).
Reported: the added cost per launch for gpuscope and torch, and their ratio (target: <= 1).
Without a GPU it says so and exits 0.

    python benchmarks/bench_launch.py --hooks-only

measures, on CPU, only the PyCUDA hook's bookkeeping per launch (the fake pycuda of the tests, no GPU):
a launch through the hooked `Function._launch_kernel` while recording vs unhooked, against the cost of
one bare `record_op` enter/exit in the same run (DESIGN §5: auto-instrumented calls add < 2 µs); also the
cost added to a hooked `memcpy_htod` and `mem_alloc` (recorded with their byte counts).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

EMPTY = 'extern "C" __global__ void empty_kernel() {}'

TORCH_CHILD = r"""
import json, sys, time, torch
n = int(sys.argv[1])
x = torch.zeros(1, device="cuda")
for _ in range(200): x.add_(1)
torch.cuda.synchronize()
def run():
    t0 = time.perf_counter()
    for _ in range(n): x.add_(1)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6
plain = min(run() for _ in range(3))
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
    prof = run()
print(json.dumps({"torch_plain_us": plain, "torch_profiled_us": prof}))
"""


def _launcher():
    """(name, launch()) for an empty kernel, via pycuda if present, else cupy; None without a GPU."""
    try:
        import pycuda.autoprimaryctx  # noqa: F401
        import pycuda.driver as drv
        from pycuda.compiler import SourceModule

        f = SourceModule(EMPTY, no_extern_c=True).get_function("empty_kernel")
        return "pycuda", (lambda: f(block=(1, 1, 1), grid=(1, 1))), drv.Context.synchronize
    except Exception:
        pass
    try:
        import cupy

        k = cupy.RawKernel(EMPTY, "empty_kernel")
        k((1,), (1,), ())
        return "cupy", (lambda: k((1,), (1,), ())), cupy.cuda.runtime.deviceSynchronize
    except Exception:
        return None


def _per_launch_us(launch, sync, n: int) -> float:
    sync()
    t0 = time.perf_counter()
    for _ in range(n):
        launch()
    sync()
    return (time.perf_counter() - t0) / n * 1e6


def hooks_only(n: int) -> int:
    """CPU-only: per-launch cost the PyCUDA hook adds while recording, vs one bare record_op."""
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    import numpy as np
    from test_pycuda_fake_module import LOG, _build

    from profiler_core import record_op, recording
    from profiler_core.integrations import pycuda_hooks

    mods = _build()
    sys.modules.update(mods)
    f = mods["pycuda.driver"].Module().get_function("k")

    def per_call(fn) -> float:
        best = float("inf")
        for _ in range(5):
            LOG.clear()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            best = min(best, (time.perf_counter() - t0) / n * 1e6)
        return best

    def bare_op():
        with record_op("x"):
            pass

    drv = mods["pycuda.driver"]
    host = np.zeros(16, np.float32)
    launch = lambda: f._launch_kernel((1, 1), (32, 1, 1), b"", 0, None)  # noqa: E731
    copy = lambda: drv.memcpy_htod(0, host)  # noqa: E731  (looked up on the module, as pycuda does)
    alloc = lambda: drv.mem_alloc(64)  # noqa: E731
    plain, plain_copy, plain_alloc = per_call(launch), per_call(copy), per_call(alloc)
    pycuda_hooks.install()
    recording.start_session(recording.Session())
    try:
        hooked, op = per_call(launch), per_call(bare_op)
        hooked_copy, hooked_alloc = per_call(copy), per_call(alloc)
    finally:
        recording.stop_session()
        pycuda_hooks.uninstall()
    print(
        json.dumps(
            {
                "launches": n,
                "plain_us": plain,
                "hooked_recording_us": hooked,
                "hook_added_us": hooked - plain,
                "bare_record_op_us": op,
                "hook_added_over_record_op": (hooked - plain) / op,
                "memcpy_htod_added_us": hooked_copy - plain_copy,
                "mem_alloc_added_us": hooked_alloc - plain_alloc,
            },
            indent=1,
        )
    )
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="empty-kernel launch overhead")
    ap.add_argument("--launches", type=int, default=10000)
    ap.add_argument("--json", default=None)
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--hooks-only", action="store_true", help="CPU-only hook bookkeeping cost (fake pycuda)")
    args = ap.parse_args(argv)
    if args.hooks_only:
        return hooks_only(min(args.launches, 100000))
    import profiler_core
    from profiler_core import ProfilerActivity
    from profiler_core.cuda import is_available

    found = _launcher()
    if found is None or not is_available():
        print("bench_launch: needs a CUDA GPU with pycuda or cupy, and cupti-python; nothing measured here")
        return 0
    via, launch, sync = found
    for _ in range(200):
        launch()
    plain = min(_per_launch_us(launch, sync, args.launches) for _ in range(3))
    with profiler_core.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        profiled = _per_launch_us(launch, sync, args.launches)
    kernels = sum(1 for e in prof.trace["traceEvents"] if e.get("cat") == "kernel")
    res = {
        "via": via,
        "launches": args.launches,
        "plain_us": plain,
        "gpuscope_us": profiled,
        "gpuscope_added_us": profiled - plain,
        "kernels_in_trace": kernels,
        "trace_source": prof.trace.get("trace_source"),
    }
    if not args.skip_torch:
        try:
            out = subprocess.run(
                [sys.executable, "-c", TORCH_CHILD, str(args.launches)],
                capture_output=True,
                text=True,
                timeout=300,
                env=dict(os.environ),
            )
            t = json.loads(out.stdout.strip().splitlines()[-1])
            res.update(t)
            res["torch_added_us"] = t["torch_profiled_us"] - t["torch_plain_us"]
            if res["torch_added_us"] > 0:
                res["ratio_gpuscope_to_torch"] = res["gpuscope_added_us"] / res["torch_added_us"]
        except Exception as exc:
            res["torch_error"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(res, indent=1))
    print(
        f"per launch: plain {plain:.2f} us, gpuscope +{res['gpuscope_added_us']:.2f} us"
        + (
            f", torch.profiler +{res['torch_added_us']:.2f} us, "
            f"ratio {res.get('ratio_gpuscope_to_torch', float('nan')):.2f}"
            if "torch_added_us" in res
            else ""
        )
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
