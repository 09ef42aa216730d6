"""Linking steps of events_from_trace: GPU activities to their launching op, [memory] to ops.

Pure functions over the builder's entries ``(start_ns, end_ns, order, FunctionEvent)``.
"""

from __future__ import annotations

import bisect

from ..trace.categories import OP_CATS
from .events import FunctionEvent
from .intervals import holds

__all__ = [
    "link_gpu",
    "resolve_pending",
    "attribute_memory",
    "memory_events",
    "roll_up_memory",
    "CPU_MEM_DEVICES",
    "GPU_MEM_DEVICES",
]

CPU_MEM_DEVICES = (0, 2, 5)  # c10 DeviceType: CPU, MKLDNN, IDEEP
GPU_MEM_DEVICES = (1, 6, 12, 20)  # CUDA, HIP, XPU, PrivateUse1
_OWNER_KINDS = OP_CATS


def link_gpu(cpu_entries: list, gpu_links: list, runtime_by_corr: dict) -> list:
    """Attach each GPU activity to its launching op: its External id, else its runtime call's.

    ``gpu_links``: ``(gpu_event, correlation, external_id)``. Activities whose runtime call has
    no usable External id are returned as ``(runtime_event, gpu_event, duration)``, to be
    resolved by ``resolve_pending`` once the CPU tree is built.
    """
    owners_by_id: dict[int, list] = {}
    for _s, _e, _o, fe in cpu_entries:
        if fe.external_id and fe.activity_type in _OWNER_KINDS:
            owners_by_id.setdefault(fe.external_id, []).append(fe)
    pending = []
    for gpu_evt, corr, ext in gpu_links:
        duration = gpu_evt.time_range.end - gpu_evt.time_range.start
        owners = owners_by_id.get(ext) if ext else None
        if owners is None and corr >= 0:
            runtime = runtime_by_corr.get(corr)
            if runtime is not None:
                owners = owners_by_id.get(runtime.external_id) if runtime.external_id else None
                if owners is None:
                    pending.append((runtime, gpu_evt, duration))
                    continue
        for owner in owners or ():
            owner.append_kernel(gpu_evt.name, gpu_evt.device_index, duration)
    return pending


def resolve_pending(pending: list) -> None:
    """Give each pending activity to the innermost op or annotation enclosing its runtime call."""
    for runtime, gpu_evt, duration in pending:
        parent = runtime.cpu_parent
        while parent is not None and parent.activity_type not in _OWNER_KINDS:
            parent = parent.cpu_parent
        if parent is not None:
            parent.append_kernel(gpu_evt.name, gpu_evt.device_index, duration)


def attribute_memory(cpu_entries: list, records: list) -> tuple[dict, list]:
    """Find, per record ``(ts_ns, pid, tid, bytes, device_type, order)``, the innermost CPU event
    of its thread whose range holds ts (``intervals.holds``: [start, end), the op tree's rule).

    Returns ``({id(event): [event, cpu_bytes, device_bytes]}, unattributed_records)``.
    """
    owned: dict[int, list] = {}
    unattributed: list = []
    if not records:
        return owned, unattributed
    by_thread: dict[tuple, list] = {}
    for c in cpu_entries:
        by_thread.setdefault((c[3].device_index, c[3].thread), []).append(c)
    records_by_thread: dict[tuple, list] = {}
    for m in records:
        records_by_thread.setdefault((m[1], m[2]), []).append(m)
    for key, recs in records_by_thread.items():
        recs.sort()
        events = sorted(by_thread.get(key, ()), key=lambda c: (c[0], -c[1], c[2]))
        starts = [c[0] for c in events]
        stack: list[tuple] = []  # open events, nested as torch nests them
        pos = 0
        for rec in recs:
            ts = rec[0]
            limit = bisect.bisect_right(starts, ts)
            while pos < limit:
                c = events[pos]
                while stack and (c[0] >= stack[-1][1] or c[1] > stack[-1][1]):
                    stack.pop()
                stack.append(c)
                pos += 1
            while stack and not holds(stack[-1][0], stack[-1][1], ts):
                stack.pop()
            if not stack:
                unattributed.append(rec)
                continue
            owner = stack[-1][3]
            slot = owned.setdefault(id(owner), [owner, 0, 0])
            if rec[4] in CPU_MEM_DEVICES:
                slot[1] += rec[3]
            elif rec[4] in GPU_MEM_DEVICES:
                slot[2] += rec[3]
    return owned, unattributed


def memory_events(unattributed: list, origin_ns: int, first_id: int, use_device: str | None) -> list:
    """torch's top-level ``[memory]`` events for records no CPU event holds (as builder entries)."""
    out = []
    for n, rec in enumerate(unattributed, 1):
        t = (rec[0] - origin_ns) / 1000
        fe = FunctionEvent(
            first_id + n,
            "[memory]",
            rec[2],
            t,
            t,
            device_index=rec[1],
            use_device=use_device,
            cpu_memory_usage=rec[3] if rec[4] in CPU_MEM_DEVICES else 0,
            device_memory_usage=rec[3] if rec[4] in GPU_MEM_DEVICES else 0,
            activity_type="memory",
        )
        out.append((rec[0], rec[0], rec[5], fe))
    return out


def roll_up_memory(owned: dict, cpu_sorted: list) -> None:
    """Inclusive memory = own records + children's inclusive (post-order over the CPU tree)."""
    if not owned:
        return
    for fe, cpu_bytes, dev_bytes in owned.values():
        fe.cpu_memory_usage += cpu_bytes
        fe.device_memory_usage += dev_bytes
    # Children start at or after their parent: reverse (start, -end) order is a post-order.
    for _s, _e, _o, fe in reversed(cpu_sorted):
        parent = fe.cpu_parent
        if parent is not None and fe.activity_type != "memory":
            parent.cpu_memory_usage += fe.cpu_memory_usage
            parent.device_memory_usage += fe.device_memory_usage
