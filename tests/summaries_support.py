"""Asking the run-level routes (/diagnosis, /pipeline, /clock_offsets, /jobdiff) as the page does: again while
their answer names `pending` workers (per-worker summaries still being computed in the background)."""

from __future__ import annotations

import time
from typing import Any

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
