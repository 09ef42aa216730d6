"""What each route answers (the route table, `tb_plugin/routes.py`, names these functions): the request's
run/worker/span looked up in the workspace, a view from `tb_plugin.views` called, its answer returned.

Every handler is `handler(ws: Workspace, a: dict) -> answer`, `a` being the request's parameters parsed by its
route; a RequestError is the answer's HTTP error. Views are imported inside the handlers, so that the route table
stays light at TensorBoard's start. The run-level handlers read the per-worker summaries only and never wait for a
missing one: `Workspace.ready` answers `pending` while they are computed.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tb_plugin.errors import BadRequest, LoadFailed, NotFound, NotReady

if TYPE_CHECKING:
    from werkzeug import wrappers

    from tb_plugin.workspace import Workspace

#: seconds a client is told to wait (Retry-After) before asking again for what is still being computed
RETRY_AFTER_S = 2
#: a partial Distributed view (`partial=1` while summaries are computed) is computed again once the workers read
#: grew by this factor: a 64-rank run computes it about 6 times, not on every poll, leaving the cores to the summaries
PARTIAL_GROWTH = 2
#: a partial Distributed request with summaries pending waits for them up to their estimate + 0.1 s, at most this
#: many seconds (a small run answers complete on its first or second poll, a big one is asked less often)
PARTIAL_WAIT_S = 1.0
#: a /runs long poll looks at the logdir again at least this often (new files, files still being written)
WAIT_STEP_S = 1.0
#: a trace of at least this many events is warmed on two threads where there are 2 cores or more: the Overview
#: beside the operators and kernels (they share no stage; numpy and the op tree's C pass let go of the GIL).
#: 11M-event trace: views 2.8 s -> 1.9 s; below this the second thread's start costs more than it saves.
WARM_TWO_THREADS_EVENTS = 1 << 20


#: what the routes import on first use: the per-file Overview's ledger, the run-level routes (/distributed,
#: /diagnosis, the Overview's run ledger)
WARM_MODULES = (
    "profiler_core.analysis.worker.ledger",
    "tb_plugin.views.distributed",
    "tb_plugin.summaries.summary",
    "profiler_core.analysis.worker.worker_facts",
    "tb_plugin.run_level.stragglers",
    "tb_plugin.run_level.run_ledger",
    "tb_plugin.run_level.report",
)


# ------------------------------------------------------------------------ per-file answers, kept with the trace
def _kept_with_trace(t: Any, key: str, fn: Callable[[], Any]) -> Any:
    """A per-file view's answer, computed once per parsed trace (kept with its stages, dropped with it)."""
    from profiler_core.analysis.stages.registry import cached

    return cached(t, "plugin:" + key, fn)


def overview_answer(t: Any) -> dict:
    """The per-file /overview answer (without the run's ledger)."""
    from tb_plugin.views import overview

    return _kept_with_trace(t, "overview", lambda: overview.overview(t))


def operators_answer(t: Any, group_by: str) -> dict:
    """The /operators answer of one trace."""
    from tb_plugin.views import operators

    return _kept_with_trace(t, f"operators:{group_by}", lambda: operators.operators(t, group_by=group_by))


def kernels_answer(t: Any, group_by: str) -> dict:
    """The /kernels answer of one trace."""
    from tb_plugin.views import kernels

    return _kept_with_trace(t, f"kernels:{group_by}", lambda: kernels.kernels(t, group_by=group_by))


def _try(fn: Callable[[Any], object], t: Any) -> None:
    try:
        fn(t)
    except Exception:  # noqa: BLE001 - the request computes it again and answers the error
        import logging

        logging.getLogger(__name__).debug("gpuscope: warming a view failed", exc_info=True)


