"""Shared pytest fixtures: where the team's reference traces live."""
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("GPUSCOPE_SHARED", ROOT.parent / "shared"))
TRACES = SHARED / "traces"
DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def shared_traces() -> Path:
    """The reference traces from real PyTorch runs (../shared/traces); skip if absent."""
    if not TRACES.is_dir():
        pytest.skip("../shared/traces not present")
    return TRACES


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
