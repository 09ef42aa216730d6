"""The native reader's C scan alone (issue 25 item 5): inflate and cut the files once, then scan their pieces
in a loop; CPU seconds of the process per million traceEvents entries, median of --repeat rounds.

    python benchmarks/native_scan.py FILE_OR_DIR...                  # the in-place build
    python benchmarks/native_scan.py --other OTHER.so FILE_OR_DIR...  # and another build, rounds alternating

Profile it with `perf record -g python benchmarks/native_scan.py --repeat 20 FILE` (the extension is built
with -g). --other takes an extension built elsewhere (`.ci/build_native.sh DIR` on another checkout).
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import statistics
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from profiler_core.trace.read import native, stream  # noqa: E402


def _load(path: str) -> Any:
    """An extension module built at `path` (another build of _native.c)."""
    spec = importlib.util.spec_from_file_location("profiler_core.trace.read._native", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _files(paths: list[str]) -> list[str]:
    out = []
    for p in paths:
        out += sorted(glob.glob(os.path.join(p, "**", "*.gz"), recursive=True)) if os.path.isdir(p) else [p]
    return out


def _texts(files: list[str]) -> list[bytes]:
    """The pieces `native.read_file` scans (the last events included), inflated and cut once."""
    texts = []
    for path in files:
        head = None
        for t in native._pieces(path):
            if t.kind == "head":
                head = t
            elif t.kind == "piece":
                texts.append(bytes(t.text))
            elif head is not None:
                for _meta, tail, _repeated in stream.tails(t.text, head.text, head.bare):
                    if tail.strip():
                        texts.append(bytes(tail))
                    break
    return texts


def _round(mod: Any, texts: list[bytes]) -> tuple[float, int]:
    pairs = native.scan_pairs()
    entries = 0
    t0 = time.process_time()
    for t in texts:
        out = mod.parse_events(t, 1 << 62, stream.BLOCK, pairs, True)
        if isinstance(out, str):
            raise SystemExit(f"the scan declined: {out}")
        entries += out["entries"]
    return time.process_time() - t0, entries


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--other", help="another build of the extension (.so), measured in alternate rounds")
    args = ap.parse_args()
    if not native.available():
        raise SystemExit("the native reader is not built (bash .ci/build_native.sh .)")
    builds = {"in place": native._native}
    if args.other:
        builds[args.other] = _load(args.other)
    texts = _texts(_files(args.paths))
    size = sum(len(t) for t in texts)
    times: dict[str, list[float]] = {name: [] for name in builds}
    entries = 0
    for _ in range(args.repeat):
        for name, mod in builds.items():
            cpu, entries = _round(mod, texts)
            times[name].append(cpu)
    for name, ts in times.items():
        med = statistics.median(ts)
        print(
            f"{name}: {size / 1e6:.1f} MB, {entries} entries: scan {med:.3f} CPU s (min {min(ts):.3f}) = "
            f"{med / entries * 1e6:.3f} CPU s per M entries, {size / med / 1e6:.0f} MB/s"
        )


if __name__ == "__main__":
    main()
