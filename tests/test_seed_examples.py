"""The two examples of the torch.profiler 1.9 reference page, unchanged except the import and a
CPU-only activity list (PyTorch 1.9's torch.profiler documentation page)."""

import numpy as np
import pytest

import profiler_core as profiler_mod  # stands in for `torch.profiler`


class torch:  # noqa: N801 - lets the examples read exactly as on the page
    profiler = profiler_mod


def code_to_profile():
    a = np.random.rand(64, 64)
    with profiler_mod.record_op("aten::mm", a, a):
        a @ a


def code_iteration_to_profile(i):
    with profiler_mod.record_function("iteration"):
        code_to_profile()


def test_example_1_context_manager(capsys):
    with torch.profiler.profile(
        activities=[
            torch.profiler.ProfilerActivity.CPU,
        ]
    ) as p:
        code_to_profile()
    print(p.key_averages().table(sort_by="self_cuda_time_total", row_limit=-1))
    out = capsys.readouterr().out
    assert "aten::mm" in out and "Self CPU time total:" in out


@pytest.mark.filterwarnings("ignore:Profiler clears events")
def test_example_2_schedule_and_on_trace_ready(capsys):
    N = 10
    calls = []

    # Non-default profiler schedule allows user to turn profiler on and off
    # on different iterations of the training loop;
    # trace_handler is called every time a new trace becomes available
    def trace_handler(prof):
        calls.append(prof.step_num)
        print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=-1))
        # prof.export_chrome_trace("/tmp/test_trace_" + str(prof.step_num) + ".json")

    with torch.profiler.profile(
        activities=[
            torch.profiler.ProfilerActivity.CPU,
        ],
        # In this example with wait=1, warmup=1, active=2,
        # profiler will skip the first step/iteration,
        # start warming up on the second, record
        # the third and the forth iterations,
        # after which the trace will become available
        # and on_trace_ready (when set) is called;
        # the cycle repeats starting with the next step
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=2),
        on_trace_ready=trace_handler,
        # on_trace_ready=torch.profiler.tensorboard_trace_handler('./log')
        # used when outputting for tensorboard
    ) as p:
        for iter in range(N):
            code_iteration_to_profile(iter)
            # send a signal to the profiler that the next iteration has started
            p.step()
    out = capsys.readouterr().out
    assert calls == [4, 8, 10]  # the third cycle is cut short by the exit (torch does the same)
    assert out.count("Self CPU time total:") == 3
    assert "ProfilerStep*" in out and "iteration" in out