def warm_views(t: Any) -> None:
    """Compute what a file's first page asks for (the Overview, and the operators and kernels with
    their default grouping) once it is read, on the loader's warming thread: the requests then find
    the answers ready. A failure is left for the request to report."""
    from profiler_core.trace.read import parallel_plan
    from tb_plugin.params import KERNELS_GROUP_BY, OPERATORS_GROUP_BY

    def operators_and_kernels(t: Any) -> None:
        _try(lambda t: operators_answer(t, OPERATORS_GROUP_BY.default_value()), t)
        _try(lambda t: kernels_answer(t, KERNELS_GROUP_BY.default_value()), t)

    if len(t.events) >= WARM_TWO_THREADS_EVENTS and parallel_plan.here(native=False).warm_two_threads:
        beside = threading.Thread(target=_try, args=(overview_answer, t), name="gpuscope-warm-overview", daemon=True)
        beside.start()
        operators_and_kernels(t)
        beside.join()
    else:
        _try(overview_answer, t)
        operators_and_kernels(t)


# ------------------------------------------------------------------------ listing routes
def runs(ws: Workspace, a: dict) -> dict:
    """/runs: the runs, the loading progress, unreadable files; with `wait`, a long poll (bounded waiters)."""
    import os

    from profiler_core.storage import redact
    from tb_plugin import runs as runs_mod

    listed = ws.refresh(force=a["rescan"] == "1")  # a reload: list the logdir now
    progress = ws.loader.progress()
    loading = progress.pop("loading") or ws.scanner.unstable > 0
    # beyond runs.MAX_WAITERS long polls at once, one answers at once (each holds a server thread)
    waits = bool(loading and a["wait"]) and runs_mod.enter_wait()
    deadline = time.monotonic() + (a["wait"] if waits else 0.0)
    try:
        while loading and time.monotonic() < deadline:  # a long poll: answer once loaded, or at the deadline
            left = deadline - time.monotonic()
            if progress["files_done"] < progress["files_total"]:
                ws.loader.wait_loaded(min(left, WAIT_STEP_S))
            else:  # files still being written: listed again until they are stable
                time.sleep(min(left, WAIT_STEP_S))
            listed = ws.refresh()
            progress = ws.loader.progress()
            loading = progress.pop("loading") or ws.scanner.unstable > 0
    finally:
        if waits:
            runs_mod.leave_wait()
    errors = [{"run": f.run, "file": f.relpath, "error": msg} for f, msg in ws.loader.errors()]
    errors.sort(key=lambda e: (e["run"], e["file"]))
    if ws.scanner.error:  # a remote logdir that cannot be listed (bucket, credentials, network)
        where = redact(ws.scanner.logdir)
        reason = ws.scanner.error
        errors.insert(
            0,
            {
                "run": "",
                "file": where,
                "error": reason[len(where) + 2 :] if reason.startswith(where + ": ") else reason,
            },
        )
    warnings = sorted(
        ({"run": f.run, "file": f.relpath, "message": msg} for f, msg in ws.loader.warnings()),
        key=lambda w: (w["run"], w["file"]),
    )
    out = {"runs": list(listed), "loading": loading, "progress": progress, "errors": errors, "warnings": warnings}
    if not listed:  # say where nothing was found (a mistyped --logdir is the usual cause)
        out["logdir"] = redact(ws.scanner.logdir or ws.logdir)
        if not ws.scanner.remote and ws.scanner.logdir and not os.path.isdir(ws.scanner.logdir):
            out["logdir_missing"] = True
    return out


def file_status(ws: Workspace, a: dict) -> dict:
    """/file_status: how far the loading of one run/worker/span's file is, and of all files together."""
    out = ws.loader.file_status(ws.file(a))
    out["all"] = ws.loader.progress()
    return out


def workers(ws: Workspace, a: dict) -> dict:
    """/workers: the workers of a run; `unreadable`: those none of whose files could be read (as far as known
    now), with the reason: they are listed, as `gpuscope diagnose` names them, but are no worker of the run-level
    views (/diagnosis and /distributed list them under `errors`)."""
    run = ws.run(a["run"])
    names = sorted(run.workers)
    out: dict = {"workers": names}
    unreadable = {}
    for w in names:
        # an empty file is known unreadable from the listing (the reader's reason), before the loader reaches it
        files = [f for s in run.spans(w) if (f := run.file(w, s)) is not None]
        reasons = [ws.loader.error(f) or ("empty file" if f.size == 0 else None) for f in files]
        if reasons and all(reasons):
            unreadable[w] = reasons[0]
    if unreadable:
        out["unreadable"] = unreadable
    return out


