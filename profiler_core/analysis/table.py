"""The text table of ``EventList.table()``: torch 2.13's columns, widths, formats and footer."""

from __future__ import annotations

import math
from collections.abc import Sequence

from .events import DeviceType, format_memory, format_time

__all__ = ["build_table", "sort_attribute"]

_SPACING = 2
_DEFAULT_WIDTH = 12
_FLOP_UNITS = ["FLOPs", "KFLOPs", "MFLOPs", "GFLOPs", "TFLOPs", "PFLOPs"]


def sort_attribute(sort_by: str) -> str:
    """Map a user sort key to the attribute torch reads (cuda/xpu/privateuse1 -> device)."""
    return sort_by.replace("cuda", "device").replace("xpu", "device").replace("privateuse1", "device")


def _time_share(time_us: float, total_us: float) -> str:
    if total_us == 0:
        return "NaN"
    return f"{time_us * 100.0 / total_us:.2f}%"


def _time(time_us: float, time_unit: str | None) -> str:
    if time_unit == "s":
        return f"{time_us / 1e6:.3f}s"
    if time_unit == "ms":
        return f"{time_us / 1e3:.3f}ms"
    if time_unit == "us":
        return f"{time_us:.3f}us"
    return format_time(time_us)


def _flops_scale(min_flops: float) -> tuple[float, str]:
    """Scale factor and header unit chosen from the smallest positive FLOP count."""
    level = max(0.0, min(math.log10(min_flops) / 3, float(len(_FLOP_UNITS) - 1)))
    return 10 ** (math.floor(level) * -3.0), _FLOP_UNITS[int(level)]


def _trim_path(path: str, width: int) -> str:
    if len(path) > width:
        path = path[len(path) - width :]
        if len(path) > 3:
            path = "..." + path[3:]
    return path


class _Layout:
    """Accumulates the row format string, the dashed separator and the line length."""

    def __init__(self) -> None:
        self.fmt = ""
        self.sep = ""
        self.length = -_SPACING

    def add(self, width: int, align: str = ">") -> None:
        self.fmt += "{: " + align + str(width) + "}" + " " * _SPACING
        self.sep += "-" * width + " " * _SPACING
        self.length += width + _SPACING


