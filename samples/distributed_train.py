#!/usr/bin/env python3
"""Data-parallel training of a small MLP over MPI, each rank profiled into one shared logdir.

Every rank trains the same model on its own shard of a synthetic classification task; after
each backward pass the gradients are averaged with one ``Allreduce`` (one flat bucket, like
DDP). The profiler records the MPI calls as communication ops, so the plugin's Distributed view
shows computation, communication and the time each rank waits for the others.

    pip install mpi4py mpich          # MPI from PyPI, no system MPI needed
    mpiexec -n 4 python samples/distributed_train.py --logdir log/distributed --slow-rank 1
    tensorboard --logdir log/distributed

``--slow-rank R`` makes rank R a straggler (it sleeps ``--slow-ms`` per step), so the other
ranks wait for it inside ``Allreduce``. ``--plant RANK:CAUSE:MS[:FROM-TO]`` (repeatable) plants a known cause for
the diagnosis to find: ``data`` (RANK's data loader takes MS longer per step, inside its
``enumerate(DataLoader)#...__next__`` range, as torch names a DataLoader's) or ``op`` (RANK's first
``mlp::linear`` of the forward pass takes MS longer per step); with ``FROM-TO`` only in steps FROM..TO-1.

``--recorder`` runs the flight recorder (docs/flight-recorder.md) instead of the scheduled profile: every rank
writes its per-step telemetry into the logdir, and the triggers (``--trigger-*``) capture the steps after a
slow one into ``LOGDIR/capture_stepNNNNNN/``:

    mpiexec -n 4 python samples/distributed_train.py --logdir log/flight --recorder --steps 500 \
        --plant 2:data:40:300-400
    gpuscope telemetry log/flight --diagnose With PyCUDA and a GPU (``--device auto|gpu``) the
forward and backward passes run on the GPU; gradients are copied to the host for MPI.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from typing import Any

# One BLAS thread per rank: ranks already use every core, and oversubscribed BLAS threads
# would turn the profile into noise (set before numpy loads its BLAS).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from profiler_core import (  # noqa: E402
    ProfilerActivity,
    profile,
    record_function,
    record_op,
    schedule,
    supported_activities,
    tensorboard_trace_handler,
)

# --- array backends: the same math on numpy or on a GPU through PyCUDA ------------------------


class CpuOps:
    """numpy implementation of the few kernels the MLP needs."""

    name = "cpu"

    def to_device(self, a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a, dtype=np.float32)

    def to_host(self, a: Any) -> np.ndarray:
        return a

    def matmul(self, a, b, trans_a: bool = False, trans_b: bool = False):
        return (a.T if trans_a else a) @ (b.T if trans_b else b)

    def add_bias_relu(self, z, bias, relu: bool):
        z += bias
        if relu:
            np.maximum(z, 0, out=z)
        return z

    def relu_backward(self, grad, activation):
        grad[activation <= 0] = 0
        return grad

    def sum_rows(self, a):
        return a.sum(axis=0)

    def assign(self, param, host: np.ndarray) -> None:
        param[...] = host

    def sgd(self, param, grad_host: np.ndarray, lr: float):
        param -= lr * grad_host


_GPU_SOURCE = r"""
extern "C" __global__ void matmul(const float* A, const float* B, float* C, int M, int N, int K,
                                  int sam, int sak, int sbk, int sbn) {
    // C[M,N] = A[M,K] @ B[K,N]; strides (in elements) express the transposes.
    int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M || col >= N) return;
    float acc = 0.f;
    for (int k = 0; k < K; ++k) acc += A[row * sam + k * sak] * B[k * sbk + col * sbn];
    C[row * N + col] = acc;
}
extern "C" __global__ void add_bias_relu(float* Z, const float* bias, int M, int N, int relu) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= M * N) return;
    float v = Z[i] + bias[i % N];
    Z[i] = (relu && v < 0.f) ? 0.f : v;
}
extern "C" __global__ void relu_backward(float* G, const float* A, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && A[i] <= 0.f) G[i] = 0.f;
}
extern "C" __global__ void sum_rows(const float* A, float* out, int M, int N) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= N) return;
    float acc = 0.f;
    for (int r = 0; r < M; ++r) acc += A[r * N + col];
    out[col] = acc;
}
"""


class GpuOps:
    """The same kernels on the GPU through PyCUDA (naive but real CUDA kernels)."""

    name = "gpu"

    def __init__(self, gpuarray: Any = None, kernels: dict | None = None) -> None:
        if gpuarray is None:
            gpuarray, kernels = self._compile()
        self.gpuarray = gpuarray
        self._matmul = kernels["matmul"]
        self._bias_relu = kernels["add_bias_relu"]
        self._relu_bwd = kernels["relu_backward"]
        self._sum_rows = kernels["sum_rows"]

    @staticmethod
    def _compile() -> tuple[Any, dict]:
        """A context on this rank's GPU (round-robin over the node's GPUs) and the compiled kernels."""
        import pycuda.driver as cuda
        import pycuda.gpuarray as gpuarray
        from pycuda.compiler import SourceModule

        cuda.init()
        local_rank = int(os.environ.get("MPI_LOCALRANKID", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")))
        ctx = cuda.Device(local_rank % cuda.Device.count()).make_context()
        import atexit

        atexit.register(ctx.pop)
        mod = SourceModule(_GPU_SOURCE, no_extern_c=True)
        names = ("matmul", "add_bias_relu", "relu_backward", "sum_rows")
        return gpuarray, {n: mod.get_function(n) for n in names}

    def to_device(self, a: np.ndarray):
        return self.gpuarray.to_gpu(np.ascontiguousarray(a, dtype=np.float32))

    def to_host(self, a) -> np.ndarray:
        return a.get()

    def matmul(self, a, b, trans_a: bool = False, trans_b: bool = False):
        (ar, ac), (br, bc) = a.shape, b.shape
        m, k = (ac, ar) if trans_a else (ar, ac)
        n = br if trans_b else bc
        sam, sak = (1, ac) if trans_a else (ac, 1)
        sbk, sbn = (1, bc) if trans_b else (bc, 1)
        out = self.gpuarray.empty((m, n), np.float32)
        i32 = np.int32
        self._matmul(
            a,
            b,
            out,
            i32(m),
            i32(n),
            i32(k),
            i32(sam),
            i32(sak),
            i32(sbk),
            i32(sbn),
            block=(16, 16, 1),
            grid=((n + 15) // 16, (m + 15) // 16),
        )
        return out

    def add_bias_relu(self, z, bias, relu: bool):
        m, n = z.shape
        self._bias_relu(
            z, bias, np.int32(m), np.int32(n), np.int32(relu), block=(256, 1, 1), grid=((m * n + 255) // 256, 1)
        )
        return z

    def relu_backward(self, grad, activation):
        self._relu_bwd(grad, activation, np.int32(grad.size), block=(256, 1, 1), grid=((grad.size + 255) // 256, 1))
        return grad

    def sum_rows(self, a):
        m, n = a.shape
        out = self.gpuarray.empty((n,), np.float32)
        self._sum_rows(a, out, np.int32(m), np.int32(n), block=(256, 1, 1), grid=((n + 255) // 256, 1))
        return out

    def assign(self, param, host: np.ndarray) -> None:
        param.set(np.ascontiguousarray(host, dtype=np.float32))

    def sgd(self, param, grad_host: np.ndarray, lr: float):
        param -= self.gpuarray.to_gpu(np.float32(lr) * grad_host)


def make_ops(device: str) -> Any:
    """CpuOps, or GpuOps when PyCUDA and a GPU are there (``auto``) or demanded (``gpu``)."""
    if device == "cpu":
        return CpuOps()
    try:
        return GpuOps()
    except Exception as exc:
        if device == "gpu":
            raise SystemExit(f"--device gpu: no usable GPU through PyCUDA ({type(exc).__name__}: {exc})") from exc
        return CpuOps()


# --- the model -------------------------------------------------------------------------------


class MLP:
    """in -> hidden (ReLU) -> hidden (ReLU) -> classes, softmax cross-entropy, plain SGD."""

    def __init__(self, ops: Any, sizes: list[int], seed: int, slow_first_s: float = 0.0) -> None:
        rng = np.random.default_rng(seed)
        self.ops = ops
        self.slow_first_s = slow_first_s  # a planted cause: the first linear layer's forward takes this longer
        self.params: list[Any] = []
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            w = rng.normal(0.0, np.sqrt(2.0 / fan_in), (fan_in, fan_out)).astype(np.float32)
            self.params += [ops.to_device(w), ops.to_device(np.zeros(fan_out, np.float32))]
        self.shapes = [tuple(p.shape) for p in self.params]

    def forward(self, x) -> list:
        acts = [x]
        n_layers = len(self.params) // 2
        for i in range(n_layers):
            w, b = self.params[2 * i], self.params[2 * i + 1]
            with record_op("mlp::linear", acts[-1], w, b):
                z = self.ops.matmul(acts[-1], w)
                z = self.ops.add_bias_relu(z, b, relu=i < n_layers - 1)
                if i == 0 and self.slow_first_s:
                    time.sleep(self.slow_first_s)
            acts.append(z)
        return acts

    @staticmethod
    def loss_and_grad(logits: np.ndarray, labels: np.ndarray) -> tuple[float, np.ndarray]:
        with record_op("mlp::cross_entropy", logits, labels):
            shifted = logits - logits.max(axis=1, keepdims=True)
            p = np.exp(shifted)
            p /= p.sum(axis=1, keepdims=True)
            n = len(labels)
            loss = float(-np.log(p[np.arange(n), labels] + 1e-12).mean())
            p[np.arange(n), labels] -= 1.0
            return loss, (p / n).astype(np.float32)

    def backward(self, acts: list, grad_out) -> list:
        grads: list[Any] = [None] * len(self.params)
        g = grad_out
        for i in reversed(range(len(self.params) // 2)):
            w = self.params[2 * i]
            with record_op("mlp::linear_backward", g, acts[i], w):
                grads[2 * i] = self.ops.matmul(acts[i], g, trans_a=True)
                grads[2 * i + 1] = self.ops.sum_rows(g)
                if i > 0:
                    g = self.ops.relu_backward(self.ops.matmul(g, w, trans_b=True), acts[i])
        return grads


# --- data ------------------------------------------------------------------------------------


def make_shard(rank: int, n: int, in_dim: int, classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """This rank's shard of a synthetic task: labels from a fixed random linear teacher."""
    teacher = np.random.default_rng(seed).normal(size=(in_dim, classes))
    x = np.random.default_rng(seed + 1 + rank).normal(size=(n, in_dim)).astype(np.float32)
    return x, (x @ teacher).argmax(axis=1)