def spans(ws: Workspace, a: dict) -> dict:
    """/spans: the spans of a worker."""
    run = ws.run(a["run"])
    worker = a["worker"]
    if worker not in run.workers:
        raise NotFound(f"unknown worker {worker!r} in run {run.name!r}")
    return {"spans": run.spans(worker)}


# ------------------------------------------------------------------------ per-file views
def overview(ws: Workspace, a: dict) -> dict:
    """/overview: the file's overview and ledger; for a run of several workers, the run's ledger from the
    summaries there are now."""
    out = overview_answer(ws.trace(a))
    if len(ws.run(a["run"]).workers) > 1:
        from tb_plugin.run_level.run_ledger import run_view
        from tb_plugin.summaries.engine import Pending

        now = ws.summaries_now(a)
        summaries, pending = now.summaries, list(now.pending) if isinstance(now, Pending) else []
        ledger = ws.kept(("run_ledger", *pending), [summaries], lambda: run_view(summaries, pending))
        out = {**out, "run_ledger": {**ledger, "errors": now.errors}}
    return out


def modules(ws: Workspace, a: dict) -> dict:
    """/modules."""
    from tb_plugin.views import modules as view

    return view.modules(ws.trace(a))


def operators(ws: Workspace, a: dict) -> dict:
    """/operators."""
    return operators_answer(ws.trace(a), a["group_by"])


def operator_stack(ws: Workspace, a: dict) -> dict:
    """/operators/stack."""
    from tb_plugin.views import operators as view

    return view.operator_stacks(ws.trace(a), a["name"], input_shape=a["input_shape"])


def kernels(ws: Workspace, a: dict) -> dict:
    """/kernels."""
    return kernels_answer(ws.trace(a), a["group_by"])


def roofline(ws: Workspace, a: dict) -> dict:
    """/roofline."""
    from tb_plugin.views import roofline as view

    t = ws.trace(a)
    return _kept_with_trace(t, "roofline", lambda: view.roofline(t))


def memory_curve(ws: Workspace, a: dict) -> dict:
    """/memory/curve."""
    from tb_plugin.views import memory

    return memory.memory_curve(ws.trace(a), a["start_us"], a["end_us"], max_points=a["max_points"])


def memory_events(ws: Workspace, a: dict) -> dict:
    """/memory/events."""
    from tb_plugin.views import memory

    return memory.memory_events(ws.trace(a), a["start_us"], a["end_us"])


def memory_stats(ws: Workspace, a: dict) -> dict:
    """/memory/stats."""
    from tb_plugin.views import memory

    return memory.memory_stats(ws.trace(a), a["start_us"], a["end_us"])


def _compared(ws: Workspace, a: dict, view: Callable[[Any, Any], dict]) -> dict:
    """A view of two profiles: the request's and the one exp_* names (or, without exp_*, `other_profile`'s)."""
    base = ws.trace(a)
    compared = ("exp_run", "exp_worker", "exp_span")
    if any(a[k] is not None for k in compared):
        missing = [k for k in compared if a[k] is None]
        if missing:
            raise BadRequest(
                f"missing parameter {missing[0]!r} (give all of exp_run, exp_worker and exp_span, or none)"
            )
        exp, other = ws.trace(a, prefix="exp_"), None
    else:
        other = ws.other_profile(ws.run(a["run"]), a["worker"], a["span"])
        exp = ws.loader.get(other[0].file(other[1], other[2]))
    out = view(base, exp)
    if other is not None and isinstance(out, dict):
        out["compared_with"] = {"run": other[0].name, "worker": other[1], "span": other[2]}
    return out


def diff(ws: Workspace, a: dict) -> dict:
    """/diff."""
    from tb_plugin.views import diff as view

    return _compared(ws, a, view.diff)


