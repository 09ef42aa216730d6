"""The ``profile`` state machine: torch.profiler.profile's semantics without torch.

Drives the recording session (``recording``), the integrations, and a CUDA collector when CUDA
is requested and capturable; each recording cycle becomes one Kineto trace dict (kept on the
object as ``trace``) that ``export_chrome_trace`` writes and ``events()``/``key_averages()`` read
through ``profiler_core.analysis``. Nothing raised by the user's ``on_trace_ready`` or by a
failing collector takes the program down: those become warnings.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from collections.abc import Callable, Iterable
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any

from . import recording
from .recording import record_function
from .schedule import ProfilerAction, ProfilerActivity, _default_schedule_fn

if TYPE_CHECKING:
    from .analysis import EventList

_A = ProfilerAction
# (prev, new) -> actions; new=None is the final stop. Pairs not listed do nothing.
_TRANSITIONS: dict = {
    (_A.NONE, _A.WARMUP): ("prepare",),
    (_A.NONE, _A.RECORD): ("prepare", "start"),
    (_A.NONE, _A.RECORD_AND_SAVE): ("prepare", "start"),
    (_A.WARMUP, _A.NONE): ("warn", "start", "stop"),
    (_A.WARMUP, _A.RECORD): ("start",),
    (_A.WARMUP, _A.RECORD_AND_SAVE): ("start",),
    (_A.RECORD, _A.NONE): ("warn", "stop"),
    (_A.RECORD, _A.WARMUP): ("warn", "stop"),
    (_A.RECORD_AND_SAVE, _A.NONE): ("stop", "ready"),
    (_A.RECORD_AND_SAVE, _A.WARMUP): ("stop", "ready", "prepare"),
    (_A.RECORD_AND_SAVE, _A.RECORD): ("stop", "ready", "prepare", "start"),
    (_A.RECORD_AND_SAVE, _A.RECORD_AND_SAVE): ("stop", "ready", "prepare", "start"),
    # DEVICE_STOPPED (torch 2.13): GPU collection stopped early; the rest of the cycle is absorbed and
    # the cycle's trace is still delivered, then profiling resumes at the next cycle.
    (_A.WARMUP, _A.DEVICE_STOPPED): ("start", "stop", "ready"),
    (_A.RECORD, _A.DEVICE_STOPPED): ("stop", "ready"),
    (_A.DEVICE_STOPPED, _A.WARMUP): ("prepare",),
    (_A.DEVICE_STOPPED, _A.RECORD): ("prepare", "start"),
    (_A.DEVICE_STOPPED, _A.RECORD_AND_SAVE): ("prepare", "start"),
    (_A.WARMUP, None): ("start", "stop"),
    (_A.RECORD, None): ("stop", "ready"),
    (_A.RECORD_AND_SAVE, None): ("stop", "ready"),
}


def _cuda_module() -> ModuleType:
    from . import cuda

    return cuda


def _cuda_available() -> bool:
    return _cuda_module().is_available()


def _backend_note() -> str:
    """What the warning about CUDA without a GPU adds when GPUSCOPE_CUDA_BACKEND names a backend: it has
    nothing to capture from, and a value that is not a backend (``cuda``) is named, not silently dropped."""
    from . import settings

    raw = os.environ.get("GPUSCOPE_CUDA_BACKEND", "").strip()
    if not raw:
        return ""
    choices = settings.SETTINGS["GPUSCOPE_CUDA_BACKEND"].choices
    if raw not in choices:
        return f"; GPUSCOPE_CUDA_BACKEND={raw!r} is not a backend either (expected {' or '.join(choices)})"
    return f"; GPUSCOPE_CUDA_BACKEND={raw} has no GPU to capture from"


def supported_activities() -> set:
    """The activities this machine can capture: CPU, plus CUDA when CUPTI capture is possible."""
    acts = {ProfilerActivity.CPU}
    if _cuda_available():
        acts.add(ProfilerActivity.CUDA)
    return acts


def _as_activity(item: Any) -> ProfilerActivity:
    if isinstance(item, ProfilerActivity):
        return item
    name = getattr(item, "name", item)  # torch.profiler.ProfilerActivity.CPU, "CPU"
    if isinstance(name, str) and name.upper() in ProfilerActivity.__members__:
        return ProfilerActivity[name.upper()]
    raise ValueError(f"unsupported profiler activity {item!r}: use ProfilerActivity.CPU or ProfilerActivity.CUDA")


def _as_activities(activities: Any) -> set:
    """The set of activities from ``activities`` (an iterable of ProfilerActivity); clear errors otherwise."""
    if isinstance(activities, (str, bytes, ProfilerActivity)) or not hasattr(activities, "__iter__"):
        raise TypeError(
            f"activities must be a list of ProfilerActivity (e.g. [ProfilerActivity.CPU]), "
            f"got {type(activities).__name__} {activities!r}"
        )
    return set(map(_as_activity, activities))


def _as_action(value: Any) -> ProfilerAction:
    action = value if isinstance(value, ProfilerAction) else None
    name = getattr(value, "name", None)  # a torch.profiler.ProfilerAction
    if action is None and isinstance(name, str) and name in ProfilerAction.__members__:
        action = ProfilerAction[name]
    if action is None:
        raise ValueError(f"the profiler schedule returned {value!r}, not a ProfilerAction")
    if action is ProfilerAction.DEVICE_STOPPED:
        raise ValueError(
            "ProfilerAction.DEVICE_STOPPED is set internally by the profiler and must not be "
            "returned by a user-provided schedule"
        )
    return action


def _distributed_info() -> dict | None:
    from .distinfo import distributed_info

    try:
        return distributed_info()
    except Exception as e:
        warnings.warn(f"gpuscope: could not read the distributed setup: {e}", RuntimeWarning, stacklevel=3)
        return None


# Top-level keys the trace format owns: user metadata under these names would corrupt the file.
_RESERVED_METADATA_KEYS = frozenset(
    ("schemaVersion", "deviceProperties", "traceEvents", "traceName", "baseTimeNanoseconds", "displayTimeUnit")
)


def _metadata_key(what: str, key: Any) -> str:
    """``key`` as the str it is stored under; ValueError for a key that belongs to the trace format."""
    key = str(key)
    if key in _RESERVED_METADATA_KEYS:
        raise ValueError(f"{what}({key!r}, ...): {key!r} is a reserved key of the trace format; choose another name")
    return key


class profile:
    """Profiler context manager with torch.profiler.profile's arguments and state transitions."""

    def __init__(
        self,
        *,
        activities: Iterable | None = None,
        schedule: Callable[[int], ProfilerAction] | None = None,
        on_trace_ready: Callable[..., Any] | None = None,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_flops: bool = False,
        with_modules: bool = False,
        experimental_config: Any = None,
        execution_trace_observer: Any = None,
        acc_events: bool = False,
        use_cuda: bool | None = None,
        custom_trace_id_callback: Callable[[], str] | None = None,
        post_processing_timeout_s: float | None = None,
    ) -> None:
        if on_trace_ready is not None and not callable(on_trace_ready):
            raise TypeError(
                f"on_trace_ready must be callable (e.g. tensorboard_trace_handler(dir)), "
                f"got {type(on_trace_ready).__name__} {on_trace_ready!r}"
            )
        if schedule is not None and not callable(schedule):
            raise TypeError(
                f"schedule must be callable (e.g. schedule(wait=1, warmup=1, active=3)), "
                f"got {type(schedule).__name__} {schedule!r}"
            )
        if post_processing_timeout_s is not None and (
            isinstance(post_processing_timeout_s, bool)
            or not isinstance(post_processing_timeout_s, (int, float))
            or post_processing_timeout_s <= 0
        ):
            raise ValueError(
                f"post_processing_timeout_s must be a positive number of seconds or None, "
                f"got {post_processing_timeout_s!r}"
            )
        if execution_trace_observer is not None and not all(
            callable(getattr(execution_trace_observer, m, None)) for m in ("start", "stop")
        ):
            raise TypeError(
                "execution_trace_observer must have start() and stop() methods (torch's "
                f"_ITraceObserver), got {type(execution_trace_observer).__name__}"
            )
        ignored = [
            name
            for name, value in (
                ("experimental_config", experimental_config),
                ("post_processing_timeout_s", post_processing_timeout_s),
            )
            if value is not None
        ]
        if ignored:
            warnings.warn(
                f"gpuscope: {' and '.join(ignored)} {'is' if len(ignored) == 1 else 'are'} accepted "
                "for torch.profiler compatibility and ignored (they configure Kineto's own collection "
                "and post-processing, which gpuscope does not use)",
                UserWarning,
                stacklevel=2,
            )
        if custom_trace_id_callback is not None and not callable(custom_trace_id_callback):
            raise TypeError(
                f"custom_trace_id_callback must be callable (returning the trace id str), "
                f"got {type(custom_trace_id_callback).__name__} {custom_trace_id_callback!r}"
            )
        acts = _as_activities(activities) if activities is not None else supported_activities()
        if use_cuda is not None:
            warnings.warn("`use_cuda` is deprecated, use `activities` argument instead", FutureWarning, stacklevel=2)
            if use_cuda:
                acts.add(ProfilerActivity.CUDA)
            else:
                acts.discard(ProfilerActivity.CUDA)
        if not acts:
            raise AssertionError("No valid profiler activities found")
        if ProfilerActivity.CUDA in acts and not _cuda_available():
            warnings.warn(
                "gpuscope: CUDA activity was requested but cannot be captured on this machine "
                "(no GPU, driver or cupti-python); recording CPU activity only" + _backend_note(),
                RuntimeWarning,
                stacklevel=2,
            )
            acts.discard(ProfilerActivity.CUDA)
            acts.add(ProfilerActivity.CPU)
        self.activities = acts
        self.record_shapes = record_shapes
        self.profile_memory = profile_memory
        self.with_stack = with_stack
        self.with_flops = with_flops
        self.with_modules = with_modules
        self.custom_trace_id_callback = custom_trace_id_callback
        self.experimental_config = experimental_config
        self.execution_trace_observer = execution_trace_observer
        self.acc_events = bool(acc_events)
        self.post_processing_timeout_s = post_processing_timeout_s
        self._old_events: list = []  # earlier cycles' events, kept with acc_events
        self._old_op_events: list = []  # the same without Python frames (key_averages, export_stacks)
        self._op_events_cache: EventList | None = None
        if schedule:
            self.schedule = schedule
            self.record_steps = True
        else:
            self.schedule = _default_schedule_fn
            self.record_steps = False
        self.on_trace_ready = on_trace_ready
        self.step_num = 0
        self.current_action = _as_action(self.schedule(self.step_num))
        self._prev_schedule_action = self.current_action  # the schedule's own view (never DEVICE_STOPPED)
        self.step_rec_fn: record_function | None = None
        self.trace: dict | None = None  # the last finished cycle's trace dict
        self._session: recording.Session | None = None
        self._collector = None
        self._prepared = False
        self._metadata: dict = {}
        self._preset_metadata: dict = {}
        self._trace_id: str | None = None
        self._cycles = 0
        self._dist_info: dict | None = None
        self._events: EventList | None = None
        self._started = False
        self._owner_pid = os.getpid()  # the process whose session this is (a fork() child never exports it)

    # --- context manager and explicit control ------------------------------------------------
    def __enter__(self) -> profile:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc_val: BaseException | None, exc_tb: TracebackType | None
    ) -> None:
        self.stop()
        if (
            self.execution_trace_observer is not None
            and os.getpid() == self._owner_pid
            and callable(getattr(self.execution_trace_observer, "cleanup", None))
        ):
            self.execution_trace_observer.cleanup()

    def start(self) -> None:
        """Start profiling (enter the schedule's first action); ``__enter__`` calls this."""
        if self._started:  # a second start would end the cycle being recorded: keep it instead
            warnings.warn(
                "gpuscope: profile.start() called on a profiler that is already started; ignored (call stop() first)",
                RuntimeWarning,
                stacklevel=2,
            )
            return
        self._started = True
        self._owner_pid = os.getpid()
        _warn_if_torch()
        self._transit(ProfilerAction.NONE, self.current_action)
        if self.record_steps:
            self._enter_step()

    def stop(self) -> None:
        """Stop profiling; delivers the trace if the cycle was recording; ``__exit__`` calls this.

        A second stop() (or one before start()) does nothing: the trace is not delivered twice.
        """
        if not self._started:
            return
        self._started = False
        if self._in_forked_child():
            return
        if self.record_steps:
            self._exit_step()
        self._transit(self.current_action, None)
        self.current_action = self._prev_schedule_action  # a later start() resumes the schedule's view

    def step(self) -> None:
        """Signal that the next training step starts (drives the schedule).

        Ignored (with a warning) outside start()/stop(): it would start recording that nothing stops.
        """
        if not self._started:
            warnings.warn(
                "gpuscope: profile.step() called while the profiler is not started "
                "(before start() or after stop()); ignored",
                RuntimeWarning,
                stacklevel=2,
            )
            return
        if self._in_forked_child():
            return
        if self.record_steps:
            self._exit_step()
        prev, prev_scheduled = self.current_action, self._prev_schedule_action
        action = _as_action(self.schedule(self.step_num + 1))
        self.step_num += 1
        self.current_action = self._prev_schedule_action = action
        if prev is ProfilerAction.DEVICE_STOPPED:
            # stay stopped until the cycle ends (after its RECORD_AND_SAVE, or when the schedule says NONE)
            if not (prev_scheduled is ProfilerAction.RECORD_AND_SAVE or action is ProfilerAction.NONE):
                self.current_action = ProfilerAction.DEVICE_STOPPED
        elif (
            prev in (ProfilerAction.WARMUP, ProfilerAction.RECORD)
            and action is not ProfilerAction.NONE
            and self._device_collection_stopped()
        ):
            warnings.warn(
                f"Device profiling activity collection was stopped early at step {self.step_num}. "
                "Profiler schedule is proceeding until next cycle without actual profiler "
                "activity collection.",
                stacklevel=2,
            )
            self.current_action = ProfilerAction.DEVICE_STOPPED
        self._transit(prev, self.current_action)
        if self.record_steps:
            self._enter_step()

    def _in_forked_child(self) -> bool:
        """Is this a fork() child of the process profiling? It then drops the session, exporting nothing."""
        if os.getpid() == self._owner_pid:
            return False
        # the child's recording was already switched off at fork (recording._after_fork_in_child)
        self._started = False
        self._session = self._collector = self.step_rec_fn = None
        self._prepared = False
        return True

    def _device_collection_stopped(self) -> bool:
        """Did GPU collection stop early in this cycle (the collector gave up while CUDA was requested)?"""
        if ProfilerActivity.CUDA not in self.activities or self._collector is None:
            return False
        try:
            return bool(self._collector.stopped_early())
        except Exception:
            return False

    def _enter_step(self) -> None:
        self.step_rec_fn = record_function("ProfilerStep#" + str(self.step_num))
        self.step_rec_fn.__enter__()

    def _exit_step(self) -> None:
        if self.step_rec_fn is not None:
            self.step_rec_fn.__exit__(None, None, None)
            self.step_rec_fn = None

    # --- transitions -------------------------------------------------------------------------
    def _transit(self, prev: ProfilerAction, new: ProfilerAction | None) -> None:
        for action in _TRANSITIONS.get((prev, new), ()):
            if action == "warn":
                warnings.warn(f"Incorrect schedule: {prev.name} followed by {new.name if new else None}", stacklevel=3)
            elif action == "prepare":
                self._prepare_trace()
            elif action == "start":
                self._start_trace()
            elif action == "stop":
                self._stop_trace()
            else:
                self._trace_ready()

    def _wants_cpu(self) -> bool:
        return ProfilerActivity.CPU in self.activities

    def _prepare_trace(self) -> None:
        self._prepared = True
        self._metadata = {}
        self._cycles += 1
        if self._cycles == 2 and not self.acc_events:
            warnings.warn(
                "Profiler clears events at the end of each cycle. Only events from the "
                "current cycle will be reported. To keep events across cycles, set "
                "acc_events=True.",
                stacklevel=4,
            )
        self._trace_id = None
        if self.custom_trace_id_callback is not None:
            try:
                self._trace_id = str(self.custom_trace_id_callback())
            except Exception as e:
                warnings.warn(
                    f"gpuscope: custom_trace_id_callback raised {type(e).__name__}: {e}", RuntimeWarning, stacklevel=4
                )
        self._collector = None
        if ProfilerActivity.CUDA in self.activities:
            self._collector = self._make_collector()

    def _make_collector(self) -> Any:
        cuda = _cuda_module()
        try:
            if cuda is None:
                raise ImportError("profiler_core.cuda cannot be imported")
            collector = cuda.make_collector(
                {
                    "record_shapes": self.record_shapes,
                    "profile_memory": self.profile_memory,
                    "with_stack": self.with_stack,
                    "with_flops": self.with_flops,
                    "with_modules": self.with_modules,
                }
            )
            collector.prepare()
            return collector
        except Exception as e:
            warnings.warn(
                f"gpuscope: CUDA capture could not be set up ({type(e).__name__}: {e}); recording CPU activity only",
                RuntimeWarning,
                stacklevel=5,
            )
            return None

    def _start_trace(self) -> None:
        if self.execution_trace_observer is not None:
            self.execution_trace_observer.start()
        self._prepared = True
        self._dist_info = _distributed_info()
        self._session = recording.Session(
            record_shapes=self.record_shapes,
            profile_memory=self.profile_memory,
            with_stack=self.with_stack,
            with_flops=self.with_flops,
        )
        if recording.active_session() is not None:
            warnings.warn(
                "gpuscope: another profiler was recording; it is stopped and this one takes over",
                RuntimeWarning,
                stacklevel=4,
            )
        if self._wants_cpu():
            from . import integrations

            integrations.activate()
            recording.start_session(self._session)
        else:  # GPU-only: keep the window's times, record no CPU events
            self._session.start_ns = recording.now_ns()
        if self._collector is not None:
            try:
                self._collector.start()
            except Exception as e:
                warnings.warn(
                    f"gpuscope: CUDA capture failed to start ({type(e).__name__}: {e})", RuntimeWarning, stacklevel=4
                )
                self._collector = None

    def _stop_trace(self) -> None:
        if self.execution_trace_observer is not None:
            self.execution_trace_observer.stop()
        session = self._session
        if session is None:
            return
        if self._wants_cpu():
            if recording.active_session() is session:
                recording.stop_session()
            elif not session.stop_ns:  # another profiler took over: its start ended ours
                session.stop_ns = recording.now_ns()
            from . import integrations

            integrations.deactivate()
        else:
            session.stop_ns = recording.now_ns()
        results: list = []
        if self._collector is not None:
            try:
                res = self._collector.stop()
                results.append(res)
                for w in getattr(res, "warnings", None) or ():
                    warnings.warn(f"gpuscope: {w}", RuntimeWarning, stacklevel=4)
            except Exception as e:
                warnings.warn(
                    f"gpuscope: CUDA capture failed at stop ({type(e).__name__}: {e}); the trace has CPU activity only",
                    RuntimeWarning,
                    stacklevel=4,
                )
            self._collector = None
        self._session = None
        self._prepared = False
        if self.acc_events and self.trace is not None:
            try:  # torch parses each cycle at its stop when accumulating: keep the events so far
                self._old_events = list(self.events())
                self._old_op_events = list(self._op_events())
            except Exception as e:
                warnings.warn(
                    f"gpuscope: could not keep the previous cycle's events ({type(e).__name__}: {e})",
                    RuntimeWarning,
                    stacklevel=4,
                )
        self._events = self._op_events_cache = None
        try:
            self.trace = self._build(session, results)
        except Exception as e:  # a bug of ours must not end the user's program
            warnings.warn(
                f"gpuscope: could not assemble the trace ({type(e).__name__}: {e})", RuntimeWarning, stacklevel=4
            )
            self.trace = None

    def _build(self, session: recording.Session, results: list) -> dict:
        from .trace.write.schema import ThreadData, build_trace

        threads = [ThreadData(b.tid, b.name, b.events, b.memory, b.python) for b in session.buffers]
        metadata = dict(self._preset_metadata)
        metadata.update(self._metadata)
        return build_trace(
            pid=session.pid,
            threads=threads,
            offset_ns=session.offset_ns,
            start_ns=session.start_ns,
            stop_ns=session.stop_ns,
            flags={
                "profile_memory": self.profile_memory,
                "with_stack": self.with_stack,
                "record_shapes": self.record_shapes,
                "with_modules": self.with_modules,
                "with_flops": self.with_flops,
            },
            metadata=metadata,
            trace_id=self._trace_id,
            distributed_info=self._dist_info,
            collector_results=results,
        )

    def _trace_ready(self) -> None:
        if self.on_trace_ready is None:
            return
        try:
            self.on_trace_ready(self)
        except Exception as e:
            warnings.warn(
                f"gpuscope: on_trace_ready ({getattr(self.on_trace_ready, '__name__', self.on_trace_ready)!s}) "
                f"raised {type(e).__name__}: {e}; profiling continues",
                RuntimeWarning,
                stacklevel=4,
            )

    # --- metadata -----------------------------------------------------------------------------
    def add_metadata(self, key: str, value: str) -> None:
        """Add a top-level string entry to this cycle's trace (dropped outside warmup/recording, as torch)."""
        key = _metadata_key("add_metadata", key)
        if self._prepared:
            self._metadata[key] = str(value)

    def add_metadata_json(self, key: str, value: str) -> None:
        """Add a top-level entry holding the JSON value ``value`` (a JSON text) to this cycle's trace."""
        key = _metadata_key("add_metadata_json", key)
        parsed = self._parse_json(key, value)
        if self._prepared:
            self._metadata[key] = parsed

    def preset_metadata_json(self, key: str, value: str) -> None:
        """Like add_metadata_json, but kept for every cycle's trace."""
        key = _metadata_key("preset_metadata_json", key)
        self._preset_metadata[key] = self._parse_json(key, value)

    @staticmethod
    def _parse_json(key: str, value: str) -> Any:
        try:
            return json.loads(value)
        except (TypeError, ValueError) as e:
            raise ValueError(f"add_metadata_json({key!r}, ...): the value is not valid JSON text: {e}") from None
        except RecursionError:
            raise ValueError(f"add_metadata_json({key!r}, ...): the JSON value is nested too deeply") from None

    # --- results --------------------------------------------------------------------------------
    def _require_trace(self, what: str) -> dict:
        if self.trace is None:
            raise RuntimeError(
                f"{what}: no trace has been collected yet (profiling has not recorded "
                "a full cycle; with a schedule, results exist only after an active phase)"
            )
        return self.trace

    def export_chrome_trace(self, path: str | os.PathLike) -> str:
        """Write the last cycle's trace as Kineto JSON (gzipped if ``path`` ends in .gz), atomically."""
        from .trace.write.writer import write_trace

        return write_trace(self._require_trace("export_chrome_trace"), path)

    def events(self) -> EventList:
        """The last cycle's unaggregated events (an analysis.EventList of FunctionEvent).

        With ``acc_events=True``, every earlier cycle's events follow the last cycle's (as torch's do).
        """
        if self._events is None:
            from .analysis import events_from_trace

            events = events_from_trace(self._require_trace("events"))
            if self.acc_events and self._old_events:
                events.extend(self._old_events)
            self._events = events
        return self._events

    def _op_events(self) -> EventList:
        """The ops and annotations, without with_stack's Python-frame events (their tree rebuilt without them).

        A Python frame under an op (the function an ``@operator`` wraps) would otherwise take the op's self
        time; its stack is already the op's ``Call stack`` (group_by_stack_n, export_stacks).
        """
        if not self.with_stack:
            return self.events()
        if self._op_events_cache is None:
            from .analysis import events_from_trace

            trace = self._require_trace("key_averages")
            events = events_from_trace(
                dict(
                    trace,
                    traceEvents=[
                        e
                        for e in trace.get("traceEvents", ())
                        if not (isinstance(e, dict) and e.get("cat") == "python_function")
                    ],
                )
            )
            if self.acc_events and self._old_op_events:
                events.extend(self._old_op_events)
            self._op_events_cache = events
        return self._op_events_cache

    def key_averages(self, group_by_input_shape: bool = False, group_by_stack_n: int = 0) -> EventList:
        """Ops and annotations averaged by name (and optionally input shapes / the top N stack frames).

        With ``with_stack=True`` the Python frames are not rows: stacks belong to the ops.
        """
        return self._op_events().key_averages(group_by_input_shape, group_by_stack_n)

    def export_stacks(self, path: str, metric: str = "self_cpu_time_total") -> None:
        """Write the stacks of every event in flame-graph format (needs with_stack=True)."""
        if self.trace is None:
            raise AssertionError("Profiler must be initialized before exporting stacks")
        if not self.with_stack:
            raise AssertionError("export_stacks() requires with_stack=True")
        return self._op_events().export_stacks(path, metric)

    def get_trace_id(self) -> str | None:
        """The trace id of the last (or current) cycle."""
        if self.trace is not None:
            return self.trace.get("trace_id")
        return self._trace_id


TORCH_HINT = (
    "gpuscope: this process has imported torch, but gpuscope's profiler records only its own "
    "record_function ranges (and pycuda / mpi4py calls), not PyTorch's operators or kernels. To "
    "profile a PyTorch program use torch.profiler.profile(on_trace_ready=torch.profiler."
    "tensorboard_trace_handler(logdir)): the gpuscope TensorBoard tab reads those traces too."
)
_torch_warned = False


def _warn_if_torch() -> None:
    """Once per process: profiling a PyTorch program with gpuscope's profiler misses PyTorch's work."""
    global _torch_warned
    if _torch_warned or "torch" not in sys.modules:
        return
    _torch_warned = True
    frame: Any = sys._getframe(0)
    level, here = 1, os.path.dirname(os.path.abspath(__file__))
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(here + os.sep):
        frame, level = frame.f_back, level + 1  # point at the user's line, not ours
    warnings.warn(TORCH_HINT, UserWarning, stacklevel=level)
