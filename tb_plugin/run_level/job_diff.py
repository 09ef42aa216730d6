"""Job diff: where two runs of a job (any number of ranks each) differ per step, from their per-worker summaries.

`job_diff(summaries_a, summaries_b) -> dict` (JSON-able), A the baseline, B the compared job:
  {"a": {"workers", "ranks", "steps", "step_ms"}, "b": {...},
   "step_delta_ms": B's mean step minus A's (ms per step),
   "buckets": [{"bucket", "label", "a_ms", "b_ms", "delta_ms"}...],    # the job's ledger per step, by delta
   "lines": [{"kind", "bucket", "name", "group", "ranks", "ranks_text", "delta_ms", "text"}...],   # ranked
   "per_rank": [{"rank", "worker_a", "worker_b", "step_delta_ms", "buckets": {bucket: delta_ms}}...],
   "groups": [{"group", "name", "ranks", "a_ms", "b_ms", "delta_ms", "max_rank", "max_delta_ms"}...],
   "kernels": [{"name", "align", "a_name", "b_name", "a_path", "b_path", "a_ms", "b_ms", "delta_ms"}...],
   "steps": [{"step", "a_ms", "b_ms", "delta_ms"}...],                 # aligned by position
   "only_a": [rank...], "notes": [text...],
   "mfu": {"a", "b", "ops": [{"name", "dtype", "a_ms", "b_ms", "delta_ms", "ranks"}...]}}   # `mfu_diff`
`to_csv(result) -> str`: the ranked lines, then the buckets, groups and kernels, one row each.

How the numbers relate (nothing counts twice):
* Per rank, each side's ledger (`run_ledger.worker_ledgers`: exclusive buckets, sync skew split from exposed
  communication) is averaged over the rank's steps, so its buckets add up to the rank's mean step. A rank of B is
  compared with the same rank of A, or with A's mean rank when A has no such rank (different rank counts).
* `step_delta_ms` is the mean over B's ranks of B's step minus the mean over A's ranks of A's step, and each
  `buckets` row is the same difference for one bucket: the buckets add up to the step delta.
* A `line` is one bucket's delta on a set of ranks whose deltas are alike (consecutive ranks written as ranges);
  its `delta_ms` is the mean over those ranks. Lines of one bucket cover disjoint ranks. `name` is drill-down:
  for compute, the kernel whose per-step time changed most on those ranks; for exposed communication and sync
  skew, the collective (process group and name) whose exposed time changed most there. Lines are ranked
  regressions first by delta, waiting for other ranks (sync skew) after the work that caused it, then gains
  (gains first when B's step is shorter).
* `groups` and `kernels` are drill-down tables, not further parts of the step delta: a group's exposed
  collective time per step (duration less the compute under it: transfer and waiting) averaged over the ranks
  that call it on each side, with the rank whose time changed most; a kernel's time per step averaged over all
  ranks, from each worker's kernel table (`kernel_table`: kernels per op path and name; a group outside a
  worker's largest `kernel_table.MAX_GROUPS` counts 0 there).
* Kernels align as in the Diff view's kernel diff (`tables.kernel_places.align_groups` over each job's groups): by
  op path and name, else by their place under the same op path ("structure": a kernel renamed between library or
  hardware versions is one row, `name` "A -> B"), else by name under another path; the rest are unmatched
  (`align`). A compute line names the row whose time changed most, with that `name`.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from typing import Any

import numpy as np

from profiler_core.analysis.worker.buckets import BUCKETS, COMPUTE, EXPOSED_COMM, LABELS, SYNC_SKEW
from tb_plugin.run_level import kernel_alignment
from tb_plugin.run_level.run_ledger import worker_ledgers
from tb_plugin.summaries.schema import CollectiveCalls, Summary, empty_kernel_table

#: a per-rank delta smaller than this (ms per step) is noise, not a line
MIN_MS = 0.05
#: ranks go into one line while their delta is at least this fraction of the line's largest
ALIKE = 0.75
MAX_LINES = 30
#: a line's text names at most this many rank ranges (its `ranks` has them all)
TEXT_RANGES = 8
LINE_FIELDS = ("order", "kind", "bucket", "name", "group", "ranks", "n_ranks", "delta_ms", "text")


class JobDiffError(ValueError):
    """The two runs cannot be compared (no summaries, no steps): the message says why."""


def _rank_of(workers: list[str], summaries: Mapping[str, Summary]) -> dict[str, int]:
    """worker -> rank (`devices.rank`; the worker's place by name where no rank is recorded or ranks repeat)."""
    ranks = {w: (d.rank if (d := summaries[w].devices) is not None else None) for w in workers}
    vals = [r for r in ranks.values() if isinstance(r, int)]
    if len(vals) != len(workers) or len(set(vals)) != len(vals):
        return {w: i for i, w in enumerate(workers)}
    return {w: int(r) for w, r in ranks.items()}  # type: ignore[arg-type]


def _side(summaries: Mapping[str, Summary]) -> dict:
    """One job's per-rank means per step: bucket ns, kernel ns by name, exposed collective ns by (group, name)."""
    workers = sorted(summaries)
    if not workers:
        raise JobDiffError("no worker summaries")
    leds = worker_ledgers(summaries)
    rank_of = _rank_of(workers, summaries)
    per: dict[int, dict] = {}
    step_walls: list[list[float]] = []
    group_ranks: dict[tuple[str, str], list[int] | None] = {}
    for w in workers:
        led = leds[w]
        n = len(led.steps)
        if not n:
            continue
        b = {k: (sum(ns) / n if (ns := led.buckets[k].ns) is not None else 0.0) for k in BUCKETS}
        for i, x in enumerate(led.wall_ns):
            while len(step_walls) <= i:
                step_walls.append([])
            step_walls[i].append(float(x))
        table = summaries[w].kernel_table or empty_kernel_table()
        cc = summaries[w].collective_calls
        coll = _exposed_by_collective(cc, n, group_ranks) if cc is not None and cc.group else {}
        per[rank_of[w]] = {
            "worker": w,
            "wall": float(np.mean(led.wall_ns)),
            "buckets": b,
            "kernels": kernel_alignment.per_step(table),
            "table": table,
            "coll": coll,
        }
    if not per:
        raise JobDiffError("no worker recorded a step")
    return {"workers": len(workers), "per": per, "step_walls": step_walls, "group_ranks": group_ranks}


def _align_kernels(A: dict, B: dict) -> list[dict]:
    """The two jobs' kernel groups aligned (`kernel_alignment.align`), one row each: its `label` ("A -> B" when the
    names differ); each rank's `kernels` rekeyed from (path, name) to the row's index."""
    rows = kernel_alignment.align(
        [A["per"][r]["table"] for r in sorted(A["per"])], [B["per"][r]["table"] for r in sorted(B["per"])]
    )
    for side, which in ((A, "a"), (B, "b")):
        index = {row[which]: i for i, row in enumerate(rows) if row[which] is not None}
        for v in side["per"].values():
            v["kernels"] = {index[k]: ns for k, ns in v["kernels"].items()}
    for row in rows:
        na, nb = (row["a"] or row["b"])[1], (row["b"] or row["a"])[1]
        row["label"] = na if na == nb else f"{na} -> {nb}"
    return rows


def _exposed_by_collective(cc: CollectiveCalls, n: int, group_ranks: dict) -> dict[tuple[str, str], float]:
    """(process group name, collective name) -> exposed ns per step (duration less `covered`) of the calls in
    the worker's first `n` steps; `group_ranks` gets each key's ranks."""
    names = len(cc.names)
    step = np.asarray(cc.step, np.int64)
    keep = (step >= 0) & (step < n)
    code = (np.asarray(cc.group, np.int64) * names + np.asarray(cc.name, np.int64))[keep]
    exposed = np.maximum(np.asarray(cc.dur, np.int64) - np.asarray(cc.covered, np.int64), 0)[keep]
    codes, inv = np.unique(code, return_inverse=True)
    sums = np.bincount(inv, weights=exposed.astype(np.float64), minlength=len(codes))
    out: dict[tuple[str, str], float] = {}
    for c, v in zip(codes.tolist(), sums.tolist()):
        g, nm = divmod(c, names)
        key = (str(cc.group_pg[g]), str(cc.names[nm]))
        out[key] = out.get(key, 0.0) + v / n
        group_ranks.setdefault(key, cc.group_ranks[g])
    return out


def _mean(per: Mapping[int, dict], part: str) -> dict:
    """The mean rank: per key of `part`, the mean over ranks (0 where a rank lacks the key)."""
    keys = sorted({k for v in per.values() for k in v[part]})
    return {k: sum(v[part].get(k, 0.0) for v in per.values()) / len(per) for k in keys}


def ranges(ranks: list[int], most: int | None = None) -> str:
    """Ranks as consecutive ranges: [0, 1, 2, 5, 8, 9] -> "0-2, 5, 8-9"; a stride of more than one as
    "5, 13, ..., 253 (stride 8)"; with `most`, at most that many pieces, then how many ranks in all."""
    rs = sorted(set(ranks))
    if len(rs) >= 4 and rs[1] - rs[0] > 1 and all(b - a == rs[1] - rs[0] for a, b in zip(rs, rs[1:])):
        return f"{rs[0]}, {rs[1]}, ..., {rs[-1]} (stride {rs[1] - rs[0]})"
    out: list[str] = []
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    if most is not None and len(out) > most:
        return ", ".join(out[:most]) + f", ... ({len(rs)} ranks)"
    return ", ".join(out)


def _clusters(deltas: dict[int, float]) -> list[list[int]]:
    """Ranks whose |delta| is at least MIN_MS, in sets of like deltas (same sign, within ALIKE of the set's largest)."""
    out: list[list[int]] = []
    for sign in (1.0, -1.0):
        rs = sorted((r for r, d in deltas.items() if d * sign >= MIN_MS), key=lambda r: (-abs(deltas[r]), r))
        cur: list[int] = []
        for r in rs:
            if cur and abs(deltas[r]) < ALIKE * abs(deltas[cur[0]]):
                out.append(cur)
                cur = []
            cur.append(r)
        if cur:
            out.append(cur)
    return out


def _top_key(
    ranks: list[int], a: Mapping[int, dict], b: Mapping[int, dict], mean_a: dict, part: str, sign: float
) -> tuple[Any, float]:
    """The key of `part` whose mean delta over `ranks` is largest in the direction `sign` of the line, and that
    delta (None, 0 when no key moved that way)."""
    tot: dict[Any, float] = {}
    for r in ranks:
        base = a[r][part] if r in a else mean_a
        for k in set(base) | set(b[r][part]):
            tot[k] = tot.get(k, 0.0) + b[r][part].get(k, 0.0) - base.get(k, 0.0)
    if not tot:
        return None, 0.0
    k = max(tot, key=lambda x: (sign * tot[x], str(x)))
    return (k, tot[k] / len(ranks)) if sign * tot[k] > 0 else (None, 0.0)


def _ms(ns: float) -> float:
    return round(ns / 1e6, 4)


def job_diff(summaries_a: Mapping[str, Summary], summaries_b: Mapping[str, Summary]) -> dict:
    """Job B (`summaries_b`: worker -> summary) compared with job A, step by step (module docstring)."""
    try:
        A = _side(summaries_a)
    except JobDiffError as e:
        raise JobDiffError(f"run A: {e}") from None
    try:
        B = _side(summaries_b)
    except JobDiffError as e:
        raise JobDiffError(f"run B: {e}") from None
    pa, pb = A["per"], B["per"]
    krows = _align_kernels(A, B)
    mean_a = {part: _mean(pa, part) for part in ("buckets", "kernels", "coll")}
    mean_b = {part: _mean(pb, part) for part in ("buckets", "kernels", "coll")}
    wall_a = float(np.mean([v["wall"] for v in pa.values()]))
    wall_b = float(np.mean([v["wall"] for v in pb.values()]))
    notes: list[str] = []
    only_b = sorted(set(pb) - set(pa))
    only_a = sorted(set(pa) - set(pb))
    if only_b:
        notes.append(f"ranks {ranges(only_b)} are only in B: compared with A's mean rank")
    if only_a:
        notes.append(f"ranks {ranges(only_a)} are only in A: in the job's means, not in the lines")
    na, nb = len(A["step_walls"]), len(B["step_walls"])
    if na != nb:
        notes.append(
            f"A has {na} steps and B {nb}: each side's means are over its own steps; `steps` compares the first "
            f"{min(na, nb)} by position"
        )

    def base(r: int, part: str) -> dict:
        return pa[r][part] if r in pa else mean_a[part]

    per_rank = []
    for r in sorted(pb):
        wa = pa[r]["wall"] if r in pa else wall_a
        per_rank.append(
            {
                "rank": r,
                "worker_a": pa[r]["worker"] if r in pa else None,
                "worker_b": pb[r]["worker"],
                "step_delta_ms": _ms(pb[r]["wall"] - wa),
                "buckets": {k: _ms(pb[r]["buckets"][k] - base(r, "buckets")[k]) for k in BUCKETS},
            }
        )
    lines: list[dict] = []
    for k in BUCKETS:
        deltas = {row["rank"]: row["buckets"][k] for row in per_rank}
        for rs in _clusters(deltas):
            d = float(np.mean([deltas[r] for r in rs]))
            name, group, detail = None, None, ""
            kind = "bucket"
            if k == COMPUTE:
                key, kd = _top_key(rs, pa, pb, mean_a["kernels"], "kernels", float(np.sign(d)))
                if key is not None and abs(kd) >= MIN_MS * 1e6:
                    name, kind = krows[key]["label"], "kernel"
                    detail = f": kernel {name} {kd / 1e6:+.2f} ms"
            elif k in (EXPOSED_COMM, SYNC_SKEW):
                key, kd = _top_key(rs, pa, pb, mean_a["coll"], "coll", float(np.sign(d)))
                if key is not None and abs(kd) >= MIN_MS * 1e6:
                    group, name, kind = key[0], key[1], "collective"
                    detail = f": {key[1]} on group {key[0]} {kd / 1e6:+.2f} ms"
            every = len(rs) == len(pb)
            where = "every rank" if every else f"rank{'s' if len(rs) > 1 else ''} {ranges(rs, TEXT_RANGES)}"
            lines.append(
                {
                    "kind": kind,
                    "bucket": k,
                    "name": name,
                    "group": group,
                    "ranks": sorted(rs),
                    "ranks_text": where,
                    "delta_ms": round(d, 4),
                    "text": f"{LABELS[k]} {d:+.2f} ms per step on {where}{detail}",
                }
            )
    grew = wall_b >= wall_a  # a faster B: its gains first
    lines.sort(key=lambda x: ((x["delta_ms"] < 0) == grew, x["bucket"] == SYNC_SKEW, -abs(x["delta_ms"]), x["ranks"]))
    lines = lines[:MAX_LINES]
    buckets: list[dict[str, Any]] = [
        {
            "bucket": k,
            "label": LABELS[k],
            "a_ms": _ms(mean_a["buckets"][k]),
            "b_ms": _ms(mean_b["buckets"][k]),
            "delta_ms": _ms(mean_b["buckets"][k] - mean_a["buckets"][k]),
        }
        for k in BUCKETS
    ]
    buckets.sort(key=lambda x: (-abs(x["delta_ms"]), x["bucket"]))
    groups: list[dict[str, Any]] = []
    for key in sorted(set(mean_a["coll"]) | set(mean_b["coll"])):
        in_a = [v["coll"][key] for v in pa.values() if key in v["coll"]]
        in_b = [v["coll"][key] for v in pb.values() if key in v["coll"]]
        ga = float(np.mean(in_a)) if in_a else 0.0
        gb = float(np.mean(in_b)) if in_b else 0.0
        dr = {
            r: pb[r]["coll"].get(key, 0.0) - (pa[r]["coll"].get(key, 0.0) if r in pa else ga)
            for r in pb
            if key in pb[r]["coll"] or key in pa.get(r, {"coll": {}})["coll"]
        }
        top = max(dr, key=lambda r: (abs(dr[r]), -r)) if dr else None
        members = A["group_ranks"].get(key) or B["group_ranks"].get(key)
        groups.append(
            {
                "group": key[0],
                "name": key[1],
                "ranks": ranges(members) if members else None,
                "a_ms": _ms(ga),
                "b_ms": _ms(gb),
                "delta_ms": _ms(gb - ga),
                "max_rank": top,
                "max_delta_ms": _ms(dr[top]) if top is not None else 0.0,
            }
        )
    groups.sort(key=lambda x: (-abs(x["max_delta_ms"]), x["group"], x["name"]))
    kernels = [
        {
            "name": row["label"],
            "align": row["align"],
            "a_name": row["a"][1] if row["a"] else None,
            "b_name": row["b"][1] if row["b"] else None,
            "a_path": row["a"][0] if row["a"] else None,
            "b_path": row["b"][0] if row["b"] else None,
            "a_ms": _ms(mean_a["kernels"].get(i, 0.0)),
            "b_ms": _ms(mean_b["kernels"].get(i, 0.0)),
            "delta_ms": _ms(mean_b["kernels"].get(i, 0.0) - mean_a["kernels"].get(i, 0.0)),
        }
        for i, row in enumerate(krows)
    ]
    kernels.sort(key=lambda x: (-abs(x["delta_ms"]), x["name"], x["a_path"] or x["b_path"] or ""))
    steps = [
        {
            "step": i,
            "a_ms": _ms(float(np.mean(A["step_walls"][i]))),
            "b_ms": _ms(float(np.mean(B["step_walls"][i]))),
            "delta_ms": _ms(float(np.mean(B["step_walls"][i])) - float(np.mean(A["step_walls"][i]))),
        }
        for i in range(min(na, nb))
    ]
    return {
        "a": _side_info(A, wall_a),
        "b": _side_info(B, wall_b),
        "step_delta_ms": _ms(wall_b - wall_a),
        "buckets": buckets,
        "lines": lines,
        "per_rank": per_rank,
        "groups": groups,
        "kernels": kernels,
        "steps": steps,
        "only_a": only_a,
        "notes": notes,
        "mfu": mfu_diff(summaries_a, summaries_b),
    }


def _lost_per_step(s: Summary) -> dict[tuple[str, str], float]:
    """(op name, dtype) -> ms lost to its roofline bound per step, from a summary's `roofline.top`."""
    r = s.roofline
    if r is None:
        return {}
    n = max(len(r.steps), 1)
    out: dict[tuple[str, str], float] = {}
    for o in r.top:
        out[(o.name, o.dtype)] = out.get((o.name, o.dtype), 0.0) + o.lost_ms / n
    return out


def mfu_diff(summaries_a: Mapping[str, Summary], summaries_b: Mapping[str, Summary]) -> dict:
    """MFU of each job (mean over its ranks that have one; None: none has) and the op groups whose ms lost to
    their roofline bound per step grew most from A to B: [{name, dtype, a_ms, b_ms, delta_ms, ranks}] (means over
    the ranks; `ranks`: the ranks of B where it grew by MIN_MS or more; a rank of B is compared with the same rank
    of A, or with A's mean rank)."""

    def mean_mfu(summaries: Mapping[str, Summary]) -> float | None:
        vals = [s.roofline.mfu for s in summaries.values() if s.roofline is not None and s.roofline.mfu is not None]
        return float(np.mean(vals)) if vals else None

    wa, wb = sorted(summaries_a), sorted(summaries_b)
    ra, rb = _rank_of(wa, summaries_a), _rank_of(wb, summaries_b)
    la = {ra[w]: _lost_per_step(summaries_a[w]) for w in wa}
    lb = {rb[w]: _lost_per_step(summaries_b[w]) for w in wb}
    keys = sorted({k for d in (*la.values(), *lb.values()) for k in d})
    ops: list[dict[str, Any]] = []
    for key in keys:
        mean_a = float(np.mean([d.get(key, 0.0) for d in la.values()])) if la else 0.0
        per = {r: d.get(key, 0.0) - (la[r].get(key, 0.0) if r in la else mean_a) for r, d in lb.items()}
        b_ms = float(np.mean([d.get(key, 0.0) for d in lb.values()])) if lb else 0.0
        ops.append(
            {
                "name": key[0],
                "dtype": key[1],
                "a_ms": round(mean_a, 4),
                "b_ms": round(b_ms, 4),
                "delta_ms": round(float(np.mean(list(per.values()))) if per else 0.0, 4),
                "ranks": sorted(r for r, x in per.items() if x >= MIN_MS),
            }
        )
    ops.sort(key=lambda o: (-o["delta_ms"], o["name"], o["dtype"]))
    return {"a": mean_mfu(summaries_a), "b": mean_mfu(summaries_b), "ops": ops[:10]}


def mfu_text(m: Mapping[str, Any]) -> str | None:
    """ "MFU 41.0 % -> 33.0 %: aten::mm (bf16) below its bound by +6.0 ms per step on ranks 0-63", or None."""
    if m.get("a") is None and m.get("b") is None:
        return None

    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{x * 100:.1f} %"

    text = f"MFU {pct(m.get('a'))} -> {pct(m.get('b'))}"
    top = next((o for o in m.get("ops") or [] if o["delta_ms"] >= MIN_MS and o["ranks"]), None)
    if top is not None:
        text += (
            f": {top['name']} ({top['dtype']}) below its bound by {top['delta_ms']:+.1f} ms per step "
            f"on ranks {ranges(top['ranks'], TEXT_RANGES)}"
        )
    return text


def _side_info(side: dict, wall: float) -> dict:
    return {
        "workers": side["workers"],
        "ranks": len(side["per"]),
        "steps": len(side["step_walls"]),
        "step_ms": _ms(wall),
    }


def render_text(result: Mapping[str, Any], limit: int = 10) -> str:
    """The job diff in words: the step delta, then the first `limit` ranked lines."""
    a, b = result["a"], result["b"]
    out = [
        f"step {a['step_ms']:.2f} ms ({a['ranks']} ranks) -> {b['step_ms']:.2f} ms ({b['ranks']} ranks): "
        f"{result['step_delta_ms']:+.2f} ms per step"
    ]
    mt = mfu_text(result.get("mfu") or {})
    if mt:
        out.append(mt)
    out += [f"{i}. {ln['text']}" for i, ln in enumerate(result["lines"][:limit], 1)]
    if not result["lines"]:
        out.append(f"no difference of {MIN_MS} ms per step or more on any rank")
    out += [f"note: {n}" for n in result["notes"]]
    return "\n".join(out) + "\n"


def to_csv(result: Mapping[str, Any]) -> str:
    """The ranked lines, then the job's buckets, collectives per group and kernels, as CSV rows (LINE_FIELDS)."""
    buf = io.StringIO()
    wr = csv.writer(buf, lineterminator="\n")
    wr.writerow(LINE_FIELDS)
    for i, ln in enumerate(result["lines"], 1):
        wr.writerow(
            [i, ln["kind"], ln["bucket"], ln["name"] or "", ln["group"] or "", ranges(ln["ranks"]), len(ln["ranks"]),
             ln["delta_ms"], ln["text"]]
        )  # fmt: skip
    for row in result["buckets"]:
        wr.writerow(["", "job_bucket", row["bucket"], "", "", "all", "", row["delta_ms"], row["label"]])
    for row in result["groups"]:
        wr.writerow(
            ["", "group", "", row["name"], row["group"], row["ranks"] or "", "", row["delta_ms"],
             f"largest on rank {row['max_rank']}: {row['max_delta_ms']:+.2f} ms"]
        )  # fmt: skip
    for row in result["kernels"]:
        wr.writerow(["", "job_kernel", COMPUTE, row["name"], "", "all", "", row["delta_ms"], row["align"]])
    return buf.getvalue()
