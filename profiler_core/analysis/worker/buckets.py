"""The ledger's buckets: their names in priority order (`ledger` defines each), labels and usual fixes. Imports
nothing, so a summary can be validated without the analysis."""

from __future__ import annotations

COMPUTE = "compute"
COPY_PAGEABLE = "exposed_copy_pageable"
COPY_PINNED = "exposed_copy_pinned"
SYNC_SKEW = "sync_skew"
EXPOSED_COMM = "exposed_comm"
PIPELINE_BUBBLE = "pipeline_bubble"
START_UP = "start_up"
DATA_LOADING = "data_loading"
HOST_SYNC = "host_sync"
LAUNCH_OVERHEAD = "launch_overhead"
HOST_COMPUTE = "host_compute"
OTHER = "other"
#: the buckets in priority order (ledger.py's docstring defines each)
BUCKETS = (
    COMPUTE,
    COPY_PAGEABLE,
    COPY_PINNED,
    SYNC_SKEW,
    EXPOSED_COMM,
    PIPELINE_BUBBLE,
    START_UP,
    DATA_LOADING,
    HOST_SYNC,
    LAUNCH_OVERHEAD,
    HOST_COMPUTE,
    OTHER,
)
LABELS = {
    COMPUTE: "Compute (kernels)",
    COPY_PAGEABLE: "Exposed memory copies (pageable)",
    COPY_PINNED: "Exposed memory copies (pinned, device, memset)",
    SYNC_SKEW: "Waiting for other ranks (sync skew)",
    EXPOSED_COMM: "Exposed communication",
    PIPELINE_BUBBLE: "Pipeline bubble (a stage waits for its neighbour's send/recv)",
    START_UP: "One-time CUDA start-up (context creation, module loading)",
    DATA_LOADING: "Data loading (GPU idle)",
    HOST_SYNC: "Host synchronization (GPU idle)",
    LAUNCH_OVERHEAD: "Kernel launch overhead (GPU idle)",
    HOST_COMPUTE: "CPU-bound (GPU idle while the host computes)",
    OTHER: "Other (nothing recorded)",
}
#: the labels of a job without a GPU (`ledger.ranked` where compute's reason is that the trace has no GPU activity):
#: there is no GPU to be idle, and the host's computing is the work itself
CPU_ONLY_LABELS = {
    **LABELS,
    DATA_LOADING: "Data loading",
    HOST_SYNC: "Host synchronization",
    LAUNCH_OVERHEAD: "Kernel launch overhead",
    HOST_COMPUTE: "CPU compute (no GPU in the trace)",
}
FIXES = {
    COMPUTE: "Faster kernels: mixed precision (Tensor Cores), fused or better-tuned kernels, less work per step.",
    COPY_PAGEABLE: "Copy from pinned memory with non_blocking=True (DataLoader pin_memory=True) so copies overlap "
    "compute instead of blocking it.",
    COPY_PINNED: "Overlap the copies with compute on another stream, or avoid them (keep tensors on the device).",
    SYNC_SKEW: "Balance the work of the ranks: find the rank that arrives last at the collectives (critical path, "
    "stragglers) and remove its extra work.",
    EXPOSED_COMM: "Overlap communication with compute (DDP bucketing, FSDP prefetch), or communicate less "
    "(gradient accumulation, compression, larger batches).",
    PIPELINE_BUBBLE: "Shrink the pipeline bubble: more micro-batches per step (the bubble is about "
    "(p - 1) / (m + p - 1) of a step for p stages and m micro-batches), an interleaved schedule (several virtual "
    "stages per rank), and stages balanced in time (move layers off the slowest stage: the Pipeline view shows "
    "which one the others wait for).",
    START_UP: "A one-time cost of the process's first CUDA calls, not of the steps that follow: profile after warm-up "
    "(torch.profiler.schedule with wait and warmup steps) to see the steady state, and initialise CUDA (a warm-up "
    "iteration) before the work you time.",
    DATA_LOADING: "Load data in parallel processes (DataLoader num_workers > 0, persistent_workers, prefetching).",
    HOST_SYNC: "Remove synchronizations from the step (.item(), .cpu(), .tolist(), printing tensors, blocking "
    "copies, torch.cuda.synchronize).",
    LAUNCH_OVERHEAD: "Launch fewer, larger kernels: CUDA graphs, torch.compile, fused ops.",
    HOST_COMPUTE: "Move CPU work out of the step or onto the GPU; a larger batch gives the GPU more work per launch.",
    OTHER: "Time with nothing recorded: work outside the profiler's view (other processes, unrecorded threads).",
}
#: the fixes that differ for a job that already replays CUDA graphs (a graph launch in the trace): CUDA graphs are
#: not news to it, the launches left outside its graphs are
FIXES_WITH_GRAPHS = {
    LAUNCH_OVERHEAD: "Launch fewer, larger kernels: the job already replays graphs, so capture the work it still "
    "launches outside them, or fuse it (torch.compile, fused ops).",
}


def fix_of(bucket: str, graph_launches: bool = False) -> str:
    """The bucket's usual fix; `graph_launches`: the job replays CUDA graphs (never told to use them)."""
    return FIXES_WITH_GRAPHS.get(bucket, FIXES[bucket]) if graph_launches else FIXES[bucket]
