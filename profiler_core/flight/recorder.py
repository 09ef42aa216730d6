"""The flight recorder: per-step telemetry of every rank, always on, and a deep capture when a rule fires.

    rec = Recorder("log")            # beside the traces: log/{worker}.telemetry.jsonl
    for batch in loader_steps:
        with rec.data():             # optional: time waiting for data
            batch = next(it)
        loss = train_step(batch)
        with rec.optimizer():        # optional
            opt.step()
        rec.step()                   # once per step: closes this step's record
    rec.close()                      # or `with Recorder(...) as rec:`

What a step costs: a few clock reads, one `getrusage`, one device event recorded (on a GPU job), one `write`
of a ~120-byte line and, locally, one of its 73-byte binary record to the twin `{worker}.telemetry.bin` (the
reader's fast path; docs/flight-recorder.md has the measured figures). The device is never synchronised: GPU
times arrive in a later record (`device.StepTimer`).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

import numpy as np

from profiler_core import storage
from profiler_core.flight import device as events_of
from profiler_core.flight import format
from profiler_core.flight.comm import CommClock, Exchange
from profiler_core.flight.rules import LocalRules, RankRules, Rules, Trigger

try:
    import resource
except ImportError:  # not on Windows
    resource = None  # type: ignore[assignment]

#: the triggers' thresholds when none are given
DEFAULT_RULES = Rules()
#: a remote (fsspec) telemetry file is published whole at most this often (object stores cannot append)
REMOTE_FLUSH_S = 30.0
_RSS_SCALE = 1 / 1024 if sys.platform != "darwin" else 1 / 2**20  # ru_maxrss: KiB on Linux, bytes on macOS


def _usage() -> tuple[float, float]:
    """(process CPU time in ms, peak RSS in MiB) from one `getrusage` call (one system call a step)."""
    if resource is None:
        return time.process_time_ns() / 1e6, float("nan")
    u = resource.getrusage(resource.RUSAGE_SELF)
    return (u.ru_utime + u.ru_stime) * 1e3, u.ru_maxrss * _RSS_SCALE


#: step records held before one `write` to the binary twin: a killed job's last ones are missing there, and the
#: reader decodes those lines as JSON (the twin is a cache of the lines, never the only record)
BIN_BATCH = 64


class _LocalSink:
    """A local file opened for appending: each line is one `write`, so a killed job keeps every finished step. The
    step records also go, fixed-width, to the binary twin beside it (`format.BIN_SUFFIX`: the reader's fast path),
    written after their lines (so that the twin never holds a step the JSON file lacks), `BIN_BATCH` at a time."""

    def __init__(self, path: str, steps: int = 1) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.pos = os.fstat(self.fd).st_size  # where the next line starts (this process is the file's writer)
        self.bin_fd: int | None = None
        self.bin_held: list[bytes] = []  # records not written yet (at most BIN_BATCH - 1)
        try:
            self.bin_fd = os.open(path[: -len(format.SUFFIX)] + format.BIN_SUFFIX, os.O_WRONLY | os.O_CREAT, 0o644)
            os.ftruncate(self.bin_fd, 0)  # a twin from an earlier job would not match; the reader checks anyway
            os.write(self.bin_fd, format.bin_header())  # lines of an earlier job before ours: the reader sees
            # them uncovered by records and decodes the JSON
        except OSError:
            self.bin_fd = None  # the JSON file alone (the reader decodes it)
        self.flush = (
            "every step (one write per record to a file opened with O_APPEND)"
            if steps == 1
            else f"every {steps} steps (one write of their records to a file opened with O_APPEND)"
        )

    def write(self, line: bytes, steps: list[tuple[int, tuple]] | None = None) -> None:
        """Append `line` (one or more whole lines); `steps`: (length, `encode_step` arguments) of each step line
        in it, in order (the lines from its start), whose binary records then follow."""
        os.write(self.fd, line)
        if steps and self.bin_fd is not None:
            at = self.pos
            for n, args in steps:
                self.bin_held.append(format.encode_step_bin(at, n, *args))
                at += n
            if len(self.bin_held) >= BIN_BATCH:
                self._write_bin()
        self.pos += len(line)

    def _write_bin(self) -> None:
        if self.bin_fd is None or not self.bin_held:
            return
        try:
            os.write(self.bin_fd, b"".join(self.bin_held))
        except OSError:
            os.close(self.bin_fd)
            self.bin_fd = None
        self.bin_held.clear()

    def close(self) -> None:
        os.close(self.fd)
        self._write_bin()
        if self.bin_fd is not None:
            os.close(self.bin_fd)


class _RemoteSink:
    """An fsspec URL: the whole file is published again (one put, never a partial object) every
    `REMOTE_FLUSH_S` seconds and at close, from a background thread; a killed job loses at most that much."""

    def __init__(self, url: str, every_s: float = REMOTE_FLUSH_S) -> None:
        self.url = url
        self.flush = f"every {every_s:g} s (the whole object put again) and at close"
        self.buf = bytearray()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.dirty = False
        self.every_s = every_s
        self.thread = threading.Thread(target=self._loop, name="gpuscope-telemetry", daemon=True)
        self.thread.start()

    def write(self, line: bytes, steps: list[tuple[int, tuple]] | None = None) -> None:
        """Append `line` to the object's bytes (no binary twin: the object is put whole, and read whole)."""
        with self.lock:
            self.buf += line
            self.dirty = True

    def _publish(self) -> None:
        with self.lock:
            if not self.dirty:
                return
            data, self.dirty = bytes(self.buf), False
        try:
            with storage.atomic_writer(self.url) as f:
                f.write(data)
        except OSError as e:
            import warnings

            warnings.warn(
                f"gpuscope: telemetry not written to {storage.redact(self.url)}: {e}", RuntimeWarning, stacklevel=2
            )

    def _loop(self) -> None:
        while not self.stop.wait(self.every_s):
            self._publish()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self._publish()


class _Span:
    """A reusable context manager adding the time spent inside it to `ns` (cheaper than a generator's)."""

    __slots__ = ("ns", "t0")

    def __init__(self) -> None:
        self.ns = 0
        self.t0 = 0

    def __enter__(self) -> None:
        self.t0 = time.perf_counter_ns()

    def __exit__(self, *exc: Any) -> None:
        self.ns += time.perf_counter_ns() - self.t0


class _Capture:
    """A deep capture in progress: a profile with a schedule of one warm-up step and N recorded steps."""

    def __init__(self, step: int, n: int, out_dir: str, worker: str, tool: str, cuda: bool) -> None:
        self.at, self.left, self.tool = step, n + 1, tool
        if tool == "torch":
            import torch.profiler as tp  # the program is a torch program: `tool` says so

            acts = [tp.ProfilerActivity.CPU] + ([tp.ProfilerActivity.CUDA] if cuda else [])
            self.prof: Any = tp.profile(
                activities=acts,
                schedule=tp.schedule(wait=0, warmup=1, active=n, repeat=1),
                on_trace_ready=tp.tensorboard_trace_handler(out_dir, worker_name=worker),
                record_shapes=True,
            )
        else:
            from profiler_core.handlers import tensorboard_trace_handler
            from profiler_core.profiler import profile, supported_activities
            from profiler_core.schedule import ProfilerActivity, schedule

            acts = [ProfilerActivity.CPU]
            if cuda and ProfilerActivity.CUDA in supported_activities():
                acts.append(ProfilerActivity.CUDA)
            self.prof = profile(
                activities=acts,
                schedule=schedule(wait=0, warmup=1, active=n, repeat=1),
                on_trace_ready=tensorboard_trace_handler(out_dir, worker_name=worker),
                record_shapes=True,
            )
        self.prof.start()

    def step(self) -> bool:
        """One step ended; True once the capture is complete (its trace written) and stopped."""
        self.prof.step()
        self.left -= 1
        if self.left <= 0:
            self.prof.stop()
            return True
        return False


class Recorder:
    """Per-step telemetry of this rank, appended to `{logdir}/{worker}.telemetry.jsonl` (locally also, fixed-width,
    to its binary twin `{worker}.telemetry.bin`: the reader's fast path), and triggered captures into
    `{logdir}/capture_step{S:06d}/` (docs/flight-recorder.md).

    - `logdir`: a local folder or an fsspec URL (the traces' logdir).
    - `rules`: the triggers' thresholds (`Rules()`: the defaults; `None`: telemetry only, no capture).
    - `device`: "auto" (the library the program uses, looked up until one is initialised), "none", or an
      `profiler_core.flight.device.Events` object.
    - `comm`: "auto" (mpi4py if imported, else torch.distributed if initialised), "mpi4py", "torch" or "none";
      `communicator`: the mpi4py communicator of the exchange (default COMM_WORLD).
    - `capture`: "auto" (torch.profiler in a torch program, else gpuscope's profile), "gpuscope" or "torch".
    - `worker`: the file's worker name (default: the traces' `{host}_rank{NNNNN}`).
    - `flush_steps`: write the step records of a local file every this many steps (1: each step as it ends;
      a killed job loses at most the steps not written yet). Captures and the end are written at once.
    """

    def __init__(
        self,
        logdir: str | os.PathLike,
        rules: Rules | None = DEFAULT_RULES,
        *,
        device: Any = "auto",
        comm: str = "auto",
        communicator: Any = None,
        capture: str = "auto",
        worker: str | None = None,
        flush_steps: int = 1,
    ) -> None:
        if flush_steps < 1:
            raise ValueError(f"flush_steps must be at least 1, got {flush_steps}")
        if capture not in ("auto", "gpuscope", "torch"):
            raise ValueError(f"capture must be auto, gpuscope or torch, got {capture!r}")
        if comm not in ("auto", "mpi4py", "torch", "none"):
            raise ValueError(f"comm must be auto, mpi4py, torch or none, got {comm!r}")
        self.logdir = storage.normalize_root(os.fspath(logdir))
        self.rules = rules
        self.capture_tool = capture if capture != "auto" else ("torch" if "torch" in sys.modules else "gpuscope")
        self._clock = CommClock()
        self.comm = self._clock.start(comm) if comm != "none" else ""
        self.exchange: Exchange | None = None
        skip = ""
        if self.comm:
            try:
                self.exchange = Exchange(self.comm, communicator)
            except Exception as e:
                skip = f"no exchange through {self.comm} ({type(e).__name__}: {e})"
        else:
            skip = "no communicator hooked (mpi4py or torch.distributed): the slow-rank rule is skipped"
        from profiler_core.distinfo import distributed_info
        from profiler_core.handlers import default_worker_name

        info = distributed_info() or {}
        self.rank = self.exchange.rank if self.exchange else int(info.get("rank", 0))
        self.world = self.exchange.world if self.exchange else int(info.get("world_size", 1))
        if self.exchange is not None and self.world < 2:
            skip, self.exchange = "a single rank: no other rank to compare with", None
        self.worker = worker or default_worker_name()
        self._device_want = device
        self._events: events_of.Events | None = device if not isinstance(device, str) else None
        self._timer: events_of.StepTimer | None = None
        storage.makedirs(self.logdir)
        self.path = storage.join(self.logdir, self.worker + format.SUFFIX)
        self._sink: Any = _RemoteSink(self.path) if storage.is_remote(self.path) else _LocalSink(self.path, flush_steps)
        self._flush_steps = flush_steps
        self._held: list[bytes] = []
        self._held_args: list[tuple[int, tuple]] = []
        self._local = LocalRules(rules, self.rank) if rules else None
        self._ranks = RankRules(rules) if rules and self.exchange else None
        self.slow_rank_rule = "on" if self._ranks else f"skipped: {skip}" if rules else "off"
        self._work = np.zeros(rules.exchange_every if rules else 1)
        self._steps = np.zeros(len(self._work), np.int64)
        self._filled = 0
        self._last_local = self._last_cross = -(10**12)
        self.capture: _Capture | None = None
        self.captures: list[dict] = []
        self.step_num = 0
        self._data, self._opt = _Span(), _Span()
        self._epoch = time.time() - time.perf_counter_ns() / 1e9
        self._closed = False
        self._header()
        self._start_step()

    # --- the loop's calls ------------------------------------------------------------------------

    def data(self) -> _Span:
        """Around the loop's data loading (`with rec.data():`): its time is this step's data wait."""
        return self._data

    def optimizer(self) -> _Span:
        """Around the optimizer step (`with rec.optimizer():`): its time is this step's optimizer time."""
        return self._opt

    def ddp_comm_hook(self) -> Any:
        """For a DDP model: `model.register_comm_hook(None, rec.ddp_comm_hook())` times its gradient all-reduces
        (DDP's default all-reduce, launch to completion) as this rank's time in collectives (`comm.CommClock`)."""
        return self._clock.ddp_hook()

    def step(self) -> None:
        """This step ended: write its record, run the rules, drive a capture; the next step starts now."""
        end = time.perf_counter_ns()
        s = self.step_num
        wall = (end - self._t0) / 1e6
        cpu, rss = _usage()
        host = cpu - self._cpu0
        comm = (self._clock.ns() - self._comm0) / 1e6 if self.comm else None
        gpu = None
        if self._timer is None and self._device_want == "auto" and s % 16 == 0:  # a library may start late
            self._events = events_of.detect()
            if self._events is not None:
                self._device_want = self._events.name
        if self._timer is None and self._events is not None:
            self._timer = events_of.StepTimer(self._events)
            self._timer.start()  # GPU times start with the next step
        elif self._timer is not None:
            self._timer.boundary(s)
            gpu = self._timer.ready()
        dmem = self._events.peak_mib() if self._events is not None else None
        data = self._data.ns / 1e6
        args = (s, self._wall0, wall, data, host, rss, comm, self._opt.ns / 1e6 if self._opt.ns else None, dmem, gpu)
        line = format.encode_step(*args)
        if self._flush_steps == 1:
            self._sink.write(line, [(len(line), args)])
        else:
            self._held.append(line)
            self._held_args.append((len(line), args))
            if len(self._held) >= self._flush_steps:
                self._flush()
        trigger = self._local.check(s, wall, data) if self._local else None
        if trigger is not None and s - self._last_local < self.rules.interval_steps:  # type: ignore[union-attr]
            trigger = None
        cross = self._exchange(s, wall - (comm or 0.0))
        if self.capture is not None and self.capture.step():
            self.capture = None
        if (
            cross is not None
            and (
                self.rules.capture_ranks == "all"  # type: ignore[union-attr]
                or self.rank in cross.ranks
                or self.rank == cross.healthy
            )
            and s - self._last_local >= self.rules.interval_steps  # type: ignore[union-attr]
        ):
            trigger = cross
        if trigger is not None and self.capture is None:
            self._start_capture(s, trigger)
        self.step_num = s + 1
        self._start_step(cpu)

    def close(self) -> None:
        """Finish a capture in progress (its trace written with the steps it has), write the end, unhook."""
        if self._closed:
            return
        self._closed = True
        if self.capture is not None:
            try:
                self.capture.prof.stop()
            finally:
                self.capture = None
        found = self._events.name if self._events is not None else "none"
        self._event({"k": "end", "s": self.step_num - 1, "t": time.time(), "device": found})
        self._sink.close()
        self._clock.stop()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- inside ----------------------------------------------------------------------------------

    def _flush(self) -> None:
        if self._held:
            self._sink.write(b"".join(self._held), self._held_args)
            self._held.clear()
            self._held_args = []

    def _event(self, record: dict) -> None:
        self._flush()
        self._sink.write(format.encode_event(record))

    def _start_step(self, cpu_ms: float | None = None) -> None:
        """The next step starts: its counters from now (the CPU time read at the end of the last step: one
        `getrusage` a step; the wall clock from the monotonic one, so that a wall-clock step moves nothing)."""
        self._data.ns = self._opt.ns = 0
        self._cpu0 = _usage()[0] if cpu_ms is None else cpu_ms
        self._comm0 = self._clock.ns() if self.comm else 0
        self._t0 = time.perf_counter_ns()
        self._wall0 = self._epoch + self._t0 / 1e9

    def _header(self) -> None:
        from profiler_core.distinfo import hostname

        self._event(
            {
                "k": "start",
                "v": format.VERSION,
                "rank": self.rank,
                "world": self.world,
                "worker": self.worker,
                "host": hostname(),
                "pid": os.getpid(),
                "t0": time.time(),
                "device": self._device_want if isinstance(self._device_want, str) else self._events.name,  # type: ignore[union-attr]
                "comm": self.comm or "none",
                "flush": self._sink.flush,
                "capture": self.capture_tool,
                "rules": self.rules.as_dict() if self.rules else None,
                "slow_rank_rule": self.slow_rank_rule,
            }
        )

    def _exchange(self, s: int, work_ms: float) -> Trigger | None:
        if self._ranks is None or self.exchange is None:
            return None
        i = self._filled
        self._work[i], self._steps[i] = work_ms, s
        self._filled = i + 1
        if self._filled < len(self._work):
            return None
        self._filled = 0
        matrix = self.exchange.allgather(self._work)
        if matrix is None:
            return None
        hit = self._ranks.check(self._steps, matrix)
        if hit is None or s - self._last_cross < self.rules.interval_steps:  # type: ignore[union-attr]
            return None
        self._last_cross = s
        return hit

    def _start_capture(self, s: int, trigger: Trigger) -> None:
        assert self.rules is not None
        name = f"capture_step{s + 1:06d}"
        out = storage.join(self.logdir, name)
        role = "affected" if self.rank in trigger.ranks else "healthy" if self.rank == trigger.healthy else "other"
        rec = {
            "k": "capture",
            "s": s + 1,
            "first": s + 2,
            "rule": trigger.rule,
            "why": trigger.why,
            "ranks": list(trigger.ranks),
            "healthy": trigger.healthy,
            "role": role,
            "steps": self.rules.capture_steps,
            "dir": name,
            "tool": self.capture_tool,
        }
        try:
            self.capture = _Capture(
                s + 1, self.rules.capture_steps, out, self.worker, self.capture_tool, self._timer is not None
            )
        except Exception as e:  # a profiler that cannot start must not end the job
            rec["error"] = f"{type(e).__name__}: {e}"
        self._last_local = s
        self.captures.append(rec)
        self._event(rec)
