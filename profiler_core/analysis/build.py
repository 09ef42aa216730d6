"""events_from_trace: turn a Kineto trace dict (ours or torch's) into torch-style FunctionEvents.

Follows torch 2.13's ``_parse_kineto_results``: CPU events (ops, annotations, Python frames,
runtime calls) nest by time per thread; GPU activities become CUDA events and are also
attributed as kernels to the CPU op that launched them; ``[memory]`` records go to the
innermost CPU event on their thread.
"""
from __future__ import annotations

import bisect
import gc
from typing import Any, Callable, Optional

from .eventlist import EventList
from .events import DeviceType, FunctionEvent

__all__ = ["events_from_trace", "TraceFormatError"]


class TraceFormatError(ValueError):
    """The trace dict is not a Kineto trace we can read."""


# Normalised category for every category spelling we accept (lower-cased first).
_CPU_CATS = {
    "cpu_op": "cpu_op", "operator": "cpu_op",
    "user_annotation": "user_annotation",
    "python_function": "python_function", "python": "python_function",
    "cuda_runtime": "cuda_runtime", "runtime": "cuda_runtime",
    "cuda_driver": "cuda_driver", "driver": "cuda_driver",
}
_GPU_CATS = {
    "kernel": "kernel", "gpu_memcpy": "gpu_memcpy", "memcpy": "gpu_memcpy",
    "gpu_memset": "gpu_memset", "memset": "gpu_memset",
    "gpu_user_annotation": "gpu_user_annotation",
}
_FILTERED_NAMES = frozenset({
    "[memory]", "[OutOfMemory]", "profiler::_record_function_enter",
    "profiler::_record_function_enter_new", "profiler::_record_function_exit",
    "aten::is_leaf", "aten::output_nr", "aten::_version",
})
_FILTERED_FRAMES = (
    ("autograd/__init__", "_make_grads"), ("autograd/__init__", "backward"),
    ("torch/tensor", "backward"), ("_internal/common_utils", "prof_callable"),
    ("_internal/common_utils", "prof_func_call"), ("_internal/common_utils", "prof_meth_call"),
)
_CPU_MEM_DEVICES = (0, 2, 5)        # CPU, MKLDNN, IDEEP
_GPU_MEM_DEVICES = (1, 6, 12, 20)   # CUDA, HIP, XPU, PrivateUse1
_KERNEL_META_KEYS = (
    "registers per thread", "shared memory", "grid", "block", "blocks per SM", "warps per SM",
    "est. achieved occupancy %", "queued", "stream", "context", "device", "bytes",
    "memory bandwidth (GB/s)", "correlation",
)
_SCOPE_BACKWARD = 1
_SCOPE_USER = 7


def events_from_trace(trace: Any) -> EventList:
    """Build the EventList of ``prof.events()`` from a Kineto trace dict (or bare event list)."""
    raw_events, meta = _split_trace(trace)
    # Building creates many linked objects and frees none: pausing the cyclic GC avoids
    # repeated full scans of the growing heap (a large share of the time otherwise).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _Builder(raw_events, meta).build()
    finally:
        if gc_was_enabled:
            gc.enable()


def _split_trace(trace: Any) -> tuple[list, dict]:
    if isinstance(trace, list):
        return trace, {}
    if not isinstance(trace, dict):
        raise TraceFormatError(
            f"events_from_trace expects a Kineto trace dict or event list, got {type(trace).__name__}")
    events = trace.get("traceEvents")
    if not isinstance(events, list):
        raise TraceFormatError("trace has no 'traceEvents' list; is this a Kineto/chrome trace?")
    return events, trace


def _to_ns(value: Any, what: str, index: int) -> int:
    """A µs timestamp/duration (int, float or numeric string) as integer ns."""
    kind = type(value)
    if kind is float and value - value == 0.0:
        return round(value * 1000)
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
    return round(number * 1000)


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


def _lookup_flops() -> Optional[Callable]:
    try:
        from profiler_core.flops import compute_flops  # lazy: owned by the collection core
    except Exception:  # noqa: BLE001 - absent or broken module means "no computed FLOPs"
        return None
    return compute_flops


