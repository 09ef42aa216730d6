"""A job that already replays CUDA graphs (a `cudaGraphLaunch` in its trace) is never told to use CUDA graphs: not
by the ledger's launch-overhead fix (worker and run level), nor by the Overview's idle-GPU recommendation. The same
trace launching its kernels one by one still is."""

from __future__ import annotations

from profiler_core.analysis.worker.buckets import LAUNCH_OVERHEAD
from tb_plugin.run_level.run_ledger import run_view
from tb_plugin.summaries import summary as S
from tb_plugin.views.overview import overview

from .test_views_common_support import kernel, make_trace, op, runtime


def _trace(launch: str):
    """One 100 µs step whose GPU is busy 20 µs: two kernels, each launched by `launch` (idle 80 % of the step)."""
    return make_trace(
        [
            op("ProfilerStep#1", 0, 100, cat="user_annotation"),
            runtime(launch, 2, 3, corr=1),
            runtime(launch, 40, 3, corr=2),
            kernel("K", 10, 10, corr=1),
            kernel("K2", 50, 10, corr=2),
        ]
    )


def _texts(launch: str) -> tuple[list[str], str, str]:
    """Every advice text of the trace's Overview (recommendations, ledger fixes and advice), and the launch-overhead
    fix of the worker ledger and of the run's ledger (from its summary)."""
    t = _trace(launch)
    ov = overview(t)
    texts = list(ov["recommendations"]) + list(ov["ledger"]["other_advice"])
    for b in ov["ledger"]["buckets"]:
        texts += [b["fix"], *b["advice"]]
    worker_fix = next(b["fix"] for b in ov["ledger"]["buckets"] if b["key"] == LAUNCH_OVERHEAD)
    run = run_view({"w0": S.decode(S.encode(S.summarize(t)))})
    run_fix = next(b["fix"] for b in run["mean"]["buckets"] if b["key"] == LAUNCH_OVERHEAD)
    return texts + [run_fix], worker_fix, run_fix


def test_graph_replaying_job_is_not_told_to_use_cuda_graphs():
    texts, worker_fix, run_fix = _texts("cudaGraphLaunch")
    assert any("idle" in x for x in texts)  # the idle-GPU recommendation is there, without CUDA graphs
    assert not [x for x in texts if "cuda graph" in x.lower()]
    assert "already replays graphs" in worker_fix and worker_fix == run_fix


def test_job_without_graphs_still_is():
    texts, worker_fix, run_fix = _texts("cudaLaunchKernel")
    assert "CUDA graphs" in worker_fix and worker_fix == run_fix
    assert any("idle" in x and "CUDA graphs" in x for x in texts)
