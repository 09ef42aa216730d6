"""Where summaries live: the logdir's hidden `.gpuscope/summaries/` folder (written by
`gpuscope summarize`, found by the plugin; scans skip hidden folders) and the parse cache's
directory (`$GPUSCOPE_CACHE_DIR/summaries/`, written by the plugin for the ones it computed).

Both are keyed by the trace file (its path relative to the logdir, or its absolute path for the
cache) and validated against its identity when read (size and ETag remotely; size, mtime, inode
and ctime locally: the parse cache's rule); a stale, damaged or other-version summary is ignored
and recomputed.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterable

from profiler_core import safe_open
from tb_plugin.summaries import fs
from tb_plugin.summaries.schema import Summary
from tb_plugin.summaries.summary import MAX_FILE_BYTES, VERSION, SummaryError, decode, encode

log = logging.getLogger(__name__)

HIDDEN_DIR = ".gpuscope"
SUFFIX = ".summary.json.gz"


def default_out(logdir: str) -> str:
    """`gpuscope summarize`'s default output folder: LOGDIR/.gpuscope/summaries."""
    return fs.join(logdir, HIDDEN_DIR, "summaries")


def out_path(out: str, relpath: str) -> str:
    """The summary file of the trace at `relpath` (relative to the logdir, "/"-separated) under `out`."""
    parts = [p for p in relpath.split("/") if p not in ("", ".", "..")]
    return fs.join(out, *parts[:-1], parts[-1] + SUFFIX)


def cache_path(path: str, source: fs.Stat) -> str:
    """The plugin's own copy of a summary, beside the parse cache."""
    from profiler_core.trace.read.cache import cache_dir

    key = repr(
        (
            path if fs.is_url(path) else os.path.abspath(path),
            source.size,
            source.mtime_ns,
            source.etag,
            tuple(source.ident),
            VERSION,
        )
    )
    return os.path.join(str(cache_dir()), "summaries", hashlib.sha256(key.encode()).hexdigest()[:32] + SUFFIX)


def read(
    where: str, source: fs.Stat | None, trusted_top: str | None = None, owners: Iterable[int] | None = None
) -> Summary | None:
    """The summary stored at `where` if it is valid for `source`, else None (never raises).

    A local summary is read only from a regular file of at most `summary.MAX_FILE_BYTES`; with
    `trusted_top`, only when every directory from it down to the file, and the file, belong to
    one of `owners` (default: this user) and no one else may write into them."""
    if trusted_top is not None and not fs.is_url(where):
        why = safe_open.trusted_dirs(trusted_top, os.path.dirname(os.path.abspath(where)), owners)
        if why is not None:
            _note_refused(where, why)
            return None
        if owners is None and hasattr(os, "getuid"):
            owners = (os.getuid(),)
    try:
        data = fs.read_bytes(where, MAX_FILE_BYTES, owners=owners)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        _note_refused(where, str(e))
        return None
    except Exception as e:  # noqa: BLE001 - a store error means: no summary there
        log.debug("gpuscope: cannot read summary %s: %s", where, e)
        return None
    try:
        return decode(data, source)
    except SummaryError as e:
        log.info("gpuscope: ignoring summary %s: %s", where, e)
        return None


def _note_refused(where: str, why: str) -> None:
    log.warning("gpuscope: not reading summary %s: %s", fs.redact(where), fs.redact(why))


def write(where: str, summary: Summary | dict) -> bool:
    """Stores a summary atomically; False (logged) when the place cannot be written."""
    try:
        fs.write_bytes(where, encode(summary))
        return True
    except Exception as e:  # noqa: BLE001 - a read-only logdir or full disk must not fail the view
        log.warning("gpuscope: cannot write summary %s: %s", where, e)
        return False
