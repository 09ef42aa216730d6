"""Regenerate tests/data/hta/hta_idle_reference.json: Holistic Trace Analysis' GPU idle time breakdown, CUDA kernel
launch statistics and queue length summary on the shared traces (`TRACES`).

Run with the compatibility venv (HolisticTraceAnalysis installed), from the repository root:

    $GPUSCOPE_COMPAT_VENV/bin/python tests/data/hta/make_hta_idle_reference.py [../shared/traces]

Each trace file is analysed alone (copied into a temporary directory of its own, as its own rank). Keys are paths
relative to the traces folder. Per trace it records:

* `idle_time_breakdown`: get_idle_time_breakdown(visualize=False) rows (stream, idle_category, idle_time in µs)
  at HTA's default consecutive_kernel_delay (30) and, under `idle_time_breakdown_delay_5`, at 5;
* `launch_stats`: a summary of get_cuda_kernel_launch_stats(visualize=False)[0] (one row per correlation):
  count, sums and maxima of cpu_duration, gpu_duration and launch_delay (µs), the number of events whose GPU
  duration is shorter than their launch call, and the outliers over HTA's default cutoffs (50 µs runtime,
  100 µs launch delay);
* `queue_length`: get_queue_length_summary() per stream (count, mean, std, min, 25%, 50%, 75%, max of the queue
  length at its change points).

tests/test_hta_idle.py compares gpuscope's numbers with these.
"""

from __future__ import annotations

import datetime
import logging
import math
import shutil
import sys
import tempfile
from pathlib import Path

from hta_refs import hta_version, write_reference

HERE = Path(__file__).resolve().parent
#: the shared traces HTA's analyses run on (paths relative to the traces folder): every GPU trace HTA loads, and
#: two without GPU activity (HTA's idle breakdown raises there). Left out: the MTIA traces (their device events,
#: mtia_ccp_events, are no GPU activity in gpuscope's model), public/tl_mi300_resnet_ckpt (HTA cannot load it:
#: TypeError while building its frame) and public/hta_et_file (an execution trace, not a Kineto trace).
TRACES = (
    "kineto_resnet50_v100/num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "kineto_resnet50_v100/num_workers_0/worker0.1623143566756.pt.trace.json.gz",
    "kineto_resnet50_v100/num_workers_4/worker0.1623212756351.pt.trace.json.gz",
    "kineto_resnet50_v100/num_workers_4/worker0.1623213129365.pt.trace.json.gz",
    "public/ds_train_h800/train.json",
    "public/hta_amd_mi250/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "public/hta_backward_thread/backward_thread.json",
    "public/hta_cmp_base/base.json.gz",
    "public/hta_cmp_test/test.json.gz",
    "public/hta_cp_alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
    "public/hta_cp_event_sync/event_sync_trace.json.gz",
    "public/hta_cp_event_sync_ms/event_sync_trace.json.gz",
    "public/hta_cp_overlaid/overlaid_critical_path_trace.json.gz",
    "public/hta_cp_simple_add/benchmark_result_493459_1694039959_trace.json.gz",
    "public/hta_cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    "public/hta_df_index/df_index_resolver.json.gz",
    "public/hta_diff_control/control.json.gz",
    "public/hta_diff_test/test.json.gz",
    "public/hta_et_trace/benchmark_simple_add_trace.json.gz",
    "public/hta_file_list_inf/inference_rank_1.json.gz",
    "public/hta_nccl_data/nccl_data.json.gz",
    "public/hta_neg_queue/rank0.json.gz",
    "public/hta_ns_resolution/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "public/hta_rank_non_gpu/rank_non_gpu.json.gz",
    "public/hta_trace_filter/sampled_rank-0.json.gz",
    "public/hta_trace_filter/sampled_rank-1.json.gz",
    "public/hta_triton/triton_example.json.gz",
    "public/kineto_rn50_autograd/worker0.pt.trace.json.gz",
    "public/tl_b200_eager/eager_trace.json.gz",
    "public/tl_mi300_ddp_resnet18/train_resnet18.json.gz",
    "public/tl_vllm_graph_capture/graph_capture_rank_0.1773709742341309550.pt.trace.json.gz",
    "public/tl_xdit_sd35/profile_trace_rank_0.json.gz",
)
RUNTIME_CUTOFF = 50
LAUNCH_DELAY_CUTOFF = 100


