"""Bad input to profiler_core's public API: a clear error at the user's call, never lost or corrupt data.

Each test pins one behaviour found by the QA sweep (issues 2, 3, 7); see the docstrings.
"""

import json
import os

import numpy as np
import pytest

import profiler_core
from profiler_core import ProfilerActivity, operator, profile, record_function, record_op, recording, schedule
from profiler_core.trace.read import reader
from profiler_core.trace.write.writer import TraceWriteError

CPU = [ProfilerActivity.CPU]


@pytest.fixture(autouse=True)
def _never_left_recording():
    yield
    assert not recording.is_recording(), "a test left a profiler recording"


def _ops(trace, cat="cpu_op"):
    return [e for e in trace["traceEvents"] if e.get("cat") == cat]


def _traced(**flags):
    """A small finished profile with one annotation and one op on two numpy arrays."""
    with profile(activities=CPU, **flags) as p:
        with record_function("outer"):
            with record_op("mylib::mm", np.ones((2, 3)), np.ones((3, 4))):
                pass
    return p


# --- profile(...) arguments -----------------------------------------------------------------
@pytest.mark.parametrize("bad", [5, "CPU", ProfilerActivity.CPU, None.__class__])
def test_activities_that_are_not_a_list_name_the_argument(bad):
    with pytest.raises(TypeError, match="activities must be a list of ProfilerActivity"):
        profile(activities=bad)


def test_schedule_called_with_a_non_int_step_says_so():
    fn = schedule(wait=0, warmup=1, active=1)
    for bad in (None, "1", 1.0):
        with pytest.raises(TypeError, match="step must be an int"):
            fn(bad)


# --- start / stop / step misuse -------------------------------------------------------------
def test_start_twice_keeps_the_cycle_being_recorded():
    p = profile(activities=CPU)
    p.start()
    with record_function("before second start"):
        pass
    with pytest.warns(RuntimeWarning, match="already started; ignored"):
        p.start()
    with record_function("after second start"):
        pass
    p.stop()
    names = [e["name"] for e in _ops(p.trace, "user_annotation")]
    assert names == ["before second start", "after second start"]


def test_stop_twice_delivers_the_trace_once():
    calls = []
    p = profile(activities=CPU, on_trace_ready=lambda prof: calls.append(prof.trace["trace_id"]))
    p.start()
    p.stop()
    p.stop()
    assert len(calls) == 1


def test_step_after_stop_does_not_start_recording_again():
    p = profile(activities=CPU, schedule=schedule(wait=0, warmup=1, active=2))
    with p:
        p.step()
    with pytest.warns(RuntimeWarning, match="not started"):
        p.step()  # would enter the next RECORD step and leave a session running forever
    assert not recording.is_recording()


def test_step_before_start_is_ignored():
    calls = []
    p = profile(
        activities=CPU, schedule=schedule(wait=0, warmup=1, active=1), on_trace_ready=lambda prof: calls.append(1)
    )
    with pytest.warns(RuntimeWarning, match="not started"):
        p.step()
        p.step()
    assert calls == [] and p.trace is None and p.step_num == 0


# --- metadata ------------------------------------------------------------------------------
@pytest.mark.parametrize("key", ["schemaVersion", "deviceProperties", "traceEvents", "baseTimeNanoseconds"])
def test_metadata_cannot_replace_the_trace_formats_own_keys(key):
    with profile(activities=CPU) as p:
        with pytest.raises(ValueError, match="reserved key of the trace format"):
            p.add_metadata(key, "x")
        with pytest.raises(ValueError, match="reserved key of the trace format"):
            p.add_metadata_json(key, '"x"')
    assert p.trace["schemaVersion"] == 1 and isinstance(p.trace["deviceProperties"], list)


# --- names and args that cannot print themselves ----------------------------------------------
class _Unprintable:
    def __str__(self):
        raise RuntimeError("no str for you")

    __repr__ = __str__


def test_a_name_that_cannot_be_printed_does_not_lose_the_trace():
    with profile(activities=CPU) as p:
        with record_function(_Unprintable()):
            pass
        with record_function("kept"):
            pass
    assert p.trace is not None
    names = [e["name"] for e in _ops(p.trace, "user_annotation")]
    assert names == ["<unprintable _Unprintable>", "kept"]


def test_an_arg_value_that_cannot_be_printed_is_still_exported(tmp_path):
    with profile(activities=CPU) as p:
        with record_op("op", args={"bad": _Unprintable(), "good": 3}):
            pass
    out = tmp_path / "t.json"
    p.export_chrome_trace(out)
    args = _ops(json.loads(out.read_text()))[0]["args"]
    assert args["bad"] == "<unprintable _Unprintable>" and args["good"] == 3


def test_extra_args_cannot_replace_the_external_id():
    with profile(activities=CPU) as p:
        with record_op("op", args={"External id": "mine", "comm": 1}):
            pass
    args = _ops(p.trace)[0]["args"]
    assert isinstance(args["External id"], int) and args["comm"] == 1


