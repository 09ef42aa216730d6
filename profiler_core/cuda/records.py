"""The plain-record vocabulary shared by the capture backends and the converter.

A raw record is a dict keyed by cupti-python's property names (`start`, `end`, `correlation_id`, ...) plus
`kind`, the ActivityKind name as a string (e.g. "CONCURRENT_KERNEL"). API records also carry `name` (the
callback name). The enum values below are CUPTI's (cupti_activity.h), so records can be written and read
without cupti installed.
"""

from __future__ import annotations

KERNEL_KINDS = ("CONCURRENT_KERNEL", "KERNEL")
API_KINDS = ("RUNTIME", "DRIVER")
ALL_KINDS = (
    "CONCURRENT_KERNEL",
    "MEMCPY",
    "MEMSET",
    "RUNTIME",
    "DRIVER",
    "SYNCHRONIZATION",
    "MEMORY2",
    "EXTERNAL_CORRELATION",
    "OVERHEAD",
)

# CUpti_ActivityMemcpyKind -> Kineto's short names.
MEMCPY_KIND = {
    0: "Unknown",
    1: "HtoD",
    2: "DtoH",
    3: "HtoA",
    4: "AtoH",
    5: "AtoA",
    6: "AtoD",
    7: "DtoA",
    8: "DtoD",
    9: "HtoH",
    10: "PtoP",
}
# CUpti_ActivityMemoryKind -> Kineto's names.
MEMORY_KIND = {
    0: "Unknown",
    1: "Pageable",
    2: "Pinned",
    3: "Device",
    4: "Array",
    5: "Managed",
    6: "Device Static",
    7: "Managed Static",
}
# CUpti_ActivitySynchronizationType -> Kineto's cuda_sync event names.
SYNC_TYPE = {0: "Unknown Sync", 1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}
# CUpti_ActivityMemoryOperationType (MEMORY2 records).
MEMORY_OP_ALLOCATION = 1
MEMORY_OP_RELEASE = 2
# CUpti_ActivityOverheadKind.
OVERHEAD_KIND = {
    0: "Unknown",
    1: "Driver Compiler",
    1 << 16: "Buffer Flush",
    2 << 16: "Instrumentation",
    3 << 16: "Resource",
    4 << 16: "Runtime Triggered Module Loading",
    5 << 16: "Lazy Function Loading",
    6 << 16: "Command Buffer Full",
    7 << 16: "Activity Buffer Request",
    8 << 16: "UVM Activity Init",
}
# CUpti_ExternalCorrelationKind (cupti_activity.h; cupti-python's ExternalCorrelationKind): Kineto uses
# CUSTOM0 for CPU ops and CUSTOM1 for user annotations.
EXTERNAL_KIND_UNKNOWN = 1
EXTERNAL_KIND_OPENACC = 2
EXTERNAL_KIND_CUSTOM0 = 3
EXTERNAL_KIND_CUSTOM1 = 4
EXTERNAL_KIND_CUSTOM2 = 5
INVALID_STREAM = 0xFFFFFFFF

# The fields each kind's backend copies out of a cupti record (everything the converter reads).
FIELDS = {
    "CONCURRENT_KERNEL": (
        "start",
        "end",
        "queued",
        "submitted",
        "device_id",
        "context_id",
        "stream_id",
        "correlation_id",
        "grid_x",
        "grid_y",
        "grid_z",
        "block_x",
        "block_y",
        "block_z",
        "registers_per_thread",
        "static_shared_memory",
        "dynamic_shared_memory",
        "local_memory_per_thread",
        "launch_type",
        "graph_id",
        "graph_node_id",
        "channel_id",
        "name",
    ),
    "MEMCPY": (
        "start",
        "end",
        "bytes",
        "copy_kind",
        "src_kind",
        "dst_kind",
        "device_id",
        "context_id",
        "stream_id",
        "correlation_id",
        "graph_id",
        "graph_node_id",
    ),
    "MEMSET": (
        "start",
        "end",
        "bytes",
        "value",
        "memory_kind",
        "device_id",
        "context_id",
        "stream_id",
        "correlation_id",
        "graph_id",
        "graph_node_id",
    ),
    "RUNTIME": ("start", "end", "cbid", "process_id", "thread_id", "correlation_id", "return_value"),
    "DRIVER": ("start", "end", "cbid", "process_id", "thread_id", "correlation_id", "return_value"),
    "SYNCHRONIZATION": ("start", "end", "type", "context_id", "stream_id", "correlation_id", "cuda_event_id"),
    "MEMORY2": (
        "memory_operation_type",
        "memory_kind",
        "address",
        "bytes",
        "timestamp",
        "device_id",
        "context_id",
        "stream_id",
        "correlation_id",
        "process_id",
        "is_async",
    ),
    "EXTERNAL_CORRELATION": ("external_kind", "external_id", "correlation_id"),
    "OVERHEAD": ("overhead_kind", "object_kind", "start", "end"),
}
