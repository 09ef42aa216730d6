"""``tensorboard_trace_handler``: an on_trace_ready callback writing traces into a TensorBoard logdir."""

from __future__ import annotations

import os
import socket
import time
import warnings
from collections.abc import Callable
from typing import Any


def default_worker_name() -> str:
    """The worker part of trace file names: distinfo's (rank-aware) name, else ``{hostname}_{pid}``."""
    from .distinfo import default_worker_name as from_distinfo

    try:
        name = from_distinfo()
    except Exception as e:  # noqa: BLE001 - an odd environment must not lose the trace
        warnings.warn(
            f"gpuscope: cannot name the worker from the distributed setup ({e}); using hostname_pid",
            RuntimeWarning,
            stacklevel=2,
        )
        name = None
    return str(name) if name else f"{socket.gethostname()}_{os.getpid()}"


def trace_file_name(worker_name: str, use_gzip: bool = False, time_ns: int | None = None) -> str:
    """torch's file name: ``{worker}.{time_ns}.pt.trace.json[.gz]``."""
    stamp = time.time_ns() if time_ns is None else time_ns
    return f"{worker_name}.{stamp}.pt.trace.json" + (".gz" if use_gzip else "")


def tensorboard_trace_handler(
    dir_name: str | os.PathLike, worker_name: str | None = None, use_gzip: bool = False
) -> Callable[[Any], None]:
    """Return an ``on_trace_ready`` callback that writes each trace into ``dir_name`` (created if needed).

    Files are named like torch's and written atomically. ``dir_name`` may be an fsspec URL
    (``s3://bucket/prefix``, ``gs://...``): each trace is then one whole object (see
    ``profiler_core.storage``). Errors (directory cannot be created, disk full, bucket missing)
    raise from the callback; the profiler turns them into a warning.
    """
    try:
        dir_name = os.fspath(dir_name)
    except TypeError:
        raise TypeError(
            f"tensorboard_trace_handler: dir_name must be a str or os.PathLike, "
            f"got {type(dir_name).__name__} {dir_name!r}"
        ) from None
    if isinstance(dir_name, bytes):
        dir_name = os.fsdecode(dir_name)
    if not dir_name:
        raise ValueError(f"tensorboard_trace_handler: dir_name must be a non-empty path, got {dir_name!r}")
    if worker_name is not None and (
        not isinstance(worker_name, str)
        or os.sep in worker_name
        or "\0" in worker_name
        or (os.altsep and os.altsep in worker_name)
    ):
        raise ValueError(f"tensorboard_trace_handler: worker_name must be a plain name, got {worker_name!r}")
    state = {"worker": worker_name}

    from . import storage

    def handler_fn(prof: Any) -> None:
        if storage.is_remote(dir_name):  # an fsspec URL (s3://bucket/prefix, ...): no local directory
            try:
                storage.makedirs(dir_name)
            except Exception as e:
                raise RuntimeError(f"Can't create directory: {storage.redact(dir_name)} ({e})") from None
        elif not os.path.isdir(dir_name):
            try:
                os.makedirs(dir_name, exist_ok=True)
            except Exception as e:
                raise RuntimeError(f"Can't create directory: {dir_name} ({e})") from e
        worker = state["worker"] or default_worker_name()
        state["worker"] = worker
        path = storage.join(dir_name, trace_file_name(worker, use_gzip))
        prof.export_chrome_trace(path)

    return handler_fn
