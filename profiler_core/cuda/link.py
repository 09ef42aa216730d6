"""Link GPU work to the CPU ops that launched it, after the fact (docs/internals.md §1).

A runtime/driver API event belongs to the innermost CPU op (`cpu_op` or `user_annotation`) on the same OS
thread whose range holds the call's start (`trace.boundary.holds`: [ts, ts + dur)); its `External id` goes
onto the API event and every GPU activity with the same `correlation`. API events that already carry an
`External id` (from CUPTI external-correlation records) keep it. Each user annotation also gets a
`gpu_user_annotation` span per stream covering the GPU work launched directly inside it. Works in any time
unit, as long as CPU and GPU events share it.
"""

from __future__ import annotations

import bisect
from collections import defaultdict

from ..trace.boundary import holds
from ..trace.categories import OP_CATS, USER_ANNOTATION
from .convert import API_CATS, GPU_ACTIVITY_CATS

# Name the PyCUDA hooks give a launch whose function name they could not learn (see pycuda_hooks).
LAUNCH_PLACEHOLDER = "pycuda::launch_kernel"


def kernel_names_for_placeholders(events: list[dict], cpu_events: list[dict]) -> dict[int, str]:
    """External id of each placeholder launch op -> the name of the kernel it launched (after linking)."""
    wanted = {
        e["args"]["External id"]
        for e in cpu_events
        if e.get("name") == LAUNCH_PLACEHOLDER and "External id" in e.get("args", {})
    }
    out = {}
    for g in events:
        if g.get("cat") == "kernel" and g.get("args", {}).get("External id") in wanted:
            out[g["args"]["External id"]] = str(g["name"]).split("(")[0]
    return out


def _with_external_id(args: dict, ext: int) -> dict:
    rest = {k: v for k, v in args.items() if k != "External id"}
    return {"External id": ext, **rest}


def _innermost(ops: list[dict], calls: list[dict]) -> dict[int, tuple[dict | None, dict | None]]:
    """For each call (by id()), the innermost enclosing op and innermost enclosing user annotation."""
    ops = sorted(ops, key=lambda o: (o["ts"], -o.get("dur", 0)))
    starts = [o["ts"] for o in ops]
    out = {}
    stack: list[dict] = []
    i = 0
    for c in sorted(calls, key=lambda c: c["ts"]):
        t = c["ts"]
        j = bisect.bisect_right(starts, t)
        while i < j:
            o = ops[i]
            while stack and not holds(stack[-1]["ts"], stack[-1]["ts"] + stack[-1].get("dur", 0), o["ts"]):
                stack.pop()
            stack.append(o)
            i += 1
        while stack and not holds(stack[-1]["ts"], stack[-1]["ts"] + stack[-1].get("dur", 0), t):
            stack.pop()
        # The stack may hold ops that ended before t below a still-open one; check containment.
        op = ann = None
        for o in reversed(stack):
            if holds(o["ts"], o["ts"] + o.get("dur", 0), t):
                if op is None:
                    op = o
                if o.get("cat") == USER_ANNOTATION:
                    ann = o
                    break
        out[id(c)] = (op, ann)
    return out


def link_gpu_to_ops(events: list[dict], cpu_events: list[dict], *, one_ns: float = 1) -> list[dict]:
    """Set `External id` on API and GPU events in `events` (in place); return new gpu_user_annotation events.

    `one_ns` is one nanosecond in the events' time unit (1 for integer ns, 0.001 for the trace's µs).
    """
    ops_by_tid = defaultdict(list)
    for e in cpu_events:
        if e.get("ph") == "X" and e.get("cat") in OP_CATS and "External id" in e.get("args", {}):
            ops_by_tid[e.get("tid")].append(e)
    calls_by_tid = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in API_CATS:
            calls_by_tid[e.get("tid")].append(e)
    annotation_of = {}
    for tid, calls in calls_by_tid.items():
        found = _innermost(ops_by_tid.get(tid, []), calls)
        for c in calls:
            op, ann = found[id(c)]
            if "External id" not in c["args"] and op is not None:
                c["args"] = _with_external_id(c["args"], op["args"]["External id"])
            if ann is not None:
                annotation_of[c["args"].get("correlation")] = ann
    ext_by_corr = {
        c["args"]["correlation"]: c["args"]["External id"]
        for calls in calls_by_tid.values()
        for c in calls
        if "External id" in c["args"] and "correlation" in c["args"]
    }
    spans = {}
    for g in events:
        if g.get("ph") != "X" or g.get("cat") not in GPU_ACTIVITY_CATS:
            continue
        corr = g["args"].get("correlation")
        if corr in ext_by_corr and "External id" not in g["args"]:
            g["args"] = _with_external_id(g["args"], ext_by_corr[corr])
        ann = annotation_of.get(corr)
        if ann is None or g["cat"] == "cuda_sync":
            continue
        key = (ann["args"]["External id"], g["pid"], g["tid"])
        lo, hi = g["ts"], g["ts"] + g.get("dur", 0)
        if key in spans:
            s = spans[key]
            s[1], s[2] = min(s[1], lo), max(s[2], hi)
        else:
            spans[key] = [ann, lo, hi]
    renames = kernel_names_for_placeholders(events, cpu_events)
    for e in cpu_events:
        if e.get("name") == LAUNCH_PLACEHOLDER and e.get("args", {}).get("External id") in renames:
            e["name"] = renames[e["args"]["External id"]]
    out = []
    for (ext, dev, stream), (ann, lo, hi) in sorted(spans.items(), key=lambda kv: (kv[1][1], kv[0])):
        ts, dur = lo - one_ns, hi - lo + 2 * one_ns
        if isinstance(one_ns, float):
            ts, dur = round(ts, 3), round(dur, 3)
        out.append(
            {
                "ph": "X",
                "cat": "gpu_user_annotation",
                "name": ann["name"],
                "pid": dev,
                "tid": stream,
                "ts": ts,
                "dur": dur,
                "args": {"External id": ext},
            }
        )
    return out


def link_trace(trace: dict) -> dict:
    """Link the GPU events of a whole trace dict (µs units) to its CPU ops, in place; idempotent."""
    events = trace.get("traceEvents", [])
    if not any(e.get("cat") in API_CATS for e in events if isinstance(e, dict)):
        return trace
    events[:] = [e for e in events if not (isinstance(e, dict) and e.get("cat") == "gpu_user_annotation")]
    cpu = [e for e in events if isinstance(e, dict) and e.get("cat") in OP_CATS]
    gpu = [e for e in events if isinstance(e, dict) and e.get("cat") not in OP_CATS]
    events.extend(link_gpu_to_ops(gpu, cpu, one_ns=0.001))
    return trace
