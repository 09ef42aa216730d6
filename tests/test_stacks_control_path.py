"""with_stack: the profiler's own control path (step/stop/trace assembly) leaves no python_function events."""

from profiler_core import ProfilerActivity, profile, schedule


def _user_work():
    return sum(i * i for i in range(50))


def test_step_and_stop_internals_are_not_traced_but_user_frames_are():
    with profile(
        activities=[ProfilerActivity.CPU], with_stack=True, schedule=schedule(wait=0, warmup=1, active=2, repeat=1)
    ) as prof:
        for _ in range(4):
            _user_work()
            prof.step()
    names = [e["name"] for e in prof.trace["traceEvents"] if e.get("cat") == "python_function"]
    assert any("_user_work" in n for n in names), names
    # The stop path hashes enums and builds dicts; none of that may show up as the user's Python.
    leaked = [n for n in names if "enum.py" in n or "profiler_core" in n or "threading.py" in n]
    assert leaked == [], leaked


def test_user_code_inside_record_function_and_operator_still_traced():
    from profiler_core import operator, record_function

    @operator("user::op")
    def op(x):
        return _user_work() + x

    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        with record_function("outer"):
            op(1)
    names = [e["name"] for e in prof.trace["traceEvents"] if e.get("cat") == "python_function"]
    assert any(n.endswith(": op") for n in names), names
    assert any("_user_work" in n for n in names), names
