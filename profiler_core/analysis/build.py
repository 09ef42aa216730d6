"""events_from_trace: turn a Kineto trace dict (ours or torch's) into torch-style FunctionEvents.

Follows torch 2.13's ``_parse_kineto_results``: CPU events (ops, annotations, Python frames,
runtime calls) nest by time per thread; GPU activities become CUDA events and are also
attributed as kernels to the CPU op that launched them; ``[memory]`` records go to the
innermost CPU event on their thread.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

from ..trace.categories import GPU_ACTIVITY_CATS, GPU_USER_ANNOTATION, HOST_CATS, LAUNCH_CATS, SPELLINGS
from ..trace.event_args import BY_FIELD
from ..trace.event_args import arg as _arg
from ..trace.event_args import key as _key
from .eventlist import EventList
from .events import DeviceType, FunctionEvent
from .linking import attribute_memory, link_gpu, memory_events, resolve_pending, roll_up_memory
from .treeops import SCOPE_USER, assign_scopes, drop_nested_computed_flops, set_backward_stacks

__all__ = ["events_from_trace", "TraceFormatError"]

# the args keys read here (profiler_core/trace/event_args.py)
_EXTERNAL_ID = BY_FIELD["external_id"].keys  # canonical, then older spellings
_INPUT_DIMS, _INPUT_TYPE, _INPUT_STRIDES = _key("input_dims"), _key("input_type"), _key("input_strides")
_FLOPS, _CONCRETE_INPUTS, _CALL_STACK = _key("flops"), _key("concrete_inputs"), _key("call_stack")
_SEQUENCE_NR, _FWD_THREAD = _key("sequence_nr"), _key("fwd_thread")
_PYTHON_ID, _PYTHON_PARENT_ID, _PYTHON_MODULE_ID = _key("python_id"), _key("python_parent_id"), _key("python_module_id")
_CORRELATION, _DEVICE, _STREAM = _key("correlation"), _key("device"), _key("stream")
_MEM_BYTES, _MEM_DEVICE_TYPE = _key("mem_bytes"), _key("mem_device_type")


class TraceFormatError(ValueError):
    """The trace dict is not a Kineto trace we can read."""


# Normalised category for every category spelling key_averages() reads, host side and device side.
_CPU_CATS = {k: v for k, v in SPELLINGS.items() if v in HOST_CATS}
_GPU_CATS = {k: v for k, v in SPELLINGS.items() if v in GPU_ACTIVITY_CATS or v == GPU_USER_ANNOTATION}
_FILTERED_NAMES = frozenset(
    {
        "[memory]",
        "[OutOfMemory]",
        "profiler::_record_function_enter",
        "profiler::_record_function_enter_new",
        "profiler::_record_function_exit",
        "aten::is_leaf",
        "aten::output_nr",
        "aten::_version",
    }
)
_FILTERED_FRAMES = (
    ("autograd/__init__", "_make_grads"),
    ("autograd/__init__", "backward"),
    ("torch/tensor", "backward"),
    ("_internal/common_utils", "prof_callable"),
    ("_internal/common_utils", "prof_func_call"),
    ("_internal/common_utils", "prof_meth_call"),
)
_KERNEL_META_KEYS = (
    "registers per thread",
    "shared memory",
    "grid",
    "block",
    "blocks per SM",
    "warps per SM",
    "est. achieved occupancy %",
    "queued",
    "stream",
    "context",
    "device",
    "bytes",
    "memory bandwidth (GB/s)",
    "correlation",
)


def events_from_trace(trace: Any) -> EventList:
    """Build the EventList of ``prof.events()`` from a Kineto trace dict (or bare event list)."""
    raw_events, meta = _split_trace(trace)
    # Building creates many linked objects and frees none: pausing the cyclic GC avoids
    # repeated full scans of the growing heap (a large share of the time otherwise).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return Builder(raw_events, meta).build()
    finally:
        if gc_was_enabled:
            gc.enable()


def _split_trace(trace: Any) -> tuple[list, dict]:
    if isinstance(trace, list):
        return trace, {}
    if not isinstance(trace, dict):
        raise TraceFormatError(
            f"events_from_trace expects a Kineto trace dict or event list, got {type(trace).__name__}"
        )
    events = trace.get("traceEvents")
    if not isinstance(events, list):
        raise TraceFormatError("trace has no 'traceEvents' list; is this a Kineto/chrome trace?")
    return events, trace


#: below this many µs a float's product by 1000 is exact to the ns; above it (epoch µs) the whole µs and the
#: fraction are converted apart, as the reader does, so both give the float's own ns
_FAST_NS_LIMIT = float(1 << 31)
#: epoch timestamps are read relative to a whole µs near them (the parse's hot path)
_NEAR_BASE_US = float(1 << 30)


def _float_ns(us: float) -> int:
    if -_FAST_NS_LIMIT < us < _FAST_NS_LIMIT:
        return round(us * 1000)
    whole = int(us)  # us - whole is exact (either sign)
    return whole * 1000 + round((us - whole) * 1000)


def to_ns(value: Any, what: str, index: int) -> int:
    """A µs timestamp/duration (int, float or numeric string) as integer ns."""
    kind = type(value)
    if kind is float and value - value == 0.0:
        return _float_ns(value)
    if kind is int:
        return value * 1000
    if isinstance(value, int) and not isinstance(value, bool):
        return value * 1000
    number = None
    if isinstance(value, float):
        number = value
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    if number is None or number != number or number in (float("inf"), float("-inf")):
        raise TraceFormatError(f"traceEvents[{index}]: '{what}' must be a finite number, got {value!r}")
    return _float_ns(number)


def _int_arg(args: dict, *keys: str, default: int = -1) -> int:
    for key in keys:
        v = args.get(key)
        if v is None:
            continue
        if type(v) is int:
            return v
        if isinstance(v, bool):
            return int(v)
        if isinstance(v, int):
            return v
        try:
            return int(v)
        except (TypeError, ValueError):
            try:
                return int(float(v))
            except (TypeError, ValueError):
                continue
    return default


def _input_shapes(dims: Any) -> list:
    """torch's FunctionEvent.input_shapes: a tensor's shape, ``[]`` for TensorLists and scalars."""
    if type(dims) is not list:
        return []
    return [d if type(d) is list and (not d or type(d[0]) is int) else [] for d in dims]


def _stack(call_stack: Any) -> list:
    """``Call stack`` ("inner;...;outer;") as a list, without torch's filtered autograd frames."""
    if not isinstance(call_stack, str) or not call_stack:
        return []
    frames = [frame for frame in call_stack.split(";") if frame]
    if any(a in call_stack for a, _b in _FILTERED_FRAMES):
        frames = [f for f in frames if all(not (a in f and b in f) for a, b in _FILTERED_FRAMES)]
    return frames