def kernel_diff(ws: Workspace, a: dict) -> dict:
    """/diff/kernels."""
    from tb_plugin.views import kernel_diff as view

    return _compared(ws, a, view.kernel_diff)


def timeline(ws: Workspace, a: dict) -> dict:
    """/timeline."""
    from tb_plugin.views import timeline as view

    return view.timeline(ws.trace(a), a["start_us"], a["end_us"], width_px=a["width_px"])


def search(ws: Workspace, a: dict) -> dict:
    """/timeline/search."""
    from tb_plugin.views import timeline as view

    return view.search(ws.trace(a), a["query"], limit=a["limit"])


def range_summary(ws: Workspace, a: dict) -> dict:
    """/timeline/summary."""
    from tb_plugin.views import timeline_tools

    return timeline_tools.range_summary(ws.trace(a), a["start_us"], a["end_us"], tracks=a["tracks"])


def counters(ws: Workspace, a: dict) -> dict:
    """/timeline/counters."""
    from tb_plugin.views import timeline_tools

    return timeline_tools.counters(ws.trace(a), a["start_us"], a["end_us"], a["width_px"])


def occurrences(ws: Workspace, a: dict) -> dict:
    """/timeline/occurrences."""
    from tb_plugin.views import timeline_tools

    return timeline_tools.occurrences(
        ws.trace(a), a["name"], limit=a["limit"], of=a["of"], input_shape=a["input_shape"], op=a["op"]
    )


def locate(ws: Workspace, a: dict) -> dict:
    """/timeline/locate."""
    from tb_plugin.views import timeline_tools

    return timeline_tools.locate(ws.trace(a), a["idx"])


def event(ws: Workspace, a: dict) -> dict:
    """/event: one event of the file as written, read back from it."""
    from profiler_core.trace.read.lookup import trace_event

    idx = a["idx"]
    t = ws.trace(a)
    try:
        ev = trace_event(t, idx)
    except IndexError as e:
        raise NotFound(str(e)) from None
    except Exception as e:  # noqa: BLE001 - file changed or vanished since it was loaded
        raise NotFound(f"event {idx} cannot be read: {e}") from None
    if not isinstance(ev, dict):
        return {"idx": idx, "event": ev, "args": {}}
    args = ev.get("args")
    return {
        "idx": idx,
        "event": {k: v for k, v in ev.items() if k != "args"},
        "args": args if isinstance(args, dict) else {},
    }


def trace(ws: Workspace, a: dict) -> wrappers.Response:
    """/trace: the raw file, once it parsed (else LoadFailed: 422), gzip-encoded."""
    from werkzeug import wrappers

    from tb_plugin import trace_download as dl

    f = ws.file(a)
    t = ws.loader.get(f)
    fh = dl.open_parsed(f, tuple(t.source_stat))
    try:
        gz = fh.read(2) == b"\x1f\x8b"
        fh.seek(0)
    except OSError as e:
        fh.close()
        raise NotFound(f"{f.relpath}: cannot read ({e.strerror or e})") from None
    body = dl.file_chunks(fh) if gz else dl.gzip_chunks(fh)
    headers = {
        "Content-Encoding": "gzip",
        "Cache-Control": "no-cache",
        "X-Content-Type-Options": "nosniff",
        "Content-Disposition": dl.content_disposition(dl.download_name(f.file_path)),
    }
    if gz:
        headers["Content-Length"] = str(t.source_stat[0] if t.source_stat[0] >= 0 else f.size)
    return wrappers.Response(
        body, status=200, content_type="application/json", headers=headers, direct_passthrough=True
    )


# ------------------------------------------------------------------------ run-level views (summaries only)
def _with_errors(result: dict, errors: list) -> dict:
    if errors:
        result["errors"] = errors
    return result


def _distributed_parts(summaries: dict) -> dict:
    """worker -> its summary's `distributed` (`schema.Distributed`; a stored summary always has one)."""
    return {w: s.distributed for w, s in summaries.items() if s.distributed is not None}


