"""The HTTP API's route table: every route under /data/plugin/gpuscope/, its typed, bounded
parameters and what it answers (docs/http-api.md is generated from it).

`tb_plugin.plugin` serves exactly these routes, parsing each request with `Route.parse` before its
handler (a function of `tb_plugin.handlers`) sees it; `docs/http-api.md` is `markdown()` of this table (a test keeps
them equal) and the frontend's development server serves the plugin's own routes. Light: no view is imported (the
handlers import theirs when called).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tb_plugin import handlers
from tb_plugin.errors import BadRequest
from tb_plugin.params import (
    END_US,
    EVENT_IDX,
    KERNELS_GROUP_BY,
    MAX_POINTS,
    MAX_TEXT_LEN,
    OCCURRENCE_LIMIT,
    OCCURRENCES_OF,
    OPERATORS_GROUP_BY,
    SEARCH_LIMIT,
    START_US,
    TRACKS,
    WIDTH_PX,
    Float,
    Int,
    Param,
    Text,
)

PREFIX = "/data/plugin/gpuscope"

RUN = Text("run", "a run name from /runs", required=True)
WORKER = Text("worker", "a worker name from /workers", required=True)
SPAN = Text("span", 'a span from /spans ("1".."N")', required=True)
EXP_RUN = Text(
    "exp_run",
    "the compared run (exp_*: all or none; none: another run's or worker's profile, named in `compared_with`)",
)
EXP_WORKER = Text("exp_worker", "the compared worker")
EXP_SPAN = Text("exp_span", "the compared span")
RESCAN = Text("rescan", "1: list the logdir now (TensorBoard's reload)", choices=("0", "1"), default="0")
#: the longest a /runs long poll waits
MAX_WAIT_S = 60.0
WAIT = Float(
    "wait",
    "seconds to wait while files are loading: the answer comes once they are loaded (or then); a long poll instead "
    "of asking again and again",
    lo=0.0,
    hi=MAX_WAIT_S,
)
PARTIAL = Text(
    "partial",
    "1: answer at once with the summaries there are, `pending` naming the workers still read",
    choices=("0", "1"),
    default="0",
)
JOB_B = Text("exp_run", "the compared job's run (B; `run` is the baseline A)", required=True)
JOB_SPAN = Text("span", "the span of each worker of `run`", default="1")
JOB_EXP_SPAN = Text("exp_span", "the span of each worker of `exp_run`", default="1")
FORMAT = Text("format", "json, or csv: the ranked deltas as a CSV file", choices=("json", "csv"), default="json")
STEP = Text("step", "a step number of that worker", required=True)
ORDER = Text(
    "order",
    "time: runs by their first trace's time; name: by name (digits as numbers)",
    choices=("time", "name"),
    default="time",
)
HISTORY_SPAN = Text("span", "the span of each worker of every run", default="1")
MATCH = Text("match", "only the runs whose name matches this glob (`nightly-*`)", max_len=1000)
OP_NAME = Text("name", "the operator's exact name", required=True, max_len=MAX_TEXT_LEN)
INPUT_SHAPE = Text(
    "input_shape", "only calls with these input shapes (as in the operators' rows)", max_len=MAX_TEXT_LEN
)
LAUNCHED_BY = Text(
    "op",
    "with of=kernels: only those launched by an op of this name (as in the kernels' rows; N/A: none)",
    max_len=MAX_TEXT_LEN,
)
EVENT_NAME = Text("name", "the event's exact name", required=True, max_len=MAX_TEXT_LEN)
QUERY = Text("query", "case-insensitive substring of event names", required=True, max_len=1000)

#: what the run-level routes say of missing per-worker summaries (in their description), and their answer then
PENDING = (
    "; never waits for missing per-worker summaries: starts computing them in the background "
    "(`gpuscope summarize LOGDIR` stores them ahead) and answers at once with `pending` and `progress` "
    "(HTTP 200), to be asked again until the answer has no `pending`"
)
PENDING_ANSWER = ' | while summarizing: {"pending": [worker...], "progress": {"done", "total"}}'

TELEMETRY_RUN = Text("run", 'a folder from /telemetry/runs ("." the logdir)', default=".", max_len=MAX_TEXT_LEN)
TELEMETRY_METRIC = Text(
    "metric",
    "work_ms (wall minus collectives), wall_ms, data_ms, comm_ms, host_ms, gpu_ms, optimizer_ms or rss_mib",
    choices=("work_ms", "wall_ms", "data_ms", "comm_ms", "host_ms", "gpu_ms", "optimizer_ms", "rss_mib"),
    default="work_ms",
)
HEATMAP_STEPS = Int(
    "max_steps", "most step bins (each the max or mean of a range of steps)", lo=1, hi=20000, default=1000
)
HEATMAP_AGG = Text("agg", "max or mean of the steps (and ranks) of a cell", choices=("max", "mean"), default="max")

FILE = (RUN, WORKER, SPAN)
RANGE = (START_US, END_US)


@dataclass(frozen=True)
class Route:
    """One GET route: its path under PREFIX, the handler that answers it (`handler(workspace, args)`), its
    parameters, whether it runs while the loader's queue is held (every view route) and what it answers."""

    path: str
    handler: Callable[[Any, dict[str, Any]], Any]
    params: tuple[Param, ...]
    summary: str
    returns: str
    held: bool = True

    def parse(self, args: Mapping[str, str]) -> dict[str, Any]:
        """The parameters of a request as typed values; BadRequest for the first bad one.
        Values longer than any real one are refused before anything reads them."""
        lists = args.lists() if hasattr(args, "lists") else ((k, [v]) for k, v in args.items())
        for name, values in lists:  # every value of a repeated parameter too
            value = max(values, key=len, default="")
            if len(name) > 100 or len(value) > MAX_TEXT_LEN:
                raise BadRequest(f"parameter {name[:100]!r} is longer than any valid value ({len(value)} characters)")
        return {p.name: p.parse(args.get(p.name)) for p in self.params}


