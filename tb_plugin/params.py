"""Typed, bounded request parameters: every value a route or a view accepts is parsed here.

A parameter is described once (name, type, bounds, default, one line of doc); the route table
(`tb_plugin.routes`) lists them per route and the views parse their own arguments with the same
objects, so the plugin and a view cannot disagree on a bound. A bad value is a `BadRequest` (400)
naming the parameter; no value, however long or large, gets further than that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from profiler_core.analysis import groupings
from tb_plugin.errors import BadRequest

#: longest run / worker / span / choice value (a run is a path relative to the logdir)
MAX_NAME_LEN = 4096
#: longest free-text value (an event name, an input shape, a search query); also the longest value
#: any parameter may have, known or not: longer ones are refused before anything else looks at them
MAX_TEXT_LEN = 65536
#: times are µs relative to a trace's start; 1e15 µs is about 31 years
MAX_ABS_US = 1e15
#: widest timeline tile
MAX_WIDTH_PX = 20000
_MAX_NUMBER_LEN = 64


def shown(value: Any, limit: int = 60) -> str:
    """`value` for an error message: its repr, cut to `limit` characters with the full length."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(str(value))} characters)"


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, str) and v == "")


def number_param(v: Any, what: str, lo: float = -MAX_ABS_US, hi: float = MAX_ABS_US) -> float | None:
    """A finite float within [lo, hi] (None and "" stay None); BadRequest naming `what` otherwise."""
    if _missing(v):
        return None
    if isinstance(v, str) and len(v) > _MAX_NUMBER_LEN:
        raise BadRequest(f"{what} must be a number, got {shown(v)}")
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):
        raise BadRequest(f"{what} must be a number, got {shown(v)}") from None
    if not math.isfinite(f):
        raise BadRequest(f"{what} must be finite, got {shown(v)}")
    if f < lo or f > hi:
        raise BadRequest(f"{what} must be between {lo:g} and {hi:g}, got {shown(v)}")
    return f


def int_param(v: Any, what: str, lo: int, hi: int) -> int:
    """An integer within [lo, hi]; BadRequest naming `what` otherwise (also for a missing value)."""
    if isinstance(v, bool) or (isinstance(v, str) and len(v) > _MAX_NUMBER_LEN):
        raise BadRequest(f"{what} must be an integer, got {shown(v)}")
    try:
        i = int(v)
    except (TypeError, ValueError, OverflowError):
        raise BadRequest(f"{what} must be an integer, got {shown(v)}") from None
    if i < lo or i > hi:
        raise BadRequest(f"{what} must be between {lo} and {hi}, got {shown(i)}")
    return i


@dataclass(frozen=True)
class Param:
    """One query parameter: `parse(raw)` turns the request's text (or a Python value) into the
    value a view takes, or raises BadRequest."""

    name: str
    doc: str = ""
    required: bool = False

    def parse(self, raw: Any) -> Any:
        """The parsed value; the default when missing and not required."""
        if _missing(raw):
            if self.required:
                raise BadRequest(f"missing parameter {self.name!r}")
            return self.default_value()
        return self.convert(raw)

    def default_value(self) -> Any:
        """The value of a missing optional parameter."""
        return None

    def convert(self, raw: Any) -> Any:
        """The value of a given parameter (subclasses check type and bounds)."""
        return raw

    def kind(self) -> str:
        """The type and bounds in words (for the API documentation)."""
        return "text"


@dataclass(frozen=True)
class Text(Param):
    """A string of at most `max_len` characters, one of `choices` when they are given."""

    max_len: int = MAX_NAME_LEN
    choices: tuple[str, ...] = ()
    default: str | None = None

    def default_value(self) -> Any:
        return self.default

    def convert(self, raw: Any) -> Any:
        if not isinstance(raw, str):
            raise BadRequest(f"{self.name} must be text, got {shown(raw)}")
        if len(raw) > self.max_len:
            raise BadRequest(f"{self.name} is longer than {self.max_len} characters ({len(raw)})")
        if self.choices and raw not in self.choices:
            raise BadRequest(f"{self.name} must be one of {', '.join(self.choices)}, not {shown(raw)}")
        return raw

    def kind(self) -> str:
        if self.choices:
            return " \\| ".join(f"`{c}`" for c in self.choices)
        return f"text (at most {self.max_len} characters)"


@dataclass(frozen=True)
class Int(Param):
    """An integer in [lo, hi]."""

    lo: int = 0
    hi: int = 2**62
    default: int | None = None

    def default_value(self) -> Any:
        return self.default

    def convert(self, raw: Any) -> Any:
        return int_param(raw, self.name, self.lo, self.hi)

    def kind(self) -> str:
        return f"integer {self.lo}..{self.hi}"


@dataclass(frozen=True)
class Float(Param):
    """A finite number in [lo, hi]."""

    lo: float = -MAX_ABS_US
    hi: float = MAX_ABS_US

    def convert(self, raw: Any) -> Any:
        return number_param(raw, self.name, self.lo, self.hi)

    def kind(self) -> str:
        return f"number {self.lo:g}..{self.hi:g}"


@dataclass(frozen=True)
class IntList(Param):
    """Comma-separated integers in [lo, hi], at most `max_items` of them; sorted, no repeats."""

    lo: int = 0
    hi: int = 2**31 - 1
    max_items: int = 10000

    def convert(self, raw: Any) -> Any:
        if isinstance(raw, str):
            if len(raw) > MAX_TEXT_LEN:
                raise BadRequest(f"{self.name} is longer than {MAX_TEXT_LEN} characters ({len(raw)})")
            items = [x for x in raw.split(",") if x.strip() != ""]
        elif isinstance(raw, (list, tuple)):
            items = list(raw)
        else:
            items = [raw]
        if len(items) > self.max_items:
            raise BadRequest(f"{self.name} has more than {self.max_items} items ({len(items)})")
        return sorted({int_param(x.strip() if isinstance(x, str) else x, self.name, self.lo, self.hi) for x in items})

    def kind(self) -> str:
        return f"comma-separated integers {self.lo}..{self.hi} (at most {self.max_items})"


# ---------------------------------------------------------------- parameters shared by routes and views
START_US = Float("start_us", "start of the time range, µs from the trace's first event")
END_US = Float("end_us", "end of the time range, µs from the trace's first event")
WIDTH_PX = Int("width_px", "pixels the range is drawn on", lo=1, hi=MAX_WIDTH_PX, default=1000)
MAX_POINTS = Int("max_points", "most points per curve (peaks are kept)", lo=10, hi=1_000_000, default=2000)
SEARCH_LIMIT = Int("limit", "most results", lo=1, hi=10000, default=100)
OCCURRENCE_LIMIT = Int("limit", "most results", lo=1, hi=100000, default=10000)
OCCURRENCES_OF = Text(
    "of",
    "which events of the name: all of them, the operator table's calls of it, or its kernels (a table row's)",
    choices=("events", "operators", "kernels"),
    default="events",
)
EVENT_IDX = Int("idx", "the event's index in the file's traceEvents", lo=0, hi=2**62, required=True)
TRACKS = IntList("tracks", "timeline track indexes (default: all)")
OPERATORS_GROUP_BY = Text(
    "group_by", "rows per name, or per name and input shapes", choices=groupings.OPERATORS, default="name"
)
KERNELS_GROUP_BY = Text(
    "group_by",
    "rows per kernel name, with the launching op, or with the launch configuration too",
    choices=groupings.KERNELS,
    default="name",
)
