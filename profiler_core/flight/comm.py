"""Time inside collectives, and the few numbers the ranks exchange for the cross-rank rule.

Sources, looked up once when the recorder starts: mpi4py through the existing integration
(`profiler_core.integrations.mpi.start_timing`: the same wrappers a profile installs, counting the time inside
every communication call and request wait, recording nothing unless a profile records); torch.distributed through
its public functions (`torch.distributed.all_reduce`, `all_gather`, ... wrapped in the module while the recorder
runs, synchronous calls and the `wait()` of the work they return), which sees what the program calls itself, and
for DDP, whose all-reduces are issued from C++, its public communication hook (`Recorder.ddp_comm_hook()`: launch
to completion of each bucket's all-reduce). A job with none has no collective time and no exchange.

The exchange (`Exchange.allgather`): every N steps each rank sends N floats (its steps' time outside collectives)
and receives everybody's, through the hooked communicator's own unwrapped call, so it is neither counted as the
program's communication nor recorded in a capture's trace.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import numpy as np

#: the torch.distributed functions timed (public API; those missing in a torch version are skipped)
TORCH_COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_to_all",
    "all_to_all_single",
    "broadcast",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "gather",
    "scatter",
    "barrier",
    "send",
    "recv",
)


class CommClock:
    """A running total of ns spent in collectives (`ns()`), from mpi4py or torch.distributed; `name` says which
    ("" when none is hooked)."""

    def __init__(self) -> None:
        self.name = ""
        self._mpi: Any = None
        self._torch: Any = None
        self._torch_saved: dict[str, Any] = {}
        self._torch_ns = [0]

    def start(self, want: str = "auto") -> str:
        """Hook the communication library (`want`: auto, mpi4py, torch or none); the name of the one hooked."""
        if want in ("auto", "mpi4py") and "mpi4py.MPI" in sys.modules:
            from profiler_core.integrations import mpi

            if mpi.start_timing():
                self._mpi = mpi
                self.name = "mpi4py"
                return self.name
        if want in ("auto", "torch"):
            dist = sys.modules.get("torch.distributed")
            try:
                ok = dist is not None and dist.is_available() and dist.is_initialized()
            except Exception:
                ok = False
            if ok:
                self._hook_torch(dist)
                self.name = "torch.distributed"
        return self.name

    def _hook_torch(self, dist: Any) -> None:
        counter = self._torch_ns
        perf = time.perf_counter_ns

        class _TimedWork:
            """The work of an async collective: its wait() counts as time in collectives."""

            def __init__(self, work: Any) -> None:
                self._work = work

            def wait(self, *a: Any, **k: Any) -> Any:
                t0 = perf()
                try:
                    return self._work.wait(*a, **k)
                finally:
                    counter[0] += perf() - t0

            def __getattr__(self, name: str) -> Any:
                return getattr(self._work, name)

        def wrap(fn: Any) -> Any:
            def timed(*a: Any, **k: Any) -> Any:
                t0 = perf()
                try:
                    out = fn(*a, **k)
                finally:
                    counter[0] += perf() - t0
                return _TimedWork(out) if k.get("async_op") and out is not None else out

            timed.__wrapped__ = fn  # type: ignore[attr-defined]
            timed.__name__ = getattr(fn, "__name__", "collective")
            timed.__doc__ = getattr(fn, "__doc__", None)
            return timed

        for name in TORCH_COLLECTIVES:
            fn = getattr(dist, name, None)
            if fn is not None:
                self._torch_saved[name] = fn
                setattr(dist, name, wrap(fn))
        self._torch = dist

    def ddp_hook(self) -> Any:
        """A DDP communication hook (`model.register_comm_hook(None, hook)`, torch's public hook) that all-reduces
        each gradient bucket as DDP's default hook does and counts the time from its launch to its completion (a
        `then` callback on its future: nothing waits for it) as time in collectives. DDP issues its all-reduces
        from C++, out of reach of the function wrappers: this is how a DDP program's communication is timed."""
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        counter, lock, perf = self._torch_ns, threading.Lock(), time.perf_counter_ns

        def hook(state: Any, bucket: Any) -> Any:
            t0 = perf()
            fut = allreduce_hook(state, bucket)

            def done(f: Any) -> Any:
                with lock:  # runs on the communication library's thread
                    counter[0] += perf() - t0
                return f.value()

            return fut.then(done)

        import torch
        import torch.distributed as dist

        # DDP checks a hook's annotations: the real types, not this module's postponed strings
        hook.__annotations__ = {
            "state": object,
            "bucket": dist.GradBucket,
            "return": torch.futures.Future[torch.Tensor],
        }
        return hook

    def ns(self) -> int:
        if self._mpi is not None:
            return self._mpi.comm_ns()
        return self._torch_ns[0]

    def stop(self) -> None:
        if self._mpi is not None:
            self._mpi.stop_timing()
            self._mpi = None
        if self._torch is not None:
            for name, fn in self._torch_saved.items():
                if getattr(getattr(self._torch, name, None), "__wrapped__", None) is fn:
                    setattr(self._torch, name, fn)
            self._torch_saved.clear()
            self._torch = None


def _let_go(*tensors: Any, limit_s: float = 2.0) -> None:
    """Return once gloo's worker thread has dropped its references to these tensors (their use count back to
    Python's one), the GIL released meanwhile. That thread takes the GIL to let go of a tensor Python made; if it
    were still waiting for it when the program destroys the process group (whose destructor joins that thread with
    the GIL held, as when a DDP model is freed), the process would hang at exit. Bounded: never blocks the job."""
    end = time.monotonic() + limit_s
    while any(t._use_count() > 1 for t in tensors) and time.monotonic() < end:
        time.sleep(0.0002)


class Exchange:
    """Everybody's last N numbers: `allgather(values) -> (world, N) array`, or None where no communicator is
    hooked (then the cross-rank rule is skipped, and the header says why)."""

    def __init__(self, kind: str, comm: Any = None) -> None:
        self.kind = kind
        self.comm = comm
        self.rank, self.world = 0, 1
        if kind == "mpi4py":
            from mpi4py import MPI

            self.comm = comm if comm is not None else MPI.COMM_WORLD
            self.rank, self.world = self.comm.Get_rank(), self.comm.Get_size()
            from profiler_core.integrations import mpi

            self._allgather = mpi.original(self.comm, "Allgather")
        elif kind == "torch.distributed":
            import torch.distributed as dist  # the program imported it: `kind` says so

            self._dist = dist
            self._gather = getattr(dist.all_gather, "__wrapped__", dist.all_gather)
            self.rank, self.world = dist.get_rank(), dist.get_world_size()

    def allgather(self, values: np.ndarray) -> np.ndarray | None:
        send = np.ascontiguousarray(values, np.float64)
        if self.kind == "mpi4py":
            recv = np.empty((self.world, len(send)), np.float64)
            self._allgather(self.comm, send, recv)
            return recv
        if self.kind == "torch.distributed":
            import torch

            t = torch.from_numpy(send)
            parts = [torch.empty_like(t) for _ in range(self.world)]
            self._gather(parts, t)
            out = np.stack([p.numpy() for p in parts])
            _let_go(t, *parts)
            return out
        return None
