"""The shared real traces (../shared/traces) as the tests that go over all of them see them: the one list of the
files gpuscope refuses on purpose, with the reason each refusal must give, and a trace file's JSON read by its
content (gzip or plain by its first two bytes, as the reader does: a file's name can say otherwise)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from profiler_core.trace.model import TraceData
from profiler_core.trace.read.reader import TraceReadError, read_trace
from tests.conftest import TRACES

PUBLIC = TRACES / "public"
#: run folders under traces/public whose file gpuscope refuses on purpose -> words its refusal must hold
REFUSED = {
    # an execution trace, not a Kineto trace (traces/public/README.md)
    "hta_et_file": "a PyTorch execution trace (schema, nodes; no traceEvents), not a Kineto trace",
}
#: run folders under traces/public whose file holds several ranks fused into one by a trace-merging tool (pid =
#: rank * 1e8 + pid) -> its ranks: listed as one worker per rank (`<worker>_rank<R>`, profiler_core/trace/read/
#: fused.py), a normal multi-worker run; only a read of the whole file by its own path is refused (FUSED_WORDS)
FUSED = {"amd_mi300x_merged_4rank": [0, 1, 2, 3]}
#: the words the refusal of a fused file's whole read must hold
FUSED_WORDS = "ranks fused into one file"
#: the first bytes of a gzip file (RFC 1952)
GZIP_MAGIC = b"\x1f\x8b"


def refusal(path: Path) -> str | None:
    """The words gpuscope's refusal of `path` must hold when it is a file of a REFUSED run, else None."""
    path = Path(path)
    if path.parent.parent.name != PUBLIC.name:
        return None
    return FUSED_WORDS if path.parent.name in FUSED else REFUSED.get(path.parent.name)


def real_trace_files() -> list[Path]:
    """Every trace file under the shared traces, those gpuscope refuses included (the tool outputs under
    reference/ and the READMEs are not traces); [] when the shared traces are absent."""
    if not TRACES.is_dir():
        return []
    return [
        p
        for p in sorted(TRACES.rglob("*.json*"))
        if p.is_file() and "reference" not in p.relative_to(TRACES).parts and p.name != "README.md"
    ]


def read_real_trace(path: Path) -> TraceData | None:
    """read_trace(path); for a file gpuscope refuses on purpose (REFUSED), or a fused file read whole (FUSED: its
    ranks are read by their part paths), check that it is refused with its reason and give None: a test over
    every real trace has nothing more to check on it."""
    reason = refusal(path)
    if reason is None:
        return read_trace(str(path))
    with pytest.raises(TraceReadError) as refused:
        read_trace(str(path))
    assert reason in str(refused.value), (path, str(refused.value))
    return None


def json_bytes(path: Path) -> bytes:
    """The JSON text of a trace file, gunzipped when its content is gzip, whatever its name says."""
    data = Path(path).read_bytes()
    return gzip.decompress(data) if data[:2] == GZIP_MAGIC else data


def load_json(path: Path) -> dict:
    """The trace file's JSON document, read by its content (json_bytes)."""
    return json.loads(json_bytes(path))