def batches(x: np.ndarray, y: np.ndarray, batch: int, seed: int):
    """Endless shuffled mini-batches (a minimal data loader)."""
    rng = np.random.default_rng(seed)
    while True:
        order = rng.permutation(len(x))
        for start in range(0, len(x) - batch + 1, batch):
            idx = order[start : start + batch]
            yield x[idx], y[idx]


# --- planted causes ---------------------------------------------------------------------------

DATALOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"  # the range torch records per batch
PLANT_CAUSES = ("data", "op")


def parse_plant(text: str) -> tuple[int, str, float, range | None]:
    """`RANK:CAUSE:MS[:FROM-TO]` -> (rank, cause, seconds, the steps FROM..TO-1 or None for every step); ValueError
    with the reason when it is malformed."""
    parts = text.split(":")
    if len(parts) not in (3, 4) or parts[1] not in PLANT_CAUSES:
        raise ValueError(
            f"--plant {text!r}: expected RANK:CAUSE:MS[:FROM-TO] with CAUSE one of {', '.join(PLANT_CAUSES)}"
        )
    try:
        rank, ms = int(parts[0]), float(parts[2])
    except ValueError:
        raise ValueError(f"--plant {text!r}: RANK must be an integer, MS a number") from None
    if rank < 0 or not ms > 0:
        raise ValueError(f"--plant {text!r}: RANK must not be negative, MS must be positive")
    steps = None
    if len(parts) == 4:
        lo, sep, hi = parts[3].partition("-")
        if not (sep and lo.isdigit() and hi.isdigit() and int(lo) < int(hi)):
            raise ValueError(f"--plant {text!r}: steps as FROM-TO, FROM < TO (e.g. 300-400)")
        steps = range(int(lo), int(hi))
    return rank, parts[1], ms / 1000.0, steps


