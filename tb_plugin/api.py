"""gpuscope from Python: `gpuscope.open(path)` and the tables it answers, as pandas DataFrames.

Why a module of its own: notebooks and CI scripts need the analyses the TensorBoard tab shows (the ledger, the
cross-rank diagnosis, the job diff) as data. There is one implementation: every method here asks the route handler
(`tb_plugin/handlers.py`) the TensorBoard tab asks, over a `tb_plugin.workspace.Workspace` of the logdir, and turns
its answer into a frame; run-level answers come from the per-worker summaries, as the Distributed view's do. Nothing
is read before a method needs it (the workspace is not eager), and what was computed is kept: parsed traces and
their per-file answers by the workspace's loader and stage cache, summaries and run-level answers by its summaries
engine. The public names are `__all__`; docs/python-api.md documents each with its columns and units.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from profiler_core.analysis.worker.buckets import BUCKETS

if TYPE_CHECKING:
    from tb_plugin.routes import Route
    from tb_plugin.workspace import Workspace

__all__ = ["AnalysisError", "Diagnosis", "History", "JobDiff", "Profile", "Result", "open"]

#: a run-level question asked while its summaries were being computed is asked again this many times at most
PENDING_RETRIES = 50
#: seconds between those asks
PENDING_POLL_S = 0.1


class AnalysisError(Exception):
    """A question gpuscope cannot answer: an unknown run, worker or span, an unreadable trace, nothing to compare
    (the message says which; it is the HTTP route's error text)."""


@dataclass
class Result:
    """A structured answer (a route's JSON, as a dict in `data`) whose main table is `to_frame()`."""

    data: dict[str, Any]
    _frame: Callable[[dict[str, Any]], pd.DataFrame] = field(repr=False, default=lambda d: pd.DataFrame())

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def keys(self) -> Any:
        """The answer's keys (as the HTTP route's JSON)."""
        return self.data.keys()

    def to_frame(self) -> pd.DataFrame:
        """The main table of the answer (see the class's docstring)."""
        return self._frame(self.data)


@dataclass
class Diagnosis(Result):
    """The run's diagnosis (the `/diagnosis` route's answer, `gpuscope diagnose --json`): `to_frame()` is one row per
    step with its critical path's straggler and what-if."""

    @property
    def caveats(self) -> list[dict[str, Any]]:
        """What the diagnosis cannot know (`{"key", "text", "withholds"}`), to be read before its claims."""
        return list(self.data.get("caveats") or [])

    @property
    def verdict(self) -> str:
        """One line: the verdict's text (`run_level.verdict`), the sentence `gpuscope diagnose` prints first."""
        from tb_plugin.run_level.history import verdict

        return verdict(self.data)

    @property
    def text(self) -> str:
        """The diagnosis in words, as `gpuscope diagnose` prints it."""
        from tb_plugin.run_level import report

        return report.render_text(self.data)


@dataclass
class JobDiff(Result):
    """Job B compared with job A (the `/jobdiff` route's answer, `gpuscope jobdiff --json`): `to_frame()` is its
    ranked lines (where the extra ms per step came from)."""

    @property
    def text(self) -> str:
        """The job diff in words, as `gpuscope jobdiff` prints it."""
        from tb_plugin.run_level import job_diff

        return job_diff.render_text(self.data)

    @property
    def cause(self) -> str | None:
        """The first ranked line's text (the largest explained delta), or None when nothing changed."""
        lines = self.data.get("lines") or []
        return str(lines[0]["text"]) if lines else None


@dataclass
class History(Result):
    """A job's runs over time (`Profile.history`): `to_frame()` is one row per run; `regression` names the first run
    slower than the noise of the runs before it (None: none), `explained` is its job diff against the run before."""

    @property
    def regression(self) -> str | None:
        """The first regressed run's name, or None."""
        reg = self.data.get("regression")
        return None if reg is None else str(reg["run"])

    @property
    def explained(self) -> JobDiff | None:
        """The regressed run compared with the run before it, or None."""
        reg = self.data.get("regression")
        if reg is None or reg.get("jobdiff") is None:
            return None
        return JobDiff(reg["jobdiff"], _frame=_lines_frame)

    @property
    def text(self) -> str:
        """The history in words, as `gpuscope history` prints it."""
        from tb_plugin.run_level import history

        return history.render_text(self.data)


def _table(rows: Any, **extra: Any) -> pd.DataFrame:
    """A frame of a list of flat dicts (nested lists and dicts stay objects), `extra` columns first."""
    frame = pd.DataFrame(list(rows or []))
    for i, (k, v) in enumerate(extra.items()):
        frame.insert(i, k, v)
    return frame


#: the columns of a job diff's ranked lines
LINE_COLUMNS = ["kind", "bucket", "name", "group", "ranks", "ranks_text", "delta_ms", "text"]


def _lines_frame(d: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame(list(d.get("lines") or []), columns=LINE_COLUMNS)


def _ledger_frame(ledger: Mapping[str, Any] | None) -> pd.DataFrame:
    """One row per step: `step`, `wall_ms`, then one column of ms per bucket (NaN: not measurable there)."""
    if not ledger:
        return pd.DataFrame(columns=["step", "wall_ms"])
    rows = []
    for s in ledger.get("steps") or []:
        row = {"step": s["step"], "wall_ms": s["wall_ms"]}
        if "worker" in s:
            row["worker"] = s["worker"]
        row.update({k: (float("nan") if v is None else v) for k, v in (s.get("buckets") or {}).items()})
        rows.append(row)
    return pd.DataFrame(rows)


def _buckets_frame(ledger: Mapping[str, Any] | None) -> pd.DataFrame:
    cols = ["key", "label", "ms", "recoverable_ms", "share", "fix", "reason"]
    if not ledger:
        return pd.DataFrame(columns=cols)
    return pd.DataFrame([{k: b.get(k) for k in cols} for b in ledger.get("buckets") or []], columns=cols)


def _flatten_tree(nodes: list[dict[str, Any]], depth: int = 0, parent: str = "") -> Iterator[dict[str, Any]]:
    for n in nodes:
        yield {"depth": depth, "parent": parent, **{k: v for k, v in n.items() if k != "children"}}
        yield from _flatten_tree(n.get("children") or [], depth + 1, n.get("path", ""))


#: the exported tables but `events` (docs/internals.md's event columns): column -> pandas dtype, so that every
#: worker's file of a table has one schema (an empty table too) and DuckDB or polars read a folder of them as one
EXPORT_SCHEMA: dict[str, dict[str, str]] = {
    "kernels": {
        "name": "string",
        "calls": "Int64",
        "total_us": "float64",
        "mean_us": "float64",
        "min_us": "float64",
        "max_us": "float64",
        "blocks_per_sm": "float64",
        "achieved_occupancy": "float64",
        "tensor_cores": "boolean",
        "grid": "string",
        "block": "string",
        "registers_per_thread": "Int64",
        "shared_memory": "Int64",
        "theoretical_occupancy": "float64",
        "launch_configs": "Int64",
    },
    "operators": {
        "name": "string",
        "calls": "Int64",
        "host_self_us": "float64",
        "host_total_us": "float64",
        "device_self_us": "float64",
        "device_total_us": "float64",
        "tc_eligible": "boolean",
        "has_call_stack": "boolean",
    },
    "steps": {
        "step": "string",
        "total_us": "float64",
        "kernel_us": "float64",
        "memcpy_us": "float64",
        "memset_us": "float64",
        "communication_us": "float64",
        "runtime_us": "float64",
        "dataloader_us": "float64",
        "cpu_exec_us": "float64",
        "other_us": "float64",
    },
    "ledger": {
        "step": "string",
        "wall_ms": "float64",
        **dict.fromkeys(BUCKETS, "float64"),
    },
    "collectives": {
        "group": "string",
        "process_group": "string",
        "group_ranks": "string",
        "name": "string",
        "step": "string",
        "start_ns": "Int64",
        "dur_ns": "Int64",
        "bytes": "Int64",
        "wait": "Int64",
    },
    "workers": {
        "path": "string",
        "base_ns": "Int64",
        "events": "Int64",
        "rank": "Int64",
        "world_size": "Int64",
    },
}


def _typed(frame: pd.DataFrame, schema: Mapping[str, str]) -> pd.DataFrame:
    """`frame` with exactly `schema`'s columns in its order and types (a missing one all null; texts of lists as
    JSON: a launch grid `[8, 8, 1]`)."""
    import json

    out = {}
    for c, dtype in schema.items():
        col = frame[c] if c in frame.columns else pd.Series([None] * len(frame), dtype=object)
        if dtype == "string":
            col = pd.Series(
                [
                    None
                    if v is None or (isinstance(v, float) and v != v)
                    else (json.dumps(v) if isinstance(v, (list, tuple, dict)) else str(v))
                    for v in col
                ],
                dtype="string",
            )
        else:
            col = pd.Series(list(col), dtype=object).astype(dtype)
        out[c] = col.reset_index(drop=True)
    return pd.DataFrame(out)


def _parquet_ready(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with every column Parquet can store: a column of lists or dicts (launch grids, nested answers) as JSON
    text, a column of mixed scalars as text."""
    import json

    out = frame.copy()
    for c in out.columns:
        col = out[c]
        if col.dtype != object:
            continue
        kinds = {type(v) for v in col if v is not None and not (isinstance(v, float) and v != v)}
        if kinds & {list, dict, tuple}:
            out[c] = [None if v is None else json.dumps(v) for v in col]
        elif len(kinds) > 1 and not kinds <= {int, float}:
            out[c] = [None if v is None else str(v) for v in col]
    return out


def _history_frame(d: dict[str, Any]) -> pd.DataFrame:
    rows = []
    for r in d.get("runs") or []:
        row = {k: v for k, v in r.items() if k not in ("buckets", "per_rank")}
        row.update({f"{k}_ms": v for k, v in (r.get("buckets") or {}).items()})
        rows.append(row)
    return pd.DataFrame(rows)


def _diagnosis_frame(d: dict[str, Any]) -> pd.DataFrame:
    rows = []
    for s in d.get("steps") or []:
        st = s.get("straggler") or {}
        rows.append(
            {
                "step": s["step"],
                "step_ms": s["step_ms"],
                "straggler": st.get("worker"),
                "rank": st.get("rank"),
                "excess_ms": st.get("excess_ms"),
                "what_if_ms": st.get("what_if_ms"),
                "saved_ms": st.get("saved_ms"),
                "why": st.get("why"),
                "path": s.get("path"),
            }
        )
    cols = ["step", "step_ms", "straggler", "rank", "excess_ms", "what_if_ms", "saved_ms", "why", "path"]
    return pd.DataFrame(rows, columns=cols)


def _route(path: str) -> Route:
    from tb_plugin.routes import ROUTES

    for r in ROUTES:
        if r.path == path:
            return r
    raise KeyError(path)


class Profile:
    """A logdir, a run folder or one trace file, opened for analysis (`open`). Per-file methods take `run`, `worker`
    and `span` (default: the profile's run, its first worker in name order, its span); run-level methods take `run`
    and `span`. Every method answers what the TensorBoard tab shows for the same choice, computed by the same code."""

    def __init__(self, path: str | os.PathLike[str], span: str = "1", scheduler: str | None = None) -> None:
        from profiler_core import storage
        from tb_plugin.workspace import Workspace

        text = os.fspath(path)
        self.path = text
        self.span = str(span)
        self._file: str | None = None
        logdir = text
        if not storage.is_remote(text) and os.path.isfile(text):
            logdir, self._file = os.path.dirname(os.path.abspath(text)), os.path.abspath(text)
        elif storage.is_remote(text) and not storage.isdir(text):
            logdir, self._file = storage.split(text)[0], text
        if not storage.is_remote(logdir) and not os.path.isdir(logdir):
            raise AnalysisError(f"{text}: no such file or directory")
        self.logdir = logdir
        self.ws: Workspace = Workspace(logdir, scheduler=scheduler, eager=False)
        self._worker: str | None = None
        self._run: str | None = None
        if self._file is not None:
            for r in self.ws.refresh().values():
                for w, files in r.workers.items():
                    for i, f in enumerate(files):
                        if f.file_path in (self._file, storage.normalize_root(self._file)):
                            self._run, self._worker, self.span = r.name, w, str(i + 1)
            if self._run is None:
                raise AnalysisError(
                    f"{text}: not a trace file gpuscope lists (name *.pt.trace.json[.gz] or *.json[.gz])"
                )

    # ------------------------------------------------------------------ the listing
    def close(self) -> None:
        """Stops the workspace's background threads (shared with the profiles `select` made: none of them answers
        after)."""
        self.ws.loader.close()
        self.ws.summaries.close()

    def __enter__(self) -> Profile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"gpuscope.Profile({self.path!r}, runs={self.runs!r})"

    @property
    def runs(self) -> list[str]:
        """The runs (folders holding traces; the logdir's own: the run named after it), as the tab lists them."""
        if self._file is not None:
            return [str(self._run)]
        return list(self.ws.refresh())

    @property
    def run(self) -> str | None:
        """The run the methods use by default: the opened file's, the one `select` chose or the only one, else None
        (then name one with `run=`)."""
        if self._run is not None:
            return self._run
        runs = self.runs
        return runs[0] if len(runs) == 1 else None

    def workers(self, run: str | None = None) -> list[str]:
        """The workers (ranks) of a run, in name order."""
        if self._worker is not None and run in (None, self._run):
            return [self._worker]
        return list(self._call("/workers", run=self._run_name(run))["workers"])

    def spans(self, run: str | None = None, worker: str | None = None) -> list[str]:
        """The spans ("1".."N", time order) of a worker."""
        name = self._run_name(run)
        return list(self._call("/spans", run=name, worker=worker or self.workers(name)[0])["spans"])

    # ------------------------------------------------------------------ plumbing
    def _run_name(self, run: str | None) -> str:
        if run is not None:
            return run
        if self.run is None:
            runs = self.runs
            if not runs:
                raise AnalysisError(f"{self.path}: no trace files")
            raise AnalysisError(f"{self.path} has {len(runs)} runs ({', '.join(runs[:20])}): name one with run=")
        return self.run

    def _file_args(self, run: str | None, worker: str | None, span: str | None) -> dict[str, str]:
        name = self._run_name(run)
        w = worker or (self._worker if name == self._run and self._worker else None) or self.workers(name)[0]
        return {"run": name, "worker": w, "span": span or self.span}

    def _call(self, path: str, **params: Any) -> Any:
        """The answer of the route `path` to `params` (texts, as a request carries them), as the HTTP layer gets it:
        parsed by the route, answered by its handler over this workspace."""
        from tb_plugin.errors import RequestError

        route = _route(path)
        try:
            args = route.parse({k: str(v) for k, v in params.items() if v is not None})
            return route.handler(self.ws, args)
        except RequestError as e:
            raise AnalysisError(str(e)) from None

    def _run_level(self, path: str, **params: Any) -> dict[str, Any]:
        """A run-level route's answer once every summary it reads exists: they are computed (or read) first, in this
        process, so the answer is never the `pending` one."""
        from tb_plugin.errors import RequestError

        runs = [params["run"]] + ([params["exp_run"]] if params.get("exp_run") else [])
        spans = [params.get("span") or self.span, params.get("exp_span") or self.span]
        for r, s in zip(runs, spans):
            try:
                self.ws.collect({"run": r, "span": s})
            except RequestError as e:
                raise AnalysisError(str(e)) from None
        for _ in range(PENDING_RETRIES):
            out = self._call(path, **params)
            if not (isinstance(out, dict) and "pending" in out and "progress" in out):
                return dict(out)
            time.sleep(PENDING_POLL_S)
        raise AnalysisError(f"{path}: the summaries of run {params['run']!r} are still being computed")

    def _summaries(self, run: str | None, span: str | None) -> dict[str, Any]:
        """worker -> its per-worker summary (`summaries.schema.Summary`) of the run and span, computed if missing."""
        from tb_plugin.errors import RequestError

        try:
            return dict(self.ws.collect({"run": self._run_name(run), "span": span or self.span}).summaries)
        except RequestError as e:
            raise AnalysisError(str(e)) from None

    # ------------------------------------------------------------------ one worker's trace (per-file views)
    def overview(self, run: str | None = None, worker: str | None = None, span: str | None = None) -> dict[str, Any]:
        """The Overview's answer as it is (the `/overview` route's JSON: steps, average, gpu, recommendations,
        environment, ledger; a run of several workers adds `run_ledger`)."""
        return dict(self._call("/overview", **self._file_args(run, worker, span)))

    def steps(self, run: str | None = None, worker: str | None = None, span: str | None = None) -> pd.DataFrame:
        """One row per step: `step` and its time breakdown in µs (`total_us`, `kernel_us`, `memcpy_us`,
        `memset_us`, `communication_us`, `runtime_us`, `dataloader_us`, `cpu_exec_us`, `other_us`)."""
        return _table(self.overview(run, worker, span)["steps"])

    def ledger(self, run: str | None = None, worker: str | None = None, span: str | None = None) -> pd.DataFrame:
        """The recoverable-time ledger of one worker: one row per step, `wall_ms` and each bucket's ms (NaN where
        the trace cannot measure it; docs/diagnosis.md names the buckets)."""
        return _ledger_frame(self.overview(run, worker, span).get("ledger"))

    def ledger_buckets(
        self, run: str | None = None, worker: str | None = None, span: str | None = None
    ) -> pd.DataFrame:
        """The ledger's buckets ranked by recoverable time: `key`, `label`, `ms` (per step on average),
        `recoverable_ms`, `share` (of the step, 0..1), `fix`, `reason` (why it is not measured, else None)."""
        return _buckets_frame(self.overview(run, worker, span).get("ledger"))

    def operators(
        self, run: str | None = None, worker: str | None = None, span: str | None = None, group_by: str = "name"
    ) -> pd.DataFrame:
        """The operators (`group_by` "name" or "name_shape"): `name`, `calls`, `host_self_us`, `host_total_us`,
        `device_self_us`, `device_total_us`, `tc_eligible`, `has_call_stack` (`input_shape` by name_shape)."""
        return _table(self._call("/operators", **self._file_args(run, worker, span), group_by=group_by)["rows"])

    def kernels(
        self, run: str | None = None, worker: str | None = None, span: str | None = None, group_by: str = "name"
    ) -> pd.DataFrame:
        """The GPU kernels (`group_by` "name", "name_op" or "name_op_config"): `name`, `calls`, `total_us`,
        `mean_us`, `min_us`, `max_us`, `blocks_per_sm`, `achieved_occupancy`, `tensor_cores`, the launch
        configuration (`grid`, `block`, `registers_per_thread`, `shared_memory`, `theoretical_occupancy`)."""
        return _table(self._call("/kernels", **self._file_args(run, worker, span), group_by=group_by)["rows"])

    def roofline(self, run: str | None = None, worker: str | None = None, span: str | None = None) -> pd.DataFrame:
        """How far each op group is from the hardware, most ms lost to its roofline bound first: `name`, `shapes`,
        `dtype`, `family` ("no model" for kernels no model covers), `calls`, `device_ms`, `flops`, `bytes`, `tflops`,
        `gbps` (achieved), `intensity`, `bound`, `roof`, `fraction`, `lost_ms`, `tc` (the /roofline answer's `ops`;
        its `mfu` is `mfu()`)."""
        return _table(self._call("/roofline", **self._file_args(run, worker, span))["ops"])

    def mfu(self, run: str | None = None, worker: str | None = None, span: str | None = None) -> pd.DataFrame:
        """Model FLOPs utilisation per step: `step`, `ms`, `model_tflop`, `all_tflop`, `mfu`, `hfu` (fractions of the
        device's matrix roof; None where the trace has no model FLOPs or the device no peaks)."""
        return _table(self._call("/roofline", **self._file_args(run, worker, span))["mfu"]["steps"])

    def memory(self, run: str | None = None, worker: str | None = None, span: str | None = None) -> pd.DataFrame:
        """Memory use per operator and device: `device`, `name`, `calls`, `size_increase_bytes`,
        `self_size_increase_bytes`, `alloc_count`, `self_alloc_count`, `alloc_size_bytes`, `self_alloc_size_bytes`."""
        ans = self._call("/memory/stats", **self._file_args(run, worker, span))
        frames = [_table(rows, device=d) for d, rows in (ans.get("rows") or {}).items()]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["device", "name"])

    def memory_curve(
        self, run: str | None = None, worker: str | None = None, span: str | None = None, max_points: int = 2000
    ) -> pd.DataFrame:
        """Allocated and reserved memory over time: `device`, `ts_us` (from the trace's first event),
        `allocated_bytes`, `reserved_bytes` (at most `max_points` points per device, peaks kept)."""
        ans = self._call("/memory/curve", **self._file_args(run, worker, span), max_points=max_points)
        frames = [pd.DataFrame(c).assign(device=d) for d, c in (ans.get("curves") or {}).items()]
        cols = ["device", "ts_us", "allocated_bytes", "reserved_bytes"]
        return pd.concat(frames, ignore_index=True)[cols] if frames else pd.DataFrame(columns=cols)

    def modules(self, run: str | None = None, worker: str | None = None, span: str | None = None) -> pd.DataFrame:
        """The module / annotation tree, one row per node in depth-first order: `depth`, `parent` (its path),
        `name`, `path`, `occurrences`, `operators`, `host_total_us`, `host_self_us`, `device_total_us`,
        `device_self_us`, `avg_host_us`."""
        return pd.DataFrame(list(_flatten_tree(self._call("/modules", **self._file_args(run, worker, span))["tree"])))

    # ------------------------------------------------------------------ the run (per-worker summaries)
    def gpu_idle(self, run: str | None = None, span: str | None = None) -> pd.DataFrame:
        """Why each GPU idled, per worker, device and step: `worker`, `device`, `step`, `cause` (docs/gpu_idle.md's
        categories, `unknown_launch`), `idle_ns`. Empty for traces without GPU activity."""
        rows = []
        for w, s in sorted(self._summaries(run, span).items()):
            gi = s.gpu_idle
            if gi is None or not gi.devices:
                continue
            for d, causes in gi.devices.items():
                for cause, per in causes.items():
                    for step, ns in zip(gi.steps, per or []):
                        rows.append({"worker": w, "device": d, "step": step, "cause": cause, "idle_ns": ns})
        return pd.DataFrame(rows, columns=["worker", "device", "step", "cause", "idle_ns"])

    def launches(self, run: str | None = None, span: str | None = None) -> pd.DataFrame:
        """Kernel launch statistics per worker and step: `worker`, `step`, `count`, `cpu_duration`,
        `gpu_duration`, `launch_delay` (ns sums), `shorter_than_launch` (kernels shorter than their launch call)."""
        from profiler_core.analysis.gpu_idle.gpu_idle_summary import LAUNCH_KEYS

        rows = []
        for w, s in sorted(self._summaries(run, span).items()):
            gi = s.gpu_idle
            if gi is None or not gi.launches:
                continue
            for i, step in enumerate(gi.steps):
                per = {k: (gi.launches.get(k) or [None] * len(gi.steps))[i] for k in LAUNCH_KEYS}
                rows.append({"worker": w, "step": step, **per})
        return pd.DataFrame(rows, columns=["worker", "step", *LAUNCH_KEYS])

    def queue_length(self, run: str | None = None, span: str | None = None) -> pd.DataFrame:
        """The largest CUDA queue length (launched, not yet started kernels) per worker and `device:stream`."""
        rows = [
            {"worker": w, "stream": k, "queue_max": v}
            for w, s in sorted(self._summaries(run, span).items())
            if s.gpu_idle is not None
            for k, v in s.gpu_idle.queue_max.items()
        ]
        return pd.DataFrame(rows, columns=["worker", "stream", "queue_max"])

    def distributed(self, run: str | None = None, span: str | None = None) -> dict[str, Any]:
        """The Distributed view's answer as it is (the `/distributed` route's JSON)."""
        return dict(self._call("/distributed", run=self._run_name(run), span=span or self.span))

    def overlap(self, run: str | None = None, span: str | None = None) -> pd.DataFrame:
        """Per worker, µs per step on average: `computation_us`, `overlap_us`, `communication_us`, `other_us`,
        `transfer_us`, `wait_us`."""
        workers = self.distributed(run, span).get("workers") or {}
        return _table([{"worker": w, **v} for w, v in workers.items()])

    def collectives(self, run: str | None = None, span: str | None = None) -> pd.DataFrame:
        """Collectives per worker, name and process group: `worker`, `name`, `calls`, `total_bytes`, `avg_bytes`,
        `total_latency_us`, `avg_latency_us`, `transfer_us`, `avg_transfer_us`, `bandwidth_gbps`, `group_size`,
        `process_group`."""
        ops = self.distributed(run, span).get("comm_ops") or {}
        return _table([{"worker": w, **row} for w, rows in ops.items() for row in rows])

    def group_waits(self, run: str | None = None, span: str | None = None) -> pd.DataFrame:
        """Wait and transfer per process group and worker: `group` ("pg [ranks]"), `worker`, `calls`,
        `transfer_us`, `wait_us` (waiting for the group's last member)."""
        groups = self.distributed(run, span).get("groups") or {}
        return _table([{"group": g, "worker": w, **v} for g, per in groups.items() for w, v in per.items()])

    def diagnosis(self, run: str | None = None, span: str | None = None) -> Diagnosis:
        """The run's diagnosis (caveats, ledger, critical path per step, stragglers, what-if): the `/diagnosis`
        route's answer and `gpuscope diagnose --json`'s."""
        ans = self._run_level("/diagnosis", run=self._run_name(run), span=span or self.span)
        return Diagnosis(ans, _frame=_diagnosis_frame)

    def run_ledger(self, run: str | None = None, span: str | None = None, which: str = "critical") -> pd.DataFrame:
        """The run's ledger across ranks, one row per step: `which` "critical" (the rank that set the step, named
        in `worker`) or "mean" (the ranks' mean); columns as `ledger`."""
        led = self.diagnosis(run, span).data.get("ledger") or {}
        return _ledger_frame(led.get(which))

    def stragglers(self, run: str | None = None, span: str | None = None) -> pd.DataFrame:
        """The critical path's stragglers, most saved first: `worker`, `rank`, `step`, `busy_ms`, `median_ms`,
        `excess_ms`, `step_ms`, `what_if_ms`, `saved_ms`, `why` (its excess by phase, kernel and operator stay in
        `phases`, `kernels`, `ops`)."""
        return _table(self.diagnosis(run, span).data.get("stragglers"))

    def critical_path(self, run: str | None = None, span: str | None = None) -> pd.DataFrame:
        """Each step's critical path across ranks, one row per segment: `step`, `step_ms`, `kind` (work, wait,
        transfer...), `worker`, `rank`, `ms`, `start_us`, `end_us`, `why`."""
        rows = []
        for s in self.diagnosis(run, span).data.get("steps") or []:
            for seg in s.get("segments") or []:
                rows.append({"step": s["step"], "step_ms": s["step_ms"], **seg})
        return pd.DataFrame(rows)

    def what_if(self, run: str | None = None, span: str | None = None) -> pd.DataFrame:
        """Per step, the step time if its straggler ran at the median rank's pace: `step`, `step_ms`, `straggler`,
        `rank`, `excess_ms`, `what_if_ms`, `saved_ms`, `why`, `path` (= `diagnosis().to_frame()`)."""
        return self.diagnosis(run, span).to_frame()

    def pipeline(self, run: str | None = None, span: str | None = None) -> Result:
        """The pipeline-parallel analysis (the `/pipeline` route's answer); `to_frame()`: per step and stage its
        bubble split (`step`, `bubble_ratio`, `theoretical_ratio`, `stage`, `worker`, `idle_ns`, `true_idle_ns`,
        `p2p_wait_ns`, `upstream_wait_ns`, `p2p_transfer_ns`...)."""

        def frame(d: dict[str, Any]) -> pd.DataFrame:
            rows = []
            for s in d.get("steps") or []:
                for st in s.get("stages") or []:
                    rows.append(
                        {
                            "step": s["step"],
                            "bubble_ratio": s.get("bubble_ratio"),
                            "theoretical_ratio": s.get("theoretical_ratio"),
                            **st,
                        }
                    )
            return pd.DataFrame(rows)

        return Result(self._run_level("/pipeline", run=self._run_name(run), span=span or self.span), _frame=frame)

    def clock_offsets(self, run: str | None = None, span: str | None = None) -> pd.DataFrame:
        """Each worker's clock offset against the reference worker: `worker`, `rank`, `shift_us`, `raw_shift_us`,
        `offset_us`, `collectives`, `spread_us`, `via`, `reason`."""
        return _table(self._run_level("/clock_offsets", run=self._run_name(run), span=span or self.span).get("workers"))

    def diff(
        self, other: Profile, run: str | None = None, other_run: str | None = None, span: str | None = None
    ) -> JobDiff:
        """`other` (job B) compared with this profile (job A), every rank of each run, from their summaries: the
        `/jobdiff` route's answer (same logdir) or `gpuscope jobdiff --json`'s."""
        from tb_plugin.run_level import job_diff

        a, b = self._run_name(run), other._run_name(other_run)
        if other.ws is self.ws:
            ans = self._run_level("/jobdiff", run=a, exp_run=b, span=span or self.span, exp_span=span or other.span)
            return JobDiff(ans, _frame=_lines_frame)
        try:
            ans = job_diff.job_diff(self._summaries(a, span), other._summaries(b, span or other.span))
        except job_diff.JobDiffError as e:
            raise AnalysisError(str(e)) from None
        return JobDiff(ans, _frame=_lines_frame)

    def history(self, span: str | None = None, order: str = "time", match: str | None = None) -> History:
        """The job's history across the runs of the logdir (`match`: a glob on run names), ordered by `order`
        ("time": the runs' first trace's time, or "name"): the `/history` route's answer and `gpuscope history
        --json`'s. `to_frame()`: one row per run (`run`, `time_ns`, `workers`, `steps`, `step_ms` (median),
        `mean_ms`, `mad_ms`, `min_ms`, `max_ms`, `mfu`, `verdict`, `baseline_ms`, `threshold_ms`, `regressed`, then the
        ledger's buckets in ms per step); `regression` and `explained` name and explain the first regressed run."""
        from tb_plugin.run_level import history as analysis
        from tb_plugin.summaries import rows

        sp = span or self.span
        for r in analysis.select(self.ws.refresh().values(), sp, match):
            if rows.kept(self.ws.summaries.logdir, r, sp, cache=True)[2] is not None:
                continue  # its row is kept on disk: its summaries are read only if the regression needs them
            try:
                self.ws.collect({"run": r.name, "span": sp})
            except Exception:  # noqa: BLE001 - a run of unreadable traces is listed in the answer's errors
                pass
        for _ in range(PENDING_RETRIES):
            out = self._call("/history", span=sp, order=order, match=match)
            if "pending" not in out:
                return History(dict(out), _frame=_history_frame)
            time.sleep(PENDING_POLL_S)
        raise AnalysisError("/history: the summaries are still being computed")

    # ------------------------------------------------------------------ Parquet export
    def tables(self, run: str | None = None, worker: str | None = None, span: str | None = None) -> dict:
        """One worker's exported tables (`to_parquet`'s, without the run/worker/span columns): table name -> frame."""
        args = self._file_args(run, worker, span)
        t = self.ws.trace(args)
        events = t.dense_events().reset_index(drop=True)
        steps = self.steps(**args)
        ledger = self.ledger(**args)
        return {
            "events": events,
            "kernels": self.kernels(**args),
            "operators": self.operators(**args),
            "steps": steps,
            "ledger": ledger,
            "collectives": self._collective_calls(args),
            "workers": pd.DataFrame(
                [
                    {
                        "path": self.ws.file(args).path,
                        "base_ns": int(t.base_ns),
                        "events": len(t.events),
                        "rank": (t.metadata.get("distributedInfo") or {}).get("rank"),
                        "world_size": (t.metadata.get("distributedInfo") or {}).get("world_size"),
                    }
                ]
            ),
        }

    def _collective_calls(self, args: dict[str, str]) -> pd.DataFrame:
        """Every collective call of one worker (its summary's `collective_calls`): `group`, `process_group`,
        `group_ranks`, `name`, `step`, `start_ns` (from the trace's first event), `dur_ns`, `bytes`, `wait`."""
        cols = ["group", "process_group", "group_ranks", "name", "step", "start_ns", "dur_ns", "bytes", "wait"]
        from tb_plugin.loader import failure_message

        f = self.ws.file(args)
        got = self.ws.summaries.collect([(args["worker"], f)], self.ws.trace_for_summary, failure_message)
        s = got.summaries.get(args["worker"])
        cc = None if s is None else s.collective_calls
        if s is None or cc is None or not cc.group:
            return pd.DataFrame(
                {c: pd.Series(dtype=object if c in ("group", "process_group", "name") else "int64") for c in cols}
            )
        steps = list(s.phases.step) if s.phases is not None else []
        return pd.DataFrame(
            {
                "group": [cc.groups[g] for g in cc.group],
                "process_group": [cc.group_pg[g] for g in cc.group],
                "group_ranks": [None if cc.group_ranks[g] is None else str(cc.group_ranks[g]) for g in cc.group],
                "name": [cc.names[n] for n in cc.name],
                "step": [steps[i] if 0 <= i < len(steps) else None for i in cc.step],
                "start_ns": cc.start,
                "dur_ns": cc.dur,
                "bytes": cc.bytes if cc.bytes is not None else [-1] * len(cc.group),
                "wait": cc.wait,
            },
            columns=cols,
        )

    def to_parquet(self, out: str | os.PathLike[str], span: str | None = None) -> dict[str, int]:
        """Writes every worker of every run (each span, or only `span`) as Parquet tables under `out`: one file per
        table and worker, `out/<table>/<run>.<worker>.<span>.parquet`, each with `run`, `worker` and `span` columns
        first (docs/python-api.md, Parquet export, gives each table's columns). Returns table -> files written.
        Needs pyarrow (`pip install "gpuscope[parquet]"`)."""
        import io
        import re

        from profiler_core import storage

        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise AnalysisError('Parquet export needs pyarrow: pip install "gpuscope[parquet]"') from None
        root = os.fspath(out)
        written: dict[str, int] = {}
        used: set[str] = set()
        for run in self.runs:
            for w in self.workers(run):
                spans = [span] if span else self.spans(run, w)
                for sp in spans:
                    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{run}.{w}.{sp}").lstrip(".") or "_"
                    while stem in used:
                        stem += "_"
                    used.add(stem)
                    for name, frame in self.tables(run, w, sp).items():
                        frame = _parquet_ready(frame) if name == "events" else _typed(frame, EXPORT_SCHEMA[name])
                        n = len(frame)
                        for i, (k, v) in enumerate((("run", run), ("worker", w), ("span", sp))):
                            frame.insert(i, k, pd.Categorical.from_codes([0] * n, [v]))
                        buf = io.BytesIO()
                        frame.to_parquet(buf, index=False)
                        folder = storage.join(root, name)
                        storage.makedirs(folder)
                        with storage.atomic_writer(storage.join(folder, stem + ".parquet")) as fh:
                            fh.write(buf.getvalue())
                        written[name] = written.get(name, 0) + 1
        return written

    def select(self, run: str) -> Profile:
        """This profile with `run` as its default run (same workspace: what was computed stays)."""
        if run not in self.runs:
            raise AnalysisError(f"no run {run!r} in {self.path} (runs: {', '.join(self.runs[:20])})")
        view = copy.copy(self)
        view._run = run
        view._worker = self._worker if run == self._run else None
        return view


def open(path: str | os.PathLike[str], span: str = "1", scheduler: str | None = None) -> Profile:  # noqa: A001
    """Opens a logdir, a run folder or one trace file (a local path or an fsspec URL: `s3://bucket/job`) for
    analysis. Nothing is read until a method asks; `span` is the default span of each worker ("1": its first
    trace); `scheduler`: a Dask scheduler that computes missing per-worker summaries."""
    return Profile(path, span=span, scheduler=scheduler)