def distributed_view(summaries: dict) -> dict:
    """The /distributed answer of the workers' summaries (without `pending` and `errors`): `caveats` first
    (`run_level.caveats`); with ranks missing (a caveat that withholds), no straggler rows (`withheld` names it)."""
    from tb_plugin.run_level import caveats as cv
    from tb_plugin.run_level import stragglers
    from tb_plugin.views import distributed as view

    cavs = cv.caveats(summaries)
    held = cv.withheld(cavs) if len(summaries) > 1 else None
    result = {"caveats": cv.as_json(cavs), **view.from_summaries(_distributed_parts(summaries)), "withheld": held}
    if held is not None:
        result["stragglers"] = []
    if isinstance(result.get("stragglers"), list):  # why, what-if and the Diff pair, from the same summaries
        stragglers.annotate_rows(result["stragglers"], summaries)
    devices = result.get("devices")
    if isinstance(devices, dict):  # the per-worker table: what each summary says of its worker
        for w, d in devices.items():
            s = summaries[w]
            d["events"] = s.events
            d["memory_peak"] = s.memory_peak
            d["step_avg_us"] = s.overview.average.get("total_us") if s.overview is not None else None
            # MFU per rank: a rank slower than the others at the same MFU waits; at a lower MFU it computes worse
            d["mfu"] = s.roofline.mfu if s.roofline is not None else None
            d["hfu"] = s.roofline.hfu if s.roofline is not None else None
    return result


def distributed(ws: Workspace, a: dict) -> dict:
    """/distributed: waits for every summary, or with `partial=1` answers from those there are now."""
    from tb_plugin.summaries.engine import Pending

    pending: list = []
    progress: dict = {}
    # partial: what is known now, `pending` naming the workers still read and `progress` how far (one worker:
    # nothing to show early)
    if a["partial"] == "1" and len(ws.run(a["run"]).workers) > 1:
        now = ws.summaries_now(a)
        if isinstance(now, Pending):  # about to be done: answer complete rather than make the page poll again
            ws.summaries.wait([f for _, f in ws.span_files(a)], min(PARTIAL_WAIT_S, (now.eta_s or 0.0) + 0.1))
            now = ws.summaries_now(a)
        summaries, errors = now.summaries, now.errors
        if isinstance(now, Pending):
            pending = now.pending
            done = len(summaries) + len(errors)
            progress = {"done": done, "total": done + len(pending), "eta_s": now.eta_s}
        if not summaries:
            return {
                "caveats": [],
                "workers": {},
                "steps": {},
                "comm_ops": {},
                "pending": pending,
                "progress": progress,
                **({"errors": errors} if errors else {}),
            }
    else:
        got = ws.collect(a)
        summaries, errors = got.summaries, got.errors
    key = (a["run"], a["span"])
    last = ws.partial_views.get(key)
    if pending and last is not None and len(summaries) < PARTIAL_GROWTH * last[0]:
        result = dict(last[1])  # the view of fewer workers until their number grew enough: polls stay cheap
    else:
        result = ws.kept(("distributed",), [summaries], lambda: distributed_view(summaries))
        if pending:
            ws.partial_views[key] = (len(summaries), result)
    if pending:
        result["pending"] = pending
        result["progress"] = progress
    else:
        ws.partial_views.pop(key, None)
    return _with_errors(result, errors)


def _run_answer(ws: Workspace, a: dict, key: str, compute: Callable[[dict], dict]) -> dict:
    """A run-level answer computed from every worker's summary by `compute(summaries)`, kept per set of summaries
    (`Workspace.kept`), with the failed files as `errors`; the pending answer while summaries are computed."""
    ready = ws.ready(a)
    if isinstance(ready, dict):
        return ready
    [got] = ready
    return _with_errors(ws.kept((key,), [got.summaries], lambda: compute(got.summaries)), got.errors)