def _lookup_flops() -> Callable | None:
    try:
        from profiler_core.flops import compute_flops  # lazy: owned by the collection core
    except Exception:  # noqa: BLE001 - absent or broken module means "no computed FLOPs"
        return None
    return compute_flops


class Builder:
    """One pass over traceEvents, then linking (tree, kernels, memory) and finally the EventList."""

    def __init__(self, raw_events: list, meta: dict) -> None:
        self.raw = raw_events
        self.meta = meta
        self.labels: dict[str, int] = {}
        self.ident_cache: dict[str, int] = {}
        self.stack_cache: dict[str, list] = {}
        self.cpu: list[tuple] = []  # (start_ns, end_ns, order, FunctionEvent)
        self.gpu: list[tuple] = []
        self.memory: list[tuple] = []  # (ts_ns, pid, tid, bytes, device_type, order)
        self.runtime_by_corr: dict[int, FunctionEvent] = {}
        self.gpu_corr: list[tuple] = []  # (FunctionEvent, correlation, external id)
        self.has_flops_arg = False
        self.computed_flops: set[int] = set()
        self.has_gpu = bool(meta.get("deviceProperties"))
        self.origin_ns: int | None = None
        self.base_us = 0.0  # a whole µs near the trace's epoch timestamps (0.0 until one is seen)
        self.base_ns = 0

    # -- identifiers -----------------------------------------------------------------
    def _ident(self, value: Any) -> int:
        """pid/tid as int: numbers kept, "25738"/"stream 7" parsed, other strings coded < 0."""
        if type(value) is int:
            return value
        cached = self.ident_cache.get(value) if isinstance(value, str) else None
        if cached is not None:
            return cached
        code = self._ident_slow(value)
        if isinstance(value, str):
            self.ident_cache[value] = code
        return code

    def _ident_slow(self, value: Any) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float):
            return int(value)
        text = str(value)
        tail = text.rsplit(" ", 1)[-1]
        if tail.lstrip("-").isascii() and tail.lstrip("-").isdigit():
            return int(tail)
        code = self.labels.get(text)
        if code is None:
            code = self.labels[text] = -(len(self.labels) + 2)
        return code

    def _stack(self, call_stack: Any) -> list:
        if not call_stack:
            return []
        frames = self.stack_cache.get(call_stack) if isinstance(call_stack, str) else None
        if frames is None:
            frames = _stack(call_stack)
            if isinstance(call_stack, str):
                self.stack_cache[call_stack] = frames
        return list(frames)

    # -- parsing ---------------------------------------------------------------------
    def build(self) -> EventList:
        with_flops = bool(self.meta.get("with_flops"))
        flops_fn = _lookup_flops() if with_flops else None
        for index, ev in enumerate(self.raw):
            if not isinstance(ev, dict):
                continue
            ph = ev.get("ph")
            if ph == "X":
                self._parse_complete(index, ev, flops_fn)
            elif ph == "i" and ev.get("name") == "[memory]":
                self._parse_memory(index, ev)
        if self.origin_ns is None:
            starts = [c[0] for c in self.cpu] + [g[0] for g in self.gpu] + [m[0] for m in self.memory]
            self.origin_ns = min(starts) if starts else 0
        use_device = "cuda" if self.has_gpu else None
        origin = self.origin_ns
        for start, end, _order, fe in self.cpu:
            fe.time_range.start = (start - origin) / 1000
            fe.time_range.end = (end - origin) / 1000
            fe.use_device = use_device
        for start, end, _order, fe in self.gpu:
            fe.time_range.start = (start - origin) / 1000
            fe.time_range.end = (end - origin) / 1000
            fe.use_device = use_device
        owned, unattributed = attribute_memory(self.cpu, self.memory)
        if unattributed:
            first_id = max((c[3].id for c in self.cpu if isinstance(c[3].id, int)), default=0)
            self.cpu.extend(memory_events(unattributed, origin, first_id, use_device))
        pending = link_gpu(self.cpu, self.gpu_corr, self.runtime_by_corr)
        cpu_sorted = sorted(self.cpu, key=lambda c: (c[0], -c[1], c[2]))
        all_sorted = sorted(self.cpu + self.gpu, key=lambda c: (c[0], -c[1], c[2]))
        all_events = [c[3] for c in all_sorted]
        result = EventList(
            all_events,
            use_device=use_device,
            profile_memory=bool(self.meta.get("profile_memory")) or bool(self.memory),
            with_flops=with_flops or self.has_flops_arg,
        )
        result._populate_cpu_children()
        assign_scopes(cpu_sorted)
        drop_nested_computed_flops(cpu_sorted, self.computed_flops)
        resolve_pending(pending)
        roll_up_memory(owned, cpu_sorted)
        result._remove_dup_nodes()
        set_backward_stacks(result)
        return result

    def _parse_complete(self, index: int, ev: dict, flops_fn: Callable | None) -> None:
        raw_cat = ev.get("cat")
        cat_l = raw_cat.lower() if type(raw_cat) is str else ""
        cat = _CPU_CATS.get(cat_l)
        is_gpu = False
        if cat is None:
            cat = _GPU_CATS.get(cat_l)
            if cat is None:
                if cat_l == "trace" and self.origin_ns is None and "ts" in ev:
                    self.origin_ns = to_ns(ev.get("ts"), "ts", index)
                return
            is_gpu = True
        name = ev.get("name")
        if type(name) is not str:
            name = "" if name is None else str(name)
        if name in _FILTERED_NAMES:
            return
        ts = ev.get("ts")
        if type(ts) is float and -_NEAR_BASE_US < ts - self.base_us < _NEAR_BASE_US:
            # exact: a non-zero base is beyond 2**32 us, ts within 2**30 of it, so their difference is a float
            start = self.base_ns + round((ts - self.base_us) * 1000)
        else:
            start = to_ns(ts, "ts", index)
            if type(ts) is float and abs(ts) >= 2 * _FAST_NS_LIMIT:
                self.base_us, self.base_ns = float(int(ts)), int(ts) * 1000
        dur = ev.get("dur", 0)
        dur = round(dur * 1000) if type(dur) is float else to_ns(dur, "dur", index)
        if dur < 0:
            dur = 0
        args = ev.get("args")
        if type(args) is not dict:
            args = {}
        pid = ev.get("pid", 0)
        if type(pid) is not int:
            pid = self._ident(pid)
        tid = ev.get("tid", 0)
        if type(tid) is not int:
            tid = self._ident(tid)
        ext = args.get(_EXTERNAL_ID[0])
        if type(ext) is not int:
            ext = _int_arg(args, *_EXTERNAL_ID, default=0)
        if is_gpu:
            self._add_gpu(cat, name, start, dur, index, pid, tid, ext, args)
            return
        dims = _arg(args, _INPUT_DIMS)  # torch 1.8 wrote "Input dims"
        flops = 0
        computed = False
        if _FLOPS in args:
            flops = _int_arg(args, _FLOPS, default=0)
            self.has_flops_arg = self.has_flops_arg or flops > 0
        elif flops_fn is not None and cat == "cpu_op" and type(dims) is list:
            try:
                flops = int(flops_fn(name, dims, args.get(_CONCRETE_INPUTS)) or 0)
            except Exception:  # noqa: BLE001 - a bad formula must not break the analysis
                flops = 0
            computed = flops > 0
        call_stack = args.get(_CALL_STACK)
        seq = args.get(_SEQUENCE_NR, -1)
        if type(seq) is not int:
            seq = _int_arg(args, _SEQUENCE_NR)
        fwd = args.get(_FWD_THREAD)
        if fwd is not None and type(fwd) is not int:
            fwd = _int_arg(args, _FWD_THREAD, default=-1)
        fe = FunctionEvent(
            ext,
            "ProfilerStep*" if name.startswith("ProfilerStep#") else name,
            tid,
            0.0,
            0.0,
            name,
            _input_shapes(dims) if dims is not None else [],
            self._stack(call_stack) if call_stack else [],
            DeviceType.CPU,
            pid,
            tid,
            fwd_thread=fwd if fwd is None or fwd >= 0 else None,
            concrete_inputs=args.get(_CONCRETE_INPUTS),
            scope=SCOPE_USER if cat == "user_annotation" else 0,
            sequence_nr=seq,
            flops=flops if flops > 0 else 0,
            is_user_annotation=cat == "user_annotation",
            activity_type=cat,
            external_id=ext,
        )
        if dims is not None:
            fe.structured_input_shapes = dims
            fe.structured_input_strides = _arg(args, _INPUT_STRIDES)
            fe.input_dtypes = _arg(args, _INPUT_TYPE)
        if cat == "python_function":
            fe.is_python_function = True
            fe.python_id = _int_arg(args, _PYTHON_ID)
            fe.python_parent_id = _int_arg(args, _PYTHON_PARENT_ID)
            fe.python_module_id = _int_arg(args, _PYTHON_MODULE_ID)
            if not ext:
                fe.id = fe.python_id if fe.python_id >= 0 else 0
        elif cat in LAUNCH_CATS:
            fe.linked_correlation_id = ext
            corr = _int_arg(args, _CORRELATION)
            if corr >= 0:
                self.runtime_by_corr[corr] = fe
        if computed:
            self.computed_flops.add(id(fe))
        self.cpu.append((start, start + dur, index, fe))

    def _add_gpu(
        self, cat: str, name: str, start: int, dur: int, index: int, pid: int, tid: int, ext: int, args: dict
    ) -> None:
        self.has_gpu = True
        device = _int_arg(args, _DEVICE, default=pid)
        stream = _int_arg(args, _STREAM, default=tid)
        key = "ProfilerStep*" if name.startswith("ProfilerStep#") else name
        fe = FunctionEvent(
            ext,
            key,
            stream,
            0.0,
            0.0,
            name,
            None,
            None,
            DeviceType.CUDA,
            device,
            stream,
            is_user_annotation=cat == "gpu_user_annotation",
            activity_type=cat,
            external_id=ext,
        )
        fe.linked_correlation_id = ext
        meta = {k: args[k] for k in _KERNEL_META_KEYS if k in args}
        if meta:
            fe.event_metadata = meta
        self.gpu.append((start, start + dur, index, fe))
        if cat != "gpu_user_annotation":
            self.gpu_corr.append((fe, _int_arg(args, _CORRELATION), ext))

    def _parse_memory(self, index: int, ev: dict) -> None:
        args = ev.get("args")
        if not isinstance(args, dict):
            return
        nbytes = _int_arg(args, _MEM_BYTES, default=0)
        self.memory.append(
            (
                to_ns(ev.get("ts"), "ts", index),
                self._ident(ev.get("pid", 0)),
                self._ident(ev.get("tid", 0)),
                nbytes,
                _int_arg(args, _MEM_DEVICE_TYPE, default=0),
                index,
            )
        )
