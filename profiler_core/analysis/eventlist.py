"""EventList: torch's list of FunctionEvents with tree building, key_averages, table and export_stacks."""

from __future__ import annotations

import itertools
import json
import os
from typing import Any

from .events import DeviceType, FunctionEvent, FunctionEventAvg
from .table import build_table, sort_attribute

__all__ = ["EventList", "SUPPORTED_STACK_METRICS"]

SUPPORTED_STACK_METRICS = (
    "self_cpu_time_total",
    "self_cuda_time_total",
    "self_xpu_time_total",
    "self_privateuse1_time_total",
)
_FRAME_TRANSLATION = str.maketrans(" ;\t\n", "____")


class EventList(list):
    """A list of FunctionEvent (or FunctionEventAvg) with torch's EventList methods."""

    def __init__(
        self, *args: Any, use_device: str | None = None, profile_memory: bool = False, with_flops: bool = False
    ) -> None:
        super().__init__(*args)
        self._use_device = use_device
        self._profile_memory = profile_memory
        self._with_flops = with_flops

    def __str__(self) -> str:
        return self.table()

    # ---- tree -------------------------------------------------------------------------
    def _populate_cpu_children(self) -> None:
        sync = [e for e in self if not e.is_async and e.device_type == DeviceType.CPU]
        sync.sort(key=_thread_key)
        for _key, group in itertools.groupby(sync, key=_thread_key):
            ordered = sorted(group, key=lambda e: (e.time_range.start, -e.time_range.end))
            open_events: list[FunctionEvent] = []
            for evt in ordered:
                start = evt.time_range.start
                end = evt.time_range.end
                while open_events:
                    parent = open_events[-1]
                    pend = parent.time_range.end
                    if start >= pend or end > pend:
                        open_events.pop()
                    else:
                        parent.cpu_children.append(evt)
                        evt.cpu_parent = parent
                        break
                open_events.append(evt)

    def _remove_dup_nodes(self) -> None:
        """Drop an event whose parent has the same name and no other child (torch does this)."""
        while True:
            removed = set()
            for evt in self:
                parent = evt.cpu_parent
                if parent is not None and parent.name == evt.name and len(parent.cpu_children) == 1:
                    parent.cpu_children = evt.cpu_children
                    # torch replaces the parent's kernels by the child's; we keep both so
                    # no device time is lost when the parent launched work itself.
                    parent.kernels = parent.kernels + evt.kernels
                    parent._device_total = None
                    for ch in evt.cpu_children:
                        ch.cpu_parent = parent
                    removed.add(id(evt))
            if not removed:
                return
            kept = [e for e in self if id(e) not in removed]
            self.clear()
            self.extend(kept)

    # ---- aggregates -------------------------------------------------------------------
    @property
    def self_cpu_time_total(self) -> float:
        return sum(e.self_cpu_time_total for e in self)

    def key_averages(
        self,
        group_by_input_shape: bool = False,
        group_by_stack_n: int = 0,
        group_by_overload_name: bool = False,
        *,
        group_by_input_shapes: bool | None = None,
    ) -> EventList:
        """Sum events that share (name, node, device type, legacy, annotation[, shapes, stack])."""
        if group_by_input_shapes is not None:
            group_by_input_shape = group_by_input_shapes
        if not isinstance(group_by_stack_n, int) or group_by_stack_n < 0:
            raise ValueError(f"group_by_stack_n must be a non-negative int, got {group_by_stack_n!r}")
        stats: dict[tuple, FunctionEventAvg] = {}
        add = FunctionEventAvg.add
        with_shapes = bool(group_by_input_shape)
        for evt in self:
            if type(evt) is FunctionEvent and not (group_by_overload_name or with_shapes or group_by_stack_n):
                key_t = (evt.name, evt.node_id, evt.device_type, evt.is_legacy, evt.is_user_annotation)
            else:
                key = [evt.key, evt.node_id, evt.device_type, evt.is_legacy, evt.is_user_annotation]
                if group_by_overload_name:
                    key.append(evt.overload_name)
                if with_shapes:
                    key.append(str(evt.input_shapes))
                if group_by_stack_n > 0:
                    key.extend(evt.stack[:group_by_stack_n])
                key_t = tuple(key)
            avg = stats.get(key_t)
            if avg is None:
                avg = stats[key_t] = FunctionEventAvg()
            add(avg, evt)
        result = EventList(
            stats.values(),
            use_device=self._use_device,
            profile_memory=self._profile_memory,
            with_flops=self._with_flops,
        )
        for avg in result:
            avg.stack = (avg.stack or [])[:group_by_stack_n]
            if not group_by_input_shape:
                avg.input_shapes = ""
            if not group_by_overload_name:
                avg.overload_name = ""
        return result

    def total_average(self) -> FunctionEventAvg:
        """All events summed into one FunctionEventAvg with key "Total"."""
        total = FunctionEventAvg()
        for evt in self:
            total.add(evt)
            total.key = None
        total.key = "Total"
        return total

    # ---- output -----------------------------------------------------------------------
    def table(
        self,
        sort_by: str | None = None,
        row_limit: int = 100,
        max_src_column_width: int = 75,
        max_name_column_width: int = 55,
        max_shapes_column_width: int = 80,
        header: str | None = None,
        top_level_events_only: bool = False,
        time_unit: str | None = None,
    ) -> str:
        """torch's summary table; ``sort_by`` is any attribute name (AttributeError if unknown)."""
        if sort_by is not None and not isinstance(sort_by, str):
            raise TypeError(f"sort_by must be an attribute name (str), got {type(sort_by).__name__}")
        if time_unit not in (None, "s", "ms", "us"):
            raise ValueError(f"time_unit must be one of 's', 'ms', 'us' or None, got {time_unit!r}")
        _check_table_args(
            row_limit=row_limit,
            max_src_column_width=max_src_column_width,
            max_name_column_width=max_name_column_width,
            max_shapes_column_width=max_shapes_column_width,
            header=header,
        )
        return build_table(
            self,
            sort_by=sort_by,
            row_limit=row_limit,
            max_src_column_width=max_src_column_width,
            max_name_column_width=max_name_column_width,
            max_shapes_column_width=max_shapes_column_width,
            header=header,
            profile_memory=self._profile_memory,
            with_flops=self._with_flops,
            top_level_events_only=top_level_events_only,
            time_unit=time_unit,
        )

    def export_chrome_trace(self, path: str) -> None:
        """Write these events as a minimal chrome trace (torch's legacy EventList format).

        One ``X`` event per FunctionEvent on pid "CPU functions", plus a flow start per kernel;
        unlike torch's writer, names are JSON-escaped, so the file is always valid JSON.
        """
        out = []
        flow_id = 0
        device_name = self._use_device or "cuda"
        for evt in self:
            if getattr(evt, "trace_name", None) is None:
                continue
            start = evt.time_range.start
            out.append(
                {
                    "name": evt.trace_name,
                    "ph": "X",
                    "ts": start,
                    "dur": evt.time_range.elapsed_us(),
                    "tid": evt.thread,
                    "pid": "CPU functions",
                    "args": {},
                }
            )
            for _ in evt.kernels:
                out.append(
                    {
                        "name": evt.trace_name,
                        "ph": "s",
                        "ts": start,
                        "tid": evt.thread,
                        "pid": "CPU functions",
                        "id": flow_id,
                        "cat": f"cpu_to_{device_name}",
                        "args": {},
                    }
                )
                flow_id += 1
        from ..trace.write.writer import write_bytes_atomic

        write_bytes_atomic(json.dumps(out).encode("utf-8"), path, "chrome trace")

    def supported_export_stacks_metrics(self) -> list[str]:
        return list(SUPPORTED_STACK_METRICS)

    def export_stacks(self, path: str, metric: str = "self_cpu_time_total") -> None:
        """Write one ``root;...;leaf <int us>`` line per event with a stack (flamegraph.pl input)."""
        if metric not in SUPPORTED_STACK_METRICS:
            raise ValueError("metric should be one of: " + str(list(SUPPORTED_STACK_METRICS)))
        attr = sort_attribute(metric)
        lines = []
        for evt in self:
            if not evt.stack:
                continue
            value = int(getattr(evt, attr))
            if value > 0:
                frames = ";".join(f.translate(_FRAME_TRANSLATION) for f in reversed(evt.stack))
                lines.append(f"{frames} {value}\n")
        from ..trace.write.writer import check_path, write_bytes_atomic

        path = check_path(path, "stacks")
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            raise FileNotFoundError(f"export_stacks: directory does not exist: {directory}")
        write_bytes_atomic("".join(lines).encode("utf-8", "replace"), path, "stacks")


def _check_table_args(*, row_limit: object, header: object, **widths: object) -> None:
    """Clear errors for table() arguments that would otherwise fail deep in the formatting."""
    if row_limit is not None and (isinstance(row_limit, bool) or not isinstance(row_limit, int)):
        raise TypeError(f"row_limit must be an int (<= 0: no limit), got {type(row_limit).__name__} {row_limit!r}")
    for name, width in widths.items():
        if width is None:
            continue
        if isinstance(width, bool) or not isinstance(width, int) or width < 0:
            raise ValueError(f"{name} must be a non-negative int, got {width!r}")
    if header is not None and not isinstance(header, str):
        raise TypeError(f"header must be a str, got {type(header).__name__} {header!r}")


def _thread_key(evt: FunctionEvent) -> tuple:
    """Events nest only within one (process, thread, node)."""
    return (evt.device_index, evt.thread, evt.node_id)
