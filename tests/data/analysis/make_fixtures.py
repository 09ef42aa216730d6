"""Regenerate the torch 2.13 fixtures of tests/test_compat_tables.py (run with the torch venv).

    .venvs/compat/bin/python tests/data/analysis/make_fixtures.py

For each scenario it writes ``<name>.trace.json.gz`` (torch's exported Kineto trace) and
``<name>.expected.json.gz`` (torch's own tables, export_stacks output and per-event values
computed from the same profile), so the tests can rebuild them from the trace alone.
"""

import gzip
import json
import os
import tempfile
import threading

import torch
from torch.profiler import ProfilerActivity, _ExperimentalConfig, profile, record_function, schedule

HERE = os.environ.get("FIXTURE_OUT") or os.path.dirname(os.path.abspath(__file__))
TABLES = [
    ("default", "key_averages", {}, {}),
    ("self_cpu_5", "key_averages", {}, {"sort_by": "self_cpu_time_total", "row_limit": 5}),
    ("shapes_cpu_total", "key_averages", {"group_by_input_shape": True}, {"sort_by": "cpu_time_total"}),
    ("header_top_ms", "key_averages", {}, {"header": "MY HEADER", "top_level_events_only": True, "time_unit": "ms"}),
    ("events_4", "events", {}, {"row_limit": 4}),
    ("count_us", "key_averages", {}, {"sort_by": "count", "time_unit": "us", "row_limit": 12}),
    ("mem", "key_averages", {}, {"sort_by": "self_cpu_memory_usage", "row_limit": 8}),
    ("limit0", "key_averages", {}, {"row_limit": 0}),
    ("narrow", "key_averages", {}, {"sort_by": "cpu_time", "max_name_column_width": 20, "max_shapes_column_width": 30}),
    ("flops", "key_averages", {}, {"sort_by": "flops", "row_limit": 6}),
]


def _dump(name, prof, extra_tables=()):
    trace_path = os.path.join(HERE, f"{name}.trace.json.gz")
    prof.export_chrome_trace(trace_path)
    expected = {"tables": {}, "events": []}
    for label, source, ka_kwargs, table_kwargs in list(TABLES) + list(extra_tables):
        src = prof.events() if source == "events" else prof.key_averages(**ka_kwargs)
        expected["tables"][label] = {
            "source": source,
            "key_averages": ka_kwargs,
            "table": table_kwargs,
            "text": src.table(**table_kwargs),
        }
    for e in prof.events():
        expected["events"].append(
            {
                "id": e.id,
                "name": e.name,
                "trace_name": e.trace_name,
                "cpu_time_total": e.cpu_time_total,
                "self_cpu_time_total": e.self_cpu_time_total,
                "cpu_memory_usage": e.cpu_memory_usage,
                "self_cpu_memory_usage": e.self_cpu_memory_usage,
                "flops": e.flops,
                "input_shapes": e.input_shapes,
                "stack": e.stack,
                "children": [c.id for c in e.cpu_children],
                "parent": e.cpu_parent.id if e.cpu_parent is not None else None,
                "is_user_annotation": bool(e.is_user_annotation),
                "count": e.count,
            }
        )
    stacks = {}
    for metric in ("self_cpu_time_total",):
        with tempfile.NamedTemporaryFile("r", suffix=".txt", delete=False) as tmp:
            pass
        try:
            prof.export_stacks(tmp.name, metric)
            with open(tmp.name) as f:
                stacks[metric] = f.read()
        except AssertionError:
            stacks[metric] = None
        os.unlink(tmp.name)
    expected["stacks"] = stacks
    total = prof.key_averages().total_average()
    expected["total_average"] = {
        "count": total.count,
        "self_cpu_time_total": total.self_cpu_time_total,
        "cpu_time_total": total.cpu_time_total,
    }
    with gzip.open(os.path.join(HERE, f"{name}.expected.json.gz"), "wt") as f:
        json.dump(expected, f, indent=1)


def matmuls():
    """record_shapes + with_flops, nested record_function, no stacks (like torch_tables.txt)."""
    a, b = torch.randn(64, 128), torch.randn(128, 96)
    bias = torch.randn(64, 96)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True) as prof:
        with record_function("matmuls"):
            for _ in range(3):
                torch.mm(a, b)
                torch.addmm(bias, a, b)
                torch.matmul(a, b).relu_()
    _dump("matmuls", prof)


def module_mem():
    """profile_memory + with_stack (python_function rows) + flops, conv and linear modules."""
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(8 * 14 * 14, 10)
    )
    x = torch.randn(2, 3, 16, 16)
    with profile(
        activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True, with_stack=True, with_flops=True
    ) as prof:
        with record_function("my_block"):
            y = model(x)
            loss = y.sum()
        loss.backward()
    _dump("module_mem", prof)


def verbose_stacks():
    """Stacks on ops (experimental verbose) for Source Location, group_by_stack_n, export_stacks."""
    lin = torch.nn.Linear(32, 16)
    x = torch.randn(8, 32, requires_grad=True)

    def step():
        out = lin(x).tanh().sum()
        out.backward()

    with profile(
        activities=[ProfilerActivity.CPU],
        with_stack=True,
        record_shapes=True,
        experimental_config=_ExperimentalConfig(verbose=True),
    ) as prof:
        for _ in range(2):
            step()
    extra = [
        ("stack_n", "key_averages", {"group_by_stack_n": 3}, {"sort_by": "self_cpu_time_total", "row_limit": 6}),
        ("events_src", "events", {}, {"row_limit": 6, "max_src_column_width": 40}),
    ]
    _dump("verbose_stacks", prof, extra)


def scheduled():
    """A schedule with ProfilerStep#N, backward, and a second thread's ops (profile_all_threads)."""
    w = torch.randn(16, 16, requires_grad=True)
    got = {}

    def on_ready(p):
        got["prof"] = p
        _dump("scheduled", p)

    def side_work():
        with record_function("side_thread"):
            torch.randn(8, 8).mm(torch.randn(8, 8))

    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=2),
        on_trace_ready=on_ready,
        record_shapes=True,
        profile_memory=True,
        experimental_config=_ExperimentalConfig(profile_all_threads=True),
    ) as prof:
        for _ in range(4):
            t = threading.Thread(target=side_work)
            t.start()
            (w @ w).sum().backward()
            t.join()
            prof.step()


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    matmuls()
    module_mem()
    verbose_stacks()
    scheduled()
    print(torch.__version__, "fixtures written to", HERE)
