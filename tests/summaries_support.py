"""Asking the run-level routes (/diagnosis, /pipeline, /clock_offsets, /jobdiff) as the page does: again while
their answer names `pending` workers (per-worker summaries still being computed in the background); and their
`gpuscope` commands, run as a user runs them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: how long a test waits for the background summaries at most (a hang guard, never a timing)
GUARD_S = 600.0


def pending(r: Any) -> bool:
    """Whether a route's answer says summaries are still being computed."""
    return r.status_code == 200 and r.is_json and isinstance(r.json, dict) and "pending" in r.json


def ready(c: Any, url: str, guard_s: float = GUARD_S) -> Any:
    """The answer of `url` once it is not `pending` (each pending answer also checked for its progress)."""
    end = time.monotonic() + guard_s
    r = c.get(url)
    while pending(r):
        p = r.json["progress"]
        assert r.json["pending"] and 0 <= p["done"] < p["total"], r.json
        assert time.monotonic() < end, f"{url}: still pending after {guard_s} s: {r.json}"
        time.sleep(0.05)
        r = c.get(url)
    return r


def gpuscope(command: str, *args: str) -> subprocess.CompletedProcess:
    """`gpuscope COMMAND ARGS...` in a child process (the source tree on its path), its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "tb_plugin.summaries.cli", command, *args],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
