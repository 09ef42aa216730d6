"""What every HTA reference generator here shares: HTA's version and writing the reference JSON (run as scripts in
the compatibility venv, so this module is found beside them)."""

from __future__ import annotations

import json
import os
from pathlib import Path


def hta_version(hta: object) -> str | None:
    """HTA's version: its `__version__`, else the installed distribution's, else None."""
    found = getattr(hta, "__version__", None)
    if found:
        return str(found)
    try:
        from importlib.metadata import version

        return version("HolisticTraceAnalysis")
    except Exception:  # noqa: BLE001
        return None


def write_reference(result: dict, default: Path) -> Path:
    """Write `result` as sorted, indented JSON to $HTA_REFERENCE_OUT or `default`; return the path written."""
    out = Path(os.environ.get("HTA_REFERENCE_OUT") or default)
    out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print("wrote", out)
    return out
