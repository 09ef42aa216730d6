"""Train a small logistic-regression model with PyCUDA under gpuscope, writing traces for TensorBoard.

Uses gpuarray arithmetic, an ElementwiseKernel, a reduction (gpuarray.dot) and two custom SourceModule
kernels (forward mat-vec and gradient), profiled with a schedule into a logdir:

    python samples/pycuda_train.py --logdir runs/pycuda --steps 12
    tensorboard --logdir runs          # the gpuscope tab

Needs a CUDA GPU and pycuda (`pip install gpuscope[cuda]`); exits with status 2 and a message otherwise.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import profiler_core
from profiler_core import ProfilerActivity, record_function

KERNELS = r"""
extern "C" __global__ void matvec(const float *X, const float *w, float *out, int n, int d)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= n) return;
    float acc = 0.f;
    for (int j = 0; j < d; ++j) acc += X[row * d + j] * w[j];
    out[row] = acc;
}

extern "C" __global__ void grad_t(const float *X, const float *err, float *grad, int n, int d)
{
    __shared__ float partial[256];
    int j = blockIdx.x;
    float acc = 0.f;
    for (int row = threadIdx.x; row < n; row += blockDim.x) acc += X[row * d + j] * err[row];
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) grad[j] = partial[0] / n;
}
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logdir", default="runs/pycuda_train")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--d", type=int, default=64)
    args = ap.parse_args(argv)
    try:
        import pycuda.autoprimaryctx  # noqa: F401  (shares the primary context with other CUDA libraries)
        import pycuda.driver as drv
        import pycuda.gpuarray as gpuarray
        from pycuda.compiler import SourceModule
        from pycuda.elementwise import ElementwiseKernel
    except Exception as exc:  # no pycuda, no driver or no GPU
        print(f"pycuda_train: needs pycuda and a CUDA GPU ({type(exc).__name__}: {exc})", file=sys.stderr)
        return 2

    rng = np.random.default_rng(0)
    n, d = args.n, args.d
    true_w = rng.normal(size=d).astype(np.float32)
    X = rng.normal(size=(n, d)).astype(np.float32)
    y = (X @ true_w > 0).astype(np.float32)

    mod = SourceModule(KERNELS, no_extern_c=True)
    matvec, grad_t = mod.get_function("matvec"), mod.get_function("grad_t")
    sigmoid = ElementwiseKernel("float *z, float *p", "p[i] = 1.f / (1.f + expf(-z[i]))", name="sigmoid")
    sgd = ElementwiseKernel("float *w, float *g, float lr", "w[i] -= lr * g[i]", name="sgd_update")

    X_gpu, y_gpu = gpuarray.to_gpu(X), gpuarray.to_gpu(y)
    w = gpuarray.zeros(d, np.float32)
    z, p, grad = gpuarray.empty(n, np.float32), gpuarray.empty(n, np.float32), gpuarray.empty(d, np.float32)
    block = 256

    sched = profiler_core.schedule(wait=1, warmup=1, active=4, repeat=2)
    with profiler_core.profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
        schedule=sched,
        on_trace_ready=profiler_core.tensorboard_trace_handler(args.logdir),
        record_shapes=True,
        profile_memory=True,
    ) as prof:
        for step in range(args.steps):
            with record_function("forward"):
                matvec(X_gpu, w, z, np.int32(n), np.int32(d), block=(block, 1, 1), grid=((n + block - 1) // block, 1))
                sigmoid(z, p)
                err = p - y_gpu
            with record_function("backward"):
                grad_t(X_gpu, err, grad, np.int32(n), np.int32(d), block=(256, 1, 1), grid=(d, 1))
            with record_function("optimizer"):
                sgd(w, grad, np.float32(0.5))
            loss = float(gpuarray.dot(err, err).get()) / n
            drv.Context.synchronize()
            prof.step()
            print(f"step {step:3d}  squared error {loss:.4f}")
    acc = float(((X @ w.get() > 0) == (y > 0)).mean())
    print(f"train accuracy {acc:.3f}; traces in {args.logdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