class _Builder:
    """One pass over traceEvents, then linking (tree, kernels, memory) and finally the EventList."""

    def __init__(self, raw_events: list, meta: dict) -> None:
        self.raw = raw_events
        self.meta = meta
        self.labels: dict[str, int] = {}
        self.ident_cache: dict[str, int] = {}
        self.stack_cache: dict[str, list] = {}
        self.cpu: list[tuple] = []       # (start_ns, end_ns, order, FunctionEvent)
        self.gpu: list[tuple] = []
        self.memory: list[tuple] = []    # (ts_ns, pid, tid, bytes, device_type, order)
        self.runtime_by_corr: dict[int, FunctionEvent] = {}
        self.gpu_corr: list[tuple] = []  # (FunctionEvent, correlation, external id)
        self.has_flops_arg = False
        self.computed_flops: set[int] = set()
        self.has_gpu = bool(meta.get("deviceProperties"))
        self.origin_ns: Optional[int] = None

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
        if tail.lstrip("-").isdigit():
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
        self._attribute_memory(use_device)
        self._link_gpu()
        cpu_sorted = sorted(self.cpu, key=lambda c: (c[0], -c[1], c[2]))
        all_sorted = sorted(self.cpu + self.gpu, key=lambda c: (c[0], -c[1], c[2]))
        all_events = [c[3] for c in all_sorted]
        result = EventList(all_events, use_device=use_device,
                           profile_memory=bool(self.meta.get("profile_memory")) or bool(self.memory),
                           with_flops=with_flops or self.has_flops_arg)
        result._populate_cpu_children()
        self._assign_scopes(cpu_sorted)
        self._drop_nested_computed_flops(cpu_sorted)
        self._resolve_pending()
        self._finish_memory(cpu_sorted)
        result._remove_dup_nodes()
        self._set_backward_stacks(result)
        result._tree_built = True
        return result

    def _parse_complete(self, index: int, ev: dict, flops_fn: Optional[Callable]) -> None:
        raw_cat = ev.get("cat")
        cat_l = raw_cat.lower() if type(raw_cat) is str else ""
        cat = _CPU_CATS.get(cat_l)
        is_gpu = False
        if cat is None:
            cat = _GPU_CATS.get(cat_l)
            if cat is None:
                if cat_l == "trace" and self.origin_ns is None and "ts" in ev:
                    self.origin_ns = _to_ns(ev.get("ts"), "ts", index)
                return
            is_gpu = True
        name = ev.get("name")
        if type(name) is not str:
            name = "" if name is None else str(name)
        if name in _FILTERED_NAMES:
            return
        start = _to_ns(ev.get("ts"), "ts", index)
        dur = ev.get("dur", 0)
        dur = round(dur * 1000) if type(dur) is float else _to_ns(dur, "dur", index)
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
        ext = args.get("External id")
        if type(ext) is not int:
            ext = _int_arg(args, "External id", "external id", default=0)
        if is_gpu:
            self._add_gpu(cat, name, start, dur, index, pid, tid, ext, args)
            return
        dims = args.get("Input Dims")
        flops = 0
        computed = False
        if "flops" in args:
            flops = _int_arg(args, "flops", default=0)
            self.has_flops_arg = self.has_flops_arg or flops > 0
        elif flops_fn is not None and cat == "cpu_op" and type(dims) is list:
            try:
                flops = int(flops_fn(name, dims, args.get("Concrete Inputs")) or 0)
            except Exception:  # noqa: BLE001 - a bad formula must not break the analysis
                flops = 0
            computed = flops > 0
        call_stack = args.get("Call stack")
        seq = args.get("Sequence number", -1)
        if type(seq) is not int:
            seq = _int_arg(args, "Sequence number")
        fwd = args.get("Fwd thread id")
        if fwd is not None and type(fwd) is not int:
            fwd = _int_arg(args, "Fwd thread id", default=-1)
        fe = FunctionEvent(
            ext, "ProfilerStep*" if name.startswith("ProfilerStep#") else name, tid, 0.0, 0.0,
            name, _input_shapes(dims) if dims is not None else [],
            self._stack(call_stack) if call_stack else [], DeviceType.CPU, pid, tid,
            fwd_thread=fwd if fwd is None or fwd >= 0 else None,
            concrete_inputs=args.get("Concrete Inputs"),
            scope=_SCOPE_USER if cat == "user_annotation" else 0,
            sequence_nr=seq, flops=flops if flops > 0 else 0,
            is_user_annotation=cat == "user_annotation", activity_type=cat, external_id=ext,
        )
        if dims is not None:
            fe.structured_input_shapes = dims
            fe.structured_input_strides = args.get("Input Strides")
            fe.input_dtypes = args.get("Input type")
        if cat == "python_function":
            fe.is_python_function = True
            fe.python_id = _int_arg(args, "Python id")
            fe.python_parent_id = _int_arg(args, "Python parent id")
            fe.python_module_id = _int_arg(args, "Python module id")
            if not ext:
                fe.id = fe.python_id if fe.python_id >= 0 else 0
        elif cat in ("cuda_runtime", "cuda_driver"):
            fe.linked_correlation_id = ext
            corr = _int_arg(args, "correlation")
            if corr >= 0:
                self.runtime_by_corr[corr] = fe
        if computed:
            self.computed_flops.add(id(fe))
        self.cpu.append((start, start + dur, index, fe))

    def _add_gpu(self, cat: str, name: str, start: int, dur: int, index: int, pid: int, tid: int,
                 ext: int, args: dict) -> None:
        self.has_gpu = True
        device = _int_arg(args, "device", default=pid)
        stream = _int_arg(args, "stream", default=tid)
        fe = FunctionEvent(ext, name, stream, 0.0, 0.0, name, None, None, DeviceType.CUDA, device, stream,
                           is_user_annotation=cat == "gpu_user_annotation", activity_type=cat,
                           external_id=ext)
        fe.linked_correlation_id = ext
        meta = {k: args[k] for k in _KERNEL_META_KEYS if k in args}
        if meta:
            fe.event_metadata = meta
        self.gpu.append((start, start + dur, index, fe))
        if cat != "gpu_user_annotation":
            self.gpu_corr.append((fe, _int_arg(args, "correlation"), ext))

    def _parse_memory(self, index: int, ev: dict) -> None:
        args = ev.get("args")
        if not isinstance(args, dict):
            return
        nbytes = _int_arg(args, "Bytes", default=0)
        self.memory.append((
            _to_ns(ev.get("ts"), "ts", index), self._ident(ev.get("pid", 0)),
            self._ident(ev.get("tid", 0)), nbytes, _int_arg(args, "Device Type", default=0), index,
        ))

    # -- linking ---------------------------------------------------------------------
    def _link_gpu(self) -> None:
        """Attach each GPU activity to its launching op: External id, else via the runtime call."""
        frontend: dict[int, list] = {}
        for _s, _e, _o, fe in self.cpu:
            if fe.external_id and fe.activity_type in ("cpu_op", "user_annotation"):
                frontend.setdefault(fe.external_id, []).append(fe)
        self._pending_by_runtime: list[tuple] = []
        for gpu_evt, corr, ext in self.gpu_corr:
            duration = gpu_evt.time_range.end - gpu_evt.time_range.start
            owners = frontend.get(ext) if ext else None
            if owners is None and corr >= 0:
                runtime = self.runtime_by_corr.get(corr)
                if runtime is not None:
                    if runtime.external_id and runtime.external_id in frontend:
                        owners = frontend[runtime.external_id]
                    else:
                        # Resolved after nesting: the runtime call's innermost enclosing op.
                        self._pending_by_runtime.append((runtime, gpu_evt, duration))
                        continue
            for owner in owners or ():
                owner.append_kernel(gpu_evt.name, gpu_evt.device_index, duration)

    def _resolve_pending(self) -> None:
        for runtime, gpu_evt, duration in self._pending_by_runtime:
            parent = runtime.cpu_parent
            while parent is not None and parent.activity_type not in ("cpu_op", "user_annotation"):
                parent = parent.cpu_parent
            if parent is not None:
                parent.append_kernel(gpu_evt.name, gpu_evt.device_index, duration)

    def _attribute_memory(self, use_device: Optional[str]) -> None:
        """Give each [memory] record's bytes to the innermost CPU event of its thread at its ts."""
        self._mem_self: dict[int, list] = {}
        self._unattributed: list[tuple] = []
        if not self.memory:
            return
        by_thread: dict[tuple, list] = {}
        for c in self.cpu:
            by_thread.setdefault((c[3].device_index, c[3].thread), []).append(c)
        mem_by_thread: dict[tuple, list] = {}
        for m in self.memory:
            mem_by_thread.setdefault((m[1], m[2]), []).append(m)
        for key, records in mem_by_thread.items():
            records.sort()
            events = sorted(by_thread.get(key, ()), key=lambda c: (c[0], -c[1], c[2]))
            starts = [c[0] for c in events]
            stack: list[tuple] = []
            pos = 0
            for rec in records:
                ts = rec[0]
                limit = bisect.bisect_right(starts, ts)
                while pos < limit:
                    c = events[pos]
                    while stack and (c[0] >= stack[-1][1] or c[1] > stack[-1][1]):
                        stack.pop()
                    stack.append(c)
                    pos += 1
                while stack and stack[-1][1] < ts:
                    stack.pop()
                if stack:
                    slot = self._mem_self.setdefault(id(stack[-1][3]), [stack[-1][3], 0, 0])
                    if rec[4] in _CPU_MEM_DEVICES:
                        slot[1] += rec[3]
                    elif rec[4] in _GPU_MEM_DEVICES:
                        slot[2] += rec[3]
                else:
                    self._unattributed.append(rec)
        origin = self.origin_ns or 0
        max_id = max((c[3].id for c in self.cpu if isinstance(c[3].id, int)), default=0)
        for rec in self._unattributed:
            max_id += 1
            t = (rec[0] - origin) / 1000
            fe = FunctionEvent(
                max_id, "[memory]", rec[2], t, t, device_index=rec[1], use_device=use_device,
                cpu_memory_usage=rec[3] if rec[4] in _CPU_MEM_DEVICES else 0,
                device_memory_usage=rec[3] if rec[4] in _GPU_MEM_DEVICES else 0,
                activity_type="memory",
            )
            self.cpu.append((rec[0], rec[0], rec[5], fe))

    def _finish_memory(self, cpu_sorted: list) -> None:
        """Inclusive memory = own records + children's inclusive (post-order over the tree)."""
        if not self._mem_self:
            return
        for fe, cpu_bytes, dev_bytes in self._mem_self.values():
            fe.cpu_memory_usage += cpu_bytes
            fe.device_memory_usage += dev_bytes
        # Children start at or after their parent: reverse start order is a valid post-order.
        for _s, _e, _o, fe in reversed(cpu_sorted):
            parent = fe.cpu_parent
            if parent is not None and fe.activity_type != "memory":
                parent.cpu_memory_usage += fe.cpu_memory_usage
                parent.device_memory_usage += fe.device_memory_usage

    def _assign_scopes(self, cpu_sorted: list) -> None:
        """Mark autograd node calls with torch's BACKWARD_FUNCTION scope.

        A node (``MmBackward0``, ``torch::autograd::AccumulateGrad``...) is the op run directly
        inside ``autograd::engine::evaluate_function: <its name>``.
        """
        prefix = "autograd::engine::evaluate_function: "
        for _s, _e, _o, fe in cpu_sorted:
            parent = fe.cpu_parent
            if (parent is not None and fe.activity_type == "cpu_op"
                    and parent.name.startswith(prefix) and parent.name[len(prefix):] == fe.name):
                fe.scope = _SCOPE_BACKWARD

    def _drop_nested_computed_flops(self, cpu_sorted: list) -> None:
        """A computed-FLOPs op with FLOP-counting ops below it (aten::matmul over aten::mm) gets 0.

        torch counts only the leaf kernels' ops; counting a composite op too would double count.
        FLOPs recorded in the trace (``"flops"`` args) are left as they are.
        """
        if not self.computed_flops:
            return
        below: dict[int, bool] = {}
        for _s, _e, _o, fe in reversed(cpu_sorted):
            has = below.get(id(fe), False)
            if has and id(fe) in self.computed_flops:
                fe.flops = 0
            if fe.cpu_parent is not None and (has or fe.flops > 0):
                below[id(fe.cpu_parent)] = True

    def _set_backward_stacks(self, events: EventList) -> None:
        """Ops inside a backward node take the stack of the forward op with the same sequence nr."""
        if not any(e.stack for e in events):
            return
        thread_index: dict[tuple, int] = {}
        for e in events:
            if e.device_type == DeviceType.CPU:
                thread_index.setdefault((e.device_index, e.thread), len(thread_index) + 1)

        def bw_parent(evt: Optional[FunctionEvent]) -> Optional[FunctionEvent]:
            while evt is not None and evt.scope != _SCOPE_BACKWARD:
                evt = evt.cpu_parent
            return evt

        fwd_stacks: dict[tuple, list] = {}
        parents = {}
        for e in events:
            p = bw_parent(e)
            parents[id(e)] = p
            if p is None and e.device_type == DeviceType.CPU:
                fwd_stacks.setdefault((e.sequence_nr, thread_index[(e.device_index, e.thread)]), e.stack)
        for e in events:
            p = parents[id(e)]
            if p is not None:
                e.stack = fwd_stacks.get((p.sequence_nr, p.fwd_thread), [])
