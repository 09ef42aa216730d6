"""Per-run answers kept on disk beside the summaries: the history's row of one run (`run_level.history.run_row`),
so that `gpuscope history` over runs it has seen reads one small file per run instead of every worker's summary.

A row is stored under `LOGDIR/.gpuscope/rows/<kind>/<run>/<span>.json` (by `gpuscope history`; the plugin, which
never writes into a logdir, keeps its own beside the parse cache, `cache_path`) with the key it was computed for: the
fingerprint of the run's files as they are now (each worker's trace size and mtime, its stored summary file's
identity), the summary schema's VERSION and ROWS_VERSION. A trace rewritten, a summary recomputed or another
version gives another key, and the row is computed again. Reading never raises: a missing, damaged, oversized or
stale file is None.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from tb_plugin.summaries import fs, store
from tb_plugin.summaries.summary import VERSION

#: bump when a kept row's meaning changes (`history.run_row`)
ROWS_VERSION = 1
#: a row file larger than this is not read (a row is a few hundred bytes)
MAX_ROW_BYTES = 1 << 20


def fingerprint(logdir: str, files: Iterable[tuple[str, Any]]) -> str | None:
    """The key of a run's row: (worker, trace file) pairs as they are now and their stored summaries' identities;
    None when a worker has no stored summary (its row cannot be kept yet)."""
    out = store.default_out(logdir)
    parts = []
    for worker, f in sorted(files, key=lambda wf: wf[0]):
        try:
            st = fs.stat(store.out_path(out, f.relpath))
        except (OSError, ValueError):
            return None
        parts.append((worker, f.relpath, int(f.size), int(f.mtime_ns), st.size, st.mtime_ns, st.etag, tuple(st.ident)))
    if not parts:
        return None
    return hashlib.sha256(repr((parts, VERSION, ROWS_VERSION)).encode()).hexdigest()


def path(logdir: str, kind: str, run: str, span: str) -> str:
    """Where the `kind` row of `run` at `span` lives."""
    names = [p for p in run.split("/") if p not in ("", ".", "..")] or ["."]
    return fs.join(logdir, store.HIDDEN_DIR, "rows", kind, *names, f"{span}.json")


def cache_path(logdir: str, kind: str, run: str, span: str) -> str:
    """Where the plugin keeps the `kind` row of `run` at `span` of `logdir` (beside the parse cache)."""
    from profiler_core.trace.read.cache import cache_dir

    top = logdir if fs.is_url(logdir) else os.path.abspath(logdir)
    digest = hashlib.sha256(repr((top, kind, run, span)).encode()).hexdigest()[:32]
    return os.path.join(str(cache_dir()), "rows", f"{digest}.json")


def kept(
    logdir: str, run: Any, span: str, kind: str = "history", cache: bool = False
) -> tuple[list, str | None, dict | None]:
    """Run `run` of the scan at `span`: its (worker, file) pairs, the key of its row now (None: a worker has no
    stored summary) and the row kept for that key (the logdir's, then with `cache` the plugin's), or None."""
    files = [(w, f) for w in sorted(run.workers) if (f := run.file(w, span)) is not None]
    key = fingerprint(logdir, files)
    if key is None:
        return files, None, None
    row = read(path(logdir, kind, run.name, span), key)
    if row is None and cache:
        row = read(cache_path(logdir, kind, run.name, span), key)
    return files, key, row


class LazySummaries(Mapping):
    """A run's summaries read on first use of a value: a history whose row of the run is kept needs only how many
    there are, unless the run is one of the two a regression compares."""

    def __init__(self, workers: list[str], load: Callable[[], dict]) -> None:
        self._workers, self._load = workers, load
        self._got: dict | None = None

    def _all(self) -> dict:
        got = self._got if self._got is not None else self._load()
        self._got = got
        return got

    def __getitem__(self, worker: str) -> Any:
        return self._all()[worker]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._workers) if self._got is None else len(self._got)


def read(where: str, key: str) -> dict | None:
    """The row stored at `where` for `key`, or None; a local one only when it is this user's file."""
    owners = None if fs.is_url(where) or not hasattr(os, "getuid") else {os.getuid()}
    try:
        data = json.loads(fs.read_bytes(where, max_bytes=MAX_ROW_BYTES, owners=owners))
    except Exception:  # noqa: BLE001 - missing, unreadable or damaged: computed again
        return None
    if not isinstance(data, Mapping) or data.get("key") != key or not isinstance(data.get("row"), dict):
        return None
    return data["row"]


def write(where: str, key: str, row: Mapping[str, Any]) -> bool:
    """Keeps `row` for `key` at `where`; False when it cannot be written (a read-only logdir still answers)."""
    try:
        fs.write_bytes(where, json.dumps({"key": key, "row": dict(row)}).encode())
    except Exception:  # noqa: BLE001 - the row is computed again next time
        return False
    return True
