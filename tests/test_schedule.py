"""schedule(): torch 2.13's step -> action table, argument errors and warnings."""

import warnings

import pytest

from profiler_core import ProfilerAction, schedule

N, W, R, RS = (ProfilerAction.NONE, ProfilerAction.WARMUP, ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)


def test_verified_table_with_skip_first_and_repeat():
    fn = schedule(wait=1, warmup=1, active=2, repeat=1, skip_first=1)
    assert [fn(s) for s in range(10)] == [N, N, W, R, RS, N, N, N, N, N]


def test_repeat_zero_cycles_forever():
    fn = schedule(wait=1, warmup=1, active=2)
    assert [fn(s) for s in range(12)] == [N, W, R, RS] * 3


def test_active_one_is_record_and_save_only():
    fn = schedule(wait=0, warmup=1, active=1, repeat=2)
    assert [fn(s) for s in range(6)] == [W, RS, W, RS, N, N]


def test_skip_first_wait_drops_first_wait():
    fn = schedule(wait=2, warmup=1, active=1, skip_first=1, skip_first_wait=1)
    assert [fn(s) for s in range(6)] == [N, W, RS, N, N, W]


def test_action_values_match_torch():
    assert [a.value for a in (N, W, R, RS)] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    "kw",
    [
        dict(wait=-1, warmup=1, active=1),
        dict(wait=0, warmup=-1, active=1),
        dict(wait=0, warmup=1, active=0),
        dict(wait=0, warmup=1, active=1, repeat=-1),
        dict(wait=0, warmup=1, active=1, skip_first=-2),
    ],
)
def test_invalid_arguments_raise_torch_message(kw):
    with pytest.raises(AssertionError, match=r"Invalid profiler schedule arguments\. Got wait="):
        schedule(**kw)


def test_non_int_argument_is_a_clear_type_error():
    with pytest.raises(TypeError, match="active must be an int"):
        schedule(wait=0, warmup=1, active="3")


def test_arguments_are_keyword_only():
    with pytest.raises(TypeError):
        schedule(1, 1, 1)  # type: ignore[misc]


def test_warmup_zero_warns():
    with pytest.warns(UserWarning, match="won't be using warmup"):
        schedule(wait=1, warmup=0, active=1)


def test_no_warning_with_warmup():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        schedule(wait=1, warmup=1, active=1)


def test_negative_step_rejected():
    with pytest.raises(AssertionError, match="Step must be non-negative"):
        schedule(wait=1, warmup=1, active=1)(-1)
