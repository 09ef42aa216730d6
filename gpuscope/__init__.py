"""`import gpuscope`: the analysis API (`gpuscope.open(path)`), re-exported from `tb_plugin.api`, where it lives
beside the route handlers it calls (docs/python-api.md)."""

from tb_plugin.api import AnalysisError, Diagnosis, History, JobDiff, Profile, Result, open  # noqa: A004

__all__ = ["AnalysisError", "Diagnosis", "History", "JobDiff", "Profile", "Result", "open"]
