"""Generate large, realistic Kineto-format CPU traces without torch (for load benchmarks).

The shape follows a torch 2.13 `tensorboard_trace_handler` trace of a CNN training loop:
ProfilerStep#N annotations, a DataLoader annotation, nested forward `cpu_op`s with Input Dims /
Input type / Concrete Inputs / Input Strides, autograd backward ops linked by `fwdbwd` flows,
an optimizer step, `[memory]` instant events (allocations and frees) and Kineto 2.13's layout.

    python benchmarks/gen_trace.py --events 2000000 --out /tmp/big/worker0.1796207156519141535.pt.trace.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random

BASE_NS = 1790857026000000000
PID = 4242
TID = 4242
BWD_TID = 4250

# op templates: (name, [children]); shapes are filled per layer
CONV = (
    "aten::conv2d",
    [
        (
            "aten::convolution",
            [("aten::_convolution", [("aten::mkldnn_convolution", [("aten::empty", []), ("aten::as_strided_", [])])])],
        )
    ],
)
BN = (
    "aten::batch_norm",
    [
        (
            "aten::_batch_norm_impl_index",
            [
                (
                    "aten::native_batch_norm",
                    [("aten::empty_like", [("aten::empty_strided", [])]), ("aten::empty", []), ("aten::empty", [])],
                )
            ],
        )
    ],
)
RELU = ("aten::relu_", [("aten::clamp_min_", [])])
POOL = ("aten::max_pool2d", [("aten::max_pool2d_with_indices", [])])
LINEAR = (
    "aten::linear",
    [
        ("aten::t", [("aten::transpose", [("aten::as_strided", [])])]),
        (
            "aten::addmm",
            [
                ("aten::expand", [("aten::as_strided", [])]),
                ("aten::copy_", []),
                ("aten::resolve_conj", []),
                ("aten::resolve_conj", []),
            ],
        ),
    ],
)
ADD = ("aten::add", [])
LAYER_KINDS = [CONV, BN, RELU, CONV, BN, ADD, RELU, POOL]
BWD = {
    "aten::conv2d": (
        "ConvolutionBackward0",
        [
            (
                "aten::convolution_backward",
                [
                    ("aten::empty", []),
                    ("aten::zeros", [("aten::empty", []), ("aten::zero_", [("aten::fill_", [])])]),
                    ("aten::sum", []),
                ],
            )
        ],
    ),
    "aten::batch_norm": (
        "NativeBatchNormBackward0",
        [("aten::native_batch_norm_backward", [("aten::empty_like", [("aten::empty_strided", [])])])],
    ),
    "aten::relu_": ("ThresholdBackward0", [("aten::threshold_backward", [])]),
    "aten::max_pool2d": (
        "MaxPool2DWithIndicesBackward0",
        [
            (
                "aten::max_pool2d_with_indices_backward",
                [("aten::zeros_like", [("aten::empty_like", []), ("aten::zero_", [])])],
            )
        ],
    ),
    "aten::add": ("AddBackward0", []),
    "aten::linear": ("AddmmBackward0", [("aten::t", []), ("aten::mm", [("aten::empty", [])]), ("aten::sum", [])]),
}
ALLOC_OPS = {"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::zeros"}


class Gen:
    """Writes events into a list of JSON fragments, in Kineto 2.13's format and order."""

    def __init__(self, seed: int, layers: int) -> None:
        self.rng = random.Random(seed)
        self.ops: list[str] = []
        self.mem: list[tuple] = []  # (ts_ns, text) written after the cpu ops
        self.ext = 0
        self.seq = 0
        self.flow = 0
        self.n = 0
        self.allocated = 0
        self.addr = 94734963622720
        self.layers = [self._layer(i) for i in range(layers)]

    def _layer(self, i: int) -> tuple:
        kind = LAYER_KINDS[i % len(LAYER_KINDS)] if i < 1000 else LINEAR
        c = 16 * (1 + i % 8)
        hw = max(7, 112 >> (i // 16))
        dims = (
            [[32, c, hw, hw], [c, c, 3, 3], [], [], [], [], []]
            if kind is CONV
            else [[32, c, hw, hw], [c], [c]]
            if kind is BN
            else [[32, c, hw, hw]]
        )
        return kind, dims

    @staticmethod
    def _fmt(ns: int) -> str:
        return f"{ns // 1000}.{ns % 1000:03d}"

    def op(
        self,
        cat: str,
        name: str,
        tid: int,
        ts: int,
        dur: int,
        dims: list | None,
        seq: int | None = None,
        flow: tuple | None = None,
    ) -> None:
        self.ext += 1
        parts = [f'"External id": {self.ext}']
        if seq is not None:
            parts.append(f'"Sequence number": {seq}, "Fwd thread id": {0 if tid == TID else 1}')
        parts.append('"Record function id": 0')
        if dims is not None:
            n = len(dims)
            parts.append('"Concrete Inputs": [' + ", ".join(['""'] * n) + "]")
            parts.append('"Input type": [' + ", ".join(['"float"' if d else '"Scalar"' for d in dims]) + "]")
            parts.append('"Input Strides": ' + json.dumps([[1] * len(d) for d in dims]))
            parts.append('"Input Dims": ' + json.dumps(dims))
        parts.append(f'"Ev Idx": {self.n}')
        args = ", ".join(parts)
        self.ops.append(
            (
                ts,
                (
                    f'\n  {{\n    "ph": "X", "cat": "{cat}", "name": "{name}", "pid": {PID}, '
                    f'"tid": {tid},\n    "ts": {self._fmt(ts)}, "dur": {self._fmt(dur)},\n'
                    f'    "args": {{\n      {args}\n    }}\n  }}'
                ),
            )
        )
        self.n += 1
        if flow is not None:
            ph, fid = flow
            bp = ', "bp": "e"' if ph == "f" else ""
            self.ops.append(
                (
                    ts,
                    (
                        f'\n  {{\n    "ph": "{ph}", "id": {fid}, "pid": {PID}, "tid": {tid}, '
                        f'"ts": {self._fmt(ts)}, "cat": "fwdbwd", "name": "fwdbwd"{bp}\n  }}'
                    ),
                )
            )
            self.n += 1

    def memory(self, ts: int, tid: int, nbytes: int, addr: int) -> None:
        self.allocated += nbytes
        self.mem.append(
            (
                ts,
                (
                    f'\n  {{\n    "ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",'
                    f' "pid": {PID}, "tid": {tid},\n    "ts": {self._fmt(ts)},\n    "args": {{\n'
                    f'      "Total Reserved": 0, "Total Allocated": {self.allocated}, "Bytes": {nbytes},'
                    f' "Device Id": -1, "Device Type": 0, "Addr": {addr}, "finished": false\n    }}\n  }}'
                ),
            )
        )
        self.n += 1

    def tree(
        self,
        node: tuple,
        tid: int,
        ts: int,
        dims: list | None,
        frees: list,
        seq: int | None = None,
        flow: tuple | None = None,
    ) -> int:
        """Emit one op and its children starting at ts; returns its end time."""
        name, children = node
        t = ts + self.rng.randint(300, 2000)
        for child in children:
            t = self.tree(child, tid, t, dims if self.rng.random() < 0.5 else [[]], frees)
            t += self.rng.randint(100, 800)
        t += self.rng.randint(500, 20000 if not children else 3000)
        if name in ALLOC_OPS and self.rng.random() < 0.35:
            size = 4096 * self.rng.randint(1, 256)
            self.addr += size
            self.memory(ts + 200, tid, size, self.addr)
            frees.append((size, self.addr))
        self.op("cpu_op", name, tid, ts, t - ts, dims, seq, flow)
        return t

    def step(self, k: int, ts: int) -> int:
        """One training step: DataLoader, forward, loss, backward, optimizer."""
        frees: list = []
        start = ts
        t = ts + 1000
        dl_end = t + self.rng.randint(50_000, 150_000)
        self.op(
            "user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", TID, t, dl_end - t, None
        )
        t = dl_end + 2000
        fwd = []
        for node, dims in self.layers:
            self.seq += 1
            self.flow += 1
            end = self.tree(node, TID, t, dims, frees, seq=self.seq, flow=("s", self.flow))
            fwd.append((node, self.seq, self.flow))
            t = end + self.rng.randint(200, 2000)
        # backward on the autograd thread, in reverse layer order
        t += 5000
        for node, seq, fid in reversed(fwd):
            bnode = BWD.get(node[0])
            if bnode is None:
                continue
            wrapper = (f"autograd::engine::evaluate_function: {bnode[0]}", [bnode])
            end = self.tree(wrapper, BWD_TID, t, None, frees, seq=seq)
            self.op_flow_end(BWD_TID, t + 300, fid)
            t = end + self.rng.randint(200, 1500)
        opt = t + 2000
        t = opt + 1000
        for _ in range(len(self.layers) // 4):
            t = self.tree(("aten::add_", []), TID, t, [[64], [64], []], frees) + 300
        self.op("user_annotation", "Optimizer.step#SGD.step", TID, opt, t + 1000 - opt, None)
        t += 3000
        for size, addr in frees:  # free the step's allocations at its end
            self.memory(t, TID, -size, addr)
            t += 50
        end = t + 5000
        self.op("user_annotation", f"ProfilerStep#{k}", TID, start, end - start, None)
        return end

    def op_flow_end(self, tid: int, ts: int, fid: int) -> None:
        self.ops.append(
            (
                ts,
                (
                    f'\n  {{\n    "ph": "f", "id": {fid}, "pid": {PID}, "tid": {tid}, '
                    f'"ts": {self._fmt(ts)}, "cat": "fwdbwd", "name": "fwdbwd", "bp": "e"\n  }}'
                ),
            )
        )
        self.n += 1


def generate(path: str, events: int, seed: int = 0, layers: int = 240) -> int:
    """Write a trace of about `events` events to `path` (.gz: gzipped); returns the count."""
    g = Gen(seed, layers)
    ts = 1_000_000_000
    k = 1
    start = ts
    while g.n < events:
        ts = g.step(k, ts) + 10_000
        k += 1
    g.ops.sort(key=lambda p: p[0])
    g.mem.sort(key=lambda p: p[0])
    meta = [
        f'\n  {{\n    "name": "process_name", "ph": "M", "ts": {g._fmt(start)}, "pid": {PID}, '
        f'"tid": 0,\n    "args": {{\n      "name": "python"\n    }}\n  }}',
        f'\n  {{\n    "name": "thread_name", "ph": "M", "ts": {g._fmt(start)}, "pid": {PID}, '
        f'"tid": {TID},\n    "args": {{\n      "name": "thread {TID} (python)"\n    }}\n  }}',
        f'\n  {{\n    "name": "thread_name", "ph": "M", "ts": {g._fmt(start)}, "pid": {PID}, '
        f'"tid": {BWD_TID},\n    "args": {{\n      "name": "thread {BWD_TID} (pt_autograd_0)"'
        f"\n    }}\n  }}",
    ]
    tail = [
        f'\n  {{\n    "ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans",'
        f' "tid": "PyTorch Profiler",\n    "ts": {g._fmt(start)}, "dur": {g._fmt(ts - start)},'
        f'\n    "args": {{\n      "Op count": 0\n    }}\n  }}',
        f'\n  {{\n    "name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": {g._fmt(ts)}\n  }}',
    ]
    head = (
        ' {\n  "schemaVersion": 1,\n  "deviceProperties": [\n  ],\n'
        '  "trace_id": "9094E99F6F4646F3BEE212B3B37D38C6",\n  "record_shapes": 1,\n'
        '  "profile_memory": 1,\n  "displayTimeUnit": "ms",\n'
        f'  "baseTimeNanoseconds": {BASE_NS},\n  "traceEvents": ['
    )
    body_parts = meta + [p[1] for p in g.ops] + [p[1] for p in g.mem] + tail
    tmp = path + ".tmp"
    gz = path.endswith(".gz")
    with gzip.open(tmp, "wt", compresslevel=6, encoding="utf-8") if gz else open(tmp, "w", encoding="utf-8") as f:
        f.write(head)
        for i in range(0, len(body_parts), 100_000):
            f.write(",".join(body_parts[i : i + 100_000]))
            if i + 100_000 < len(body_parts):
                f.write(",")
        f.write(f'\n],\n  "traceName": "{os.path.basename(path)}"\n}}')
    os.replace(tmp, path)
    return len(body_parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--out", required=True, help="output file (.json or .json.gz)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    n = generate(args.out, args.events, args.seed)
    print(f"wrote {n} events to {args.out} ({os.path.getsize(args.out) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
