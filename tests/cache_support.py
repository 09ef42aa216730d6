"""Test helper: read a trace the way the plugin's loader does, through the parse cache."""

from __future__ import annotations

import os

from profiler_core.trace.model import TraceData
from profiler_core.trace.read.reader import read_trace


def read_trace_cached(path: str | os.PathLike) -> TraceData:
    """A cached parse of `path` when valid, else parse it and store the parse (`read_trace`'s
    parse-cache strategy)."""
    return read_trace(path, use_cache=True)
