"""A bigger real-shaped trace from a real one: its events repeated on new threads.

    python benchmarks/gen_real_big.py SRC.pt.trace.json.gz OUT.pt.trace.json.gz COPIES

Copy k (k >= 1) of the source's events gets thread ids prefixed with k ("tid": 9072 -> "tid":
19072), so each copy is its own thread with the same real events (args, shapes, nesting). With
the 2.2M-event trace of ../shared/tools/big_torch_trace.py (`OUTDIR 10 20000`), COPIES=5 gives
about 11M events and 4.2 GB of JSON. The output is gzip (ISA-L when installed, level 1).
"""

from __future__ import annotations

import gzip
import os
import re
import sys

_HEAD = re.compile(rb'"traceEvents"\s*:\s*\[')
_TID = re.compile(rb'"tid": (\d+)')


def _open_out(path: str):
    try:
        from isal import igzip

        return igzip.open(path, "wb", compresslevel=1)
    except ImportError:
        return gzip.open(path, "wb", compresslevel=1)


def generate(src: str, out: str, copies: int) -> None:
    """Write `out`: the trace `src` with its events repeated `copies` times on new threads."""
    with gzip.open(src, "rb") as f:
        data = f.read()
    m = _HEAD.search(data)
    end = data.rindex(b"]")
    head, events, tail = data[: m.end()], data[m.end() : end], data[end:]
    del data
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with _open_out(out) as f:
        f.write(head)
        f.write(events)
        for k in range(1, copies):
            f.write(b",")
            f.write(_TID.sub(rb'"tid": ' + str(k).encode() + rb"\1", events))
        f.write(tail)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    generate(sys.argv[1], sys.argv[2], int(sys.argv[3]))