class NoProfile:
    """Stands in for the scheduled profile when the flight recorder decides what to capture."""

    def __enter__(self) -> NoProfile:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def step(self) -> None:
        pass


# --- training --------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--logdir", default="log/distributed", help="TensorBoard logdir for the traces")
    p.add_argument("--steps", type=int, default=12, help="training steps")
    p.add_argument("--batch-size", type=int, default=128, help="per-rank batch size")
    p.add_argument("--hidden", type=int, default=256, help="hidden layer width")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--slow-rank", type=int, default=-1, help="this rank sleeps --slow-ms extra per step")
    p.add_argument("--slow-ms", type=float, default=30.0)
    p.add_argument(
        "--plant",
        action="append",
        default=[],
        metavar="RANK:CAUSE:MS",
        help=f"plant MS ms per step of a cause ({', '.join(PLANT_CAUSES)}) on RANK; repeatable",
    )
    p.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto")
    p.add_argument("--wait", type=int, default=1, help="profiler schedule: steps skipped per cycle")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--active", type=int, default=4, help="steps recorded per trace")
    p.add_argument("--repeat", type=int, default=1, help="traces per rank (0: until the end)")
    p.add_argument("--die-at-step", type=int, default=-1, help="failure drill: --die-rank exits abruptly at this step")
    p.add_argument("--die-rank", type=int, default=-1)
    p.add_argument("--seed", type=int, default=0)
    rec = p.add_argument_group("flight recorder (docs/flight-recorder.md)")
    rec.add_argument("--recorder", action="store_true", help="telemetry + triggered captures instead of the schedule")
    rec.add_argument("--trigger-k", type=float, default=3.0, help="slow step: > K x the running median (0: off)")
    rec.add_argument("--trigger-rank-ms", type=float, default=20.0, help="slow rank: > MS over the others (0: off)")
    rec.add_argument("--trigger-rank-steps", type=int, default=5, help="... for this many consecutive steps")
    rec.add_argument("--trigger-data-ms", type=float, default=0.0, help="data wait over MS (0: off)")
    rec.add_argument("--capture-steps", type=int, default=5, help="steps a capture records")
    rec.add_argument("--capture-interval", type=int, default=1000, help="at most one capture per this many steps")
    args = p.parse_args(argv)
    for name in ("steps", "batch_size", "hidden", "active"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.slow_ms < 0:
        p.error("--slow-ms must not be negative")
    try:
        args.plants = [parse_plant(t) for t in args.plant]
    except ValueError as exc:
        p.error(str(exc))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        from mpi4py import MPI
    except ImportError:
        print("distributed_train.py needs mpi4py and an MPI: pip install mpi4py mpich", file=sys.stderr)
        return 2
    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    if any(p[0] >= world for p in args.plants):
        if rank == 0:
            print(f"--plant: a rank is not in 0..{world - 1} ({' '.join(args.plant)})", file=sys.stderr)
        return 2
    plants = [(cause, s, steps) for r, cause, s, steps in args.plants if r == rank]

    def delay_at(cause: str, step: int) -> float:
        return sum(s for c, s, steps in plants if c == cause and (steps is None or step in steps))

    recorder = None
    if args.recorder:
        from profiler_core.flight import Recorder, Rules

        recorder = Recorder(
            args.logdir,
            Rules(
                step_factor=args.trigger_k or None,
                rank_ms=args.trigger_rank_ms or None,
                rank_steps=args.trigger_rank_steps,
                data_ms=args.trigger_data_ms or None,
                capture_steps=args.capture_steps,
                interval_steps=args.capture_interval,
            ),
        )

    ops = make_ops(args.device)
    in_dim, classes = 64, 10
    model = MLP(ops, [in_dim, args.hidden, args.hidden, classes], seed=args.seed)
    # Same initial weights everywhere (rank 0's), as DDP does at construction.
    for p in model.params:
        host = np.ascontiguousarray(ops.to_host(p))
        comm.Bcast(host, root=0)
        ops.assign(p, host)
    x, y = make_shard(rank, args.batch_size * 8, in_dim, classes, args.seed)
    loader = batches(x, y, args.batch_size, seed=args.seed + rank)
    sizes = [int(np.prod(s)) for s in model.shapes]
    bucket = np.empty(sum(sizes), np.float32)

    activities = [ProfilerActivity.CPU]
    if ops.name == "gpu" and ProfilerActivity.CUDA in supported_activities():
        activities.append(ProfilerActivity.CUDA)
    sched = schedule(wait=args.wait, warmup=args.warmup, active=args.active, repeat=args.repeat)
    scheduled: Any = (
        NoProfile()
        if recorder is not None
        else profile(
            activities=activities,
            schedule=sched,
            record_shapes=True,
            on_trace_ready=tensorboard_trace_handler(args.logdir),
        )
    )
    data_wait = recorder.data if recorder is not None else contextlib.nullcontext
    optimizer = recorder.optimizer if recorder is not None else contextlib.nullcontext
    with scheduled as prof:
        for step in range(args.steps):
            if step == args.die_at_step and rank == args.die_rank:
                print(f"rank {rank}: dying at step {step} (failure drill)", flush=True)
                os._exit(3)
            model.slow_first_s = delay_at("op", step)
            with record_function("data_loading"), data_wait():
                with record_function(DATALOADER):
                    xb, yb = next(loader)
                    data_delay = delay_at("data", step)
                    if data_delay:
                        time.sleep(data_delay)
                xd = ops.to_device(xb)
            with record_function("forward"):
                acts = model.forward(xd)
                loss, grad = model.loss_and_grad(ops.to_host(acts[-1]), yb)
                if rank == args.slow_rank:
                    with record_op("straggler_delay"):
                        time.sleep(args.slow_ms / 1000.0)
            with record_function("backward"):
                grads = model.backward(acts, ops.to_device(grad))
            with record_function("gradient_allreduce"):
                offset = 0
                for g, n in zip(grads, sizes):
                    bucket[offset : offset + n] = ops.to_host(g).ravel()
                    offset += n
                comm.Allreduce(MPI.IN_PLACE, bucket, op=MPI.SUM)
                bucket /= world
            with record_function("optimizer_step"), optimizer():
                offset = 0
                for p, n, shape in zip(model.params, sizes, model.shapes):
                    ops.sgd(p, bucket[offset : offset + n].reshape(shape), args.lr)
                    offset += n
            losses = comm.allreduce(loss, op=MPI.SUM) if step % 4 == 3 or step == args.steps - 1 else None
            if rank == 0 and losses is not None:
                print(f"step {step:3d}  mean loss {losses / world:.4f}", flush=True)
            prof.step()
            if recorder is not None:
                recorder.step()
    if recorder is not None:
        recorder.close()
        if recorder.captures:
            for c in recorder.captures:
                print(
                    f"rank {rank}: captured steps {c['first']}.. into {c['dir']} ({c['rule']}: {c['why']})", flush=True
                )
    if rank == 0:
        print(f"{world} ranks on {ops.name}; traces in {args.logdir}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
