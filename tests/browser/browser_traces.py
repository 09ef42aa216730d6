"""Small Kineto traces generated for the browser tests (no dependency on profiler_core's writer)."""
from __future__ import annotations

import json
from pathlib import Path

# Names a careless frontend would turn into markup or run as script.
HOSTILE = [
    '<img src=x onerror="window.__xss=1">',
    "<script>window.__xss=2</script>",
    "<b>bold</b> & <i>em</i>",
]


def html_names_trace() -> dict:
    """A CPU trace whose op, step, process and thread names contain HTML and script."""
    pid, tid = 4242, 4243
    ev: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "<u>proc</u>"}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": "<svg onload=window.__xss=3>"}},
    ]
    t = 0.0
    for step in range(3):
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step + 1}", "pid": pid, "tid": tid,
                   "ts": t, "dur": 900.0, "args": {"External id": 100 + step}})
        for i, name in enumerate(HOSTILE):
            ts = t + 10 + i * 250
            ev.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": 200.0,
                       "args": {"External id": 1000 + step * 10 + i, "Input Dims": [[2, 3]], "Input type": ["float"],
                                "Call stack": f"{name};<script>stack()</script>"}})
            ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": pid, "tid": tid, "ts": ts + 20,
                       "dur": 30.0, "args": {"External id": 2000 + step * 10 + i}})
            ev.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": pid, "tid": tid,
                       "ts": ts + 25, "args": {"Device Type": 0, "Device Id": -1, "Addr": 1000 + i, "Bytes": 4096,
                                               "Total Allocated": 4096 * (i + 1), "Total Reserved": 0}})
        t += 1000.0
    return {"schemaVersion": 1, "deviceProperties": [], "traceEvents": ev, "traceName": "<b>html</b>",
            "displayTimeUnit": "ms", "baseTimeNanoseconds": 1700000000000000000, "<i>meta</i>": "<script>x()</script>"}


def million_event_trace(path: Path, n: int = 1_000_000, threads: int = 8) -> int:
    """Writes a synthetic CPU+GPU trace of about n complete events (nested ops on `threads`
    threads, kernels on two streams); returns the number of events written."""
    pid = 1000
    names = [f"aten::op{i}" for i in range(40)]
    count = 0
    with open(path, "w", encoding="utf-8") as f:
        f.write('{"schemaVersion": 1, "deviceProperties": [], "displayTimeUnit": "ms", '
                '"baseTimeNanoseconds": 1700000000000000000, "traceEvents": [\n')
        first = True
        per_track = n // (threads + 2)
        for th in range(threads):
            t = 0.0
            k = 0
            while k < per_track:
                # one parent (20 us) with three children (5 us each)
                parts = [(t, 20.0, names[k % 40])] + [(t + 1 + 6 * j, 5.0, names[(k + j + 1) % 40]) for j in range(3)]
                for ts, dur, name in parts:
                    f.write(("" if first else ",\n") + json.dumps({"ph": "X", "cat": "cpu_op", "name": name, "pid": pid,
                                                                   "tid": 2000 + th, "ts": round(ts, 3), "dur": dur}))
                    first = False
                k += 4
                t += 25.0
            count += k
        for stream in (7, 8):
            t = 0.0
            for k in range(per_track):
                f.write(",\n" + json.dumps({"ph": "X", "cat": "kernel", "name": names[k % 40] + "_kernel", "pid": 0,
                                            "tid": stream, "ts": round(t, 3), "dur": 4.0,
                                            "args": {"device": 0, "stream": stream, "correlation": k}}))
                t += 6.25
            count += per_track
        f.write("\n]}\n")
    return count


def write(trace: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(trace), encoding="utf-8")
    return path
