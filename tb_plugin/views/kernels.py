"""Kernels view: the kernel table grouped by name, with the launching op, or with the launch configuration too
(docs/http-api.md); the table is `analysis.tables.kernels`'."""

from __future__ import annotations

from typing import Any

from profiler_core.analysis.tables import kernels as table
from tb_plugin.errors import BadRequest
from tb_plugin.params import KERNELS_GROUP_BY

GROUP_BY = KERNELS_GROUP_BY.choices


def kernels(t: Any, group_by: str = "name") -> dict:
    """The kernel table's rows grouped by `group_by` (one of GROUP_BY)."""
    if group_by not in GROUP_BY:
        raise BadRequest(f"group_by must be one of {', '.join(GROUP_BY)}, not {group_by!r}")
    return table.kernels(t, group_by)
