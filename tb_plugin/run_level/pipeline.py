"""Pipeline parallelism across a job's ranks: the stage x micro-batch schedule rebuilt from each rank's projection
(`analysis.worker.pipeline.project`, kept in the summaries, so a run is analysed without reading traces), the
schedule recognised, each stage's bubble split by cause and the bubble ratio per step next to the schedule's
theoretical one (docs/diagnosis.md, "Pipeline parallelism"). `analyse(projections)` does this; `pipeline(traces)`
projects traces and analyses them (`gpuscope pipeline RUN_DIR` prints it for a run folder).

Stage order: the `PP:<stage>` index of torch.distributed.pipelining's names where the trace has them (a rank
holding several virtual stages is an interleaved schedule; its pipeline position is its lowest stage), else the
ranks' order. Times: every trace's ns since the epoch (`base_ns` + ts); the ranks must share a clock.

Per step, the window W is from the first span's start to the last span's end over all stages. On each stage,
idle = W minus its busy ranges (P2P kernels are not busy), split into four parts that add up to it exactly:

* `p2p_transfer_ns`: idle time inside a P2P kernel once both sides of its transfer are there (a recv paired with
  the send of the span it feeds: from the later of the two kernels' starts to each kernel's end);
* `upstream_wait_ns`: idle time, outside transfers, from the stage's previous span's end (or W's start) until the
  producing stage's send for the next span ended (forward: the previous stage; backward: the next one), but not
  past that span's start; `waiting_on` splits it by producing stage;
* `p2p_wait_ns`: idle time left inside P2P kernels (a send whose receiver is not there yet);
* `true_idle_ns`: the rest.

Bubble ratio of a step: summed idle / (stages x |W|). Theoretical: (p - 1) / (m + p - 1) for 1F1B and GPipe,
(p - 1) / (v m + p - 1) interleaved (p stages, m micro-batches, v virtual stages per rank).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from profiler_core.analysis.intervals import clip_ranges, intersect_ranges, merge_ranges, subtract_ranges, total_length
from profiler_core.analysis.worker.pipeline import project
from tb_plugin.summaries.schema import Pipeline, PipelineStep, convert

#: a projection's bounds (a summary holding more is refused and recomputed): steps (the first ones are kept,
#: `steps_dropped` counts the others), forward/backward spans and P2P kernels per step (a step with more has
#: no schedule: `reason`)


def theoretical_ratio(schedule: str, stages: int, microbatches: int, virtual: int = 1) -> float | None:
    """The bubble ratio a schedule has with equal stages and free communication, None for an unknown one."""
    if schedule in ("1F1B", "GPipe"):
        return (stages - 1) / (microbatches + stages - 1)
    if schedule == "interleaved":
        return (stages - 1) / (virtual * microbatches + stages - 1)
    return None


# --------------------------------------------------------------------------- projections -> schedule and bubbles
def _stage_orders(projections: Mapping[str, Pipeline]) -> tuple[list[str], dict[str, list[int]]]:
    """Workers in pipeline order and the (virtual) stages each holds."""
    held: dict[str, list[int]] = {}
    for w, p in projections.items():
        held[w] = sorted({x[2] for s in p.steps for x in s.spans if x[2] >= 0})
    if all(held.values()):
        order = sorted(projections, key=lambda w: (held[w][0], w))
    else:
        order = sorted(projections, key=lambda w: (projections[w].rank is None, projections[w].rank or 0, w))
        held = {w: [i] for i, w in enumerate(order)}
    return order, held


def _expected(kind: str, stage: int, stages: int, mbs: int) -> list[tuple[str, int]]:
    if kind == "GPipe":
        return [("F", i) for i in range(mbs)] + [("B", i) for i in range(mbs)]
    warm = min(stages - 1 - stage, mbs)  # 1F1B: warm-up forwards, one forward one backward, cool-down backwards
    seq = [("F", i) for i in range(warm)]
    for i in range(mbs - warm):
        seq += [("F", warm + i), ("B", i)]
    return seq + [("B", i) for i in range(mbs - warm, mbs)]


def _recognise(seqs: list[list[tuple[str, int]]], virtual: int, mbs: int) -> tuple[str, str | None]:
    stages = len(seqs)
    if virtual > 1:
        if all({k for k, _ in s} <= {"F", "B"} and len(s) == 2 * virtual * mbs for s in seqs):
            return "interleaved", None
        return "unknown", "ranks hold several stages but do not run every micro-batch's forward and backward"
    for kind in ("1F1B", "GPipe"):
        if all(s == _expected(kind, i, stages, mbs) for i, s in enumerate(seqs)):
            return kind, None
    return "unknown", "the forward/backward order matches neither 1F1B nor GPipe"


def analyse(projections: Mapping[str, Pipeline | None]) -> dict:
    """The pipeline diagnosis of a job from its workers' projections (module docstring): {"stages", "workers"
    (pipeline order), "virtual_stages", "microbatches", "schedule", "schedule_reason", "steps": [{"step",
    "start_ns", "end_ns" (since the epoch), "bubble_ratio", "theoretical_ratio", "chart": [per stage: [[kind, mb,
    stage, start, end] (ns from start_ns)]], "stages": [{"stage", "worker", "window_ns", "busy_ns", "idle_ns",
    "true_idle_ns", "p2p_wait_ns", "p2p_transfer_ns", "upstream_wait_ns", "waiting_on": {stage: ns}}]}],
    "steps_dropped" (steps beyond the projections' MAX_STEPS, not analysed), "reason"}. `projections`: each
    worker's summary part (`schema.Pipeline`; None: none)."""
    usable = {w: p for w, p in projections.items() if p is not None and p.steps}
    out: dict[str, Any] = {"stages": len(usable), "workers": [], "steps": [], "schedule": "unknown"}
    out.update(schedule_reason=None, virtual_stages=None, microbatches=None)
    out["steps_dropped"] = max((int(p.steps_dropped) for p in usable.values()), default=0)
    if len(usable) < 2:
        lacking = [f"{w}: {p.reason if p else None}" for w, p in sorted(projections.items()) if not (p and p.steps)]
        out["reason"] = "a pipeline needs at least two ranks with forward/backward spans" + (
            f" ({'; '.join(lacking)})" if lacking else ""
        )
        return out
    order, held = _stage_orders(usable)
    claimed = [v for w in order for v in held[w]]
    if len(set(claimed)) < len(claimed):
        dup = sorted({v for v in claimed if claimed.count(v) > 1})
        out["reason"] = (
            f"several ranks run stage {', '.join(map(str, dup))}: pass the ranks of one pipeline "
            "(one data-parallel replica) at a time"
        )
        return out
    p = len(order)
    virtual = max(len(v) for v in held.values())
    pos = {w: i for i, w in enumerate(order)}
    names = [[s.step for s in usable[w].steps] for w in order]
    common = [s for s in names[0] if all(s in n for n in names[1:])]
    if not common:
        out["workers"], out["reason"] = order, "no step is recorded on every stage"
        return out
    first = {w: {s.step: s for s in usable[w].steps} for w in order}
    mbs = len({x[1] for x in first[order[0]][common[0]].spans})
    seqs: list[list[tuple[str, int]]] = [[(x[0], x[1]) for x in first[w][common[0]].spans] for w in order]
    schedule, why = _recognise(seqs, virtual, mbs)
    out["workers"], out["virtual_stages"], out["microbatches"] = order, virtual, mbs
    out["schedule"], out["schedule_reason"] = schedule, why
    theory = theoretical_ratio(schedule, p, mbs, virtual)
    for name in common:
        out["steps"].append(
            _step(name, [first[w][name] for w in order], [usable[w].base_ns for w in order], held, order, pos, theory)
        )
    out["reason"] = None
    return out


def _step(
    name: str,
    recs: list[PipelineStep],
    bases: list[int],
    held: dict,
    order: list[str],
    pos: dict,
    theory: float | None,
) -> dict:
    p = len(recs)
    # absolute spans; (stage of the span's owner, kind, mb, virtual stage) -> span, and the send each span made
    spans = [[(x[0], x[1], x[2], b + x[3], b + x[4]) for x in r.spans] for r, b in zip(recs, bases)]
    p2p = [[(c[0], b + c[1], b + c[2], c[3]) for c in r.p2p] for r, b in zip(recs, bases)]
    start = min(s[0][3] for s in spans)
    end = max(max(x[4] for x in s) for s in spans)
    vstage_of = {}  # (virtual stage) -> pipeline position
    for w in order:
        for v in held[w]:
            vstage_of[v] = pos[w]
    nv = len(vstage_of)
    by_key: dict[tuple, tuple[int, int]] = {}  # (kind, mb, virtual stage) -> (position, span index)
    for i, sp in enumerate(spans):
        for j, x in enumerate(sp):
            by_key[(x[0], x[1], x[2] if x[2] >= 0 else i)] = (i, j)
    send_of: dict[tuple[int, int], tuple[int, int]] = {}
    recv_of: dict[tuple[int, int], tuple[int, int]] = {}
    for i, cs in enumerate(p2p):
        for c, s0, s1, k in cs:
            if k >= 0:
                (send_of if c == "send" else recv_of).setdefault((i, k), (s0, s1))
    stages = []
    idle_sum = 0
    for i, r in enumerate(recs):
        win = np.array([[start, end]], np.int64)
        busy = clip_ranges(np.asarray(r.busy, np.int64).reshape(-1, 2) + bases[i], start, end)
        idle = subtract_ranges(win, busy)
        closed = int(r.closed_gap_ns)
        kernels = merge_ranges(np.array([c[1] for c in p2p[i]], np.int64), np.array([c[2] for c in p2p[i]], np.int64))
        transfer_parts, upstream_wins, upstream_from = [], [], []
        prev_end = start
        for j, x in enumerate(spans[i]):
            kind, mb, v = x[0], x[1], x[2] if x[2] >= 0 else i
            producer = v - 1 if kind == "F" else v + 1 if kind in ("B", "I") else None
            if producer is not None and 0 <= producer < nv and (kind, mb, producer) in by_key:
                q, k = by_key[(kind, mb, producer)]
                send = send_of.get((q, k))
                ready = send[1] if send else spans[q][k][4]
                if ready > prev_end:
                    upstream_wins.append((prev_end, min(ready, x[3])))
                    upstream_from.append(vstage_of.get(producer, q))
                recv = recv_of.get((i, j))
                if send and recv:
                    both = max(send[0], recv[0])
                    if both < recv[1]:
                        transfer_parts.append((both, recv[1]))
            prev_end = max(prev_end, x[4])
        for c, s0, s1, k in p2p[i]:  # a send's transfer: from when its receiver's recv started
            if c == "send" and k >= 0:
                rx = _recv_for(i, k, spans, by_key, recv_of, nv)
                if rx is not None and max(s0, rx[0]) < s1:
                    transfer_parts.append((max(s0, rx[0]), s1))
        tr = intersect_ranges(idle, _ranges(transfer_parts))
        rest = subtract_ranges(idle, tr)
        waiting_on: dict[int, int] = {}
        for src in sorted(set(upstream_from)):  # a stage's windows are disjoint: one intersection per producer
            wins = [w for w, f in zip(upstream_wins, upstream_from) if f == src]
            n = total_length(intersect_ranges(rest, _ranges(wins)))
            if n:
                waiting_on[src] = n
        up = intersect_ranges(rest, _ranges(upstream_wins))
        rest = subtract_ranges(rest, up)
        pw = intersect_ranges(rest, kernels)
        true_idle = total_length(subtract_ranges(rest, pw)) + closed
        idle_ns = total_length(idle) + closed
        row = {
            "stage": i,
            "worker": order[i],
            "window_ns": end - start,
            "busy_ns": end - start - idle_ns,
            "idle_ns": idle_ns,
            "p2p_transfer_ns": total_length(tr),
            "upstream_wait_ns": total_length(up),
            "p2p_wait_ns": total_length(pw),
            "waiting_on": {str(k): v for k, v in sorted(waiting_on.items())},
        }
        row["true_idle_ns"] = true_idle
        stages.append(row)
        idle_sum += idle_ns
    chart = [[[x[0], x[1], x[2], x[3] - start, x[4] - start] for x in sp] for sp in spans]
    return {
        "step": name,
        "start_ns": start,
        "end_ns": end,
        "bubble_ratio": idle_sum / (p * (end - start)) if end > start else None,
        "theoretical_ratio": theory,
        "chart": chart,
        "stages": stages,
    }


def _recv_for(i: int, k: int, spans: list, by_key: dict, recv_of: dict, nv: int) -> tuple[int, int] | None:
    """The recv that takes span k of position i's output (the consumer's recv)."""
    kind, mb, v = spans[i][k][0], spans[i][k][1], spans[i][k][2] if spans[i][k][2] >= 0 else i
    consumer = v + 1 if kind == "F" else v - 1
    if not 0 <= consumer < nv or (kind, mb, consumer) not in by_key:
        return None
    return recv_of.get(by_key[(kind, mb, consumer)])


def _ranges(pairs: list[tuple[int, int]]) -> np.ndarray:
    if not pairs:
        return np.zeros((0, 2), np.int64)
    a = np.array(pairs, np.int64)
    a = a[a[:, 1] > a[:, 0]]
    return merge_ranges(a[:, 0], a[:, 1])


def pipeline(traces: Mapping[str, Any]) -> dict:
    """`analyse` of the traces' projections ({worker: TraceData})."""
    return analyse({w: convert(project(t), Pipeline) for w, t in traces.items()})
