"""Memory of a parsed trace's events table and the size of its parse-cache entry (issue 25 item 4: sparse args).

    PYTHONPATH=. python benchmarks/model_bytes.py TRACE [TRACE...]      # from a checkout's root

Per trace: events, the bytes the `events` frame holds (a column absent from the trace is one shared value: its
itemsize; a category column its codes and texts), the bytes of `TraceData.sparse` (a row array shared by several
columns counted once; 0 on checkouts without it), their sum, and the parse-cache entry's size on disk. Runs on
any checkout (before and after the sparse args), so the two can be compared.
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any


def frame_bytes(df: Any) -> int:
    """Bytes held by a DataFrame's columns (zero-stride constant columns: one value)."""
    import pandas as pd

    total = 0
    for c in df.columns:
        col = df[c]
        if isinstance(col.dtype, pd.CategoricalDtype):
            total += col.cat.codes.to_numpy().nbytes + int(col.cat.categories.memory_usage(deep=True))
            continue
        values = col.to_numpy(copy=False)
        total += values.itemsize if values.strides == (0,) and len(values) else values.nbytes
    return total


def sparse_bytes(t: Any) -> int:
    """Bytes of `t.sparse` (shared row arrays once; 0 where the model has no sparse columns)."""
    columns = getattr(t, "sparse", {})
    if not columns:
        return 0
    from profiler_core.trace.sparse import nbytes_of

    return nbytes_of(columns.values())


def measure(path: str) -> dict:
    """Events, events-frame bytes, sparse bytes and cache entry bytes of one trace."""
    with tempfile.TemporaryDirectory() as d:
        os.environ["GPUSCOPE_CACHE_DIR"] = d
        from profiler_core.trace.read import cache
        from profiler_core.trace.read.reader import read_trace

        t = read_trace(path)
        cache.store(path, t)
        entry = os.path.getsize(cache.entry_path(path))
    frame, sparse = frame_bytes(t.events), sparse_bytes(t)
    return {"events": len(t.events), "frame": frame, "sparse": sparse, "total": frame + sparse, "cache": entry}


def main() -> None:
    """Print one line per trace."""
    print(f"{'trace':40s} {'events':>9s} {'frame MB':>9s} {'sparse MB':>9s} {'total MB':>9s} {'cache MB':>9s}")
    for path in sys.argv[1:]:
        m = measure(path)
        mb = {k: m[k] / 1e6 for k in ("frame", "sparse", "total", "cache")}
        print(
            f"{os.path.basename(path)[:40]:40s} {m['events']:9d} {mb['frame']:9.2f} {mb['sparse']:9.2f}"
            f" {mb['total']:9.2f} {mb['cache']:9.2f}"
        )


if __name__ == "__main__":
    main()
