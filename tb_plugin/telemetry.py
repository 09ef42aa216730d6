"""The flight recorder's telemetry of a whole job, read by the plugin (/telemetry routes) and `gpuscope telemetry`.

A *telemetry run* is a folder of the logdir holding `*.telemetry.jsonl` files (profiler_core/flight/format.py), one
per rank. This module reads them (each file decoded once, its step columns from its binary twin when it has a
matching one, and kept in memory with the byte offset read: a file
that grew since, a job still running, is read from there on; a rewritten file is read again; a finished file's
decoded columns are also kept in $GPUSCOPE_CACHE_DIR/telemetry/, numpy arrays without pickle, so that the next
process reads them at disk speed), aligns the ranks
by step number into (rank x step) arrays, and answers:
- per-rank summaries (steps, wall time quantiles, data wait, collectives, GPU, memory);
- stragglers by a stated rule (`RULE`): a rank is *late* in a step when it is the step's slowest rank and its
  work (wall minus collectives: what it did, not what it waited for the others; the wall time when collectives
  are not measured) exceeds the other ranks' median by more than max(`late_ms`, `late_frac` x that median);
  *chronic*: late in more than `chronic_frac` of its steps; *occasional*: not chronic, with at least one *burst*
  of `burst_steps` or more consecutive late steps (its bursts listed);
- the captures the triggers started, grouped by capture folder, with each one's reason and the run to diagnose;
- a step x rank heatmap of one metric, downsampled to at most `max_steps` x `max_ranks` cells by step (and rank)
  ranges with numpy (the mean or the max of each range).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from profiler_core import storage
from profiler_core.flight import format
from profiler_core.flight.rules import others_median

#: the heatmap's metrics: name -> how it is computed from a rank's columns
METRICS = ("work_ms", "wall_ms", "data_ms", "comm_ms", "host_ms", "gpu_ms", "optimizer_ms", "rss_mib")


@dataclass(frozen=True)
class StragglerRule:
    """The thresholds of the straggler classification (module docstring)."""

    late_ms: float = 2.0
    late_frac: float = 0.10
    chronic_frac: float = 0.5
    burst_steps: int = 3

    def text(self) -> str:
        return (
            f"late: the step's slowest rank, its work (wall minus collectives) over the other ranks' median by more "
            f"than max({self.late_ms:g} ms, {100 * self.late_frac:g} % of that median); chronic: late in more than "
            f"{100 * self.chronic_frac:g} % of its steps; occasional: not chronic, with bursts of >= "
            f"{self.burst_steps} consecutive late steps"
        )


RULE = StragglerRule()

_lock = threading.Lock()
#: path -> (identity, bytes decoded, RankTelemetry, the incomplete tail kept for the next read)
_files: dict[str, tuple[tuple, int, format.RankTelemetry, bytes]] = {}  # path -> (identity, size read, ...)
#: the last jobs loaded (folder -> Job), whose matrices serve the next request while no file changed
_jobs: dict[str, Job] = {}
#: files kept decoded at most (a 256-rank job: 256 entries)
MAX_FILES = 4096


def _concat(a: format.RankTelemetry, b: format.RankTelemetry) -> format.RankTelemetry:
    """`a` followed by the records decoded from the bytes after it (`b`): a file that grew."""
    out = format.RankTelemetry(a.path, header=a.header or b.header)
    out.steps = np.concatenate([a.steps, b.steps])
    out.start_s = np.concatenate([a.start_s, b.start_s])
    out.columns = {k: np.concatenate([a.columns[k], b.columns[k]]) for k in a.columns}
    out.device_mib = np.concatenate([a.device_mib, b.device_mib])
    gpu = np.concatenate([a.gpu_ms, b.gpu_ms])
    if b.orphan_gpu and len(a.steps):  # GPU times of steps read before, given by the new records
        at = np.array([p[0] for p in b.orphan_gpu], np.int64)
        pos = np.searchsorted(a.steps, at)
        ok = (pos < len(a.steps)) & (a.steps[np.minimum(pos, max(0, len(a.steps) - 1))] == at)
        gpu[pos[ok]] = np.array([p[1] for p in b.orphan_gpu])[ok]
    out.captures, out.ended, out.bad_lines = a.captures + b.captures, a.ended or b.ended, a.bad_lines + b.bad_lines
    out.end = b.end or a.end
    out.gpu_ms = gpu
    return out


#: the version of the decoded-column cache entries (bump when RankTelemetry's arrays change)
CACHE_VERSION = 2
_ARRAYS = ("steps", "start_s", "gpu_ms", "device_mib")


def _cache_entry(path: str, st: storage.FileInfo) -> Any:
    """Where the decoded columns of a finished telemetry file are kept ($GPUSCOPE_CACHE_DIR/telemetry/, the parse
    cache's directory and rules), or None when the cache is off or not ours."""
    import hashlib

    from profiler_core import settings
    from profiler_core.trace.read import cache

    if not settings.get("GPUSCOPE_CACHE"):
        return None
    d = cache.usable_dir(create=True)
    if d is None:
        return None
    sub = d / "telemetry"
    try:
        sub.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return None
    key = repr((cache._key(path, st), CACHE_VERSION)).encode()
    return sub / f"{hashlib.sha256(key).hexdigest()[:32]}.npz"


def _cache_load(entry: Any, path: str) -> format.RankTelemetry | None:
    import json

    try:
        with np.load(entry, allow_pickle=False) as z:
            meta = json.loads(bytes(z["meta"]).decode())
            t = format.RankTelemetry(path, header=meta["header"], captures=meta["captures"], ended=meta["ended"])
            t.bad_lines, t.end = meta["bad_lines"], meta.get("end", {})
            for name in _ARRAYS:
                setattr(t, name, z[name])
            t.columns = {name: z["col_" + name] for name in format.COLUMNS.values()}
            return t
    except (OSError, ValueError, KeyError):
        return None


def _cache_store(entry: Any, t: format.RankTelemetry) -> None:
    import json

    meta = {"header": t.header, "captures": t.captures, "ended": t.ended, "end": t.end, "bad_lines": t.bad_lines}
    arrays = {name: getattr(t, name) for name in _ARRAYS}
    arrays.update({"col_" + k: v for k, v in t.columns.items()})
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    try:
        with storage.write_beside(str(entry), mode=0o600) as f:
            np.savez(f, **arrays)
    except OSError:
        pass


def _read_binary(path: str, data: bytes) -> format.RankTelemetry | None:
    """The file decoded through its binary twin (`format.decode_binary`: the step columns without decoding their
    JSON), or None when it has none or the twin does not match (the caller decodes the JSON)."""
    twin = path[: -len(format.SUFFIX)] + format.BIN_SUFFIX
    if not path.endswith(format.SUFFIX) or not data:
        return None
    try:
        with storage.open_read(twin) as f:
            bdata = f.read()
    except (OSError, ValueError):
        return None
    return format.decode_binary(path, data, bdata)


def read_file(path: str) -> format.RankTelemetry:
    """One rank's telemetry, decoded once and kept; a local file that only grew (the same inode) is read from where
    the last read ended."""
    st = storage.stat(path)
    same = tuple(st.ident[2:4]) if st.ident else (st.version,)  # inode and device; a remote object's version
    with _lock:
        kept = _files.get(path)
    if kept is not None and kept[0] == (same, st.size, st.mtime_ns):
        return kept[2]
    if kept is not None and st.ident and kept[0][0] == same and st.size > kept[1]:
        with storage.open_read(path) as f:  # the same file, grown: read the new bytes only
            f.seek(kept[1])
            new = f.read()
        size = kept[1] + len(new)
        data = kept[3] + new
        end = data.rfind(b"\n") + 1
        t = _concat(kept[2], format.decode(path, data[:end]))
    else:
        cached = _cache_entry(path, st)
        t_cached = _cache_load(cached, path) if cached is not None and cached.exists() else None
        if t_cached is not None:  # a finished file decoded before (by this or another process)
            t, size, data, end = t_cached, st.size, b"", 0
        else:
            with storage.open_read(path) as f:
                data = f.read()
            size = len(data)
            end = data.rfind(b"\n") + 1
            t_bin = _read_binary(path, data[:end])
            t = t_bin if t_bin is not None else format.decode(path, data[:end])
            if cached is not None and t.ended and size == st.size:
                _cache_store(cached, t)
    entry = ((same, size, st.mtime_ns), size, t, data[end:])
    with _lock:
        if len(_files) >= MAX_FILES:
            _files.pop(next(iter(_files)))
        _files[path] = entry
    return t


def runs(logdir: str) -> list[str]:
    """The folders of the logdir that hold telemetry files ("." the logdir itself), sorted."""
    root = storage.normalize_root(logdir)
    found = {
        storage.relpath(storage.split(f.path)[0], root)
        for f in storage.walk_files(root, accept=lambda n: n.endswith(format.SUFFIX))
    }
    return sorted(found)


def run_dir(logdir: str, run: str) -> str:
    """The folder of a telemetry run; ValueError for a name that leaves the logdir."""
    parts = [p for p in run.replace("\\", "/").split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts) or run.startswith("/"):
        raise ValueError(f"run {run!r}: a folder inside the logdir")
    root = storage.normalize_root(logdir)
    return storage.join(root, *parts) if parts else root


@dataclass
class Job:
    """Every rank of one telemetry run, aligned by step: `matrix(metric)` is (ranks x steps), NaN where absent."""

    dir: str
    ranks: list[int]
    files: list[format.RankTelemetry]
    steps: np.ndarray  # the step numbers of the columns (0..max)
    kept: dict = field(default_factory=dict)  # metric -> matrix, and the straggler rule's answers

    def matrix(self, metric: str) -> np.ndarray:
        """The (ranks x steps) float32 matrix of `metric`, NaN where a rank has no record (kept: read-only)."""
        if metric not in self.kept:
            m = self._matrix(metric)
            m.flags.writeable = False
            self.kept[metric] = m
        return self.kept[metric]

    def _matrix(self, metric: str) -> np.ndarray:
        out = np.full((len(self.files), len(self.steps)), np.nan, np.float32)
        for i, t in enumerate(self.files):
            if metric == "work_ms":
                wall, comm = t.columns["wall_ms"], t.columns["comm_ms"]
                v = np.where(np.isnan(comm), wall, wall - comm)
            elif metric == "gpu_ms":
                v = t.gpu_ms
            else:
                v = t.columns[metric]
            ok = (t.steps >= 0) & (t.steps < len(self.steps))
            out[i, t.steps[ok]] = v[ok]
        return out


def load(logdir: str, run: str = ".") -> Job:
    """The telemetry run `run` of `logdir`; FileNotFoundError when it has no telemetry file."""
    d = run_dir(logdir, run)
    paths = [
        f.path
        for f in storage.walk_files(d, accept=lambda n: n.endswith(format.SUFFIX))
        if storage.split(f.path)[0] == d
    ]
    if not paths:
        raise FileNotFoundError(f"{storage.redact(d)}: no *{format.SUFFIX} files")
    files = [read_file(p) for p in paths]
    files.sort(key=lambda t: (t.rank, t.path))
    with _lock:
        kept = _jobs.get(d)
    if kept is not None and len(kept.files) == len(files) and all(a is b for a, b in zip(kept.files, files)):
        return kept  # nothing was read again: its matrices still hold
    last = max((int(t.steps.max()) for t in files if len(t.steps)), default=-1)
    job = Job(d, [t.rank for t in files], files, np.arange(last + 1))
    with _lock:
        if len(_jobs) >= 16:
            _jobs.pop(next(iter(_jobs)))
        _jobs[d] = job
    return job


def others_median_matrix(w: np.ndarray) -> np.ndarray:
    """For each entry of each column of `w` (ranks x steps, no NaN), the median of the other entries of its
    column: three order statistics per column (np.partition, linear time), then per entry the one its removal
    leaves in the middle (removing a value <= the k-th smallest moves the k-th to the (k+1)-th)."""
    r = w.shape[0]
    m = r - 1
    k = m // 2 if m % 2 else m // 2 - 1
    ks = [k, min(k + 1, r - 1), min(k + 2, r - 1)]
    part = np.partition(w, ks, axis=0)
    s0, s1, s2 = part[ks[0]], part[ks[1]], part[ks[2]]
    below0 = w <= s0  # removing it moves the k-th smallest up by one
    kth = np.where(below0, s1, s0)
    if m % 2:
        return kth
    below1 = w <= s1
    kth1 = np.where(below1, s2, s1)
    return (kth + kth1) / 2


def late_matrix(work: np.ndarray, rule: StragglerRule = RULE) -> tuple[np.ndarray, np.ndarray]:
    """(late: bool ranks x steps, excess ms: ranks x steps) by the rule; a step with fewer than 2 ranks' numbers
    has no late rank."""
    r, n = work.shape
    excess = np.full((r, n), np.nan, np.float32)
    late = np.zeros((r, n), bool)
    if r < 2 or n == 0:
        return late, excess
    full = ~np.isnan(work).any(axis=0)
    cols = np.flatnonzero(full)
    if len(cols):
        w = work[:, cols] if len(cols) < n else work
        om = others_median_matrix(w)
        exc = w - om
        excess[:, cols] = exc
        slowest = np.argmax(w, axis=0)
        at = np.arange(len(cols))
        thr = np.maximum(rule.late_ms, rule.late_frac * om[slowest, at])
        hit = exc[slowest, at] > thr
        late[slowest[hit], cols[hit]] = True
    for j in np.flatnonzero(~full):  # steps some rank lacks: the ranks that have them
        have = ~np.isnan(work[:, j])
        if have.sum() < 2:
            continue
        idx = np.flatnonzero(have)
        col = work[idx, j].astype(np.float64)
        om1 = others_median(col)
        excess[idx, j] = col - om1
        k = int(np.argmax(col))
        if col[k] - om1[k] > max(rule.late_ms, rule.late_frac * om1[k]):
            late[idx[k], j] = True
    return late, excess


def _bursts(row: np.ndarray, min_len: int) -> list[tuple[int, int]]:
    """[(first, last)] column indices of runs of True of at least `min_len`."""
    x = np.concatenate([[0], row.astype(np.int8), [0]])
    d = np.diff(x)
    starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1) - 1
    return [(int(a), int(b)) for a, b in zip(starts, ends) if b - a + 1 >= min_len]


