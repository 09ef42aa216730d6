"""Device-time tables computed by torch 2.13's own post-processing from a GPU trace (torch venv).

    .venvs/compat/bin/python tests/data/analysis/make_gpu_reference.py TRACE[.gz] OUT.json.gz
    .venvs/compat/bin/python tests/data/analysis/make_gpu_reference.py --make-ours-gpu OUT.json.gz

The fixtures: ``ours_gpu.trace.json.gz`` (made by ``--make-ours-gpu``: our format from
profiler_core.analysis.synthetic, plus Kineto-style GPU ProfilerStep spans) with
``ours_gpu.expected.json.gz``, and ``resnet50_v100.expected.json.gz`` for the shared trace
kineto_resnet50_v100/num_workers_0/worker0.1623143089861.pt.trace.json.gz.

What is torch's and what is ours. No GPU is available here, so torch cannot profile one and hand its
C++ profiler result (``_ProfilerResult``) to Python. Everything from there on is torch's own code:
``torch.autograd.profiler.profile._parse_kineto_results`` (which events are dropped, naming and
``ProfilerStep*``, async detection, which GPU activity and runtime call is attributed to which op,
thread fix-ups, the sort), then ``EventList._build_tree``, ``key_averages`` and ``table``
(use_device="cuda"). Ours is only the thin adapter below that presents each Kineto JSON event with the
accessors of torch's C++ ``KinetoEvent`` (device type from the category as torch's
deviceTypeFromActivity maps it; ``linked_correlation_id`` = the External id a kernel, copy, memset or
runtime call carries, 0 for a GPU user annotation, which Kineto creates without a linked activity and
whose id is its CPU annotation's, as its ``External id`` in the JSON says). So the comparison is an oracle
for the aggregation and table code and for torch's attribution rules, and a differential test (not an
oracle) for the event -> KinetoEvent mapping.
Memory is left out (torch attributes it by time across threads, our contract per thread).
"""

import gzip
import json
import sys

from torch.autograd import DeviceType
from torch.autograd.profiler import profile
from torch.autograd.profiler_util import EventList

#: Kineto JSON categories of device-side activities (DeviceType.CUDA in torch's KinetoEvent)
GPU_CATS = {"kernel", "gpu_memcpy", "memcpy", "gpu_memset", "memset", "gpu_user_annotation"}
#: categories of CPU-side events carrying a link to the op that caused them (torch's spellings, its 1.8 "Driver"
#: too: this adapter stands on torch's side and runs in the torch venv, not on gpuscope's category table)
LINKED_CPU_CATS = {"cuda_runtime", "runtime", "cuda_driver", "driver"}
#: categories torch's KinetoEvent list holds at all (others, e.g. the "Trace" span, are not events there)
EVENT_CATS = GPU_CATS | LINKED_CPU_CATS | {"cpu_op", "operator", "user_annotation", "python_function"}
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


class KinetoEventView:
    """One Kineto JSON "X" event behind the accessors torch's C++ KinetoEvent offers to Python."""

    def __init__(self, e: dict, origin_ns: int):
        self.e, args = e, e.get("args") or {}
        self.cat = str(e.get("cat", "")).lower()
        self.gpu = self.cat in GPU_CATS
        self.ext = _num(args.get("External id", args.get("external id", 0)))
        self.start = round(e["ts"] * 1000) - origin_ns
        self.end = self.start + max(round(e.get("dur", 0) * 1000), 0)
        dims = args.get("Input Dims") or []
        self.dims = [d if isinstance(d, list) and (not d or isinstance(d[0], int)) else [] for d in dims]
        self.args = args

    def name(self):
        return self.e["name"]

    def start_ns(self):
        return self.start

    def end_ns(self):
        return self.end

    def device_type(self):
        return DeviceType.CUDA if self.gpu else DeviceType.CPU

    def device_index(self):
        return _num(self.args.get("device", self.e.get("pid", 0))) if self.gpu else _tid(self.e.get("pid", 0))

    def device_resource_id(self):
        return _tid(self.e.get("tid", 0))

    def start_thread_id(self):
        return _tid(self.e.get("tid", 0))

    def end_thread_id(self):
        return _tid(self.e.get("tid", 0))

    def fwd_thread_id(self):
        return _num(self.args.get("Fwd thread id", 0))

    def is_async(self):
        return False

    def correlation_id(self):  # GPU activities and runtime calls: their own (CUPTI) correlation
        if self.cat in LINKED_CPU_CATS or (self.gpu and self.cat != "gpu_user_annotation"):
            return _num(self.args.get("correlation", self.ext))
        return self.ext

    def linked_correlation_id(self):  # Kineto links activities and runtime calls to their op; a GPU user
        linked = self.cat in LINKED_CPU_CATS or (self.gpu and self.cat != "gpu_user_annotation")
        return self.ext if linked else 0  # annotation has no linked activity (its id is the annotation's)

    def external_id(self):
        return self.ext

    def shapes(self):
        return [] if self.gpu else self.dims

    def structured_input_shapes(self):
        return []

    def structured_input_strides(self):
        return []

    def dtypes(self):
        return []

    def concrete_inputs(self):
        return []

    def kwinputs(self):
        return {}

    def stack(self):
        return []

    def scope(self):
        return 0

    def sequence_nr(self):
        return _num(self.args.get("Sequence number", -1), -1)

    def flops(self):
        return 0

    def is_user_annotation(self):
        return self.cat in ("user_annotation", "gpu_user_annotation")

    def is_python_function(self):
        return self.cat == "python_function"

    def activity_type(self):
        return self.cat

    def metadata_json(self):
        return ""

    def extra_meta(self):
        return None

    def flow_id(self):
        return 0

    def flow_type(self):
        return 0

    def flow_start(self):
        return False

    def overload_name(self):
        return ""

    def cuda_elapsed_us(self):
        return -1

    def privateuse1_elapsed_us(self):
        return -1

    def python_id(self):
        return 0

    def python_parent_id(self):
        return 0

    def python_module_id(self):
        return 0

    def nbytes(self):
        return 0


class ProfilerResultView:
    """The two members of torch's _ProfilerResult that _parse_kineto_results reads."""

    def __init__(self, events):
        self._events = events

    def events(self):
        return self._events

    def trace_start_ns(self):
        return 0


def replay(trace):
    """torch's EventList for a Kineto trace: torch's own _parse_kineto_results over the adapter above."""
    evs = [e for e in trace["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]
    span = [e for e in evs if str(e.get("cat", "")).lower() == "trace"]
    origin = round(span[0]["ts"] * 1000) if span else min(round(e["ts"] * 1000) for e in evs)
    kineto = [KinetoEventView(e, origin) for e in evs if str(e.get("cat", "")).lower() in EVENT_CATS]
    owner = type("ProfileState", (), {"use_device": "cuda"})()
    function_events = profile._parse_kineto_results(owner, ProfilerResultView(kineto))
    result = EventList(function_events, use_device="cuda", profile_memory=False, with_flops=False)
    result._build_tree()
    return result


def make_ours_gpu(out):
    """A deterministic GPU trace in our format (no [memory] records; see the module docstring)."""
    import os

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
    from profiler_core.analysis.synthetic import gpu_annotation, large_trace

    t = large_trace(2000, gpu=True, seed=1)
    steps = [e for e in t["traceEvents"] if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
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
