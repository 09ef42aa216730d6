"""Post-processing of the CPU tree in events_from_trace: scopes, FLOPs de-duplication, stacks."""

from __future__ import annotations

from .events import DeviceType, FunctionEvent

__all__ = ["assign_scopes", "drop_nested_computed_flops", "set_backward_stacks", "SCOPE_BACKWARD", "SCOPE_USER"]

SCOPE_BACKWARD = 1  # at::RecordScope::BACKWARD_FUNCTION
SCOPE_USER = 7  # at::RecordScope::USER_SCOPE
_EVALUATE = "autograd::engine::evaluate_function: "


def assign_scopes(cpu_sorted: list) -> None:
    """Mark autograd node calls with torch's BACKWARD_FUNCTION scope.

    A node (``MmBackward0``, ``torch::autograd::AccumulateGrad``...) is the op run directly
    inside ``autograd::engine::evaluate_function: <its name>``.
    """
    for _s, _e, _o, fe in cpu_sorted:
        parent = fe.cpu_parent
        if (
            parent is not None
            and fe.activity_type == "cpu_op"
            and parent.name.startswith(_EVALUATE)
            and parent.name[len(_EVALUATE) :] == fe.name
        ):
            fe.scope = SCOPE_BACKWARD


def drop_nested_computed_flops(cpu_sorted: list, computed: set) -> None:
    """A computed-FLOPs op with FLOP-counting ops below it (aten::matmul over aten::mm) gets 0.

    torch counts only the ops its formulas name, which are never nested in one another; counting
    a composite op too would double count. ``computed`` holds ids of events whose FLOPs we
    computed; FLOPs recorded in the trace (``"flops"`` args) are left as they are.
    """
    if not computed:
        return
    below: dict[int, bool] = {}
    for _s, _e, _o, fe in reversed(cpu_sorted):
        has = below.get(id(fe), False)
        if has and id(fe) in computed:
            fe.flops = 0
        if fe.cpu_parent is not None and (has or fe.flops > 0):
            below[id(fe.cpu_parent)] = True


def set_backward_stacks(events: list) -> None:
    """Ops inside a backward node take the stack of the forward op with the same sequence nr.

    torch keys forward stacks by (sequence nr, RecordFunction thread index); the trace has OS
    thread ids, so threads are numbered 1.. in order of first appearance, as torch numbers them.
    """
    if not any(e.stack for e in events):
        return
    thread_index: dict[tuple, int] = {}
    for e in events:
        if e.device_type == DeviceType.CPU:
            thread_index.setdefault((e.device_index, e.thread), len(thread_index) + 1)

    def bw_parent(evt: FunctionEvent | None) -> FunctionEvent | None:
        while evt is not None and evt.scope != SCOPE_BACKWARD:
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
