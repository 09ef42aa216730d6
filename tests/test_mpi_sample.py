"""samples/distributed_train.py without MPI: its model learns, its arguments are checked, and its
GPU path (PyCUDA kernels) computes what the numpy path computes, with the kernels emulated."""

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "distributed_train.py"


@pytest.fixture(scope="module")
def sample():
    saved = dict(os.environ)  # the sample pins BLAS threads in os.environ: keep ours as it was
    spec = importlib.util.spec_from_file_location("distributed_train_sample", SAMPLE)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return mod


class FakeGPUArray(np.ndarray):
    """numpy standing in for pycuda's GPUArray (get/set)."""

    def get(self):
        return np.array(self)

    def set(self, host):
        self[...] = host


class FakeGpuarrayModule:
    @staticmethod
    def to_gpu(a):
        return np.array(a).view(FakeGPUArray)

    @staticmethod
    def empty(shape, dtype):
        return np.full(shape, np.nan, dtype).view(FakeGPUArray)  # garbage, as on a GPU


def _grid_threads(block, grid):
    return block[0] * grid[0], block[1] * grid[1]


def fake_kernels():
    """Each CUDA kernel of the sample, executed thread by thread over the launched grid in numpy."""

    def matmul(A, B, C, M, N, K, sam, sak, sbk, sbn, block, grid):
        nx, ny = _grid_threads(block, grid)
        assert nx >= N and ny >= M, "grid does not cover the output"
        a, b, c = A.reshape(-1), B.reshape(-1), C.reshape(-1)
        for row in range(int(M)):
            for col in range(int(N)):
                c[row * N + col] = sum(a[row * sam + k * sak] * b[k * sbk + col * sbn] for k in range(int(K)))

    def add_bias_relu(Z, bias, M, N, relu, block, grid):
        assert _grid_threads(block, grid)[0] >= M * N
        z = Z.reshape(-1)
        v = z + np.tile(bias, int(M))
        z[...] = np.where(relu & (v < 0), 0, v)

    def relu_backward(G, A, n, block, grid):
        assert _grid_threads(block, grid)[0] >= n
        g = G.reshape(-1)
        g[A.reshape(-1) <= 0] = 0

    def sum_rows(A, out, M, N, block, grid):
        assert _grid_threads(block, grid)[0] >= N
        out[...] = A.reshape(int(M), int(N)).sum(axis=0)

    return {"matmul": matmul, "add_bias_relu": add_bias_relu, "relu_backward": relu_backward, "sum_rows": sum_rows}


def _one_step(sample, ops, x, y):
    model = sample.MLP(ops, [6, 5, 4, 3], seed=1)
    acts = model.forward(ops.to_device(x))
    loss, grad = model.loss_and_grad(ops.to_host(acts[-1]), y)
    grads = model.backward(acts, ops.to_device(grad))
    return loss, [ops.to_host(g) for g in grads]


def test_gpu_path_matches_cpu_path(sample):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(7, 6)).astype(np.float32)
    y = rng.integers(0, 3, size=7)
    loss_cpu, grads_cpu = _one_step(sample, sample.CpuOps(), x, y)
    loss_gpu, grads_gpu = _one_step(sample, sample.GpuOps(FakeGpuarrayModule, fake_kernels()), x, y)
    assert loss_gpu == pytest.approx(loss_cpu, rel=1e-5)
    for gc, gg in zip(grads_cpu, grads_gpu):
        assert gc.shape == gg.shape
        np.testing.assert_allclose(gg, gc, rtol=1e-4, atol=1e-6)


def test_gradients_are_right(sample):
    """Backward against a finite difference of the loss (the model really trains)."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(5, 6)).astype(np.float32)
    y = rng.integers(0, 3, size=5)
    ops = sample.CpuOps()
    model = sample.MLP(ops, [6, 5, 4, 3], seed=2)
    model.params = [p.astype(np.float64) for p in model.params]
    acts = model.forward(x.astype(np.float64))
    _, grad = model.loss_and_grad(acts[-1], y)
    grads = model.backward(acts, grad.astype(np.float64))
    w = model.params[2]
    eps = 1e-6
    for idx in [(0, 0), (3, 2), (4, 1)]:
        old = w[idx]
        w[idx] = old + eps
        up, _ = model.loss_and_grad(model.forward(x.astype(np.float64))[-1], y)
        w[idx] = old - eps
        down, _ = model.loss_and_grad(model.forward(x.astype(np.float64))[-1], y)
        w[idx] = old
        assert grads[2][idx] == pytest.approx((up - down) / (2 * eps), rel=1e-3, abs=1e-7)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--steps", "0"], "--steps must be at least 1"),
        (["--slow-ms", "-1"], "--slow-ms must not be negative"),
        (["--device", "tpu"], "invalid choice"),
        (["--plant", "1:disk:5"], "CAUSE one of data, op"),
        (["--plant", "1:data"], "expected RANK:CAUSE:MS"),
        (["--plant", "x:data:5"], "RANK must be an integer"),
        (["--plant", "1:data:0"], "MS must be positive"),
    ],
)
def test_bad_arguments_are_clear(sample, capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        sample.parse_args(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_gpu_demanded_without_gpu_is_a_clear_error(sample, monkeypatch):
    def no_gpu():
        raise ImportError("No module named 'pycuda'")

    monkeypatch.setattr(sample.GpuOps, "_compile", staticmethod(no_gpu))
    with pytest.raises(SystemExit, match="--device gpu: no usable GPU"):
        sample.make_ops("gpu")
    assert sample.make_ops("auto").name == "cpu"
