"""The one boundary rule of the analysis: a range [start, end) holds a time t.

Kept apart from `intervals` (which needs numpy) so that the capture side can use it without importing
numpy while a program is profiled.
"""

from __future__ import annotations

from typing import Any


def holds(start: Any, end: Any, t: Any) -> Any:
    """True where the range [start, end) holds time `t` (scalars or arrays alike)."""
    return (start <= t) & (t < end)
