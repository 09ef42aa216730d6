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
