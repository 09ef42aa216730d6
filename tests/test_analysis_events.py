"""events_from_trace on hand-made traces: nesting, self time, names, memory, FLOPs, bad input."""

import json
import warnings

import pytest

from profiler_core.analysis import (
    DeviceType,
    EventList,
    FunctionEvent,
    FunctionEventAvg,
    TraceFormatError,
    events_from_trace,
)
from profiler_core.analysis.synthetic import TID, annotation, memory, op, python_frame, trace


def by_name(events, name):
    return [e for e in events if e.name == name]


def test_nesting_and_self_time():
    ev = events_from_trace(
        trace(
            [
                annotation("outer", 0, 100, 1),
                op("aten::a", 10, 30, 2),
                op("aten::b", 15, 10, 3),
                op("aten::c", 50, 20, 4),
            ]
        )
    )
    outer, a, b, c = (by_name(ev, n)[0] for n in ("outer", "aten::a", "aten::b", "aten::c"))
    assert [x.name for x in outer.cpu_children] == ["aten::a", "aten::c"]
    assert a.cpu_children == [b] and b.cpu_parent is a and outer.cpu_parent is None
    assert outer.cpu_time_total == pytest.approx(100)
    assert outer.self_cpu_time_total == pytest.approx(50)
    assert a.self_cpu_time_total == pytest.approx(20)
    assert ev.self_cpu_time_total == pytest.approx(100)
    assert outer.is_user_annotation and not a.is_user_annotation
    assert outer.scope == 7 and a.scope == 0
    assert a.id == 2 and a.external_id == 2


def test_partial_overlap_is_not_a_child():
    ev = events_from_trace(trace([op("aten::x", 0, 10, 1), op("aten::y", 5, 10, 2)]))
    x, y = ev
    assert y.cpu_parent is None and x.cpu_children == []
    assert x.self_cpu_time_total == pytest.approx(10)


def test_threads_do_not_nest_into_each_other():
    ev = events_from_trace(
        trace(
            [
                op("aten::main", 0, 100, 1),
                op("aten::side", 10, 10, 2, tid=TID + 1),
            ]
        )
    )
    main = by_name(ev, "aten::main")[0]
    side = by_name(ev, "aten::side")[0]
    assert main.cpu_children == [] and side.cpu_parent is None
    assert side.thread == TID + 1


def test_profiler_step_rename_and_filtered_names():
    ev = events_from_trace(
        trace(
            [
                annotation("ProfilerStep#7", 0, 100, 1),
                op("aten::is_leaf", 1, 1, 2),
                op("profiler::_record_function_exit", 2, 1, 3),
                op("aten::mm", 5, 10, 4),
            ]
        )
    )
    assert [e.name for e in ev] == ["ProfilerStep*", "aten::mm"]
    assert ev[0].trace_name == "ProfilerStep#7"
    avg = ev.key_averages()
    assert [a.key for a in avg] == ["ProfilerStep*", "aten::mm"]


def test_same_name_single_child_is_folded_like_torch():
    ev = events_from_trace(
        trace(
            [
                op("aten::linear", 0, 50, 1),
                op("aten::linear", 1, 40, 2),
                op("aten::addmm", 2, 30, 3),
            ]
        )
    )
    assert [e.name for e in ev] == ["aten::linear", "aten::addmm"]
    linear = ev[0]
    assert linear.cpu_children == [ev[1]] and ev[1].cpu_parent is linear
    assert linear.self_cpu_time_total == pytest.approx(20)
    assert ev.key_averages()[0].count == 1


def test_key_averages_groups_and_sums():
    ev = events_from_trace(
        trace(
            [
                op("aten::mm", 0, 10, 1, dims=[[2, 3], [3, 4]]),
                op("aten::mm", 20, 30, 2, dims=[[5, 3], [3, 4]]),
                op("aten::mm", 60, 20, 3, dims=[[2, 3], [3, 4]]),
            ]
        )
    )
    (mm,) = ev.key_averages()
    assert isinstance(mm, FunctionEventAvg)
    assert (mm.key, mm.count) == ("aten::mm", 3)
    assert mm.cpu_time_total == pytest.approx(60) and mm.cpu_time == pytest.approx(20)
    assert mm.input_shapes == ""
    shaped = ev.key_averages(group_by_input_shape=True)
    assert [(a.input_shapes, a.count) for a in shaped] == [([[2, 3], [3, 4]], 2), ([[5, 3], [3, 4]], 1)]
    # torch's EventList spelling of the keyword is accepted too
    assert len(ev.key_averages(group_by_input_shapes=True)) == 2
    total = ev.total_average()
    assert total.key == "Total" and total.count == 3