ROUTES: tuple[Route, ...] = (
    Route(
        "/runs",
        handlers.runs,
        (RESCAN, WAIT),
        "the runs of the logdir and the loading progress",
        '{"runs": [name...], "loading": bool, "progress": {...}, "errors": [{"run", "file", '
        '"error"}...], "warnings": [{"run", "file", "message"}...], "logdir", "logdir_missing"}',
        held=False,
    ),
    Route(
        "/workers",
        handlers.workers,
        (RUN,),
        "the workers of a run; those none of whose files could be read (so far) under `unreadable`, with the reason "
        "(they are no worker of /diagnosis or /distributed, nor of `gpuscope diagnose`)",
        '{"workers": [name...], "unreadable": {name: reason}}',
        held=False,
    ),
    Route(
        "/spans",
        handlers.spans,
        (RUN, WORKER),
        "the spans of a worker, in time order",
        '{"spans": ["1"..."N"]}',
        held=False,
    ),
    Route(
        "/file_status",
        handlers.file_status,
        FILE,
        "how far the loading of one trace file is",
        '{"state": "queued"|"reading"|"done"|"failed", ..., "all": {...}}',
        held=False,
    ),
    Route(
        "/overview",
        handlers.overview,
        FILE,
        "per-step time breakdown, GPU summary, recommendations, the recoverable-time ledger (docs/diagnosis.md); "
        "runs of several workers: the run's ledger from the summaries there are",
        '{"steps": [...], "average": {...}, "gpu": {...} | null, "recommendations": [...], "environment": {...}, '
        '"ledger": {...}, "roofline": {"device", "roof", "peak_tflops", "mfu", "hfu", "note", "lost_ms", '
        '"modelled_ms", "no_model_ms"}, "run_ledger": {...} (several workers)}',
    ),
    Route(
        "/operators",
        handlers.operators,
        FILE + (OPERATORS_GROUP_BY,),
        "host and device time per operator",
        '{"rows": [{"name", "input_shape", "calls", "host_self_us", "host_total_us", '
        '"device_self_us", "device_total_us", "tc_eligible", "has_call_stack"}...], '
        '"notes": [text...] (on CUDA-graph replays, when the trace has any)}',
    ),
    Route(
        "/operators/stack",
        handlers.operator_stack,
        FILE + (OP_NAME, INPUT_SHAPE),
        "the call stacks of one operator",
        '{"rows": [...]}',
    ),
    Route(
        "/kernels",
        handlers.kernels,
        FILE + (KERNELS_GROUP_BY,),
        "GPU kernels and their launch statistics",
        '{"rows": [{"name", "op", "calls", "total_us", "mean_us", "min_us", "max_us", '
        '"blocks_per_sm", "achieved_occupancy", "tensor_cores"}...], "notes": [text...] (CUDA graphs, when any)}',
    ),
    Route(
        "/roofline",
        handlers.roofline,
        FILE,
        "how far each op is from the hardware: achieved FLOP/s and bytes/s against the device's roofs, ms lost to "
        "the bound, per kernel, and MFU per step",
        '{"device": {"name", "product", "known", "source", "about", "roofs_tflops", "bandwidth_gbps"}, "fraction", '
        '"modelled_ms", "no_model_ms", "lost_ms", "ops": [{"name", "shapes", "dtype", "family", "calls", "device_ms", '
        '"flops", "bytes", "tflops", "gbps", "intensity", "bound", "roof", "fraction", "lost_ms", "tc"}...], '
        '"more_ops", "kernels": [{"kernel", "count", "device_ms", "modelled", "tc", "tflops", "gbps", "peak_tflops", '
        '"fraction"}...], "more_kernels", "mfu": {"device", "roof", "peak_tflops", "mfu", "hfu", "steps": [{"step", '
        '"ms", "model_tflop", "all_tflop", "mfu", "hfu"}...], "note"}}',
    ),
    Route(
        "/memory/curve",
        handlers.memory_curve,
        FILE + RANGE + (MAX_POINTS,),
        "allocated and reserved memory over time, per device",
        '{"devices": [...], ...}',
    ),
    Route(
        "/memory/events",
        handlers.memory_events,
        FILE + RANGE,
        "allocations and frees in the range",
        '{"rows": [...], ...}',
    ),
    Route(
        "/memory/stats",
        handlers.memory_stats,
        FILE + RANGE,
        "memory use per operator in the range",
        '{"rows": [...], ...}',
    ),
    Route(
        "/modules",
        handlers.modules,
        FILE,
        "time per Python module (nn.Module) tree",
        '{"source", "tree": [...], "notes": [text...] (CUDA graphs, when any)}',
    ),
    Route(
        "/diff",
        handlers.diff,
        FILE + (EXP_RUN, EXP_WORKER, EXP_SPAN),
        "one span compared with another",
        '{..., "compared_with": {"run", "worker", "span"}}',
    ),
    Route(
        "/diff/kernels",
        handlers.kernel_diff,
        FILE + (EXP_RUN, EXP_WORKER, EXP_SPAN),
        "the kernels of one span compared with another's: aligned by name, else by their place under the same op path",
        '{"base": {"kernels", "device_us"}, "exp": {...}, "rows": [{"align", "path", "base", "exp", "delta_us", '
        '"delta_mean_us"}], "notes": [text...], "compared_with": {...}}',
    ),
    Route(
        "/distributed",
        handlers.distributed,
        (RUN, SPAN, PARTIAL),
        "computation, communication and overlap per worker (from per-worker summaries)",
        '{"workers": {w: {"computation_us", "overlap_us", "communication_us", "other_us"}}, '
        '"steps": {...}, "comm_ops": {...}, "stragglers": [{"worker", "step", ..., "why", "what_if_ms", '
        '"diff": {"worker", "exp_worker", "step"}}...], "devices": {w: {..., "mfu", "hfu"}}, "errors": [...], '
        '"pending": [worker...]}',
    ),
    Route(
        "/diagnosis",
        handlers.diagnosis,
        (RUN, SPAN),
        "the run's diagnosis from the per-worker summaries: what it cannot know first (caveats), then its verdict "
        "in one sentence, ledger, critical path per step, stragglers with their cause and what-if "
        "(docs/diagnosis.md)" + PENDING,
        '{"caveats": [{"key", "text", "withholds"}...], "verdict": {"text", "kind", "rank", "worker", "ms", '
        '"saved_ms"}, "withheld", "workers", "ranks", "ledger", "ledger_reason", '
        '"steps": [{"step", "step_ms", "segments": [...], '
        '"path", "path_parts", "straggler"}...], "worst", "stragglers": [...], "notes": [...], "reason", '
        '"errors": [...]}' + PENDING_ANSWER,
    ),
    Route(
        "/pipeline",
        handlers.pipeline,
        (RUN, SPAN),
        "the run's pipeline-parallel schedule from the per-worker summaries: stage x micro-batch chart per step, "
        "schedule, bubble ratio against the schedule's theoretical one, each stage's bubble split by cause "
        "(docs/diagnosis.md); `reason` says why a run has none" + PENDING,
        '{"stages", "workers", "virtual_stages", "microbatches", "schedule", "schedule_reason", "steps": [{"step", '
        '"start_ns", "end_ns", "bubble_ratio", "theoretical_ratio", "chart": [[[kind, mb, stage, start_ns, end_ns]...] '
        'per stage], "stages": [{"stage", "worker", "idle_ns", "true_idle_ns", "p2p_wait_ns", "upstream_wait_ns", '
        '"p2p_transfer_ns", "waiting_on", ...}]}...], "steps_dropped", "reason", "errors": [...]}' + PENDING_ANSWER,
    ),
    Route(
        "/clock_offsets",
        handlers.clock_offsets,
        (RUN, SPAN),
        "each worker's clock offset against a reference worker, from the collectives' common end times "
        "(per-worker summaries only), and the shift that places its timeline on the reference's" + PENDING,
        '{"reference": worker | null, "workers": [{"worker", "rank", "shift_us", "raw_shift_us", "offset_us", '
        '"collectives", "spread_us", "via", "reason", "steps"}...], "notes": [...], "reason": text | null, '
        '"errors": [...]}' + PENDING_ANSWER,
    ),
    Route(
        "/jobdiff",
        handlers.jobdiff,
        (RUN, JOB_B, JOB_SPAN, JOB_EXP_SPAN, FORMAT),
        "job B compared with job A (any number of ranks each) from the per-worker summaries: where the extra ms per "
        "step came from, ranked, with per-rank, per-group and per-kernel drill-down (docs/diagnosis.md)"
        + PENDING
        + " (`pending` names `{run, worker}`: the workers of both runs); format=csv then answers 503 with a "
        "Retry-After header, never a partial CSV",
        '{"a": {"workers", "ranks", "steps", "step_ms"}, "b": {...}, "step_delta_ms", "buckets": [...], '
        '"lines": [{"kind", "bucket", "name", "group", "ranks", "ranks_text", "delta_ms", "text"}...], '
        '"per_rank": [...], "groups": [...], "kernels": [...], "steps": [...], "only_a": [...], "notes": [...], '
        '"mfu": {"a", "b", "ops": [{"name", "dtype", "a_ms", "b_ms", "delta_ms", "ranks"}...]}, '
        '"errors": [...]}; format=csv: text/csv' + PENDING_ANSWER.replace("[worker...]", '[{"run", "worker"}...]'),
    ),
    Route(
        "/history",
        handlers.history,
        (HISTORY_SPAN, ORDER, MATCH),
        "the job's history across the logdir's runs from the per-worker summaries: per run its step time statistics, "
        "MFU (mean over its ranks; null: unknown), ledger buckets, per-rank step and MFU and the diagnosis' verdict; "
        "the first run slower than the noise of the runs before it (the stated `rule`) and its job diff against the "
        "run before (docs/python-api.md#a-jobs-history)" + PENDING + " (`pending` names `{run, worker}`)",
        '{"order", "rule", "runs": [{"run", "time_ns", "workers", "steps", "step_ms", "mean_ms", "mad_ms", "min_ms", '
        '"max_ms", "mfu", "buckets", "per_rank", "verdict", "baseline_ms", "threshold_ms", "regressed"}...], '
        '"regression": {"run", "previous", "step_ms", "baseline_ms", "threshold_ms", "delta_ms", "cause", "jobdiff"} '
        '| null, "notes": [...], "errors": [...]}' + PENDING_ANSWER.replace("[worker...]", '[{"run", "worker"}...]'),
    ),
    Route(
        "/distributed/step",
        handlers.distributed_step,
        (RUN, SPAN, WORKER, STEP),
        "one worker's step in detail",
        "{...}",
    ),
    Route(
        "/timeline",
        handlers.timeline,
        FILE + RANGE + (WIDTH_PX,),
        "one level-of-detail tile of the timeline",
        '{"tracks": [...], ...}',
    ),
    Route(
        "/timeline/search",
        handlers.search,
        FILE + (QUERY, SEARCH_LIMIT),
        "events whose name contains the query",
        '{"total": n, "results": [...]}',
    ),
    Route(
        "/timeline/summary",
        handlers.range_summary,
        FILE + RANGE + (TRACKS,),
        "count, total and self time by name of the events in a range",
        '{"start_us", "end_us", "tracks", "events", "rows": [...], "truncated"}',
    ),
    Route(
        "/timeline/counters",
        handlers.counters,
        FILE + RANGE + (WIDTH_PX,),
        "memory and GPU utilization counter tracks",
        '{"counters": [...]}',
    ),
    Route(
        "/timeline/occurrences",
        handlers.occurrences,
        FILE + (EVENT_NAME, OCCURRENCE_LIMIT, OCCURRENCES_OF, INPUT_SHAPE, LAUNCHED_BY),
        "every event of one exact name, in time order",
        '{"name", "total", "results": [...]}',
    ),
    Route(
        "/timeline/locate",
        handlers.locate,
        FILE + (EVENT_IDX,),
        "where one event is drawn",
        '{"name", "cat", "ts_us", "dur_us", "track", "depth", "idx"}',
    ),
    Route(
        "/event",
        handlers.event,
        FILE + (EVENT_IDX,),
        "one event with all its args",
        '{"idx", "event": {...}, "args": {...}}',
    ),
    Route("/trace", handlers.trace, FILE, "the raw trace file (gzip-encoded JSON), once it parsed", "the file's bytes"),
    Route(
        "/telemetry/runs",
        handlers.telemetry_runs,
        (),
        "the folders of the logdir holding flight-recorder telemetry (`*.telemetry.jsonl`, docs/flight-recorder.md)",
        '{"runs": [folder...]}',
        held=False,
    ),
    Route(
        "/telemetry",
        handlers.telemetry,
        (TELEMETRY_RUN,),
        "a telemetry run: per-rank summaries, the chronic and occasional stragglers (the rule in `rule`) and the "
        "captures the triggers started, with their reason and the run to diagnose",
        '{"dir", "ranks": [...], "steps", "rule", "metric", "chronic": [...], "occasional": [...], '
        '"captures": [{"dir", "run", "step", "rule", "why", "ranks", "healthy", "captured", ...}...]}',
        held=False,
    ),
    Route(
        "/telemetry/heatmap",
        handlers.telemetry_heatmap,
        (TELEMETRY_RUN, TELEMETRY_METRIC, HEATMAP_STEPS, HEATMAP_AGG),
        "a step x rank heatmap of one metric over the whole run, downsampled by step (and rank) ranges",
        '{"metric", "agg", "steps", "ranks", "step_bin", "rank_bin", "step_starts", "rank_starts", "min", "max", '
        '"cells": [[value | null...] per rank bin]}',
        held=False,
    ),
)


