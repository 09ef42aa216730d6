"""One parallelism plan for reading traces: `plan(cores, size, native)` decides the plugin's load threads and
processes, the parser processes of one trace, the native reader's scan threads and whether views are warmed on
two threads; the settings GPUSCOPE_LOAD_THREADS, GPUSCOPE_LOAD_PROCESSES, GPUSCOPE_PARSE_PROCESSES and
GPUSCOPE_NATIVE_THREADS override its fields, here and nowhere else."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from profiler_core import settings

#: traces at least this big on disk are split across parser processes (smaller: the reading process alone)
PARALLEL_MIN_BYTES = 16 << 20

#: field -> the setting that overrides it
OVERRIDES = {
    "load_threads": "GPUSCOPE_LOAD_THREADS",
    "load_processes": "GPUSCOPE_LOAD_PROCESSES",
    "parse_processes": "GPUSCOPE_PARSE_PROCESSES",
    "scan_threads": "GPUSCOPE_NATIVE_THREADS",
}


@dataclass(frozen=True)
class Plan:
    load_threads: int  # files the plugin reads at once in threads (without load processes)
    load_processes: int  # plugin processes that parse different trace files at once
    parse_processes: int  # extra processes that parse one trace in byte ranges
    scan_threads: int  # native reader threads scanning pieces beside the reading thread
    warm_two_threads: bool  # a big trace's first views warmed on two threads
    overridden: frozenset[str] = frozenset()  # the fields a setting set


def default_plan(cores: int, size: int, native: bool) -> Plan:
    """The plan without settings, for `cores` cores, a trace of `size` bytes on disk and whether the native reader
    is built and on: 2 load threads from 2 cores with the native reader (its scan lets go of the GIL), else 1;
    half the cores as load processes, at most 4, from 4 cores, else 0; cores - 1 parser processes, at most 3, for
    a trace of PARALLEL_MIN_BYTES or more, else 0; cores - 1 scan threads, at most 4; warming on two threads from
    2 cores."""
    cores = max(1, cores)
    return Plan(
        load_threads=2 if cores >= 2 and native else 1,
        load_processes=min(4, cores // 2) if cores >= 4 else 0,
        parse_processes=max(0, min(3, cores - 1)) if size >= PARALLEL_MIN_BYTES else 0,
        scan_threads=max(0, min(4, cores - 1)),
        warm_two_threads=cores >= 2,
    )


def plan(cores: int, size: int, native: bool) -> Plan:
    """`default_plan` with each field whose setting is set replaced by it (listed in `overridden`)."""
    base = default_plan(cores, size, native)
    set_ = {f: settings.get(name) for f, name in OVERRIDES.items()}
    set_ = {f: max(0, v) for f, v in set_.items() if v is not None}
    return dataclasses.replace(base, **set_, overridden=frozenset(set_))


def here(native: bool, size: int = PARALLEL_MIN_BYTES) -> Plan:
    """`plan` for this machine's cores; `native`: whether the native reader reads here (`native.enabled()`, which
    the caller asks: this module imports no reader)."""
    return plan(os.cpu_count() or 1, size, native)