# --- array-likes with odd shapes / strides ---------------------------------------------------
class _NumpyIntStrides:
    shape = (np.int64(2), np.int32(3))
    dtype = np.dtype("float32")
    strides = (np.int64(12), np.int64(4))


class _JunkShape:
    shape = (float("nan"), None, 3)  # e.g. dask's unknown chunk sizes
    dtype = np.dtype("float64")
    strides = ("x", 8)


class _ShapeIsAString:
    shape = "abc"
    dtype = np.dtype("float32")


def test_odd_array_likes_give_int_dims_and_strides_and_a_readable_trace(tmp_path):
    with profile(activities=CPU, record_shapes=True) as p:
        with record_op("op", _NumpyIntStrides(), _JunkShape(), _ShapeIsAString()):
            pass
    args = _ops(p.trace)[0]["args"]
    assert args["Input Dims"] == [[2, 3], [-1, -1, 3], []]
    assert args["Input Strides"] == [[3, 1], [-1, 1], []]
    for dims in args["Input Dims"] + args["Input Strides"]:
        assert all(type(d) is int for d in dims)
    out = tmp_path / "t.pt.trace.json"
    p.export_chrome_trace(out)
    reader.parse_trace(out.read_bytes(), str(out))  # our own reader accepts it


# --- export paths ------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [None, 5, 1.5])
def test_export_path_of_the_wrong_type_names_the_path(bad):
    p = _traced()
    with pytest.raises(TypeError, match="cannot write trace: the path must be a str or os.PathLike"):
        p.export_chrome_trace(bad)


def test_export_to_a_directory_or_an_empty_path_is_a_clear_error(tmp_path):
    p = _traced()
    with pytest.raises(TraceWriteError, match="it is a directory"):
        p.export_chrome_trace(tmp_path)
    with pytest.raises(TraceWriteError, match="the path is empty"):
        p.export_chrome_trace("")
    with pytest.raises(ValueError, match="NUL character"):
        p.export_chrome_trace(str(tmp_path / "a\x00b.json"))
    assert os.listdir(tmp_path) == []


def test_export_to_a_bytes_path_works(tmp_path):
    p = _traced()
    out = os.fsencode(str(tmp_path / "t.json.gz"))
    p.export_chrome_trace(out)
    assert os.listdir(tmp_path) == ["t.json.gz"]


def test_export_stacks_bad_path_is_a_clear_error(tmp_path):
    p = _traced(with_stack=True)
    with pytest.raises(TypeError, match="cannot write stacks: the path must be a str"):
        p.export_stacks(None)
    with pytest.raises(TraceWriteError, match="it is a directory"):
        p.export_stacks(str(tmp_path))


def test_export_stacks_with_undecodable_file_names_writes_a_whole_file(tmp_path):
    """A frame from a file whose name had undecodable bytes (a lone surrogate) used to stop the write
    half-way, leaving a truncated file."""
    p = _traced(with_stack=True)
    events = p.events()
    for e in events:
        e.stack = ["bad\udcffname.py(1): f", "main.py(2): <module>"]
    out = tmp_path / "s.txt"
    out.write_text("previous content\n")
    events.export_stacks(str(out))
    lines = out.read_text(encoding="utf-8").splitlines()
    assert lines and all(line.startswith("main.py(2):_<module>;bad") for line in lines)
    assert sorted(os.listdir(tmp_path)) == ["s.txt"]  # no temporary file left


def test_eventlist_chrome_trace_missing_directory_names_the_directory(tmp_path):
    p = _traced()
    with pytest.raises(TraceWriteError, match="directory .* does not exist"):
        p.events().export_chrome_trace(str(tmp_path / "missing" / "e.json"))


def test_tensorboard_trace_handler_bad_dir_names_the_argument(tmp_path):
    with pytest.raises(TypeError, match="dir_name must be a str or os.PathLike"):
        profiler_core.tensorboard_trace_handler(None)
    handler = profiler_core.tensorboard_trace_handler(os.fsencode(str(tmp_path / "tb")), worker_name="w")
    with profile(activities=CPU, on_trace_ready=handler):
        pass
    assert [f.startswith("w.") for f in os.listdir(tmp_path / "tb")] == [True]


# --- table arguments -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"row_limit": "10"}, TypeError, "row_limit must be an int"),
        ({"row_limit": 1.5}, TypeError, "row_limit must be an int"),
        ({"max_name_column_width": -5}, ValueError, "max_name_column_width must be a non-negative int"),
        ({"max_src_column_width": "wide"}, ValueError, "max_src_column_width must be a non-negative int"),
        ({"header": 5}, TypeError, "header must be a str"),
        ({"sort_by": "__class__"}, TypeError, "cannot be ordered"),
    ],
)
def test_table_bad_arguments_are_named(kwargs, exc, match):
    avgs = _traced().key_averages()
    with pytest.raises(exc, match=match):
        avgs.table(**kwargs)