def build_table(
    events: Sequence,
    sort_by: str | None = None,
    header: str | None = None,
    row_limit: int = 100,
    max_src_column_width: int = 75,
    max_name_column_width: int = 55,
    max_shapes_column_width: int = 80,
    with_flops: bool = False,
    profile_memory: bool = False,
    top_level_events_only: bool = False,
    time_unit: str | None = None,
) -> str:
    """Render FunctionEvents or FunctionEventAvgs as torch's profiler summary table."""
    if len(events) == 0:
        return ""
    use_device = events[0].use_device
    has_device_time = bool(use_device) and any(e.self_device_time_total > 0 for e in events)
    has_device_mem = any(e.self_device_memory_usage > 0 for e in events)
    has_shapes = any(e.input_shapes is not None and len(e.input_shapes) > 0 for e in events)
    has_overload = any(e.overload_name for e in events)

    if sort_by is not None:
        attr = sort_attribute(sort_by)
        try:
            events = sorted(events, key=lambda e: getattr(e, attr), reverse=True)
        except TypeError:
            raise TypeError(
                f"sort_by={sort_by!r}: the values of this attribute cannot be ordered; "
                "sort by a time, memory or count attribute (e.g. 'cpu_time_total')"
            ) from None

    name_width = max(len(e.key) for e in events) + 4
    if max_name_column_width is not None:
        name_width = min(name_width, max_name_column_width)
    shapes_width = max(len(str(e.input_shapes)) for e in events) + 4
    if max_shapes_column_width is not None:
        shapes_width = min(shapes_width, max_shapes_column_width)
    stacks = [e.stack for e in events if e.stack]
    has_stack = bool(stacks)
    src_width = 0
    if has_stack:
        src_width = max(len(entry) for s in stacks for entry in s) + 4
        if max_src_column_width is not None:
            src_width = min(src_width, max_src_column_width)

    dev = use_device.upper() if use_device else "None"
    headers = ["Name"]
    if has_overload:
        headers.append("Overload Name")
    headers += ["Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg"]
    if has_device_time:
        headers += [f"Self {dev}", f"Self {dev} %", f"{dev} total", f"{dev} time avg"]
    if profile_memory:
        headers += ["CPU Mem", "Self CPU Mem"]
        if use_device and has_device_mem:
            headers += [f"{dev} Mem", f"Self {dev} Mem"]
    headers.append("# of Calls")
    with_node_id = any(e.node_id != -1 for e in events)
    if with_node_id:
        headers.append("Node ID")

    layout = _Layout()
    layout.add(name_width)
    if has_overload:
        layout.add(name_width)
    for _ in headers[1 + has_overload :]:
        layout.add(_DEFAULT_WIDTH)
    if has_shapes:
        headers.append("Input Shapes")
        layout.add(shapes_width)
    if has_stack:
        headers.append("Source Location")
        layout.add(src_width, "<")
    flops_scale = 1.0
    if with_flops:
        positive = [e.flops for e in events if e.flops and e.flops > 0]
        if positive:
            flops_scale, unit = _flops_scale(min(positive))
            headers.append(f"Total {unit}")
            layout.add(_DEFAULT_WIDTH)
        else:
            with_flops = False

    total_self_cpu = 0.0
    total_self_device = 0.0
    for e in events:
        total_self_cpu += e.self_cpu_time_total
        if (
            e.device_type == DeviceType.CPU
            and e.is_legacy
            or e.device_type != DeviceType.CPU
            and not e.is_user_annotation
        ):
            total_self_device += e.self_device_time_total

    out: list[str] = []

    def line(text: str) -> None:
        out.append(text)
        out.append("\n")

    if header is not None:
        line("=" * layout.length)
        line(header)
    if top_level_events_only:
        line("=" * layout.length)
        line("This report only display top-level ops statistics")
    line(layout.sep)
    line(layout.fmt.format(*headers))
    line(layout.sep)

    shown = 0
    for e in events:
        if shown == row_limit:
            break
        if top_level_events_only and e.cpu_parent is not None:
            continue
        shown += 1
        name = e.key
        if max_name_column_width is not None and len(name) >= max_name_column_width - 3:
            name = name[: max_name_column_width - 3] + "..."
        e.self_cpu_percent = _time_share(e.self_cpu_time_total, total_self_cpu)
        e.total_cpu_percent = _time_share(e.cpu_time_total, total_self_cpu) if not e.is_async else 0
        row: list = [name]
        if has_overload:
            ov = e.overload_name or ""
            if max_name_column_width is not None and len(ov) >= max_name_column_width - 3:
                ov = ov[: max_name_column_width - 3] + "..."
            row.append(ov)
        row += [
            e.self_cpu_percent,
            _time(e.self_cpu_time_total, time_unit),
            e.total_cpu_percent,
            _time(e.cpu_time_total, time_unit),
            _time(e.cpu_time, time_unit),
        ]
        if has_device_time:
            e.total_device_percent = _time_share(e.self_device_time_total, total_self_device)
            row += [
                _time(e.self_device_time_total, time_unit),
                e.total_device_percent,
                _time(e.device_time_total, time_unit),
                _time(e.device_time, time_unit),
            ]
        if profile_memory:
            row += [format_memory(e.cpu_memory_usage), format_memory(e.self_cpu_memory_usage)]
            if use_device and has_device_mem:
                row += [format_memory(e.device_memory_usage), format_memory(e.self_device_memory_usage)]
        row.append(e.count)
        if with_node_id:
            row.append(e.node_id)
        if has_shapes:
            row.append(str(e.input_shapes)[:shapes_width])
        # torch 2.13 emits FLOPs before Source Location although the headers say the
        # opposite; we keep its order so the text is identical (see docs in the report).
        if with_flops:
            row.append("--" if not e.flops or e.flops <= 0 else f"{e.flops * flops_scale:8.3f}")
        if has_stack:
            row.append(_trim_path(e.stack[0], src_width) if e.stack else "")
        line(layout.fmt.format(*row))
        if has_stack:
            blanks = [""] * (len(headers) - 1)
            for entry in (e.stack or [])[1:]:
                line(layout.fmt.format(*(blanks + [_trim_path(entry, src_width)])))
            line(layout.fmt.format(*(blanks + [""])))

    line(layout.sep)
    line(f"Self CPU time total: {_time(total_self_cpu, time_unit)}")
    if has_device_time:
        line(f"Self {dev} time total: {_time(total_self_device, time_unit)}")
    return "".join(out)