def _num(v):
    v = float(v)
    return None if math.isnan(v) else v


def _idle(ta, rank: int, delay: int) -> list[dict]:
    df, _ = ta.get_idle_time_breakdown(ranks=[rank], visualize=False, consecutive_kernel_delay=delay)
    return sorted(
        (
            {"stream": int(r["stream"]), "idle_category": str(r["idle_category"]), "idle_time": _num(r["idle_time"])}
            for r in df.to_dict(orient="records")
        ),
        key=lambda r: (r["stream"], r["idle_category"]),
    )


def _launch_stats(ta, rank: int) -> dict:
    df = ta.get_cuda_kernel_launch_stats(ranks=[rank], visualize=False)[rank]
    out = {
        "count": len(df),
        "shorter_than_launch": int((df["gpu_duration"] < df["cpu_duration"]).sum()),
        "runtime_outliers": int((df["cpu_duration"] > RUNTIME_CUTOFF).sum()),
        "launch_delay_outliers": int((df["launch_delay"] > LAUNCH_DELAY_CUTOFF).sum()),
    }
    for c in ("cpu_duration", "gpu_duration", "launch_delay"):
        out[f"{c}_sum"] = _num(df[c].sum()) if len(df) else 0.0
        out[f"{c}_max"] = _num(df[c].max()) if len(df) else None
    return out


def _queue(ta, rank: int) -> list[dict]:
    df = ta.get_queue_length_summary(ranks=[rank])
    if df is None:
        return []
    rows = []
    for (_, stream), r in df.iterrows():
        rows.append({"stream": int(stream), **{str(stat): _num(v) for (_, stat), v in r.items()}})
    return sorted(rows, key=lambda r: r["stream"])


def analyse(path: Path) -> dict:
    """HTA's three analyses on one trace file (or the reason each could not run)."""
    from hta.trace_analysis import TraceAnalysis

    out: dict = {}
    with tempfile.TemporaryDirectory() as d:
        shutil.copy(path, Path(d) / path.name)
        try:
            ta = TraceAnalysis(trace_dir=d)
        except Exception as e:  # noqa: BLE001 - recorded as the reason
            return {"error": f"TraceAnalysis: {type(e).__name__}: {e}"}
        (rank,) = ta.t.get_ranks()  # the trace's own rank (distributedInfo), 0 without one
        out["rank"] = int(rank)
        for name, fn in (
            ("idle_time_breakdown", lambda: _idle(ta, rank, 30)),
            ("idle_time_breakdown_delay_5", lambda: _idle(ta, rank, 5)),
            ("launch_stats", lambda: _launch_stats(ta, rank)),
            ("queue_length", lambda: _queue(ta, rank)),
        ):
            try:
                out[name] = fn()
            except Exception as e:  # noqa: BLE001 - recorded as the reason
                out[name] = {"error": f"{type(e).__name__}: {e}"}
    return out


def main() -> None:
    logging.disable(logging.WARNING)
    import hta

    root = Path(sys.argv[1] if len(sys.argv) > 1 else HERE.parents[2] / ".." / "shared" / "traces").resolve()
    result = {
        "provenance": {
            "tool": "HolisticTraceAnalysis",
            "version": hta_version(hta),
            "generated_by": "tests/data/hta/make_hta_idle_reference.py",
            "python": sys.version.split()[0],
            "date": datetime.date.today().isoformat(),
            "inputs": "../shared/traces (the team's shared real traces, TRACES in the generator), each file "
            "analysed alone (as its rank)",
            "calls": "get_idle_time_breakdown(ranks=[rank], visualize=False, consecutive_kernel_delay=30 and 5), "
            "get_cuda_kernel_launch_stats(ranks=[rank], visualize=False)[rank] (summarised), "
            "get_queue_length_summary(ranks=[rank]); rank = the trace's own (TraceAnalysis' only rank)",
        },
        "traces": {},
    }
    for rel in TRACES:
        print("analysing", rel, flush=True)
        result["traces"][rel] = analyse(root / rel)
    write_reference(result, HERE / "hta_idle_reference.json")


if __name__ == "__main__":
    main()