def diagnosis(ws: Workspace, a: dict) -> dict:
    """/diagnosis: the run's report (a one-worker run: its single-rank critical path, from its trace)."""
    from tb_plugin.run_level import report

    run = ws.run(a["run"])
    trace = lambda w: ws.loader.get(run.file(w, a["span"]))  # noqa: E731
    return _run_answer(ws, a, "diagnosis", lambda summaries: report.diagnose(summaries, trace=trace))


def pipeline(ws: Workspace, a: dict) -> dict:
    """/pipeline."""
    from tb_plugin.run_level import pipeline as analysis

    return _run_answer(
        ws, a, "pipeline", lambda summaries: analysis.analyse({w: s.pipeline for w, s in summaries.items()})
    )


def clock_offsets(ws: Workspace, a: dict) -> dict:
    """/clock_offsets."""
    from tb_plugin.run_level import clock_offsets as analysis

    return _run_answer(ws, a, "clock_offsets", analysis.clock_offsets)


def jobdiff(ws: Workspace, a: dict) -> Any:
    """/jobdiff: two runs' jobs compared rank by rank (JSON, or the ranked deltas as CSV)."""
    from werkzeug import wrappers

    from tb_plugin.run_level import job_diff
    from tb_plugin.trace_download import content_disposition

    ready = ws.ready({"run": a["run"], "span": a["span"]}, {"run": a["exp_run"], "span": a["exp_span"]})
    if isinstance(ready, dict):
        if a["format"] == "csv":  # never a partial CSV: a download link asked too early says so
            p = ready["progress"]
            raise NotReady(
                f"the workers' summaries are still being computed ({p['done']} of {p['total']} done); "
                f"ask again in a few seconds",
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        return ready
    ga, gb = ready
    sa, sb = ga.summaries, gb.summaries
    try:
        result = ws.kept(("jobdiff",), [sa, sb], lambda: job_diff.job_diff(sa, sb))
    except job_diff.JobDiffError as e:
        raise LoadFailed(str(e)) from None
    if a["format"] == "csv":
        name = f"jobdiff_{a['run']}_{a['exp_run']}.csv".replace("/", "_")
        return wrappers.Response(
            job_diff.to_csv(result),
            status=200,
            content_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": content_disposition(name), "X-Content-Type-Options": "nosniff"},
        )
    errors = [{**e, "run": a["run"]} for e in ga.errors] + [{**e, "run": a["exp_run"]} for e in gb.errors]
    return _with_errors(result, errors)


def history(ws: Workspace, a: dict) -> dict:
    """/history: the logdir's runs (those matching `match`, with the span) in order, each from its summaries, and the
    first run slower than the noise of the runs before it, explained by its job diff (`run_level.history`)."""
    from tb_plugin.run_level import history as analysis
    from tb_plugin.summaries import rows
    from tb_plugin.summaries.answers import answer_of, identity
    from tb_plugin.summaries.engine import Pending, Ready, pending_answer

    chosen = analysis.select(ws.refresh().values(), a["span"], a["match"])
    if not chosen:
        raise NotFound(f"no run{' matching ' + repr(a['match']) if a['match'] else ''} has span {a['span']!r}")
    logdir, span = ws.summaries.logdir, a["span"]
    states: list = []
    ids: dict[int, tuple | None] = {}  # id(a run's summaries) -> their identity, taken while they are in memory
    kept: dict[int, dict] = {}  # id(a run's lazy summaries) -> its row kept on disk (`summaries.rows`)
    keys: dict[int, tuple[str, str]] = {}  # id(a run's summaries) -> (its row's key, where the plugin keeps it)
    for r in chosen:
        files, row_key, row = rows.kept(logdir, r, span, cache=True)
        if row is not None and row_key is not None:  # every summary stored, its row kept: none is read for it
            lazy = rows.LazySummaries([w for w, _ in files], functools.partial(_summaries_of_run, ws, r.name, span))
            kept[id(lazy)] = row
            ids[id(lazy)] = ("row", row_key)
            states.append(Ready(lazy, []))  # type: ignore[arg-type]
            continue
        st = ws.summaries_now({"run": r.name, "span": span})
        states.append(st)
        if not isinstance(st, Pending):
            ids[id(st.summaries)] = identity(ws.summaries, st.summaries)
            row_key = rows.fingerprint(logdir, files)
            if row_key is not None:
                keys[id(st.summaries)] = (row_key, rows.cache_path(logdir, "history", r.name, span))
    if any(isinstance(s, Pending) for s in states):
        return pending_answer(states, [r.name for r in chosen])
    series = [(r.name, analysis.run_time(r), s.summaries) for r, s in zip(chosen, states)]
    errors = [{**e, "run": r.name} for r, s in zip(chosen, states) for e in s.errors]
    key = ("history", a["order"], a["match"], *(r.name for r in chosen))

    def keep(summaries: Mapping[str, Any], compute: Callable[[], dict]) -> dict:
        # each run's row by its summaries' identity: a logdir with one run more computes that run only; kept on
        # disk too (beside the parse cache) where its summaries are the logdir's stored ones
        row = kept.get(id(summaries))
        if row is not None:
            return row
        row = answer_of(ws.summaries, ("history/run",), [ids.get(id(summaries))], compute)
        if id(summaries) in keys:
            rows.write(keys[id(summaries)][1], keys[id(summaries)][0], row)
        return row

    run_ids = [ids.get(id(s)) for _, _, s in series]
    result = dict(answer_of(ws.summaries, key, run_ids, lambda: analysis.history(series, order=a["order"], keep=keep)))
    return _with_errors(result, errors)


def _summaries_of_run(ws: Workspace, run: str, span: str) -> dict:
    """A run's summaries, waited for (a history's regression reading a run whose row was kept)."""
    return ws.collect({"run": run, "span": span}).summaries


def distributed_step(ws: Workspace, a: dict) -> dict:
    """/distributed/step: one worker's step in detail."""
    from tb_plugin.views import distributed as view

    worker, step = a["worker"], a["step"]
    summaries = ws.collect(a).summaries
    if worker not in summaries:
        raise NotFound(f"unknown worker {worker!r} (or its trace cannot be read)")
    parts = _distributed_parts(summaries)
    return ws.kept(("distributed/step", worker, step), [summaries], lambda: view.step_detail(parts, worker, step))


def _telemetry_job(ws: Workspace, a: dict) -> Any:
    from tb_plugin import telemetry

    run = a["run"] if len(a["run"]) <= 200 else a["run"][:200] + "..."
    try:
        return telemetry.load(ws.scanner.logdir or ws.logdir, a["run"])
    except ValueError:
        raise BadRequest(f"run {run!r}: a folder inside the logdir") from None
    except (FileNotFoundError, NotADirectoryError):
        raise NotFound(f"run {run!r}: no flight-recorder telemetry (*.telemetry.jsonl) there") from None


def telemetry_runs(ws: Workspace, a: dict) -> dict:
    """/telemetry/runs: the folders holding flight-recorder telemetry."""
    from tb_plugin import telemetry

    return {"runs": telemetry.runs(ws.scanner.logdir or ws.logdir)}


def telemetry(ws: Workspace, a: dict) -> dict:
    """/telemetry: per-rank summaries, stragglers and captures of a telemetry run (`tb_plugin.telemetry.summary`);
    each capture names its run (the capture folder from the logdir) for /diagnosis."""
    from profiler_core import storage
    from tb_plugin import telemetry as analysis

    out = analysis.summary(_telemetry_job(ws, a))
    base = "" if a["run"] in ("", ".") else a["run"].strip("/") + "/"
    for c in out["captures"]:
        c["run"] = base + c["dir"]
    out["dir"] = storage.redact(out["dir"])
    return out


def telemetry_heatmap(ws: Workspace, a: dict) -> dict:
    """/telemetry/heatmap: the step x rank heatmap, downsampled (`tb_plugin.telemetry.heatmap`)."""
    from tb_plugin import telemetry as analysis

    return analysis.heatmap(_telemetry_job(ws, a), a["metric"], max_steps=a["max_steps"], agg=a["agg"])
