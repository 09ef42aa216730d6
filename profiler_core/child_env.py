"""Child Python processes that never import from the working directory.

`multiprocessing`'s spawn and forkserver start methods (used by the plugin's loader pool and by
Dask's local workers) start `python -c ...`, which puts the working directory first on sys.path:
a `multiprocessing.py` or `numpy.py` lying in TensorBoard's working directory (a downloaded
logdir, say) would run in every such child. `safe_path()` sets PYTHONSAFEPATH=1 (Python 3.11+:
the same as `-P`) in the environment the children inherit while they are started.
"""
from __future__ import annotations

import contextlib
import os
import threading
from typing import Iterator

_lock = threading.Lock()
_depth = 0
_saved: str | None = None


@contextlib.contextmanager
def safe_path() -> Iterator[None]:
    """While the block runs, Python processes started from this one leave the working directory
    off their sys.path (PYTHONSAFEPATH=1; nested and concurrent uses share one setting)."""
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = os.environ.get("PYTHONSAFEPATH")
            os.environ["PYTHONSAFEPATH"] = "1"
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                if _saved is None:
                    os.environ.pop("PYTHONSAFEPATH", None)
                else:
                    os.environ["PYTHONSAFEPATH"] = _saved
