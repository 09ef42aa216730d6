"""Dump every route's answer and every summary over the shared traces, or compare two dumps byte for byte.

A refactoring that must not change behaviour is proved by a dump before and after: it goes through the HTTP
routes (`tb_plugin.routes.ROUTES`) and the summary encoder only, so it does not depend on where a module lives.

    PYTHONPATH=. python benchmarks/route_dump.py dump OUT_DIR      # from a checkout's root
    python benchmarks/route_dump.py compare BEFORE_DIR AFTER_DIR
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

SHARED = Path(os.environ.get("GPUSCOPE_SHARED", Path.cwd().parent / "shared")) / "traces"
P = "/data/plugin/gpuscope"
#: the per-file routes asked with their defaults (and the extra parameters they need)
FILE_ROUTES = {
    "overview": {},
    "operators": {},
    "operators?name_shape": {"group_by": "name_shape"},
    "kernels": {},
    "kernels?name_op_config": {"group_by": "name_op_config"},
    "memory/curve": {},
    "memory/events": {},
    "memory/stats": {},
    "modules": {},
    "timeline": {},
    "timeline/summary": {},
    "timeline/counters": {},
    "timeline/search": {"query": "a"},
    "timeline/locate": {"idx": "0"},
    "event": {"idx": "0"},
    "diff": {},
    "diff/kernels": {},
}
RUN_ROUTES = ("distributed", "diagnosis", "pipeline", "clock_offsets")


def _logdir(root: Path) -> Path:
    """A logdir of copies of every shared trace folder (copies: the scanner does not follow links out)."""
    logdir = root / "logs"
    for f in sorted(SHARED.rglob("*.json*")):
        if "reference" in f.parts or f.name == "README.md":
            continue
        rel = f.parent.relative_to(SHARED)
        dst = logdir / "__".join(rel.parts)
        dst.mkdir(parents=True, exist_ok=True)
        name = f.name if ".pt.trace.json" in f.name else f.name.replace(".json", ".pt.trace.json")
        shutil.copy2(f, dst / name)
    return logdir


def _answer(c: object, route: str, params: dict) -> bytes:
    r = c.get(f"{P}/{route.split('?')[0]}?{urlencode(params)}")  # type: ignore[attr-defined]
    body = r.get_data()
    if r.headers.get("Content-Encoding") == "gzip":
        body = gzip.decompress(body)
    return f"{r.status_code}\n".encode() + body


def _until_done(c: object, route: str, params: dict, timeout: float = 600) -> bytes:
    """Ask a run-level route again while it answers `pending`."""
    end = time.monotonic() + timeout
    while True:
        out = _answer(c, route, params)
        if b'"pending"' not in out[:200] or time.monotonic() > end:
            return out
        time.sleep(0.2)


def dump(out: str) -> None:
    """Write `<run>__<worker>__<span>__<route>` answer files and `summary__<file>` summaries to `out`."""
    from tensorboard.backend import application
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    from tb_plugin.plugin import GpuscopePlugin

    os.makedirs(out, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="route-dump-"))
    os.environ["GPUSCOPE_CACHE_DIR"] = str(tmp / "cache")
    logdir = _logdir(tmp)
    p = GpuscopePlugin(base_plugin.TBContext(logdir=str(logdir)))
    c = Client(application.TensorBoardWSGI([p]))
    listing = c.get(f"{P}/runs?wait=60").json
    while listing["loading"]:
        listing = c.get(f"{P}/runs?wait=60").json
    files: dict[str, bytes] = {"runs": json.dumps(listing, sort_keys=True).encode()}
    for run in listing["runs"]:
        workers = c.get(f"{P}/workers?{urlencode({'run': run})}").json["workers"]
        first_span = None
        for worker in workers:
            spans = c.get(f"{P}/spans?{urlencode({'run': run, 'worker': worker})}").json.get("spans", [])
            for span in spans:
                first_span = first_span or span
                base = {"run": run, "worker": worker, "span": span}
                for route, extra in FILE_ROUTES.items():
                    files[f"{run}__{worker}__{span}__{route}"] = _answer(c, route, {**base, **extra})
                ops = c.get(f"{P}/operators?{urlencode(base)}").json
                for row in (ops.get("rows") or [])[:3]:
                    key = f"{run}__{worker}__{span}__operators/stack__{row['name']}"
                    files[key] = _answer(c, "operators/stack", {**base, "name": row["name"]})
                    files[key + "__occ"] = _answer(c, "timeline/occurrences", {**base, "name": row["name"]})
        if first_span is None:
            continue
        for route in RUN_ROUTES:
            files[f"{run}__{route}"] = _until_done(c, route, {"run": run, "span": first_span})
        dist = json.loads(files[f"{run}__distributed"].split(b"\n", 1)[1] or b"{}")
        for w in workers[:2]:
            steps = list(dist.get("steps") or [None]) if isinstance(dist, dict) else [None]  # a dict: by step name
            step = steps[0] if steps[0] is not None else "0"
            files[f"{run}__{w}__distributed/step"] = _answer(
                c, "distributed/step", {"run": run, "span": first_span, "worker": w, "step": str(step)}
            )
    runs = listing["runs"]
    for a, b in zip(runs, runs[1:]):
        files[f"jobdiff__{a}__{b}"] = _until_done(c, "jobdiff", {"run": a, "exp_run": b})
    from tb_plugin.summaries.engine import summarize_bytes

    for f in sorted(logdir.rglob("*.json*")):
        key = f"summary__{f.parent.name}__{f.name}"
        try:
            raw = summarize_bytes(str(f))
            doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
            for k in ("path", "mtime", "mtime_ns", "size", "etag", "source"):  # where the copy lives, not content
                doc.pop(k, None)
            files[key] = json.dumps(doc, sort_keys=True).encode()
        except Exception as e:  # a refused file: its message is the output
            files[key] = f"error: {type(e).__name__}: {e}".encode()
    root = str(tmp)
    for name, body in files.items():
        safe = (
            hashlib.sha1(name.encode()).hexdigest()[:12]
            + "_"
            + "".join(ch if ch.isalnum() else "_" for ch in name)[:80]
        )
        Path(out, safe).write_bytes(body.replace(root.encode(), b"<TMP>"))
    print(f"{len(files)} answers written to {out}")
    p._loader.close() if hasattr(p, "_loader") else None
    shutil.rmtree(tmp, ignore_errors=True)


def compare(before: str, after: str) -> int:
    """Print every answer that differs or exists on one side only; exit status 1 when any does."""
    a, b = set(os.listdir(before)), set(os.listdir(after))
    bad = sorted(a ^ b)
    for name in sorted(a & b):
        if Path(before, name).read_bytes() != Path(after, name).read_bytes():
            bad.append(name)
    for name in bad[:50]:
        print("differs:", name)
    print(f"{len(a & b)} answers compared, {len(bad)} differ")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("dump").add_argument("out")
    c = sub.add_parser("compare")
    c.add_argument("before")
    c.add_argument("after")
    args = ap.parse_args()
    if args.cmd == "dump":
        dump(args.out)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
