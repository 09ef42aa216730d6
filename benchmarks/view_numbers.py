"""Dump the per-worker views' JSON for every shared trace, or compare two dumps number by number.

Used to record every number a change moves (issue 21: no view's output changes unless a test shows the old
number was wrong). Rows are matched by name (and input shape / module path), not by position.

    PYTHONPATH=. python benchmarks/view_numbers.py dump OUT_DIR        # from a checkout's root
    python benchmarks/view_numbers.py compare BEFORE_DIR AFTER_DIR [--limit N]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

SHARED = Path(os.environ.get("GPUSCOPE_SHARED", Path.cwd().parent / "shared")) / "traces"  # run from a checkout root


def dump(out: str) -> None:
    """Write one JSON file per shared trace with the views that read node, link and step stages."""
    from profiler_core.analysis import step_breakdown as overview
    from profiler_core.analysis.comm import collectives
    from profiler_core.analysis.stages.graph_replay import graph_replay
    from profiler_core.analysis.tables import kernels, operators
    from profiler_core.analysis.worker import pipeline, worker_facts
    from profiler_core.trace.read.reader import read_trace
    from tb_plugin.views import diff, distributed, memory, modules

    def frame(df: object) -> dict:
        return df.to_dict("list")  # type: ignore[attr-defined]

    os.makedirs(out, exist_ok=True)
    for f in sorted(SHARED.rglob("*.json*")):
        if "reference" in f.parts or "hta_et_file" in str(f) or f.name == "README.md":
            continue
        res: dict = {}
        try:
            t = read_trace(str(f))
        except Exception as e:  # a refused file: its message is the output
            res["read"] = str(e)
        else:
            for name, fn in [
                ("overview", overview.overview),
                ("ops", operators.operators),
                ("ops_shape", lambda t: operators.operators(t, "name_shape")),
                ("kernels", lambda t: kernels.kernels(t, "name_op")),
                ("kernels_config", lambda t: kernels.kernels(t, "name_op_config")),
                ("collectives", lambda t: frame(collectives.collectives(t))),
                ("graph_replay", lambda t: frame(graph_replay(t))),
                ("pipeline", pipeline.project),
                ("worker_facts", worker_facts.worker_facts),
                ("mem_stats", memory.memory_stats),
                ("mem_events", memory.memory_events),
                ("modules", modules.modules),
                ("diff", lambda t: diff.diff(t, t)),
                ("dist", distributed.worker_summary),
            ]:
                try:
                    res[name] = fn(t)
                except Exception as e:
                    res[name] = f"ERROR {e!r}"
        name = str(f.relative_to(SHARED)).replace("/", "_")
        Path(out, name + ".json").write_text(json.dumps(res, sort_keys=True, default=str))


def _label(row: object, i: int) -> str:
    if not isinstance(row, dict):
        return str(i)
    for k in ("path", "name", "phase", "step"):
        if k in row:
            return str(row[k]) + (f"|{row['input_shape']}" if "input_shape" in row else "")
    return str(i)


def _walk(x: object, y: object, path: list, out: list) -> None:
    if isinstance(x, dict) and isinstance(y, dict):
        for k in sorted(set(x) | set(y)):
            _walk(x.get(k), y.get(k), path + [str(k)], out)
    elif isinstance(x, list) and isinstance(y, list):
        xs = {_label(r, i): r for i, r in enumerate(x)}
        ys = {_label(r, i): r for i, r in enumerate(y)}
        for k in list(xs) + [k for k in ys if k not in xs]:
            _walk(xs.get(k), ys.get(k), path + [k], out)
    elif x != y and not (x != x and y != y):  # NaN == NaN here
        out.append(("/".join(path), x, y))


def compare(before: str, after: str, limit: int) -> None:
    """Print every value that differs between two dumps: file, path, before -> after."""
    total = 0
    for f in sorted(os.listdir(before)):
        out: list = []
        _walk(json.loads(Path(before, f).read_text()), json.loads(Path(after, f).read_text()), [], out)
        if out:
            print(f"== {f}: {len(out)} changed")
            for p, x, y in out[:limit]:
                print(f"   {p}: {x} -> {y}")
        total += len(out)
    print("total changed values:", total)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("dump").add_argument("out")
    c = sub.add_parser("compare")
    c.add_argument("before")
    c.add_argument("after")
    c.add_argument("--limit", type=int, default=100000)
    a = ap.parse_args()
    if a.cmd == "dump":
        dump(a.out)
    else:
        compare(a.before, a.after, a.limit)


if __name__ == "__main__":
    main()
