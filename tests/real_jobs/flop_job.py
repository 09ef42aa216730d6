"""Small CPU models traced by torch.profiler (record_shapes=True) and counted by torch's own
FlopCounterMode, for the per-op performance models' oracle test.

Run with the compat venv's python: `flop_job.py --out DIR`. For each case it writes DIR/<case>.json (the
trace) and DIR/<case>.flops.json: every call FlopCounterMode counted, in call order, as [aten op name, FLOPs]."""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode


class CallLog(FlopCounterMode):
    """FlopCounterMode that also keeps each counted call (op name, FLOPs) in order."""

    def __init__(self) -> None:
        super().__init__(display=False)
        self.calls: list[list] = []
        # torch's counter has no entry for SDPA's CPU kernels: count them with its own SDPA formulas, whose
        # arguments start the same way (query, key, value / grad_out, query, key, value)
        aten = torch.ops.aten
        reg = self.flop_registry
        reg[aten._scaled_dot_product_flash_attention_for_cpu] = reg[aten._scaled_dot_product_flash_attention]
        back = reg[aten._scaled_dot_product_flash_attention_backward]
        reg[aten._scaled_dot_product_flash_attention_for_cpu_backward] = back

    def _count_flops(self, func_packet, out, args, kwargs):
        if func_packet in self.flop_registry:
            n = self.flop_registry[func_packet](*args, **kwargs, out_val=out)
            self.calls.append([f"aten::{func_packet.__name__}", int(n)])
        return super()._count_flops(func_packet, out, args, kwargs)


class Block(torch.nn.Module):
    """A pre-norm transformer block: attention through SDPA, then an MLP."""

    def __init__(self, d: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.norm2 = torch.nn.LayerNorm(d)
        self.fc1 = torch.nn.Linear(d, 4 * d)
        self.fc2 = torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        q, k, v = (t.reshape(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


def cnn() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, stride=2, padding=1),
        torch.nn.BatchNorm2d(16),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, padding=2, dilation=2, groups=4),
        torch.nn.ReLU(),
        torch.nn.Conv2d(32, 32, 1, stride=2),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(32, 10),
    )


def cases():
    """(name, function running one training or inference step)."""
    torch.manual_seed(0)
    block = Block()
    x = torch.randn(2, 16, 64, requires_grad=True)

    def transformer():
        block(x).sum().backward()

    net = cnn()
    img = torch.randn(2, 3, 20, 20)

    def conv():
        F.cross_entropy(net(img), torch.tensor([1, 2])).backward()

    q, k, v = (torch.randn(2, 4, 32, 16, requires_grad=True) for _ in range(3))

    def attention():
        F.scaled_dot_product_attention(q, k, v).sum().backward()

    def attention_causal():
        F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()

    a, bm = torch.randn(3, 8, 5), torch.randn(3, 5, 7)

    def gemms():
        torch.bmm(a, bm)
        torch.baddbmm(torch.randn(3, 8, 7), a, bm)
        torch.matmul(a, bm)
        torch.mm(a[0], bm[0])
        torch.addmm(torch.randn(8, 7), a[0], bm[0])
        F.linear(torch.randn(4, 6, 5), torch.randn(9, 5))

    return [
        ("transformer", transformer),
        ("cnn", conv),
        ("attention", attention),
        ("attention_causal", attention_causal),
        ("gemms", gemms),
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    out = ap.parse_args().out
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)
    for name, step in cases():
        step()  # warm-up: the same calls in both runs below
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            step()
        prof.export_chrome_trace(os.path.join(out, f"{name}.json"))
        log = CallLog()
        with log:
            step()
        with open(os.path.join(out, f"{name}.flops.json"), "w") as f:
            json.dump(log.calls, f)


if __name__ == "__main__":
    main()