def markdown() -> str:
    """The API documentation of the route table (what docs/http-api.md holds)."""
    lines = [
        "# gpuscope HTTP API",
        "",
        f"Every route is a GET under `{PREFIX}/` and answers JSON. Times are µs with an `_us` "
        'suffix; fractions are 0..1. Errors are JSON `{"error": "..."}`: 400 for a bad '
        "parameter, 404 for an unknown run, worker, span or event, 422 for a trace file that "
        "cannot be read, 503 (with a Retry-After header) for a CSV whose per-worker summaries are still being "
        "computed. A parameter longer than "
        f"{MAX_TEXT_LEN} characters is refused (400) whatever its name.",
        "",
        "This page is generated from `tb_plugin/routes.py` "
        "(`python -m tb_plugin.routes > docs/http-api.md`); a test keeps them equal.",
        "",
    ]
    for r in ROUTES:
        lines += [f"## `{r.path}`", "", r.summary[:1].upper() + r.summary[1:] + ".", ""]
        if r.params:
            lines += ["| parameter | required | type | default | meaning |", "| --- | --- | --- | --- | --- |"]
            for p in r.params:
                default = p.default_value()
                lines.append(
                    f"| `{p.name}` | {'yes' if p.required else 'no'} | {p.kind()} | "
                    f"{'' if default is None else f'`{default}`'} | {p.doc} |"
                )
            lines.append("")
        lines += [f"Answer: `{r.returns}`", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(), end="")
