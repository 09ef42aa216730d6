"""Train a small numpy MLP (forward, backward, SGD) and profile it like a PyTorch training loop.

    python samples/cpu_train.py --logdir ./log        # then: tensorboard --logdir ./log

The model's operators are declared with ``profiler_core.operator`` (their inputs give shapes and
FLOPs), the phases with ``record_function``; the profiler follows
``schedule(wait=1, warmup=1, active=3, repeat=2)`` and writes one trace per cycle into the logdir.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from profiler_core import (
    ProfilerActivity,
    operator,
    profile,
    record_function,
    register_flops_formula,
    schedule,
    tensorboard_trace_handler,
)

# A formula for our own fused op name: 2*M*K*N for the matmul plus the bias add.
register_flops_formula("mlp::linear", lambda dims, _c: 2 * dims[0][0] * dims[0][1] * dims[1][1])


# ---- operators (what a numpy "framework" would declare) ------------------------------------------
@operator("mlp::linear")
def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    return x @ w + b


@operator("aten::relu")
def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0)


@operator("aten::mse_loss")
def mse_loss(pred: np.ndarray, target: np.ndarray) -> float:
    return float(np.mean((pred - target) ** 2))


@operator("aten::mm")
def mm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a @ b


@operator("aten::threshold_backward")
def relu_backward(grad: np.ndarray, x: np.ndarray) -> np.ndarray:
    return grad * (x > 0)


@operator("aten::add_")
def add_(param: np.ndarray, update: np.ndarray, alpha: float) -> None:
    param += alpha * update


# ---- model, data, optimizer -----------------------------------------------------------------------
class MLP:
    """in -> hidden -> hidden -> out, ReLU activations."""

    def __init__(self, sizes: list[int], rng: np.random.Generator) -> None:
        self.params = []
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            w = rng.standard_normal((fan_in, fan_out)).astype(np.float32) * np.sqrt(2.0 / fan_in)
            self.params.append([w, np.zeros(fan_out, np.float32)])
        self.grads = [[np.zeros_like(w), np.zeros_like(b)] for w, b in self.params]

    def forward(self, x: np.ndarray) -> np.ndarray:
        with record_function("MLP.forward"):
            self.acts = [x]
            for i, (w, b) in enumerate(self.params):
                x = linear(x, w, b)
                if i < len(self.params) - 1:
                    self.acts.append(x)  # pre-activation, for relu_backward
                    x = relu(x)
                    self.acts.append(x)
            return x

    def backward(self, pred: np.ndarray, target: np.ndarray) -> None:
        with record_function("MLP.backward"):
            grad = (2.0 / pred.size) * (pred - target)
            acts = list(self.acts)
            for i in reversed(range(len(self.params))):
                inp = acts.pop()
                w, _ = self.params[i]
                self.grads[i][0][...] = mm(inp.T, grad)
                self.grads[i][1][...] = grad.sum(axis=0)
                if i > 0:
                    grad = relu_backward(mm(grad, w.T), acts.pop())


class SGD:
    def __init__(self, model: MLP, lr: float) -> None:
        self.model, self.lr = model, lr

    def zero_grad(self) -> None:
        with record_function("Optimizer.zero_grad#SGD.zero_grad"):
            for g in self.model.grads:
                g[0].fill(0)
                g[1].fill(0)

    def step(self) -> None:
        with record_function("Optimizer.step#SGD.step"):
            for (w, b), (gw, gb) in zip(self.model.params, self.model.grads):
                add_(w, gw, -self.lr)
                add_(b, gb, -self.lr)


class DataLoader:
    """Mini-batches of a synthetic regression task; named like torch's loader in the trace."""

    def __init__(self, n: int, dim: int, batch: int, rng: np.random.Generator) -> None:
        self.x = rng.standard_normal((n, dim)).astype(np.float32)
        true_w = rng.standard_normal((dim, 1)).astype(np.float32)
        self.y = np.tanh(self.x @ true_w)
        self.batch = batch

    def __iter__(self):
        for start in range(0, len(self.x) - self.batch + 1, self.batch):
            with record_function("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"):
                xb = self.x[start : start + self.batch].copy()
                yb = self.y[start : start + self.batch].copy()
            yield xb, yb


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logdir", default="./log", help="TensorBoard logdir for the traces (default ./log)")
    ap.add_argument("--steps", type=int, default=12, help="training steps (default 12)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--with-stack", action="store_true", help="also record Python stacks")
    ap.add_argument("--gzip", action="store_true", help="write .json.gz traces")
    args = ap.parse_args(argv)

    rng = np.random.default_rng(0)
    model = MLP([32, args.hidden, args.hidden, 1], rng)
    opt = SGD(model, lr=0.002)
    data = DataLoader(n=args.batch * args.steps, dim=32, batch=args.batch, rng=rng)

    def on_ready(prof) -> None:
        tensorboard_trace_handler(args.logdir, use_gzip=args.gzip)(prof)
        print(f"--- trace ready at step {prof.step_num} (written to {args.logdir})")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))

    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=3, repeat=2),
        on_trace_ready=on_ready,
        record_shapes=True,
        profile_memory=True,
        with_stack=args.with_stack,
        with_flops=True,
    ) as prof:
        for step, (xb, yb) in enumerate(data):
            opt.zero_grad()
            pred = model.forward(xb)
            loss = mse_loss(pred, yb)
            model.backward(pred, yb)
            opt.step()
            prof.step()
            if step % 4 == 0:
                print(f"step {step:3d}  loss {loss:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
