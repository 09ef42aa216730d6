"""The memory budget of a read: the measured cost of what the reader keeps (per event, per sparse arg) against
GPUSCOPE_MAX_LOADED_BYTES (default: 4 GiB, at most half the machine's memory), estimated before the body of a
trace is read (its uncompressed size from the gzip trailer or the file's size, and the events per JSON byte of
its first SAMPLE_BYTES), so that a trace that fits is read and one that does not is refused at once. While a
trace is read, its entries are counted against the same budget (`decode.max_trace_events`), so a trace whose
first events mislead the estimate (a gzip bomb of tiny events after a few big ones) is still stopped in time."""

from __future__ import annotations

import os
import re

from profiler_core import settings, storage

#: the default budget where the machine has the memory for it
DEFAULT_BUDGET = 4 << 30
#: share of the machine's physical memory the default budget takes at most
MACHINE_SHARE = 0.5

#: peak memory of a read per entry of traceEvents, without its sparse args: the columns kept (about 100-120 bytes
#: an event on the shared real traces: `trace_nbytes` / entries) and the sorting and merging copies of them. Peak
#: RSS growth of read_trace over entries, measured: V100 ResNet-50 x10 (`gen_real_big.py`, 757k entries)
#: 230-240 bytes (native and Python readers, 12% of them with kernel or copy args); the 11M-event trace 1.9 GB,
#: 173 bytes
EVENT_PEAK_BYTES = 224
#: peak memory per entry that carries sparse args (a kernel's launch shape and occupancy, a copy's bytes): 58
#: bytes kept per such row on the V100 trace (`TraceData.sparse`), and the copies made while they are built
SPARSE_ROW_PEAK_BYTES = 128

#: inflated bytes of a trace's start that the estimate samples (a trace no bigger is counted exactly instead)
SAMPLE_BYTES = 1 << 20

_HEAD = re.compile(rb'"traceEvents"\s*:\s*\[')
_SEP = re.compile(rb"\}\s*,\s*\{")
_SPARSE_KEYS = re.compile(rb'"(?:grid|bytes|Collective name)"\s*:')


def machine_memory() -> int | None:
    """Bytes of physical memory (None where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None


def memory_budget() -> int:
    """GPUSCOPE_MAX_LOADED_BYTES when set, else DEFAULT_BUDGET bounded by MACHINE_SHARE of the machine's memory."""
    explicit = settings.get("GPUSCOPE_MAX_LOADED_BYTES")
    if explicit is not None:
        return explicit
    memory = machine_memory()
    return DEFAULT_BUDGET if not memory else min(DEFAULT_BUDGET, int(memory * MACHINE_SHARE))


def cost(entries: float, sparse_rows: float = 0) -> int:
    """The peak memory a read of `entries` entries, `sparse_rows` of them with sparse args, takes (bytes)."""
    return int(entries * EVENT_PEAK_BYTES + sparse_rows * SPARSE_ROW_PEAK_BYTES)


def estimate(path: str) -> tuple[int, int] | None:
    """(entries, peak bytes) a read of the trace at `path` is estimated to take, from its uncompressed size and its
    first SAMPLE_BYTES of JSON; None when the file is no bigger than the sample (its count is exact anyway), has no
    event in it, or cannot be sampled (the read then says what is wrong)."""
    from profiler_core.trace.read.gunzip import GZIP_MAGIC, gunzip_blocks, uncompressed_size_hint

    try:
        total = uncompressed_size_hint(path)
        if total <= SAMPLE_BYTES:
            return None
        sample = b""
        with storage.open_read(path) as f:
            gz = f.read(2) == GZIP_MAGIC
            f.seek(0)
            blocks = gunzip_blocks(f, 1 << 16, max_out=1 << 18) if gz else iter(lambda: f.read(1 << 18), b"")
            for block in blocks:
                sample += block
                if len(sample) >= SAMPLE_BYTES:
                    break
    except Exception:  # noqa: BLE001 - not this function's to say: the read reports it
        return None
    m = _HEAD.search(sample)
    if m is None and not sample.lstrip().startswith(b"["):
        return None
    body = memoryview(sample)[m.end() if m is not None else sample.index(b"[") + 1 :]
    entries = len(_SEP.findall(body))
    if not entries:
        return None
    scale = total / len(body)
    n = entries * scale
    return int(n), cost(n, len(_SPARSE_KEYS.findall(body)) * scale)


def over_budget(path: str) -> str | None:
    """Why the trace at `path` cannot be read within the budget, decided before its body is read; None if it fits
    (or cannot be estimated)."""
    est = estimate(path)
    budget = memory_budget()
    if est is None or est[1] <= budget:
        return None
    entries, need = est
    return (
        f"{path}: trace of about {entries} events would take about {need >> 20} MiB to read, more than the memory "
        f"budget holds ({budget >> 20} MiB; raise GPUSCOPE_MAX_LOADED_BYTES to read it)"
    )
