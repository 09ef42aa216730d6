"""Shared pytest fixtures: where the team's reference traces live, and what a missing one means."""

import fcntl
import functools
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("GPUSCOPE_SHARED", ROOT.parent / "shared"))
TRACES = SHARED / "traces"
DATA = Path(__file__).resolve().parent / "data"
#: the venv with torch 2.13 CPU, torch-tb-profiler 0.4.3 and HTA that .ci/run builds
COMPAT_VENV = Path(os.environ.get("GPUSCOPE_COMPAT_VENV") or ROOT / ".venvs" / "compat")
#: Under CI (`CI=true`, as CI services set it) every oracle, reference and tool that .ci/run installs is
#: required: a test that would skip for lack of one fails instead, with the same reason.
IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
BROWSER_TESTS = Path(__file__).resolve().parent / "browser"


def pytest_collection_modifyitems(config, items) -> None:
    """Every test under tests/browser/ is marked `browser` (`-m "not browser"` leaves them out)."""
    for item in items:
        if BROWSER_TESTS in item.path.parents:
            item.add_marker(pytest.mark.browser)


def missing(reason: str) -> NoReturn:
    """Something this test checks against is absent: skip with `reason` locally, fail with it under CI."""
    __tracebackhide__ = True  # report the test's line, not this one
    if IN_CI:
        pytest.fail(f"required under CI=true (.ci/run installs it): {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def requires(why: str | None) -> Callable:
    """Decorator (the skipif of this suite): when `why` is not None the test skips with it, or under CI
    fails with it (see missing())."""
    if why is None:
        return lambda test: test
    if not IN_CI:
        return pytest.mark.skipif(True, reason=why)

    def decorate(test: Callable) -> Callable:
        @functools.wraps(test)
        def absent(*args, **kwargs):
            __tracebackhide__ = True
            missing(why)

        return absent

    return decorate


def require_module(name: str, reason: str):
    """Import `name` (pytest.importorskip), or `missing(reason)` when it is not installed."""
    __tracebackhide__ = True
    try:
        return pytest.importorskip(name, reason=reason)
    except pytest.skip.Exception:
        missing(reason)


@pytest.fixture
def shared_traces() -> Path:
    """The reference traces from real PyTorch runs (../shared/traces); missing() if absent."""
    if not TRACES.is_dir():
        missing(f"the shared traces are not at {TRACES} (set GPUSCOPE_SHARED to the folder holding traces/)")
    return TRACES


# the summaries a page waits for are computed in this process only (the plugin's helper processes for big runs are
# tested where they are asked for: tests/test_summaries_priority.py), so that tests holding a computation hold all
os.environ.setdefault("GPUSCOPE_SUMMARY_PROCESSES", "0")


@pytest.fixture(scope="session", autouse=True)
def _isolated_trace_cache(tmp_path_factory):
    """Keep parsed-trace caches of the test run out of the user's ~/.cache (subprocesses inherit it)."""
    if "GPUSCOPE_CACHE_DIR" in os.environ:
        yield
        return
    os.environ["GPUSCOPE_CACHE_DIR"] = str(tmp_path_factory.mktemp("gpuscope-cache"))
    try:
        yield
    finally:
        os.environ.pop("GPUSCOPE_CACHE_DIR", None)


def session_dir(tmp_path_factory) -> Path:
    """A folder of this test session that its pytest-xdist workers share (each worker's own base temp is
    a subfolder of the session's, popen-gwN); without xdist, the session's base temp."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(tmp_path_factory, name: str, build: Callable[[Path], object]) -> Path:
    """The folder `name` of this test session, filled by `build(folder)` the first time any xdist worker
    asks for it; the others wait on its lock and get the same folder. A build that raised is started over
    by the next caller (and raises for it as well, usually)."""
    root = session_dir(tmp_path_factory)
    folder, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            done.touch()
    return folder