def test_group_by_stack_n():
    ev = events_from_trace(
        trace(
            [
                op("aten::mm", 0, 10, 1, stack="f.py(3): inner;f.py(9): outer;"),
                op("aten::mm", 20, 10, 2, stack="f.py(4): other;f.py(9): outer;"),
            ]
        )
    )
    assert ev[0].stack == ["f.py(3): inner", "f.py(9): outer"]
    assert len(ev.key_averages()) == 1
    by_stack = ev.key_averages(group_by_stack_n=1)
    assert [a.stack for a in by_stack] == [["f.py(3): inner"], ["f.py(4): other"]]
    with pytest.raises(ValueError, match="group_by_stack_n"):
        ev.key_averages(group_by_stack_n=-1)


def test_input_shapes_tensorlist_and_scalars():
    ev = events_from_trace(
        trace([op("aten::cat", 0, 5, 1, dims=[[[2, 3], [2, 3]], [], [4]], types=["TensorList", "Scalar", "float"])])
    )
    e = ev[0]
    assert e.input_shapes == [[], [], [4]]
    assert e.structured_input_shapes == [[[2, 3], [2, 3]], [], [4]]
    assert e.input_dtypes == ["TensorList", "Scalar", "float"]


def test_memory_goes_to_innermost_op_on_its_thread():
    ev = events_from_trace(
        trace(
            [
                annotation("outer", 0, 100, 1),
                op("aten::empty", 10, 10, 2),
                memory(5, 1000),  # outer itself
                memory(12, 4096),  # aten::empty
                memory(50, -1000),  # outer (free)
                memory(15, 777, tid=TID + 1),  # other thread, no op there: unattributed
                memory(30, 2048, device_type=1),  # CUDA memory in outer
            ],
            profile_memory=1,
        )
    )
    outer = by_name(ev, "outer")[0]
    empty = by_name(ev, "aten::empty")[0]
    assert empty.cpu_memory_usage == 4096 and empty.self_cpu_memory_usage == 4096
    assert outer.cpu_memory_usage == 4096 and outer.self_cpu_memory_usage == 0
    assert outer.device_memory_usage == 2048 and outer.self_device_memory_usage == 2048
    loose = by_name(ev, "[memory]")
    assert len(loose) == 1 and loose[0].cpu_memory_usage == 777 and loose[0].thread == TID + 1
    text = ev.key_averages().table()
    assert "CPU Mem" in text and "Self CPU Mem" in text and "4.00 KB" in text
    assert "CUDA Mem" not in text  # no device time -> no use_device on a CPU-only trace


def test_python_functions_are_rows_and_can_go_negative():
    ev = events_from_trace(
        trace(
            [
                python_frame("t.py(1): <module>", 0, 100, 1),
                python_frame("t.py(5): f", 10, 50, 2, 1),
                op("aten::mm", 20, 20, 1),
            ],
            with_stack=1,
        )
    )
    f = by_name(ev, "t.py(5): f")[0]
    assert f.is_python_function and f.python_id == 2 and f.python_parent_id == 1
    assert f.cpu_children[0].name == "aten::mm"
    assert f.self_cpu_time_total == pytest.approx(30)


def test_flops_from_arg_and_column():
    ev = events_from_trace(
        trace([op("aten::mm", 0, 10, 1, dims=[[2, 3], [3, 4]], flops=48), op("aten::relu", 20, 10, 2)])
    )
    assert ev[0].flops == 48 and ev[1].flops == 0
    text = ev.key_averages().table()
    assert "Total FLOPs" in text
    assert "  48.000  " in text and "--" in text


def test_flops_computed_when_trace_has_with_flops():
    events = [op("aten::mm", 0, 10, 1, dims=[[4, 5], [5, 6]])]
    assert events_from_trace(trace(events, with_flops=1))[0].flops == 240
    assert events_from_trace(trace(events))[0].flops == 0  # without with_flops: none computed


def test_composite_op_does_not_double_count_computed_flops():
    ev = events_from_trace(
        trace(
            [
                op("aten::matmul", 0, 30, 1, dims=[[4, 5], [5, 6]]),
                op("aten::mm", 5, 20, 2, dims=[[4, 5], [5, 6]]),
            ],
            with_flops=1,
        )
    )
    assert [(e.name, e.flops) for e in ev] == [("aten::matmul", 0), ("aten::mm", 240)]


def test_old_kineto_format_operator_integer_us_string_tid():
    raw = {
        "schemaVersion": 1,
        "traceEvents": [
            {
                "ph": "X",
                "cat": "Operator",
                "name": "aten::conv2d",
                "pid": 11,
                "tid": "11",
                "ts": 1000,
                "dur": 50,
                "args": {"External id": 5, "Input Dims": [[1, 3, 8, 8]]},
            },
            {
                "ph": "X",
                "cat": "Operator",
                "name": "aten::empty",
                "pid": 11,
                "tid": "11",
                "ts": 1010,
                "dur": 5,
                "args": {"External id": 6},
            },
            {
                "ph": "i",
                "s": "t",
                "name": "[memory]",
                "pid": 11,
                "tid": 11,
                "ts": 1012,
                "args": {"Device Type": 0, "Device Id": -1, "Bytes": 64},
            },
        ],
    }
    ev = events_from_trace(raw)
    conv, empty = ev
    assert conv.cpu_children == [empty] and conv.thread == 11
    assert empty.cpu_memory_usage == 64 and conv.self_cpu_memory_usage == 0
    assert conv.self_cpu_time_total == pytest.approx(45)


