"""The installed distribution's version (pyproject.toml is its only source)."""

from __future__ import annotations

DIST_NAME = "gpuscope"
#: What ``__version__`` is when no ``gpuscope`` distribution is installed (e.g. a source tree on PYTHONPATH).
UNKNOWN = "0+unknown"


def get_version() -> str:
    """The version of the installed ``gpuscope`` distribution, or ``UNKNOWN`` when it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DIST_NAME)
    except PackageNotFoundError:
        return UNKNOWN
