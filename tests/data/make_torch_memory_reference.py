"""Regenerate torch_cnn_memory_key_averages.json: PyTorch's own key_averages memory columns.

Run with the torch venv (never a project dependency):
    .venvs/compat/bin/python tests/data/make_torch_memory_reference.py

For each torch_cpu_cnn trace, every cpu_op/user_annotation/python_function event becomes a
torch.autograd.profiler_util.FunctionEvent whose cpu_memory_usage is the sum of the [memory]
records inside [start, end] (exactly the rule of torch.autograd.profiler._parse_kineto_results,
which uses MemRecordsAcc.in_interval); torch's EventList then builds the tree (its
_populate_cpu_children / _remove_dup_nodes) and key_averages() gives "CPU Mem" and
"Self CPU Mem" per name.
"""

import bisect
import glob
import gzip
import json
import os

from torch.autograd.profiler_util import EventList, FunctionEvent

HERE = os.path.dirname(os.path.abspath(__file__))
TRACES = os.path.join(HERE, "..", "..", "..", "shared", "traces", "torch_cpu_cnn")


def key_averages_memory(path):
    with gzip.open(path, "rt") as f:
        trace = json.load(f)
    evs = trace["traceEvents"]
    mem = sorted(
        (e["ts"], e["args"]["Bytes"])
        for e in evs
        if e.get("ph") == "i" and e.get("name") == "[memory]" and e["args"].get("Device Type") == 0
    )
    mts = [m[0] for m in mem]
    fes = []
    for i, e in enumerate(evs):
        if e.get("ph") != "X" or e.get("cat") not in ("cpu_op", "user_annotation", "python_function"):
            continue
        start, end = e["ts"], e["ts"] + e["dur"]
        lo, hi = bisect.bisect_left(mts, start), bisect.bisect_right(mts, end)
        fes.append(
            FunctionEvent(
                id=i,
                name=e["name"],
                thread=e["tid"],
                start_us=start,
                end_us=end,
                cpu_memory_usage=sum(m[1] for m in mem[lo:hi]),
                stack=[],
                input_shapes=[],
            )
        )
    el = EventList(fes)
    el._build_tree()
    return {
        a.key: {
            "calls": a.count,
            "cpu_memory_usage": a.cpu_memory_usage,
            "self_cpu_memory_usage": a.self_cpu_memory_usage,
        }
        for a in el.key_averages()
    }


def main():
    out = {}
    for p in sorted(glob.glob(os.path.join(TRACES, "*", "*.pt.trace.json.gz"))):
        out[os.path.relpath(p, TRACES)] = key_averages_memory(p)
    with open(os.path.join(HERE, "torch_cnn_memory_key_averages.json"), "w") as f:
        json.dump(out, f, indent=0, sort_keys=True)


if __name__ == "__main__":
    main()
