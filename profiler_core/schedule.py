"""Profiler schedules and actions: torch.profiler's step -> action table, reproduced exactly."""

from __future__ import annotations

import enum
import warnings
from collections.abc import Callable


class ProfilerAction(enum.Enum):
    """What the profiler does at a step (same members and values as torch.profiler).

    DEVICE_STOPPED is set by the profiler itself when GPU collection stopped early (as torch 2.13 does);
    a schedule must not return it.
    """

    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3
    DEVICE_STOPPED = 4


class ProfilerActivity(enum.Enum):
    """Activity groups a profile can capture (the torch.profiler names we support)."""

    CPU = 0
    CUDA = 2


def _check_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"schedule(): {name} must be an int, got {type(value).__name__} {value!r}")


def schedule(
    *,
    wait: int,
    warmup: int,
    active: int,
    repeat: int = 0,
    skip_first: int = 0,
    skip_first_wait: int = 0,
) -> Callable[[int], ProfilerAction]:
    """Return a step -> ProfilerAction function: skip_first steps, then cycles of wait/warmup/active.

    ``repeat`` bounds the number of cycles (0: unbounded); the last active step of each cycle is
    RECORD_AND_SAVE. ``skip_first_wait`` (torch >= 2.5) drops the first cycle's wait phase.
    """
    for name, value in (
        ("wait", wait),
        ("warmup", warmup),
        ("active", active),
        ("repeat", repeat),
        ("skip_first", skip_first),
        ("skip_first_wait", skip_first_wait),
    ):
        _check_int(name, value)

    def schedule_fn(step: int) -> ProfilerAction:
        if isinstance(step, bool) or not isinstance(step, int):
            raise TypeError(f"the schedule's step must be an int, got {type(step).__name__} {step!r}")
        if step < 0:
            raise AssertionError(f"Step must be non-negative. Got {step}.")
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        if skip_first_wait != 0:
            step += wait
        num_steps = wait + warmup + active
        if repeat > 0 and step / num_steps >= repeat:
            return ProfilerAction.NONE
        mod_step = step % num_steps
        if mod_step < wait:
            return ProfilerAction.NONE
        if mod_step < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if mod_step < num_steps - 1 else ProfilerAction.RECORD_AND_SAVE

    if wait < 0 or warmup < 0 or active <= 0 or repeat < 0 or skip_first < 0:
        raise AssertionError(
            f"Invalid profiler schedule arguments. Got wait={wait} (need >= 0), warmup={warmup} "
            f"(need >= 0), active={active} (need > 0), repeat={repeat} (need >= 0), "
            f"skip_first={skip_first} (need >= 0)."
        )
    if warmup == 0:
        warnings.warn("Profiler won't be using warmup, this can skew profiler results", stacklevel=2)
    return schedule_fn


def _default_schedule_fn(_: int) -> ProfilerAction:
    """The schedule used when none is given: record everything, all the time."""
    return ProfilerAction.RECORD
