"""with_stack: Call stack on ops (torch's format) and python_function events with ids/parents."""

import sys
import threading

from profiler_core import ProfilerActivity, profile, record_function, record_op
from profiler_core.stacks import short_path

CPU = [ProfilerActivity.CPU]


def helper_that_records():
    with record_op("stacked_op"):
        pass


def test_call_stack_format_innermost_first():
    with profile(activities=CPU, with_stack=True) as p:
        helper_that_records()
    (op,) = [e for e in p.trace["traceEvents"] if e.get("name") == "stacked_op"]
    stack = op["args"]["Call stack"]
    assert stack.endswith(";")
    frames = stack[:-1].split(";")
    assert frames[0].endswith(": helper_that_records") and "test_stacks.py(" in frames[0]
    assert frames[1].endswith(": test_call_stack_format_innermost_first")
    assert not any("profiler_core" in f for f in frames)
    assert p.trace["with_stack"] == 1


def test_no_stack_without_with_stack():
    before = sys.getprofile()
    with profile(activities=CPU) as p:
        assert sys.getprofile() is before
        helper_that_records()
    (op,) = [e for e in p.trace["traceEvents"] if e.get("name") == "stacked_op"]
    assert "Call stack" not in op["args"]
    assert not [e for e in p.trace["traceEvents"] if e.get("cat") == "python_function"]


def inner_fn():
    return len([1, 2])


def outer_fn():
    return inner_fn()


def test_python_function_events_and_parents():
    before = sys.getprofile()
    with profile(activities=CPU, with_stack=True) as p:
        outer_fn()
    assert sys.getprofile() is before  # hook removed after recording
    py = [e for e in p.trace["traceEvents"] if e.get("cat") == "python_function"]
    by_id = {e["args"]["Python id"]: e for e in py}
    outer = [e for e in py if e["name"].endswith(": outer_fn")][0]
    inner = [e for e in py if e["name"].endswith(": inner_fn")][0]
    c_len = [e for e in py if e["name"] == "<built-in function len>"][0]
    assert inner["args"]["Python parent id"] == outer["args"]["Python id"]
    assert c_len["args"]["Python parent id"] == inner["args"]["Python id"]
    assert outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"]
    # the test function itself was already running: opened at start, parent chain reaches a root
    roots = [e for e in py if e["args"]["Python parent id"] is None]
    assert roots
    e = outer
    while e["args"]["Python parent id"] is not None:
        e = by_id[e["args"]["Python parent id"]]
    assert e in roots
    first_line = inner_fn.__code__.co_firstlineno
    assert inner["name"] == f"{short_path(__file__)}({first_line}): inner_fn"
    assert not any("profiler_core/recording" in e["name"] for e in py)


def test_python_functions_in_thread_started_while_recording():
    with profile(activities=CPU, with_stack=True) as p:
        t = threading.Thread(target=outer_fn)
        t.start()
        t.join()
    py = [e for e in p.trace["traceEvents"] if e.get("cat") == "python_function" and e["name"].endswith(": outer_fn")]
    assert py and py[0]["tid"] == t.native_id


def test_exception_unwinding_keeps_tree_consistent():
    def raiser():
        raise ValueError("x")

    with profile(activities=CPU, with_stack=True) as p:
        try:
            raiser()
        except ValueError:
            pass
        inner_fn()
    py = [e for e in p.trace["traceEvents"] if e.get("cat") == "python_function"]
    r = [e for e in py if e["name"].endswith(": raiser")][0]
    i = [e for e in py if e["name"].endswith(": inner_fn")][0]
    assert r["args"]["Python parent id"] == i["args"]["Python parent id"]


def test_export_stacks_writes_flamegraph_lines(tmp_path):
    with profile(activities=CPU, with_stack=True) as p:
        with record_function("annotated"):
            sum(i * i for i in range(20000))
    out = tmp_path / "stacks.txt"
    p.export_stacks(str(out))
    lines = out.read_text().splitlines()
    assert lines and all(ln.rsplit(" ", 1)[1].isdigit() for ln in lines)
