"""One rank's pipeline-parallel projection (`project(t)`, docs/diagnosis.md "Pipeline parallelism"): a small
JSON-able summary part (`PROJECTION_VERSION`) from which `tb_plugin/run_level/pipeline.py` rebuilds the job's
schedule without reading traces. Per ProfilerStep: the GPU span of every forward/backward annotation
(`SPAN_PATTERNS`), every P2P kernel (an NCCL kernel whose `record_param_comms` names `send` or `recv`) with the
span it feeds or was fed by, and the GPU's busy ranges (every other GPU activity, merged). Size per step: spans and
P2P kernels are a few per micro-batch; busy ranges are at most `MAX_BUSY_RANGES` (beyond that the shortest gaps
between them are closed and their time counted in `closed_gap_ns`, which the analysis counts as true idle), so a
projection is O(steps x micro-batches). Times: ns since the epoch (`base_ns` + ts)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from profiler_core.analysis.intervals import clip_ranges, merge_ranges
from profiler_core.analysis.stages.columns import category_mask
from profiler_core.analysis.stages.gpu_links import link_gpu_to_ops
from profiler_core.analysis.stages.steps import steps as steps_stage
from profiler_core.trace.categories import GPU_ACTIVITY_CATS

PROJECTION_VERSION = 1
MAX_BUSY_RANGES = 2048
#: a projection's bounds (a summary holding more is refused and recomputed): steps (the first ones are kept,
#: `steps_dropped` counts the others), forward/backward spans and P2P kernels per step (a step with more has
#: no schedule: `reason`)
MAX_STEPS, MAX_SPANS, MAX_P2P = 64, 4096, 8192
P2P_NAMES = frozenset({"send", "recv"})
#: forward/backward annotation names -> (kind, micro-batch, stage or None): torch.distributed.pipelining's
#: `PP:<stage><F|B|I|W><mb>` (I/W: backward for inputs/weights), its older `Forward <mb>`/`Backward <mb>`, and
#: `forward_mb<mb>`/`backward_step_mb<mb>` style user annotations
SPAN_PATTERNS = (
    re.compile(r"^PP:(?P<stage>\d+)(?P<kind>[FBIW])(?P<mb>\d+)$"),
    re.compile(r"^(?P<kind>Forward|Backward) (?P<mb>\d+)$"),
    re.compile(r"^(?P<kind>forward|backward)[_ ]?(?:step[_ ]?)?(?:mb|microbatch|micro_batch)[_ ]?(?P<mb>\d+)$", re.I),
)
NO_SPANS = "no forward/backward micro-batch annotations (PP:<stage>F<mb>, forward_mb<mb>, ...) in the trace"


def parse_span(name: str) -> tuple[str, int, int | None] | None:
    """(kind "F"/"B"/"I"/"W", micro-batch, stage or None) of a forward/backward annotation name, else None."""
    for pat in SPAN_PATTERNS:
        m = pat.match(name)
        if m:
            kind = m["kind"][0].upper()
            stage = m.groupdict().get("stage")
            return kind, int(m["mb"]), int(stage) if stage is not None else None
    return None


# --------------------------------------------------------------------------- one trace -> projection
def project(t: Any) -> dict:
    """The pipeline projection of one trace (module docstring): {"version", "rank", "base_ns", "steps": [{"step",
    "spans": [[kind, mb, stage, start, end]], "p2p": [[coll, start, end, span]], "busy": [[start, end]],
    "closed_gap_ns"}] (at most MAX_STEPS), "steps_dropped", "reason"}; times are ns relative to base_ns, `stage`
    -1 when the name has none, a P2P kernel's `span` the index of the span a recv feeds (the first to start after
    it ends) or a send carries (the last to end before it starts), -1 if none."""
    ev = t.events
    info = t.metadata.get("distributedInfo") if isinstance(getattr(t, "metadata", None), dict) else None
    rank = info.get("rank") if isinstance(info, dict) and isinstance(info.get("rank"), int) else None
    out: dict[str, Any] = {"version": PROJECTION_VERSION, "rank": rank, "base_ns": int(t.base_ns), "steps": []}
    out["steps_dropped"] = 0
    ts = ev["ts"].to_numpy(np.int64)
    te = ts + ev["dur"].to_numpy(np.int64)
    names = ev["name"].to_numpy()
    ann = np.flatnonzero(category_mask(ev, ("user_annotation",)))
    parsed = [(int(r), parse_span(str(names[r]))) for r in ann]
    spans_rows = [(r, p) for r, p in parsed if p is not None]
    if not spans_rows:
        out["reason"] = NO_SPANS
        return out
    links = link_gpu_to_ops(t)
    grow, grt, gop = (links[c].to_numpy(np.int64) for c in ("row", "runtime", "op"))
    gpu = category_mask(ev, GPU_ACTIVITY_CATS)
    coll = t.arg("coll_name")
    is_p2p = np.zeros(len(grow), dtype=bool)
    has_op = gop >= 0
    is_p2p[has_op] = np.isin(coll[gop[has_op]], sorted(P2P_NAMES))
    tid = ev["tid"].to_numpy()
    # each span's GPU time: the non-P2P activities launched (same thread) inside its CPU range
    compute = (~is_p2p) & (grt >= 0)
    c_launch, c_row = ts[grt[compute]], grow[compute]
    order = np.argsort(c_launch, kind="stable")
    c_launch, c_row = c_launch[order], c_row[order]
    c_tid = tid[grt[compute]][order]
    spans = []
    for r, (kind, mb, stage) in spans_rows:
        lo, hi = np.searchsorted(c_launch, ts[r]), np.searchsorted(c_launch, te[r])
        rows = c_row[lo:hi][c_tid[lo:hi] == tid[r]]
        if len(rows):
            spans.append((int(ts[rows].min()), int(te[rows].max()), kind, mb, -1 if stage is None else stage))
    if not spans:
        out["reason"] = "the forward/backward annotations launched no GPU work"
        return out
    spans.sort()
    p2p_rows = grow[is_p2p]
    p2p = sorted((int(ts[r]), int(te[r]), str(coll[gop[k]])) for k, r in zip(np.flatnonzero(is_p2p), p2p_rows))
    other = np.setdiff1d(np.flatnonzero(gpu), p2p_rows)
    busy_all = merge_ranges(ts[other], te[other])
    st = steps_stage(t)
    for _, s in st.iterrows():
        a, b = int(s["start"]), int(s["end"])
        sp = [x for x in spans if a <= x[0] < b]
        if not sp:
            continue
        if len(out["steps"]) == MAX_STEPS:
            out["steps_dropped"] += 1
            continue
        if len(sp) > MAX_SPANS:
            out["steps"] = []
            out["reason"] = f"step {s['step']} holds {len(sp)} forward/backward spans, more than the {MAX_SPANS} read"
            return out
        starts = np.array([x[0] for x in sp], np.int64)
        ends = np.array([x[1] for x in sp], np.int64)
        pp = []
        for ps, pe, c in p2p:
            if not a <= ps < b:
                continue
            if c == "recv":
                k = int(np.searchsorted(starts, pe, side="left"))
                k = k if k < len(sp) else -1
            else:
                done = np.flatnonzero(ends <= ps)
                k = int(done[np.argmax(ends[done])]) if len(done) else -1
            pp.append([c, ps, pe, k])
        if len(pp) > MAX_P2P:
            out["steps"] = []
            out["reason"] = f"step {s['step']} holds {len(pp)} P2P kernels, more than the {MAX_P2P} read"
            return out
        busy, closed = _bounded(clip_ranges(busy_all, a, b))
        out["steps"].append(
            {
                "step": str(s["step"]),
                "spans": [[k, mb, stg, x0, x1] for x0, x1, k, mb, stg in sp],
                "p2p": pp,
                "busy": busy.tolist(),
                "closed_gap_ns": closed,
            }
        )
    out["reason"] = None if out["steps"] else "no step holds a forward/backward annotation"
    return out


def check_projection(p: Any) -> None:
    """ValueError unless `p` has the shape `project` gives, within its bounds (`analyse` can read it)."""

    def ints(xs: Any, n: int) -> bool:
        return isinstance(xs, list) and len(xs) == n and all(type(x) is int and -(1 << 63) <= x < 1 << 63 for x in xs)

    if not isinstance(p, dict) or p.get("version") != PROJECTION_VERSION:
        raise ValueError(f"is not a version-{PROJECTION_VERSION} pipeline projection")
    if not (p.get("rank") is None or type(p.get("rank")) is int) or type(p.get("base_ns")) is not int:
        raise ValueError("rank or base_ns is not an integer")
    if not (p.get("reason") is None or isinstance(p.get("reason"), str)):
        raise ValueError("reason is not a text")
    steps = p.get("steps")
    if not isinstance(steps, list) or len(steps) > MAX_STEPS or type(p.get("steps_dropped", 0)) is not int:
        raise ValueError(f"steps is not a list of at most {MAX_STEPS}")
    for s in steps:
        if not isinstance(s, dict) or not isinstance(s.get("step"), str) or type(s.get("closed_gap_ns")) is not int:
            raise ValueError("a step is not of the expected shape")
        spans, p2p, busy = s.get("spans"), s.get("p2p"), s.get("busy")
        if not isinstance(spans, list) or not 0 < len(spans) <= MAX_SPANS:
            raise ValueError(f"step {s['step']}: not 1 to {MAX_SPANS} spans")
        if not all(
            isinstance(x, list) and len(x) == 5 and x[0] in ("F", "B", "I", "W") and ints(x[1:], 4) for x in spans
        ):
            raise ValueError(f"step {s['step']}: a span is not [kind, mb, stage, start, end]")
        if any(a[3] > b[3] for a, b in zip(spans, spans[1:])):
            raise ValueError(f"step {s['step']}: spans are not in time order")
        if not isinstance(p2p, list) or len(p2p) > MAX_P2P:
            raise ValueError(f"step {s['step']}: p2p is not a list of at most {MAX_P2P}")
        if not all(isinstance(c, list) and len(c) == 4 and c[0] in P2P_NAMES and ints(c[1:], 3) for c in p2p):
            raise ValueError(f"step {s['step']}: a P2P kernel is not [coll, start, end, span]")
        if not all(-1 <= c[3] < len(spans) for c in p2p):
            raise ValueError(f"step {s['step']}: a P2P kernel's span is out of range")
        if not isinstance(busy, list) or len(busy) > MAX_BUSY_RANGES or not all(ints(b, 2) for b in busy):
            raise ValueError(f"step {s['step']}: busy is not a list of at most {MAX_BUSY_RANGES} ranges")


def _bounded(busy: np.ndarray) -> tuple[np.ndarray, int]:
    """At most MAX_BUSY_RANGES ranges: the shortest gaps closed; (ranges, the closed gaps' total ns)."""
    if len(busy) <= MAX_BUSY_RANGES:
        return busy, 0
    gaps = busy[1:, 0] - busy[:-1, 1]
    close = np.argsort(gaps, kind="stable")[: len(busy) - MAX_BUSY_RANGES]
    keep = np.ones(len(busy), dtype=bool)
    keep[close + 1] = False  # range i + 1 joins range i
    first = np.flatnonzero(keep)
    last = np.append(first[1:], len(busy)) - 1
    return np.stack([busy[first, 0], busy[last, 1]], axis=1), int(gaps[close].sum())