def test_bare_event_list_is_accepted():
    ev = events_from_trace([op("aten::mm", 0, 10, 1)])
    assert isinstance(ev, EventList) and ev[0].name == "aten::mm"


@pytest.mark.parametrize(
    "bad, match",
    [
        (42, "expects a Kineto trace dict"),
        ({"schemaVersion": 1}, "no 'traceEvents' list"),
        ({"traceEvents": "nope"}, "no 'traceEvents' list"),
        (
            {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": "soon", "dur": 1}]},
            r"traceEvents\[0\]: 'ts' must be a finite number",
        ),
        (
            {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1.0, "dur": None}]},
            r"traceEvents\[0\]: 'dur'",
        ),
    ],
)
def test_bad_input_gives_clear_error(bad, match):
    with pytest.raises(TraceFormatError, match=match):
        events_from_trace(bad)


def test_unknown_categories_and_junk_entries_are_ignored():
    ev = events_from_trace(
        {
            "traceEvents": [
                "junk",
                None,
                {
                    "ph": "X",
                    "cat": "Trace",
                    "name": "PyTorch Profiler (0)",
                    "pid": "Spans",
                    "tid": "PyTorch Profiler",
                    "ts": 0.0,
                    "dur": 500.0,
                },
                {"ph": "X", "cat": "overhead", "name": "x", "ts": 1.0, "dur": 1.0},
                {"ph": "s", "cat": "ac2g", "id": 1, "ts": 1.0},
                op("aten::mm", 10, 10, 1),
            ]
        }
    )
    assert [e.name for e in ev] == ["aten::mm"]
    assert ev[0].time_range.start == pytest.approx(10)  # relative to the Trace span's start


def test_negative_duration_clamped():
    ev = events_from_trace(trace([op("aten::mm", 10, -5, 1)]))
    assert ev[0].cpu_time_total == 0


def test_deprecated_cuda_aliases_warn():
    ev = events_from_trace(trace([op("aten::mm", 0, 10, 1)]))
    with pytest.warns(FutureWarning):
        assert ev[0].cuda_time_total == 0
    with pytest.warns(FutureWarning):
        assert ev.key_averages()[0].self_cuda_time_total == 0


def test_function_event_rejects_unknown_keyword():
    with pytest.raises(TypeError, match="bogus"):
        FunctionEvent(1, "x", 1, 0.0, 1.0, bogus=1)
    e = FunctionEvent(1, "x", 1, 0.0, 1.0, node_id=3)
    assert e.node_id == 3 and e.device_type == DeviceType.CPU and e.count == 1


def test_our_profiler_trace_round_trip(tmp_path):
    """A trace made by profiler_core itself reads back with the ops, shapes and memory it recorded."""
    import numpy as np

    import profiler_core

    with profiler_core.profile(
        activities=[profiler_core.ProfilerActivity.CPU], record_shapes=True, profile_memory=True, with_flops=True
    ) as prof:
        with profiler_core.record_function("block"):
            a = np.ones((32, 16))
            with profiler_core.record_op("aten::mm", a, a.T):
                _ = a @ a.T
    path = tmp_path / "t.json"
    prof.export_chrome_trace(str(path))
    ev = events_from_trace(json.loads(path.read_text()))
    mm = by_name(ev, "aten::mm")[0]
    assert mm.input_shapes == [[32, 16], [16, 32]]
    assert mm.flops == 2 * 32 * 16 * 32
    assert mm.cpu_parent is not None and mm.cpu_parent.name == "block"
    assert by_name(ev, "block")[0].cpu_memory_usage > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = ev.key_averages().table(sort_by="cpu_time_total")
    assert "Total KFLOPs" in table and "block" in table


def test_function_event_rejects_read_only_names():
    with pytest.raises(TypeError, match="cpu_time_total"):
        FunctionEvent(1, "x", 1, 0.0, 1.0, cpu_time_total=5)


def test_eventlist_export_chrome_trace_is_valid_json(tmp_path):
    ev = events_from_trace(trace([annotation('quote"back\\slash', 0, 50, 1), op("aten::mm", 10, 20, 2)]))
    path = tmp_path / "legacy.json"
    ev.export_chrome_trace(str(path))
    rows = json.loads(path.read_text())
    assert [r["name"] for r in rows] == ['quote"back\\slash', "aten::mm"]
    assert rows[1]["ts"] == pytest.approx(10) and rows[1]["dur"] == pytest.approx(20)
    assert all(r["pid"] == "CPU functions" for r in rows)
