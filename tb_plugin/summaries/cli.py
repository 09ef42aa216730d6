"""`gpuscope summarize LOGDIR [--scheduler ADDRESS | --local N] [--out DIR] [--force]`
`gpuscope diagnose LOGDIR [RUN] [--span N] [--json]`
`gpuscope jobdiff LOGDIR_A[:RUN] LOGDIR_B[:RUN] [--span N] [--exp-span N] [--json | --csv]`
`gpuscope history LOGDIR [--span N] [--order time|name] [--match GLOB] [--json]`
`gpuscope export LOGDIR OUT [--format parquet] [--span N]`

Computes the summary of every trace file under LOGDIR, each on a Dask worker that reads its own file
straight from the storage and sends back only the summary (a few KB), then writes them under --out
(default LOGDIR/.gpuscope/summaries, where the plugin finds them). Without --scheduler or --local
the files are summarized one after the other in this process.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from profiler_core import child_env
from tb_plugin.summaries import fs, store
from tb_plugin.summaries.engine import IO_THREADS, source_of, summarize_bytes

#: what `printable` escapes: C0, DEL, C1, and lone surrogates
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def printable(text: str, keep: str = "") -> str:
    """`text` safe on a terminal: C0 and C1 control characters and DEL (but those in `keep`) as `\\xNN` escapes,
    so that a name from a folder or a trace (`ctl\\x1b[31m`) sends no escape sequence; a lone surrogate (an
    undecodable byte of a command-line argument) as `\\xNN` too, or `\\uNNNN`."""

    def esc(m: re.Match) -> str:
        ch = m.group()
        o = ord(ch)
        if ch in keep:
            return ch
        if 0xD800 <= o <= 0xDFFF:
            return f"\\x{o - 0xDC00:02x}" if 0xDC80 <= o <= 0xDCFF else f"\\u{o:04x}"
        return f"\\x{o:02x}"

    return _UNPRINTABLE.sub(esc, text)


def _print(*parts: object, file: Any = None, end: str = "\n", flush: bool = False) -> None:
    """print() of text output: every part through `printable` (line breaks kept)."""
    print(*(printable(str(p), keep="\n") for p in parts), file=file, end=end, flush=flush)


class ScanFailed(Exception):
    """The logdir could not be listed (message without credentials)."""


class SchedulerUnavailable(Exception):
    """The Dask scheduler given with --scheduler cannot be reached (or is not an address)."""


def _files(logdir: str) -> list:
    from tb_plugin.runs import Scanner

    scanner = Scanner(logdir, stable_age_s=0.0)
    runs = scanner.scan()
    if getattr(scanner, "error", None):
        raise ScanFailed(scanner.error)
    return [f for r in runs.values() for f in r.files()]


def _todo(files: list, out: str, force: bool) -> list:
    """The files whose summary under `out` is missing, stale or unreadable."""
    if force:
        return list(files)
    with ThreadPoolExecutor(IO_THREADS) as pool:  # small reads, slow on object stores: in parallel
        found = list(pool.map(lambda f: store.read(store.out_path(out, f.relpath), source_of(f)), files))
    return [f for f, s in zip(files, found) if s is None]


@contextlib.contextmanager
def _children_ignore_sigint() -> Any:
    """Processes started in the block ignore SIGINT (an ignored signal stays ignored in children):
    Ctrl-C then reaches only this process, which stops them, instead of each worker printing its
    traceback. SIGINT is also blocked in this thread meanwhile, so that a Ctrl-C during the block
    stays pending (Linux keeps a blocked signal even while it is ignored) and arrives when it ends;
    one that the kernel hands to another thread of the process (a BLAS pool's) is lost."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def local_workers(asked: int, files: int) -> int:
    """Worker processes of a --local cluster: as asked, but no more than files or cores."""
    return max(1, min(asked, files, os.cpu_count() or 1))


def _client(args: argparse.Namespace) -> tuple[Any, Any]:
    if args.scheduler:
        Client, _ = _dask()
        try:
            return Client(args.scheduler, timeout="30s"), None
        except (OSError, ValueError, TypeError) as e:
            raise SchedulerUnavailable(
                f"cannot connect to the Dask scheduler {args.scheduler!r}: {fs.redact(str(e))}"
            ) from None
    # the workers report failures through their results; their log lines (a task cancelled by
    # Ctrl-C, say) would only repeat them
    quiet = {"DASK_LOGGING__DISTRIBUTED": "error"}
    saved = {k: os.environ.get(k) for k in quiet}
    with _children_ignore_sigint():
        os.environ.update(quiet)
        try:
            Client, LocalCluster = _dask()
            cluster = LocalCluster(n_workers=args.local, threads_per_worker=1, processes=True, dashboard_address=None)
            return Client(cluster), cluster
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


@contextlib.contextmanager
def _quiet_local_cluster() -> Any:
    """This process's Dask and Tornado logging silenced while a local cluster runs and closes:
    failures are reported per file from the results, and a Ctrl-C makes their event loop log
    cancelled callbacks and forgotten keys."""
    names = [n for n in list(logging.root.manager.loggerDict) if n.split(".")[0] in ("distributed", "tornado")]
    loggers = [logging.getLogger(n) for n in ("distributed", "tornado", *names)]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _dask() -> tuple[Any, Any]:
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise SystemExit(
            "gpuscope summarize: --scheduler and --local need Dask: pip install 'gpuscope[dask]'"
        ) from None
    return Client, LocalCluster


def summarize_logdir(
    logdir: str,
    out: str | None = None,
    scheduler: str | None = None,
    local: int | None = None,
    force: bool = False,
    log=_print,
) -> dict:
    """Summarizes every trace file of `logdir` that lacks a valid summary under `out`; returns counts
    (files, done, skipped, failed: [(relpath, reason)]) and the wall time."""
    t0 = time.perf_counter()
    out = out or store.default_out(logdir)
    files = _files(logdir)
    todo = _todo(files, out, force)
    failed: list[tuple[str, str]] = []

    writer = ThreadPoolExecutor(IO_THREADS)  # writes overlap with the cluster's work
    writes: list = []

    def write(f: Any, data: bytes) -> bool:
        try:
            fs.write_bytes(store.out_path(out, f.relpath), data)
            return True
        except Exception as e:  # noqa: BLE001
            failed.append((f.relpath, _reason(f, e)))
            return False

    def keep(f: Any, data: bytes) -> None:
        from tb_plugin.summaries.summary import decode

        s = decode(data)
        if s.source is None or s.source.size != f.size:
            failed.append((f.relpath, "the file changed while it was summarized"))
            return
        writes.append(writer.submit(write, f, data))

    if todo and (scheduler or local):
        if local:
            workers = local_workers(local, len(todo))
            log(
                f"gpuscope summarize: {len(todo)} files on {workers} local worker processes"
                + (f" ({local} asked; at most one per file and per core)" if workers != local else "")
            )
            local = workers
        # local workers (and their restarts) never import from the working directory
        with child_env.safe_path():
            args = argparse.Namespace(scheduler=scheduler, local=local)
            client, cluster = _client(args)
            stack = contextlib.ExitStack()
            if cluster is not None:
                stack.enter_context(_quiet_local_cluster())
            try:
                from distributed import as_completed

                # pure=False: a fresh random key per task (never another client's result on a shared scheduler)
                futs = {client.submit(summarize_bytes, f.path, pure=False): f for f in todo}
                for n, fut in enumerate(as_completed(futs), 1):
                    f = futs[fut]
                    if n % max(1, len(futs) // 10) == 0 and n < len(futs):
                        log(f"gpuscope summarize: {n} of {len(futs)} files")
                    try:
                        keep(f, fut.result())
                    except Exception as e:  # noqa: BLE001 - one bad file must not stop the others
                        failed.append((f.relpath, _reason(f, e)))
            finally:
                with stack:
                    client.close()
                    if cluster is not None:
                        cluster.close()
    else:
        for f in todo:
            try:
                keep(f, summarize_bytes(f.path))
            except Exception as e:  # noqa: BLE001
                failed.append((f.relpath, _reason(f, e)))
    writer.shutdown(wait=True)
    done = sum(w.result() for w in writes)
    failed.sort()
    for rel, why in failed:
        log(f"gpuscope summarize: {rel}: {why}")
    return {
        "files": len(files),
        "done": done,
        "skipped": len(files) - len(todo),
        "failed": failed,
        "out": out,
        "seconds": time.perf_counter() - t0,
    }


def _reason(f: Any, e: BaseException) -> str:
    text = str(e).replace(f.path, f.relpath)
    return text if type(e).__name__ in ("TraceReadError", "SummaryError") else f"{type(e).__name__}: {text}"


class DiagnoseFailed(Exception):
    """`gpuscope diagnose` cannot answer (no such logdir, run or span, no readable trace): the message says why."""


def _scan(logdir: str) -> dict:
    """The runs of `logdir`, listed now (no stability wait); DiagnoseFailed when it cannot be listed or is empty."""
    from tb_plugin.runs import Scanner

    scanner = Scanner(logdir, stable_age_s=0.0)
    runs = scanner.scan()
    if getattr(scanner, "error", None):
        raise DiagnoseFailed(f"cannot list the logdir: {scanner.error}")
    if not runs:
        raise DiagnoseFailed(f"{logdir}: no trace files")
    return runs


def run_summaries(
    logdir: str,
    run: str | None,
    span: str,
    log=_print,
    prog: str = "gpuscope diagnose",
    errors: list | None = None,
) -> tuple[str, dict, dict]:
    """The run's name, its workers' summaries at `span` (read from LOGDIR/.gpuscope/summaries, the missing
    ones computed here and stored there when it is writable) and their trace paths. DiagnoseFailed when there is
    nothing to read. Each trace that cannot be read is logged and, given `errors`, appended to it as the plugin's
    run-level routes list it (`{"worker", "file", "error"}`: the same workers, the same reasons)."""
    runs = _scan(logdir)
    if run is None:
        if len(runs) > 1:
            names = ", ".join(sorted(runs)[:20]) + (", ..." if len(runs) > 20 else "")
            raise DiagnoseFailed(f"{logdir} has {len(runs)} runs ({names}): name one")
        run = next(iter(runs))
    if run not in runs:
        raise DiagnoseFailed(f"no run {run!r} in {logdir} (runs: {', '.join(sorted(runs)[:20])})")
    got, paths = _summaries_of(logdir, runs[run], span, log, prog, errors)
    return run, got, paths


def _summaries_of(
    logdir: str, r: Any, span: str, log=_print, prog: str = "gpuscope", errors: list | None = None
) -> tuple[dict, dict]:
    """The summaries of the run `r` (of the scan) at `span` and their trace paths (`run_summaries`); `prog` begins
    each line logged."""
    from tb_plugin.summaries.summary import decode

    run = r.name
    files = []
    for w in sorted(r.workers):
        f = r.file(w, span)
        if f is not None:
            files.append((w, f))
    if not files:
        raise DiagnoseFailed(f"no worker of run {run!r} has span {span!r}")
    out = store.default_out(logdir)
    with ThreadPoolExecutor(IO_THREADS) as pool:
        found = list(pool.map(lambda wf: store.read(store.out_path(out, wf[1].relpath), source_of(wf[1])), files))
    got: dict = {}
    todo = [(w, f) for (w, f), s in zip(files, found) if s is None]
    got.update({w: s for (w, _), s in zip(files, found) if s is not None})
    if todo:
        log(f"{prog}: summarizing {len(todo)} of {len(files)} trace files of run {run}")
    for w, f in todo:
        try:
            data = summarize_bytes(f.path)
            got[w] = decode(data)
        except Exception as e:  # noqa: BLE001 - one unreadable trace must not stop the others
            why = _reason(f, e)
            log(f"{prog}: {why if why.startswith(f.relpath) else f'{f.relpath}: {why}'}")
            if errors is not None:
                short = why[len(f.relpath) + 2 :] if why.startswith(f.relpath + ": ") else why
                errors.append({"worker": w, "file": f.relpath, "error": fs.redact(short)})
            continue
        try:
            fs.write_bytes(store.out_path(out, f.relpath), data)
        except Exception as e:  # noqa: BLE001 - a read-only logdir still gets its diagnosis
            log(f"{prog}: cannot store the summary of {f.relpath}: {fs.redact(str(e))}")
    if not got:
        raise DiagnoseFailed(f"no trace of run {run!r} could be read")
    return got, {w: f.path for w, f in files}


def diagnose_main(args: argparse.Namespace) -> int:
    """`gpuscope diagnose`: the diagnosis of one run as text or JSON on stdout; 2 when there is none."""
    import json

    from tb_plugin.run_level import report

    if not fs.is_url(args.logdir) and not os.path.isdir(args.logdir):
        _print(f"gpuscope diagnose: {args.logdir}: no such directory", file=sys.stderr)
        return 2
    peak = getattr(args, "peak_tflops", None)
    if peak is not None:
        if not (peak > 0 and peak == peak and peak != float("inf")):
            _print("gpuscope diagnose: --peak-tflops must be a number > 0", file=sys.stderr)
            return 2
        os.environ["GPUSCOPE_PEAK_TFLOPS"] = repr(peak)  # read by the device peaks table (settings)
    errors: list = []
    try:
        run, summaries, paths = run_summaries(
            args.logdir, args.run, args.span, log=lambda m: _print(m, file=sys.stderr, flush=True), errors=errors
        )
    except DiagnoseFailed as e:
        _print(f"gpuscope diagnose: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        _print("gpuscope diagnose: interrupted", file=sys.stderr)
        return 130

    def trace(worker: str) -> Any:  # a one-worker run: its single-rank critical path reads the trace
        from profiler_core.trace.read.reader import read_trace

        return read_trace(paths[worker], processes=0, tune_memory=True)

    rep = report.diagnose(summaries, trace=trace)
    if errors:  # as the /diagnosis route lists them: not workers, each with its reason
        rep = {**rep, "errors": errors}
    if args.json:
        _print(json.dumps({"caveats": rep["caveats"], "run": run, "span": args.span, **rep}, indent=1))
    else:
        _print(f"run {run}, span {args.span}")
        for bad in errors:
            _print(f"unreadable, not a worker here: {bad['file']} ({bad['error']})")
        _print(report.render_text(rep), end="")
    return 0


def split_run(text: str) -> tuple[str, str | None]:
    """`LOGDIR[:RUN]` -> (logdir, run or None): a local directory as it is, else split at the last `:` whose left
    part is a local directory or a URL (`s3://bucket/logs:run`)."""
    if fs.is_url(text):
        head, sep, run = text.rpartition(":")
        return (head, run or None) if sep and fs.is_url(head) and not run.startswith("//") else (text, None)
    if os.path.isdir(text):
        return text, None
    i = text.rfind(":")
    while i > 0:
        if os.path.isdir(text[:i]):
            return text[:i], text[i + 1 :] or None
        i = text.rfind(":", 0, i)
    return text, None


def jobdiff_main(args: argparse.Namespace) -> int:
    """`gpuscope jobdiff`: job B compared with job A from their summaries, as text, JSON or CSV; 2 on bad input."""
    import json

    from tb_plugin.run_level import job_diff

    sides = []
    for what, arg, span in (("A", args.job_a, args.span), ("B", args.job_b, args.exp_span)):
        logdir, run = split_run(arg)
        if not fs.is_url(logdir) and not os.path.isdir(logdir):
            _print(f"gpuscope jobdiff: job {what}: {logdir}: no such directory", file=sys.stderr)
            return 2
        try:
            name, summaries, _ = run_summaries(
                logdir, run, span, log=lambda m: _print(m, file=sys.stderr, flush=True), prog="gpuscope jobdiff"
            )
        except DiagnoseFailed as e:
            _print(f"gpuscope jobdiff: job {what}: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            _print("gpuscope jobdiff: interrupted", file=sys.stderr)
            return 130
        sides.append((name, summaries))
    try:
        res = job_diff.job_diff(sides[0][1], sides[1][1])
    except job_diff.JobDiffError as e:
        _print(f"gpuscope jobdiff: {e}", file=sys.stderr)
        return 2
    if args.csv:
        sys.stdout.write(printable(job_diff.to_csv(res), keep="\r\n"))
    elif args.json:
        _print(json.dumps({"run": sides[0][0], "exp_run": sides[1][0], **res}, indent=1))
    else:
        _print(f"job A: run {sides[0][0]}; job B: run {sides[1][0]}")
        _print(job_diff.render_text(res), end="")
    return 0


def history_main(args: argparse.Namespace) -> int:
    """`gpuscope history`: the logdir's runs in order from their summaries, and the first regressed run explained
    (`run_level.history`), as text or JSON; 2 on bad input."""
    import json

    from tb_plugin.run_level import history
    from tb_plugin.summaries import rows

    if not fs.is_url(args.logdir) and not os.path.isdir(args.logdir):
        _print(f"gpuscope history: {args.logdir}: no such directory", file=sys.stderr)
        return 2
    log = lambda m: _print(m, file=sys.stderr, flush=True)  # noqa: E731
    kept: dict[int, dict] = {}  # id(a run's summaries) -> its row read from disk
    where: dict[int, tuple[str, list]] = {}  # id(a run's summaries) -> (its row's path, its (worker, file) pairs)
    try:
        chosen = history.select(_scan(args.logdir).values(), args.span, args.match)
        if not chosen:
            raise DiagnoseFailed(
                f"no run{' matching ' + repr(args.match) if args.match else ''} has span {args.span!r}"
            )
        series = []
        with ThreadPoolExecutor(IO_THREADS) as pool:  # small reads: in parallel
            found = list(pool.map(lambda r: rows.kept(args.logdir, r, args.span), chosen))
        for r, (files, _, row) in zip(chosen, found):
            if row is not None:  # its row on disk: the summaries are read only if a regression needs them
                load = functools.partial(_run_summaries, args.logdir, r, args.span, log)
                got: Any = rows.LazySummaries([w for w, _ in files], load)
                kept[id(got)] = row
            else:
                got = _run_summaries(args.logdir, r, args.span, log)
            where[id(got)] = (rows.path(args.logdir, "history", r.name, args.span), files)
            series.append((r.name, history.run_time(r), got))
    except DiagnoseFailed as e:
        _print(f"gpuscope history: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        _print("gpuscope history: interrupted", file=sys.stderr)
        return 130

    def keep(summaries: Any, compute: Any) -> dict:
        row = kept.get(id(summaries))
        if row is not None:
            return row
        row = compute()
        path, files = where[id(summaries)]
        key = rows.fingerprint(args.logdir, files)  # the summaries are on disk now
        if key is not None:
            rows.write(path, key, row)
        return row

    res = history.history(series, order=args.order, keep=keep)
    if args.json:
        _print(json.dumps(res, indent=1))
    else:
        _print(history.render_text(res), end="")
    return 0


def _run_summaries(logdir: str, r: Any, span: str, log: Callable[[str], None]) -> dict:
    """The run's summaries (`_summaries_of`), {} when none can be read (said on `log`)."""
    try:
        return _summaries_of(logdir, r, span, log, "gpuscope history")[0]
    except DiagnoseFailed as e:
        log(f"gpuscope history: {e}")
        return {}


def export_main(args: argparse.Namespace) -> int:
    """`gpuscope export`: every worker's tables as Parquet under OUT (`tb_plugin.api.Profile.to_parquet`); 2 when
    there is nothing to export or pyarrow is missing."""
    from tb_plugin.api import AnalysisError, Profile

    try:
        with Profile(args.logdir) as prof:
            written = prof.to_parquet(args.out, span=args.span)
    except AnalysisError as e:
        _print(f"gpuscope export: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        _print("gpuscope export: interrupted", file=sys.stderr)
        return 130
    if not written:
        _print(f"gpuscope export: {args.logdir}: no trace files", file=sys.stderr)
        return 2
    _print(f"gpuscope export: {', '.join(f'{k} {v}' for k, v in written.items())} files -> {args.out}")
    return 0


def pipeline_main(args: argparse.Namespace) -> int:
    """`gpuscope pipeline RUN_DIR`: the pipeline diagnosis of a run folder's traces as JSON (without the chart)."""
    import json
    import os

    from profiler_core.trace.read.decode import TraceReadError
    from profiler_core.trace.read.reader import read_trace
    from tb_plugin.run_level.pipeline import pipeline

    try:
        files = sorted(f for f in os.listdir(args.run_dir) if ".pt.trace.json" in f)
        if not files:
            _print(f"gpuscope pipeline: {args.run_dir}: no *.pt.trace.json files", file=sys.stderr)
            return 2
        r = pipeline({f.split(".")[0]: read_trace(os.path.join(args.run_dir, f), processes=0) for f in files})
    except (OSError, TraceReadError) as e:
        _print(f"gpuscope pipeline: {e}", file=sys.stderr)
        return 2
    for step in r["steps"]:
        step.pop("chart")
    _print(json.dumps(r, indent=1))
    return 0


def telemetry_main(args: argparse.Namespace) -> int:
    """`gpuscope telemetry`: the flight recorder's telemetry of every rank of a run (tb_plugin/telemetry.py): per-rank
    summaries, stragglers by the printed rule, the captures with their reason (and, with --diagnose, each capture's
    diagnosis verdict); 2 when there is no telemetry."""
    import json

    from tb_plugin import telemetry

    if not fs.is_url(args.logdir) and not os.path.isdir(args.logdir):
        _print(f"gpuscope telemetry: {args.logdir}: no such directory", file=sys.stderr)
        return 2
    run = args.run
    if run is None:
        found = telemetry.runs(args.logdir)
        if len(found) != 1:
            what = "no telemetry (*.telemetry.jsonl) files" if not found else "telemetry in several folders"
            _print(f"gpuscope telemetry: {args.logdir}: {what}; name one: {' '.join(found)}", file=sys.stderr)
            return 2
        run = found[0]
    rule = telemetry.StragglerRule(
        late_ms=args.late_ms, late_frac=args.late_frac, chronic_frac=args.chronic, burst_steps=args.burst
    )
    try:
        job = telemetry.load(args.logdir, run)
    except (ValueError, OSError) as e:
        _print(f"gpuscope telemetry: {e}", file=sys.stderr)
        return 2
    res = telemetry.summary(job, rule)
    base = "" if run in ("", ".") else run.strip("/") + "/"
    for c in res["captures"]:
        c["run"] = base + c["dir"]
        if args.diagnose:
            c["diagnosis"] = _capture_verdict(args.logdir, c["run"])
    if args.heatmap:
        res["heatmap"] = telemetry.heatmap(job, args.metric, max_steps=args.heatmap)
    if args.json:
        _print(json.dumps(res, indent=1))
        return 0
    _print(telemetry.render_text(res), end="")
    for c in res["captures"]:
        _print(f"  diagnose it: gpuscope diagnose {args.logdir} {c['run']}")
        if "diagnosis" in c:
            _print("  " + _verdict_text(c["diagnosis"]))
    if args.heatmap:
        h = res["heatmap"]
        _print(f"heatmap of {h['metric']} ({h['agg']} of {h['step_bin']} steps per column; {h['min']}..{h['max']}):")
        shades = " .:-=+*#%@"
        lo, hi = h["min"] or 0.0, h["max"] or 1.0
        for r, row in zip(h["rank_starts"], h["cells"]):
            line = "".join(
                " " if v is None else shades[min(9, int(9 * (v - lo) / (hi - lo))) if hi > lo else 0] for v in row
            )
            _print(f"{r:>5} |{line}|")
    return 0


def _capture_verdict(logdir: str, run: str) -> dict:
    """What the diagnosis of a capture (`gpuscope diagnose LOGDIR RUN`) says of its stragglers: the rank that would
    save the most, why, and how much; or the caveat that withholds cross-rank claims, or why there is none."""
    from tb_plugin.run_level import report

    try:
        _, summaries, _ = run_summaries(logdir, run, "1", log=lambda m: None, prog="gpuscope telemetry")
    except DiagnoseFailed as e:
        return {"error": str(e)}
    rep = report.diagnose(summaries)
    out: dict = {"workers": rep["workers"], "withheld": rep["withheld"]}
    if rep["withheld"]:
        out["caveats"] = [c["text"] for c in rep["caveats"] if c.get("withholds")]
    worst = rep["stragglers"][0] if rep["stragglers"] else None
    if worst is not None:
        out["straggler"] = {k: worst.get(k) for k in ("rank", "worker", "step", "why", "excess_ms", "saved_ms")}
    out["stragglers_by_rank"] = {}
    for st in rep["stragglers"]:
        r = str(st.get("rank"))
        out["stragglers_by_rank"][r] = out["stragglers_by_rank"].get(r, 0) + 1
    return out


def _verdict_text(d: dict) -> str:
    if "error" in d:
        return f"no diagnosis: {d['error']}"
    if d.get("withheld"):
        return "diagnosis withholds cross-rank claims: " + "; ".join(d.get("caveats", []))
    st = d.get("straggler")
    if not st:
        return f"diagnosis of {d['workers']} workers: no straggler"
    steps = ", ".join(f"rank {r} in {n} step(s)" for r, n in d["stragglers_by_rank"].items())
    return (
        f"diagnosis of {d['workers']} workers: straggler rank {st['rank']} ({steps}); worst at step {st['step']}: "
        f"{st['why']}; {st['saved_ms']:.1f} ms saved had it run at the median"
    )


class _VersionAction(argparse._VersionAction):
    """`--version`: the version's line, then the detail of the C extensions (built, or not and what it costs)."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        from profiler_core import native_parts

        print(f"{self.version}\n{native_parts.detail()}")
        parser.exit()


def main(argv: list[str] | None = None) -> int:
    """The `gpuscope` command (subcommands `summarize`, `diagnose`, `jobdiff`, `history`, `export`, `pipeline`,
    `telemetry`)."""
    from profiler_core import __version__

    p = argparse.ArgumentParser(prog="gpuscope", description="gpuscope command-line tools")
    p.add_argument(
        "--version",
        action=_VersionAction,
        version=f"gpuscope {__version__}",
        help="print the version, then whether the C extensions are built here (and what runs without them)",
    )
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser(
        "summarize",
        help="compute the per-worker summaries of a logdir (optionally on Dask)",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s.add_argument("logdir", help="the log directory (a local path, or a URL where fsspec can read it)")
    where = s.add_mutually_exclusive_group()
    where.add_argument("--scheduler", metavar="ADDRESS", help="a running Dask scheduler, e.g. tcp://host:8786")
    where.add_argument("--local", metavar="N", type=int, help="start a local Dask cluster of N worker processes")
    s.add_argument("--out", metavar="DIR", help="where to write the summaries (default LOGDIR/.gpuscope/summaries)")
    s.add_argument("--force", action="store_true", help="recompute summaries that are already up to date")
    d = sub.add_parser(
        "diagnose",
        help="which rank set each step's time, why, and what fixing it is worth (from the summaries)",
        description="Prints the run's diagnosis (recoverable-time ledger, cross-rank critical path per step, "
        "stragglers with their cause and what-if) from the per-worker summaries under LOGDIR/.gpuscope/summaries, "
        "computing the missing ones here (for a big job, run `gpuscope summarize --local N` first).",
    )
    d.add_argument("logdir", help="the log directory (a local path, or a URL where fsspec can read it)")
    d.add_argument("run", nargs="?", help="the run (a folder of the logdir); needed when there are several")
    d.add_argument("--span", default="1", help="the span of each worker (1..N, default 1)")
    d.add_argument("--json", action="store_true", help="print the diagnosis as JSON (the /diagnosis route's)")
    d.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        help="dense peak TFLOP/s of a GPU the device peaks table does not know (GPUSCOPE_PEAK_TFLOPS), for the "
        "summaries computed by this command (stored ones keep theirs: `gpuscope summarize --force` remakes them)",
    )
    j = sub.add_parser(
        "jobdiff",
        help="where job B's extra ms per step came from, compared with job A (from the summaries)",
        description="Compares two runs of a job (any number of ranks each) from their per-worker summaries, "
        "computing the missing ones here: the step delta and its ranked causes by bucket, rank, collective and "
        "kernel (docs/diagnosis.md, Job diff).",
    )
    j.add_argument("job_a", metavar="LOGDIR_A[:RUN]", help="the baseline: a log directory and its run")
    j.add_argument("job_b", metavar="LOGDIR_B[:RUN]", help="the compared job")
    j.add_argument("--span", default="1", help="the span of each worker of A (1..N, default 1)")
    j.add_argument("--exp-span", default="1", help="the span of each worker of B (1..N, default 1)")
    fmt = j.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print the job diff as JSON (the /jobdiff route's)")
    fmt.add_argument("--csv", action="store_true", help="print the ranked deltas as CSV")
    pp = sub.add_parser(
        "pipeline",
        help="a pipeline-parallel run's schedule and bubbles, from its rank traces (JSON)",
        description="Prints the pipeline diagnosis of a run folder's rank traces as JSON, without the chart "
        "(docs/diagnosis.md, Pipeline parallelism).",
    )
    pp.add_argument("run_dir", help="a folder of one pipeline's rank traces (*.pt.trace.json[.gz])")
    h = sub.add_parser(
        "history",
        help="a job's runs over time: step time, ledger, verdict per run; the first regression and its cause",
        description="Orders the runs of LOGDIR by time (or name), gives each run's step time statistics, ledger "
        "buckets and diagnosis verdict from the per-worker summaries (computing the missing ones here), names the "
        "first run slower than the noise of the runs before it (the printed rule) and explains it with the job diff "
        "against the run before (docs/python-api.md#a-jobs-history).",
    )
    h.add_argument("logdir", help="the log directory (a local path, or a URL where fsspec can read it)")
    h.add_argument("--span", default="1", help="the span of each worker of every run (1..N, default 1)")
    h.add_argument("--order", choices=("time", "name"), default="time", help="runs by time (default) or by name")
    h.add_argument("--match", metavar="GLOB", help="only the runs whose name matches this glob")
    h.add_argument("--json", action="store_true", help="print the history as JSON (the /history route's)")
    x = sub.add_parser(
        "export",
        help="write each worker's tables (events, kernels, operators, steps, ledger, collectives) as Parquet",
        description="Exports every worker of every run of LOGDIR as Parquet tables under OUT (docs/python-api.md, "
        "Parquet export: the files and their schema), for DuckDB, polars or pandas.",
    )
    x.add_argument("logdir", help="the log directory, a run folder or a trace file (local path or fsspec URL)")
    x.add_argument("out", help="the folder to write the tables into")
    x.add_argument("--format", choices=("parquet",), default="parquet", help="the table format (parquet)")
    x.add_argument("--span", default=None, help="only this span of each worker (default: every span)")
    t = sub.add_parser(
        "telemetry",
        help="the flight recorder's telemetry of every rank: summaries, stragglers, captures and why they ran",
        description="Reads the flight recorder's *.telemetry.jsonl files of a run folder (docs/flight-recorder.md) "
        "and prints per-rank summaries, the chronic and occasional stragglers (the rule is printed) and the "
        "captures the triggers started, with their reason and the run to diagnose.",
    )
    t.add_argument("logdir", help="the log directory (a local path, or a URL where fsspec can read it)")
    t.add_argument("run", nargs="?", help="the folder of the telemetry files (default: the only one)")
    t.add_argument("--json", action="store_true", help="print the answer as JSON (the /telemetry route's)")
    t.add_argument("--diagnose", action="store_true", help="diagnose each capture (gpuscope diagnose) too")
    t.add_argument("--heatmap", type=int, metavar="COLUMNS", default=0, help="print a step x rank heatmap")
    t.add_argument("--metric", default="work_ms", help="the heatmap's metric (work_ms, wall_ms, data_ms, ...)")
    t.add_argument("--late-ms", type=float, default=2.0, help="straggler rule: least excess in ms (default 2)")
    t.add_argument("--late-frac", type=float, default=0.10, help="... or this fraction of the median (0.10)")
    t.add_argument("--chronic", type=float, default=0.5, help="chronic: late in more than this fraction (0.5)")
    t.add_argument("--burst", type=int, default=3, help="occasional: bursts of at least this many steps (3)")
    args = p.parse_args(argv)
    if args.command == "telemetry":
        return telemetry_main(args)
    if args.command == "history":
        return history_main(args)
    if args.command == "export":
        return export_main(args)
    if args.command == "pipeline":
        return pipeline_main(args)
    if args.command == "diagnose":
        return diagnose_main(args)
    if args.command == "jobdiff":
        return jobdiff_main(args)
    if args.local is not None and args.local < 1:
        p.error("--local needs at least 1 worker")
    if not fs.is_url(args.logdir):
        import os

        if not os.path.isdir(args.logdir):
            _print(f"gpuscope summarize: {args.logdir}: no such directory", file=sys.stderr)
            return 2
    try:
        res = summarize_logdir(
            args.logdir,
            args.out,
            args.scheduler,
            args.local,
            args.force,
            log=lambda m: _print(m, file=sys.stderr, flush=True),
        )
    except ScanFailed as e:
        _print(f"gpuscope summarize: cannot list the logdir: {e}", file=sys.stderr)
        return 2
    except SchedulerUnavailable as e:
        _print(f"gpuscope summarize: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        _print("gpuscope summarize: interrupted", file=sys.stderr)
        return 130
    _print(
        f"gpuscope summarize: {res['done']} summarized, {res['skipped']} up to date, "
        f"{len(res['failed'])} failed, of {res['files']} trace files in {res['seconds']:.1f} s -> {res['out']}"
    )
    return 1 if res["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