def _q(v: np.ndarray, q: float) -> float | None:
    return _qs(v, (q,))[0]


def _qs(v: np.ndarray, qs: tuple[float, ...]) -> list[float | None]:
    """Quantiles `qs` of the numbers of `v` (NaN left out), in one selection: None each when there are none."""
    v = v[~np.isnan(v)]
    if not len(v):
        return [None] * len(qs)
    return [round(float(x), 3) for x in np.quantile(v, list(qs))]


def _max(v: np.ndarray) -> float | None:
    m = np.fmax.reduce(v) if len(v) else np.nan  # NaN only when every value is
    return None if m != m else round(float(m), 3)


def summary(job: Job, rule: StragglerRule = RULE) -> dict:
    """Per-rank summaries, chronic and occasional stragglers, and captures (the /telemetry answer); kept with the
    job (a copy is returned) until one of its files changes."""
    import copy

    key = ("summary", rule)
    if key not in job.kept:
        job.kept[key] = _summary(job, rule)
    return copy.deepcopy(job.kept[key])


def _summary(job: Job, rule: StragglerRule) -> dict:
    work = job.matrix("work_ms")
    late, excess = late_matrix(work, rule)
    ranks_out = []
    chronic, occasional = [], []
    for i, t in enumerate(job.files):
        wall = t.columns["wall_ms"]
        wall_median, wall_p99 = _qs(wall, (0.5, 0.99))
        present = ~np.isnan(work[i])
        n_late = int(late[i].sum())
        frac = n_late / max(1, int(present.sum()))
        row = {
            "rank": t.rank,
            "worker": t.header.get("worker", ""),
            "host": t.header.get("host", ""),
            "steps": len(t.steps),
            "last_step": int(t.steps[-1]) if len(t.steps) else None,
            "ended": t.ended,
            "wall_ms": {"median": wall_median, "p99": wall_p99, "max": _max(wall)},
            "data_ms": _q(t.columns["data_ms"], 0.5),
            "comm_ms": _q(t.columns["comm_ms"], 0.5),
            "host_ms": _q(t.columns["host_ms"], 0.5),
            "gpu_ms": _q(t.gpu_ms, 0.5),
            "rss_mib": _max(t.columns["rss_mib"]),
            "device_mib": _max(t.device_mib),
            "late_steps": n_late,
            "late_frac": round(frac, 4),
            "device": t.end.get("device") or t.header.get("device", ""),
            "comm": t.header.get("comm", ""),
            "bad_lines": t.bad_lines,
        }
        ranks_out.append(row)
        exc = excess[i][late[i]]
        mean_exc = round(float(exc.mean()), 3) if len(exc) else None
        if n_late and frac > rule.chronic_frac:
            chronic.append({"rank": t.rank, "late_steps": n_late, "late_frac": round(frac, 4), "excess_ms": mean_exc})
            continue
        bursts = _bursts(late[i], rule.burst_steps)
        if bursts:
            occasional.append(
                {
                    "rank": t.rank,
                    "late_steps": n_late,
                    "bursts": [
                        {
                            "first": int(job.steps[a]),
                            "last": int(job.steps[b]),
                            "steps": b - a + 1,
                            "excess_ms": round(float(np.nanmean(excess[i, a : b + 1])), 3),
                        }
                        for a, b in bursts
                    ],
                }
            )
    return {
        "dir": storage.redact(job.dir),
        "ranks": ranks_out,
        "steps": len(job.steps),
        "rule": rule.text(),
        "metric": "work_ms" if any(not np.isnan(t.columns["comm_ms"]).all() for t in job.files) else "wall_ms",
        "chronic": chronic,
        "occasional": occasional,
        "captures": captures(job),
    }


