"""Device-time tables computed by torch 2.13's own EventList code from a GPU trace (torch venv).

    .venvs/compat/bin/python tests/data/analysis/make_gpu_reference.py TRACE[.gz] OUT.json.gz
    .venvs/compat/bin/python tests/data/analysis/make_gpu_reference.py --make-ours-gpu OUT.json.gz

The fixtures: ``ours_gpu.trace.json.gz`` (made by ``--make-ours-gpu``: our format from
profiler_core.analysis.synthetic, plus Kineto-style GPU ProfilerStep spans) with
``ours_gpu.expected.json.gz``, and ``resnet50_v100.expected.json.gz`` for the shared trace
kineto_resnet50_v100/num_workers_0/worker0.1623143089861.pt.trace.json.gz.

No GPU is available here, so torch cannot profile one; instead this replays a Kineto GPU trace
through torch's post-processing: one ``torch.autograd.profiler_util.FunctionEvent`` per kineto
event as ``torch.autograd.profiler._parse_kineto_results`` builds it (CPU ops, annotations,
Python frames and runtime calls as CPU events; kernels, memcpy, memset and GPU annotations as
CUDA events; each GPU activity appended as a kernel to the op whose id equals its External id),
then torch's ``EventList._build_tree``, ``key_averages`` and ``table`` (use_device="cuda").
Memory is left out (torch attributes it by time across threads, our contract per thread).
"""
import gzip
import json
import sys

from torch.autograd import DeviceType
from torch.autograd.profiler_util import EventList, FunctionEvent

CPU_CATS = {"cpu_op", "operator", "user_annotation", "python_function", "cuda_runtime", "runtime",
            "cuda_driver"}
GPU_CATS = {"kernel", "gpu_memcpy", "memcpy", "gpu_memset", "memset", "gpu_user_annotation"}
FILTERED = {"[memory]", "[OutOfMemory]", "profiler::_record_function_enter",
            "profiler::_record_function_enter_new", "profiler::_record_function_exit",
            "aten::is_leaf", "aten::output_nr", "aten::_version"}
TABLES = [
    ("self_cuda", {}, {"sort_by": "self_cuda_time_total", "row_limit": 25}),
    ("cuda_total", {}, {"sort_by": "cuda_time_total", "row_limit": 15}),
    ("cpu_total_ms", {}, {"sort_by": "cpu_time_total", "row_limit": 10, "time_unit": "ms"}),
    ("shapes", {"group_by_input_shapes": True}, {"sort_by": "self_cuda_time_total", "row_limit": 10}),
    ("top_level", {}, {"sort_by": "cuda_time_total", "top_level_events_only": True, "row_limit": 8}),
]


def _num(v, default=0):
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def _tid(v):
    if isinstance(v, int):
        return v
    tail = str(v).rsplit(" ", 1)[-1]
    return int(tail) if tail.lstrip("-").isdigit() else hash(v) % 100000


def replay(trace):
    evs = [e for e in trace["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]
    span = [e for e in evs if str(e.get("cat", "")).lower() == "trace"]
    origin = round(span[0]["ts"] * 1000) if span else min(round(e["ts"] * 1000) for e in evs)
    all_events, frontend, by_corr = [], [], {}
    for e in evs:
        cat = str(e.get("cat", "")).lower()
        if (cat not in CPU_CATS and cat not in GPU_CATS) or e.get("name") in FILTERED:
            continue
        args = e.get("args") or {}
        ext = _num(args.get("External id", args.get("external id", 0)))
        start = round(e["ts"] * 1000) - origin
        end = start + max(round(e.get("dur", 0) * 1000), 0)
        is_gpu = cat in GPU_CATS
        dims = args.get("Input Dims") or []
        shapes = [d if isinstance(d, list) and (not d or isinstance(d[0], int)) else [] for d in dims]
        name = e["name"]
        fe = FunctionEvent(
            id=ext, name="ProfilerStep*" if name.startswith("ProfilerStep#") else name, trace_name=name,
            thread=_tid(e.get("tid", 0)), start_us=start / 1000, end_us=end / 1000,
            input_shapes=[] if is_gpu else shapes, stack=[], use_device="cuda",
            device_type=DeviceType.CUDA if is_gpu else DeviceType.CPU,
            device_index=_num(args.get("device", e.get("pid", 0))) if is_gpu else _tid(e.get("pid", 0)),
            is_user_annotation=cat in ("user_annotation", "gpu_user_annotation"), flops=0,
        )
        all_events.append(fe)
        linked = ext if (is_gpu or cat in ("cuda_runtime", "runtime", "cuda_driver")) else 0
        if linked > 0:
            by_corr.setdefault(linked, []).append(fe)
        else:
            frontend.append(fe)
    for fe in frontend:
        for f_evt in by_corr.get(fe.id, ()) if fe.id else ():
            if f_evt.device_type == DeviceType.CUDA and not f_evt.is_user_annotation:
                fe.append_kernel(f_evt.name, f_evt.device_index, f_evt.time_range.end - f_evt.time_range.start)
    all_events.sort(key=lambda evt: [evt.time_range.start, -evt.time_range.end])
    result = EventList(all_events, use_device="cuda", profile_memory=False, with_flops=False)
    result._build_tree()
    return result


def make_ours_gpu(out):
    """A deterministic GPU trace in our format (no [memory] records; see the module docstring)."""
    import os
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
    from profiler_core.analysis.synthetic import gpu_annotation, large_trace

    t = large_trace(2000, gpu=True, seed=1)
    steps = [e for e in t["traceEvents"]
             if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    for st in steps:
        t["traceEvents"].append(gpu_annotation(st["name"], st["ts"] + 3, st["dur"] - 2, st["args"]["External id"]))
    t.pop("profile_memory")
    t["traceEvents"] = [e for e in t["traceEvents"] if e.get("name") != "[memory]"]
    with gzip.open(out, "wt") as f:
        json.dump(t, f)


def main():
    if sys.argv[1] == "--make-ours-gpu":
        make_ours_gpu(sys.argv[2])
        return
    src, out = sys.argv[1], sys.argv[2]
    opener = gzip.open if src.endswith(".gz") else open
    with opener(src, "rt") as f:
        events = replay(json.load(f))
    tables = {}
    for label, ka, kw in TABLES:
        tables[label] = {"key_averages": ka, "table": kw, "text": events.key_averages(**ka).table(**kw)}
    with gzip.open(out, "wt") as f:
        json.dump({"source": src, "tables": tables}, f, indent=1)
    print(tables["self_cuda"]["text"])


if __name__ == "__main__":
    main()
