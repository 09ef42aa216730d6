"""Facts of a Kineto trace read from its raw JSON with the standard library only, for the tests of one-time CUDA
start-up, host syncs and the window of a trace without ProfilerStep: no gpuscope code, so the tests compare
gpuscope's answers with an independent reading of the same events. Times are µs as the trace writes them."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

#: host runtime/driver calls, GPU activity, the profiler's own span, Python frames: Kineto's spellings (torch < 1.9
#: wrote `Runtime`, `Kernel`, `Memcpy`, `Memset`, `Trace`)
RUNTIME = {"cuda_runtime", "cuda_driver", "runtime"}
GPU = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}
AROUND_OPS = {"trace", "python_function", "overhead"}
#: the synchronising calls (CUDA, driver and HIP spellings)
SYNCS = {
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "cudaEventSynchronize",
    "cudaMemcpy",
    "cuCtxSynchronize",
    "cuStreamSynchronize",
    "cuEventSynchronize",
    "hipDeviceSynchronize",
    "hipStreamSynchronize",
    "hipEventSynchronize",
    "hipMemcpy",
}
LONG_US = 50_000.0
RATIO = 10.0


def events(path: Path) -> list[dict]:
    """The complete events (ph X with a duration) of a trace file, gzip or plain by its first bytes."""
    data = Path(path).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    doc = json.loads(data)
    evs = doc["traceEvents"] if isinstance(doc, dict) else doc
    out = []
    for e in evs:
        if e.get("ph") == "X" and "dur" in e:
            e = dict(e, ts=float(e["ts"]), dur=float(e["dur"]), cat=str(e.get("cat", "")).lower())
            out.append(e)
    return out


def union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(s for s in spans if s[1] > s[0]):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def length(spans: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in spans)


def minus(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The parts of the disjoint sorted spans `a` outside the disjoint sorted spans `b`."""
    out = []
    for s, e in a:
        cur = s
        for x, y in b:
            if y <= cur or x >= e:
                continue
            if x > cur:
                out.append((cur, x))
            cur = max(cur, y)
        if cur < e:
            out.append((cur, e))
    return out


def clip(spans: list[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    return [(max(a, lo), min(b, hi)) for a, b in spans if b > lo and a < hi]


def gpu_busy(evs: list[dict]) -> list[tuple[float, float]]:
    return union([(e["ts"], e["ts"] + e["dur"]) for e in evs if e["cat"] in GPU])


def runtime_calls(evs: list[dict]) -> list[dict]:
    return sorted((e for e in evs if e["cat"] in RUNTIME), key=lambda e: e["ts"])


def one_time_calls(evs: list[dict]) -> list[dict]:
    """The runtime calls the start-up rule names (profiler_core/analysis/stages/startup.py's docstring, read here
    on the raw events): not a sync nor a copy; at least 50 ms and the only call of its name, or followed by calls
    of its name that are all ten times shorter; the GPU busy under at most half of it."""
    calls = runtime_calls(evs)
    by_name: dict[str, list[dict]] = {}
    for c in calls:
        by_name.setdefault(c["name"], []).append(c)
    busy = gpu_busy(evs)
    out = []
    for name, cs in by_name.items():
        if name in SYNCS or "Memcpy" in name:
            continue
        for i, c in enumerate(cs):
            if c["dur"] < LONG_US:
                continue
            later = cs[i + 1 :]
            if len(cs) > 1 and (not later or c["dur"] < RATIO * max(x["dur"] for x in later)):
                continue
            under = length(clip(busy, c["ts"], c["ts"] + c["dur"]))
            if under <= 0.5 * c["dur"]:
                out.append(c)
    return sorted(out, key=lambda c: c["ts"])


def ops_window(evs: list[dict]) -> tuple[float, float]:
    """A trace without ProfilerStep: first start and last end of its operators, runtime calls and GPU activity
    (every event but the profiler's span, Python frames and overhead records)."""
    xs = [e for e in evs if e["cat"] not in AROUND_OPS]
    return min(e["ts"] for e in xs), max(e["ts"] + e["dur"] for e in xs)


def frames_window(evs: list[dict]) -> tuple[float, float]:
    """The same with the Python frames in (every event but the profiler's own span)."""
    xs = [e for e in evs if e["cat"] != "trace"]
    return min(e["ts"] for e in xs), max(e["ts"] + e["dur"] for e in xs)


def median_of(evs: list[dict], name: str) -> float:
    return statistics.median(c["dur"] for c in runtime_calls(evs) if c["name"] == name)


def profiler_steps(evs: list[dict]) -> list[dict]:
    """The ProfilerStep ranges with their window stretched to the end of the GPU work launched inside them (by
    correlation of the launch call), torch-tb-profiler's rule: [{name, start, end}] in time order."""
    steps = sorted((e for e in evs if str(e["name"]).startswith("ProfilerStep#")), key=lambda e: e["ts"])
    gpu_by_corr: dict = {}
    for e in evs:
        if e["cat"] in GPU:
            c = (e.get("args") or {}).get("correlation")
            if c is not None:
                gpu_by_corr[c] = max(gpu_by_corr.get(c, 0.0), e["ts"] + e["dur"])
    out = []
    prev = None
    for s in steps:
        lo, hi = s["ts"], s["ts"] + s["dur"]
        end = hi
        for c in runtime_calls(evs):
            if lo <= c["ts"] and c["ts"] + c["dur"] <= hi:
                k = (c.get("args") or {}).get("correlation")
                if k in gpu_by_corr:
                    end = max(end, gpu_by_corr[k])
        start = lo if prev is None else max(prev, lo)
        out.append({"name": s["name"], "start": start, "end": end})
        prev = end
    return out
