"""A CUDA-graph job: one trace per rank whose first step captures a graph and whose other steps replay it.

The capture, as torch.cuda.graph records it: `cudaStreamBeginCapture`, then per layer a `layer_<l>` annotation
holding four `aten::` ops that each make one `cudaLaunchKernel` call (no kernel runs during a capture), then
`cudaStreamEndCapture` and `cudaGraphInstantiateWithFlags`. Each replay step is a `CompiledFunction` op making
one `cudaGraphLaunch` call, whose correlation every replayed kernel carries. Kernel j of the graph (op j of the
capture, j = 4 * layer + position) runs for 10 + j µs. Options: no capture (the profile starts after it), and
CUPTI's graph ids on the kernels (`graph id`, `graph node id`), in which case the kernels of each pair run on
two streams with the second starting first, so that time order differs from capture order.

    python benchmarks/gen_distributed.py --cuda-graph --ranks 2 --out /tmp/graph_job
"""

from __future__ import annotations

OPS = ["aten::mm", "aten::gelu", "aten::native_layer_norm", "aten::addmm"]
KERNELS = [
    "ampere_sgemm_128x64_nn",
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>",
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>",
    "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8",
]
SHAPES = [[[64, 1024], [1024, 1024]], [[64, 1024]], [[64, 1024], [1024], [1024]], [[1024], [64, 1024], [1024, 1024]]]
PID, TID, DEVICE, STREAM, SIDE_STREAM = 2000, 2000, 0, 7, 8
BASE_NS = 1_790_950_000_000_000_000
FIRST_NODE_ID = 101


def kernel_us(j: int) -> float:
    """Duration of the graph's kernel j (launched by op j of the capture)."""
    return 10.0 + j


def graph_trace(
    rank: int = 0, ranks: int = 1, layers: int = 4, replays: int = 3, capture: bool = True, ids: bool = False
) -> dict:
    """The Kineto trace of one rank of the job (see the module docstring)."""
    ev: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "process_name", "pid": DEVICE, "tid": 0, "args": {"name": "GPU 0"}},
    ]
    n = 4 * layers
    ext, corr = 1, 1

    def x(cat: str, name: str, ts: float, dur: float, args: dict, pid: int = PID, tid: int = TID) -> None:
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args})

    def runtime(name: str, ts: float, dur: float, external: int) -> int:
        nonlocal corr
        x("cuda_runtime", name, ts, dur, {"External id": external, "correlation": corr})
        corr += 1
        return corr - 1

    t = 0.0
    step = 1
    if capture:
        length = 200.0 + 20.0 * n
        x("user_annotation", f"ProfilerStep#{step}", t, length, {"External id": ext})
        ext += 1
        runtime("cudaStreamBeginCapture", t + 10, 2, 0)
        for j in range(n):
            layer, m = divmod(j, 4)
            ts = t + 20 + 20 * j
            if m == 0:
                x("user_annotation", f"layer_{layer}", ts - 1, 20 * 4 - 2, {"External id": ext})
                ext += 1
            x("cpu_op", OPS[m], ts, 15, {"External id": ext, "Input Dims": SHAPES[m], "Input type": ["float"]})
            runtime("cudaLaunchKernel", ts + 3, 5, ext)
            ext += 1
        end = t + 20 + 20 * n
        runtime("cudaStreamEndCapture", end + 5, 3, 0)
        runtime("cudaGraphInstantiateWithFlags", end + 20, 50, 0)
        t += length + 10
        step += 1
    gpu_len = sum(kernel_us(j) + 1 for j in range(n))
    for _ in range(replays):
        length = 40.0 + gpu_len + 20
        x("user_annotation", f"ProfilerStep#{step}", t, length, {"External id": ext})
        ext += 1
        op_ext = ext
        x("cpu_op", "CompiledFunction", t + 5, 30, {"External id": op_ext})
        ext += 1
        c = runtime("cudaGraphLaunch", t + 10, 15, op_ext)
        g = t + 30
        starts = []
        for j in range(n):
            starts.append(g)
            g += kernel_us(j) + 1
        for j in range(n):
            ts, stream = starts[j], STREAM
            if ids and j % 2 == 1:  # runs beside kernel j - 1 and starts before it
                ts, stream = starts[j - 1] - 0.5, SIDE_STREAM
            args: dict = {"External id": op_ext, "device": DEVICE, "stream": stream, "correlation": c}
            args.update({"grid": [1024, 1, 1], "block": [256, 1, 1], "registers per thread": 64})
            if ids:
                args.update({"graph id": 1, "graph node id": FIRST_NODE_ID + j})
            x("kernel", KERNELS[j % 4], ts, kernel_us(j), args, pid=DEVICE, tid=stream)
        t += length + 10
        step += 1
    ev.sort(key=lambda e: e.get("ts", -1))
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": ranks},
        "traceEvents": ev,
        "traceName": f"graph_rank{rank:05d}",
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": BASE_NS,
    }
