"""Operators view: the operator table grouped by name or by name and input shape, and one group's call stacks
(docs/http-api.md); the table is `analysis.tables.operators`'."""

from __future__ import annotations

from typing import Any

from profiler_core.analysis.tables import operators as table
from tb_plugin.errors import BadRequest
from tb_plugin.params import OPERATORS_GROUP_BY

GROUP_BY = OPERATORS_GROUP_BY.choices


def operators(t: Any, group_by: str = "name") -> dict:
    """The operator table's rows grouped by `group_by` (one of GROUP_BY)."""
    if group_by not in GROUP_BY:
        raise BadRequest(f"group_by must be one of {', '.join(GROUP_BY)}, not {group_by!r}")
    return table.operators(t, group_by)


def operator_stacks(t: Any, name: str, input_shape: str | None = None) -> dict:
    """The calls of one operator (and input shape) split by call stack."""
    if not isinstance(name, str) or not name:
        raise BadRequest("name is required")
    return table.operator_stacks(t, name, input_shape)