def captures(job: Job) -> list[dict]:
    """The captures of the job, one per capture folder: its step, rule, reason, the ranks named, the ranks that
    captured (their roles), and the run to diagnose (the folder, relative to the telemetry run's)."""
    by_dir: dict[str, dict] = {}
    for t in job.files:
        for c in t.captures:
            d = str(c.get("dir", ""))
            e = by_dir.setdefault(
                d,
                {
                    "dir": d,
                    "step": c.get("s"),
                    "first": c.get("first"),
                    "steps": c.get("steps"),
                    "rule": c.get("rule"),
                    "why": c.get("why"),
                    "ranks": c.get("ranks"),
                    "healthy": c.get("healthy"),
                    "tool": c.get("tool"),
                    "captured": [],
                    "errors": [],
                },
            )
            e["captured"].append({"rank": t.rank, "role": c.get("role")})
            if c.get("error"):
                e["errors"].append({"rank": t.rank, "error": c["error"]})
    return sorted(by_dir.values(), key=lambda e: (e["step"] if isinstance(e["step"], int) else -1, e["dir"]))


def heatmap(job: Job, metric: str = "work_ms", max_steps: int = 1000, max_ranks: int = 256, agg: str = "max") -> dict:
    """The (rank x step) matrix of `metric` downsampled to at most max_ranks x max_steps cells: each cell the max
    (or mean) of a range of `step_bin` steps (and `rank_bin` ranks); a cell without any value is null."""
    if metric not in METRICS:
        raise ValueError(f"metric {metric!r}: one of {', '.join(METRICS)}")
    m = job.matrix(metric)
    r, n = m.shape
    sw = max(1, -(-n // max_steps))
    rw = max(1, -(-r // max_ranks))
    nb, rb = -(-n // sw), -(-r // rw)
    if n % sw or r % rw:
        pad = np.full((rb * rw, nb * sw), np.nan, np.float32)
        pad[:r, :n] = m
    else:
        pad = m
    if rw > 1:  # more ranks than rows: ranks binned too (a copy; steps alone need none)
        blocks = pad.reshape(rb, rw, nb, sw).transpose(0, 2, 1, 3).reshape(rb, nb, rw * sw)
    else:
        blocks = pad.reshape(rb, nb, sw)
    with np.errstate(invalid="ignore", divide="ignore"):
        if agg == "max":
            cells = np.fmax.reduce(blocks, axis=2)  # NaN only where the whole range is NaN
        else:
            count = (~np.isnan(blocks)).sum(axis=2)
            cells = np.where(count > 0, np.nansum(blocks, axis=2) / np.maximum(count, 1), np.nan)
    finite = cells[~np.isnan(cells)]
    return {
        "metric": metric,
        "agg": agg,
        "steps": n,
        "ranks": job.ranks,
        "step_bin": sw,
        "rank_bin": rw,
        "step_starts": [int(s) for s in job.steps[::sw]] if n else [],
        "rank_starts": [job.ranks[i] for i in range(0, r, rw)],
        "min": round(float(finite.min()), 3) if len(finite) else None,
        "max": round(float(finite.max()), 3) if len(finite) else None,
        "cells": [[None if v != v else v for v in row] for row in np.round(cells.astype(np.float64), 3).tolist()],
    }


def render_text(s: dict) -> str:
    """`gpuscope telemetry`'s text: per-rank table, the stragglers and their rule, the captures and their why."""
    out = [f"telemetry of {s['dir']}: {len(s['ranks'])} ranks, {s['steps']} steps (metric: {s['metric']})"]
    out.append(
        f"{'rank':>5} {'steps':>7} {'wall med':>9} {'wall p99':>9} {'data':>7} {'comm':>7} {'gpu':>7} "
        f"{'late':>6} {'rss MiB':>8}"
    )

    def f(v: Any) -> str:
        return "-" if v is None else f"{v:.1f}"

    for r in s["ranks"]:
        out.append(
            f"{r['rank']:>5} {r['steps']:>7} {f(r['wall_ms']['median']):>9} {f(r['wall_ms']['p99']):>9} "
            f"{f(r['data_ms']):>7} {f(r['comm_ms']):>7} {f(r['gpu_ms']):>7} {r['late_steps']:>6} "
            f"{f(r['rss_mib']):>8}" + ("" if r["ended"] else "  (no end record: still running or killed)")
        )
    out.append(f"rule: {s['rule']}")
    if s["chronic"]:
        for c in s["chronic"]:
            out.append(
                f"chronic straggler: rank {c['rank']}, late in {c['late_steps']} steps "
                f"({100 * c['late_frac']:.0f} %), +{c['excess_ms']:.1f} ms on average"
            )
    else:
        out.append("chronic stragglers: none")
    if s["occasional"]:
        for o in s["occasional"]:
            b = "; ".join(f"steps {x['first']}-{x['last']} (+{x['excess_ms']:.1f} ms)" for x in o["bursts"][:5])
            more = f" and {len(o['bursts']) - 5} more" if len(o["bursts"]) > 5 else ""
            out.append(f"occasional straggler: rank {o['rank']}, late in {o['late_steps']} steps; bursts: {b}{more}")
    else:
        out.append("occasional stragglers: none")
    if not s["captures"]:
        out.append("captures: none")
    for c in s["captures"]:
        who = ", ".join(f"rank {x['rank']} ({x['role']})" for x in c["captured"])
        out.append(f"capture at step {c['step']} ({c['rule']}) into {c['dir']}/ on {who}: {c['why']}")
        for e in c["errors"]:
            out.append(f"  rank {e['rank']} could not capture: {e['error']}")
    return "\n".join(out) + "\n"