# --- FLOP formulas ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "result, expected, warns",
    [
        ("12", 0, True),
        ([1], 0, True),
        (float("nan"), 0, True),
        (float("inf"), 0, True),
        (np.int64(7), 7, False),
        (1.5e3, 1500, False),
        (-3, 0, False),
        (None, 0, False),
        (10**30, 2**63 - 1, False),
    ],
)
def test_flops_formula_results_that_are_not_counts(result, expected, warns):
    from profiler_core.flops import _warned, compute_flops

    name = f"qa_flops_{type(result).__name__}_{expected}_{warns}_{result!r}"
    profiler_core.register_flops_formula(name, lambda dims, concrete: result)
    _warned.discard(name)
    import warnings as w

    with w.catch_warnings(record=True) as caught:
        w.simplefilter("always")
        assert compute_flops(name, [[3]]) == expected
    messages = [str(c.message) for c in caught]
    assert bool(messages) == warns
    if warns:
        assert "not a number of FLOPs" in messages[0]


# --- decorators used wrongly -------------------------------------------------------------------
def test_bare_record_function_decorator_runs_the_function():
    @record_function
    def add_one(x):
        return x + 1

    with profile(activities=CPU) as p:
        assert add_one(3) == 4  # used to return a wrapper of 3 instead of calling add_one
    assert [e["name"] for e in _ops(p.trace, "user_annotation")] == [
        "test_bare_record_function_decorator_runs_the_function.<locals>.add_one"
    ]


def test_decorators_applied_to_non_functions_fail_at_decoration():
    with pytest.raises(TypeError, match="used as a decorator takes one function"):
        record_function("x")(5)
    with pytest.raises(TypeError, match="decorates a function"):
        operator("x")(5)
    with pytest.raises(TypeError, match="name must be a str"):
        operator(5)


def test_non_callable_trace_id_callback_and_bad_worker_names_fail_at_the_call(tmp_path):
    with pytest.raises(TypeError, match="custom_trace_id_callback must be callable"):
        profile(activities=CPU, custom_trace_id_callback="my-id")
    for bad in ("a/b", "a\x00b", 5):
        with pytest.raises(ValueError, match="worker_name must be a plain name"):
            profiler_core.tensorboard_trace_handler(str(tmp_path), worker_name=bad)


@pytest.mark.parametrize("name", [5, None, ["mm"], b"mm"])
def test_non_str_op_names_with_flops_are_recorded_not_raised(name):
    with profile(activities=CPU, with_flops=True) as p:
        with record_op(name, np.ones((2, 2)), np.ones((2, 2))):
            pass
    ops = _ops(p.trace)
    assert [e["name"] for e in ops] == [str(name)] and "flops" not in ops[0]["args"]


def test_distinfo_bad_arguments_are_clear():
    from profiler_core import distinfo

    with pytest.raises(TypeError, match="env must be a mapping"):
        distinfo.distributed_info(env=5)
    # int values (a dict built by hand, not os.environ) are read like their text
    assert distinfo.distributed_info(env={"RANK": 1, "WORLD_SIZE": 2})["rank"] == 1
    with pytest.raises(ValueError, match="needs 0 <= rank < world_size"):
        distinfo.default_worker_name(info={"rank": "x", "world_size": 2})
    with pytest.raises(TypeError, match="info must be a dict"):
        distinfo.default_worker_name(info=5)
    assert distinfo.default_worker_name(info={"rank": "3", "world_size": "12"}).endswith("_rank00003")


def test_cyclic_or_deeply_nested_values_do_not_make_the_trace_unwritable(tmp_path):
    cyclic = {"name": "a"}
    cyclic["self"] = cyclic
    nested = []
    for _ in range(5000):
        nested = [nested]
    with profile(activities=CPU) as p:
        with record_op("op", args={"cyclic": cyclic, "nested": nested, "ok": 1}):
            pass
        with pytest.raises(ValueError, match="nested too deeply"):
            p.add_metadata_json("deep", "[" * 100000 + "]" * 100000)
    out = tmp_path / "t.json"
    p.export_chrome_trace(out)
    args = _ops(json.loads(out.read_text()))[0]["args"]
    assert args["ok"] == 1 and args["cyclic"] == {"name": "a", "self": "<recursive reference>"}
    depth, v = 0, args["nested"]
    while isinstance(v, list):
        depth, v = depth + 1, v[0]
    assert v == "<nested too deeply>" and depth < 100


def test_export_under_a_file_says_it_is_not_a_directory(tmp_path):
    p = _traced()
    (tmp_path / "afile").write_text("x")
    with pytest.raises(TraceWriteError, match="afile' is not a directory"):
        p.export_chrome_trace(tmp_path / "afile" / "t.json")
    assert (tmp_path / "afile").read_text() == "x"
