"""The groupings the operator and kernel tables offer; the plugin's `group_by` parameters take their choices from
here. Imports nothing, so the route table stays light."""

from __future__ import annotations

#: the operator table: one row per name, or per name and input shapes
OPERATORS = ("name", "name_shape")
#: the kernel table: per kernel name, with the launching op, or with the launch configuration too
KERNELS = ("name", "name_op", "name_op_config")
