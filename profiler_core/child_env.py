"""Child Python processes that never import from the working directory.

`multiprocessing`'s spawn and forkserver start methods (used by the plugin's loader pool and by
Dask's local workers) start `python -c ...`, which puts the working directory first on sys.path:
a `multiprocessing.py` or `numpy.py` lying in TensorBoard's working directory (a downloaded
logdir, say) would run in every such child. `safe_path()` sets PYTHONSAFEPATH=1 (Python 3.11+:
the same as `-P`) in the environment the children inherit while they are started.

Python 3.10 has no PYTHONSAFEPATH. There `safe_path()` points `multiprocessing` (its spawned
children, forkserver and resource tracker) at a launcher that starts the interpreter in a private
empty directory: with `-c`, sys.path[0] is the directory the interpreter starts in, and the child
takes the parent's sys.path and working directory (`spawn.prepare`) only after `multiprocessing`
itself was imported.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shlex
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_depth = 0
_saved: str | None = None
_saved_exe: str | bytes | None = None
_launchers: dict[str, str] = {}

_HAS_SAFEPATH = sys.version_info >= (3, 11)
_USE_LAUNCHER = not _HAS_SAFEPATH and os.name == "posix"


def launcher(executable: str | bytes) -> str:
    """A script (made once per process and executable, in a fresh 0700 directory removed at exit)
    that runs `executable` with its arguments in that empty directory, which only this user can
    write."""
    executable = os.fsdecode(executable)
    path = _launchers.get(executable)
    if path is not None and os.path.exists(path):
        return path
    folder = tempfile.mkdtemp(prefix="gpuscope-start-")
    atexit.register(shutil.rmtree, folder, True)
    path = os.path.join(folder, "python")
    with open(path, "w") as f:
        f.write(f'#!/bin/sh\ncd -- {shlex.quote(folder)} || exit 1\nexec {shlex.quote(executable)} "$@"\n')
    os.chmod(path, 0o700)
    _launchers[executable] = path
    return path


def _enter() -> None:
    """Turn the setting on (the first of nested or concurrent `safe_path` blocks)."""
    global _saved, _saved_exe
    if _HAS_SAFEPATH:
        _saved = os.environ.get("PYTHONSAFEPATH")
        os.environ["PYTHONSAFEPATH"] = "1"
    elif _USE_LAUNCHER:
        from multiprocessing import spawn

        _saved_exe = spawn.get_executable()
        if _saved_exe:
            spawn.set_executable(launcher(_saved_exe))


def _leave() -> None:
    """Put back what `_enter` changed (the last block to end)."""
    global _saved_exe
    if _HAS_SAFEPATH:
        if _saved is None:
            os.environ.pop("PYTHONSAFEPATH", None)
        else:
            os.environ["PYTHONSAFEPATH"] = _saved
    elif _USE_LAUNCHER and _saved_exe:
        from multiprocessing import spawn

        spawn.set_executable(os.fsdecode(_saved_exe))
        _saved_exe = None


@contextlib.contextmanager
def safe_path() -> Iterator[None]:
    """While the block runs, Python processes started from this one leave the working directory
    off their sys.path (PYTHONSAFEPATH=1 on 3.11+; on 3.10, multiprocessing's children start
    through `launcher`; nested and concurrent uses share one setting)."""
    global _depth
    with _lock:
        if _depth == 0:
            _enter()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _leave()
