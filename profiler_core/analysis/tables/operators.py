"""Operators view: operators grouped by name (or name and input shape) with calls, host and device self/total
time, Tensor Core eligibility and call-stack availability; the call stacks of one group (docs/http-api.md)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from profiler_core.analysis import groupings
from profiler_core.analysis.stages.classify import STEP_PREFIX, is_dataloader
from profiler_core.analysis.stages.columns import (
    category_mask,
    codes_and_texts,
    first_position_by_key,
    is_zeros_column,
    lookup,
    name_mask,
    ns_to_us,
    per_value,
    zeros_column,
)
from profiler_core.analysis.stages.node_stats import node_stats as stages_node_stats
from profiler_core.analysis.stages.op_tree import composite, group_codes
from profiler_core.analysis.stages.registry import cached, stage
from profiler_core.analysis.tables.graph_notes import graph_replay_notes
from profiler_core.analysis.tensor_cores import is_tc_eligible_op, uses_tensor_cores
from profiler_core.trace.categories import GPU_ACTIVITY_CATS

GROUP_BY = groupings.OPERATORS
# ops left out of the table, as torch-tb-profiler does: wrappers whose time is their children's
_EXCLUDED = frozenset({"DataParallel.forward", "DistributedDataParallel.forward"})


def _is_table_op(name: str) -> bool:
    return not (name.startswith((STEP_PREFIX, "Optimizer.")) or name in _EXCLUDED or is_dataloader(name))


def _display_shape(dims: str) -> str:
    """Input Dims text as torch-tb-profiler shows it: Python's str() of the list ("[[2, 3], []]")."""
    if not dims:
        return "[]"
    try:
        return json.dumps(json.loads(dims))
    except ValueError:
        return dims


def _eligible_up(parent: np.ndarray, is_op: np.ndarray, eligible: np.ndarray, below: np.ndarray) -> None:
    """Up the tree from the eligible nodes, in place: every ancestor of one has an eligible node `below`; an op
    whose child is eligible is eligible. The walks touch only those nodes and their ancestors, a level at a
    time (not every node at every depth)."""
    up = parent[eligible]
    while len(up := up[up >= 0]):
        up = up[~below[up]]
        below[up] = True
        up = parent[up]
    up = parent[eligible]
    while len(up := up[up >= 0]):
        up = up[is_op[up] & ~eligible[up]]
        eligible[up] = True
        up = parent[up]


@stage(stages_node_stats)
def op_stats(t: Any) -> pd.DataFrame:
    """`stages.node_stats` plus Tensor Core columns: `tc_self` (Tensor Core kernel ns launched by the node),
    `tc_eligible` (the node, or an op it calls, can use Tensor Cores), `bottom_eligible` (eligible with no
    eligible op below)."""
    ev = t.events
    st = stages_node_stats(t)
    n = len(st)
    is_op = st["is_op"].to_numpy()
    parent = st["parent"].to_numpy().astype(np.int64)
    rows = st["row"].to_numpy()
    eligible = name_mask(ev, is_tc_eligible_op)[rows]
    has_eligible_below = np.zeros(n, dtype=bool)
    gnode, grow = st.attrs["device_node"], st.attrs["device_rows"]
    if len(grow):
        tc_kernel = category_mask(ev, ("kernel",))[grow] & name_mask(ev, uses_tensor_cores)[grow]
        tc_self = np.bincount(
            gnode, weights=np.where(tc_kernel, ev["dur"].to_numpy(np.float64)[grow], 0.0), minlength=n
        )
        eligible |= is_op & (tc_self > 0)
    else:
        tc_self = zeros_column(n)
    _eligible_up(parent, is_op, eligible, has_eligible_below)
    cols = {c: st[c].array if c == "name" else st[c].to_numpy() for c in st.columns}
    cols.update(tc_self=tc_self, tc_eligible=eligible, bottom_eligible=eligible & ~has_eligible_below)
    return pd.DataFrame(cols, copy=False)


def node_stats(t: Any) -> pd.DataFrame:
    """Per op-tree node: `stages.node_stats`' columns with the Tensor Core ones (`op_stats`)."""
    return op_stats(t)


@stage()
def python_parents(t: Any) -> tuple[np.ndarray, np.ndarray]:
    """The with_stack frames stage: python_function rows and each one's parent frame (row or -1)."""
    ev = t.events
    rows = np.flatnonzero(category_mask(ev, ("python_function",)))
    pid_of = ev["python_id"].to_numpy(np.int64)[rows]
    parent_id = ev["python_parent_id"].to_numpy(np.int64)[rows]
    keys, vals = first_position_by_key(pid_of[pid_of >= 0], rows[pid_of >= 0])
    parent = lookup(keys, vals, np.where(parent_id >= 0, parent_id, -2))
    return rows, parent


def python_leaf_frames(t: Any, rows: np.ndarray) -> np.ndarray:
    """For events at `rows`: the innermost python_function on the same thread running at the event's start
    (the leaf of its with_stack call stack), or -1. Current PyTorch records stacks this way, not as args."""
    ev = t.events
    prow, prow_parent = python_parents(t)
    out = np.full(len(rows), -1, np.int64)
    if len(prow) == 0 or len(rows) == 0:
        return out
    pid, tid = ev["pid"].to_numpy(), ev["tid"].to_numpy()
    ts = ev["ts"].to_numpy(np.int64)
    te = ts + ev["dur"].to_numpy(np.int64)
    g = group_codes(np.concatenate([pid[prow], pid[rows]]), np.concatenate([tid[prow], tid[rows]]))
    gp, gq = g[: len(prow)], g[len(prow) :]
    order = np.lexsort((-te[prow], ts[prow], gp))
    sp, gp = prow[order], gp[order]
    lo = int(min(ts[sp].min(), ts[rows].min()))
    span = int(max(te[sp].max(), ts[rows].max())) - lo + 2
    cand = np.searchsorted(composite(gp, ts[sp], lo, span), composite(gq, ts[rows], lo, span), side="right") - 1
    ok = cand >= 0
    same = np.zeros(len(rows), dtype=bool)
    same[ok] = gp[cand[ok]] == gq[ok]
    leaf = np.where(same, sp[np.maximum(cand, 0)], -1)
    parent_of = np.full(len(ev), -1, np.int64)
    parent_of[prow] = prow_parent
    q = ts[rows]
    for _ in range(256):  # walk up the Python parents until the frame is still running at the op's start
        bad = (leaf >= 0) & (te[np.maximum(leaf, 0)] <= q)
        if not bad.any():
            break
        leaf[bad] = parent_of[leaf[bad]]
    return leaf


def _python_stack(names: pd.Series, parent_of: np.ndarray, leaf: int, memo: dict) -> str:
    """The with_stack frames from `leaf` up to the top, innermost first, ';'-separated (like `Call stack`)."""
    if leaf not in memo:
        frames, r, seen = [], leaf, set()
        while r >= 0 and r not in seen:
            seen.add(r)
            frames.append(str(names.iloc[r]))
            r = int(parent_of[r])
        memo[leaf] = ";".join(frames)
    return memo[leaf]


def _table_mask(t: Any, st: pd.DataFrame, only_name: str | None = None) -> np.ndarray:
    """Per node of `st` (node_stats): whether it is an operator-table node (optionally of one name)."""
    ev = t.events
    rows = st["row"].to_numpy()
    keep = st["is_op"].to_numpy() & name_mask(ev, _is_table_op)[rows]
    if only_name is not None:
        keep &= per_value(ev["name"], lambda n: n == only_name)[rows]
    return keep


def _table_rows(t: Any, st: pd.DataFrame, only_name: str | None = None) -> np.ndarray:
    """Positions in `st` (node_stats) of the operator-table nodes, optionally of one name."""
    return np.flatnonzero(_table_mask(t, st, only_name))


def _has_stack(t: Any, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For events at `rows`: their `Call stack` texts (categorical), with_stack leaf frames, and whether
    either gives a stack."""
    call_stack = t.events["call_stack"].array.take(rows)
    py_leaf = python_leaf_frames(t, rows)
    return call_stack, py_leaf, per_value(pd.Series(call_stack), bool) | (py_leaf >= 0)


def _stack_mask(t: Any, rows: np.ndarray) -> np.ndarray:
    """`_has_stack(t, rows)[2]` without taking the rows' texts: whether the events at `rows` have a stack."""
    has = per_value(t.events["call_stack"], bool)[rows]
    if len(python_parents(t)[0]):  # (no with_stack frame: no leaf to look for)
        has |= python_leaf_frames(t, rows) >= 0
    return has


def _table_ops(t: Any, only_name: str | None = None) -> pd.DataFrame:
    """The operator-table nodes (optionally of one name) with input dims, call stack and stack availability."""
    st = node_stats(t)
    where = _table_rows(t, st, only_name)
    # only the columns the tables use, each taken once (a copy of every node column is this view's peak)
    cols = {c: st[c].array.take(where) if c == "name" else st[c].to_numpy()[where] for c in _TABLE_COLUMNS}
    rows = cols["row"]
    call_stack, py_leaf, has_stack = _has_stack(t, rows)
    cols.update(
        input_dims=t.events["input_dims"].array.take(rows), call_stack=call_stack, py_leaf=py_leaf, has_stack=has_stack
    )
    return pd.DataFrame(cols, copy=False)


#: the node_stats columns the operator tables use
_TABLE_COLUMNS = ("row", "name", "host_self", "host_total", "device_self", "device_total", "kernel_self", "tc_eligible")
_SUMS = ("host_self", "host_total", "device_self", "device_total")


@stage(op_stats)
def tensor_core_eligible_kernel_ratio(t: Any) -> float:
    """Kernel time of the lowest Tensor Core eligible ops / kernel time of all table ops (for the AMP advice)."""
    st = op_stats(t)
    kernel_self = st["kernel_self"].to_numpy()
    if is_zeros_column(kernel_self):  # no kernel under any node
        return 0.0
    total = kernel_self[_table_rows(t, st)].sum()
    if total <= 0:
        return 0.0
    return float(st.loc[st["bottom_eligible"], "kernel_self"].sum() / total)


def _has_device(t: Any) -> bool:
    return bool(category_mask(t.events, GPU_ACTIVITY_CATS).any()) if len(t.events) else False


def _aggregate(ops: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    g = ops.groupby(keys, sort=False, observed=True)
    out = g.agg(
        calls=("row", "size"),
        host_self=("host_self", "sum"),
        host_total=("host_total", "sum"),
        device_self=("device_self", "sum"),
        device_total=("device_total", "sum"),
        tc_eligible=("tc_eligible", "any"),
        has_call_stack=("has_stack", "any"),
    ).reset_index()
    for k in keys:  # categorical keys -> plain strings on the (small) result
        out[k] = out[k].astype(str)
    return out


def operators(t: Any, group_by: str = "name") -> dict:
    """Operator table rows grouped by `name` or `name_shape`, sorted by device self time (host self time on a
    CPU-only trace) descending, then name and input shape."""
    if group_by not in GROUP_BY:
        raise ValueError(f"group_by must be one of {', '.join(GROUP_BY)}, not {group_by!r}")
    res = cached(t, f"operators:{group_by}", lambda: _operators(t, group_by))  # the view's answer, not a stage
    return {**res, "rows": [dict(r) for r in res["rows"]]}  # callers may edit their copy


def _group_sums(group: np.ndarray, values: np.ndarray, m: int) -> np.ndarray:
    """Per group 0..m-1, the sum of `values` (group m: left out); a column of zeros shared by every row (a
    CPU trace's device times) sums to zeros without a pass."""
    if is_zeros_column(values):
        return np.zeros(m)
    return np.bincount(group, weights=values, minlength=m + 1)[:m]


def _operators(t: Any, group_by: str) -> dict:
    """The table, aggregated with bincounts over group codes (no per-node frame: the table's nodes are
    most of a trace's events, and a frame of them was this view's peak memory)."""
    st = node_stats(t)
    keep = _table_mask(t, st)
    rows = st["row"].to_numpy()[keep] if group_by == "name_shape" or len(python_parents(t)[0]) else None
    # the sums over every node, those outside the table in one more group (m): no copy of each column's
    # table part (the same additions in the same order); the table's masks are spread over the nodes too
    # (no per-table-node copies: the table's nodes are most of a big trace's events)
    shape_values: list[str] = []
    names = st["name"].array
    if group_by == "name_shape":  # distinct Input Dims texts that display alike form one group
        name_codes, name_values = codes_and_texts(names[keep])
        dims_codes, dims_values = codes_and_texts(t.events["input_dims"].array.take(rows))
        shape_of_dims, uniq = pd.factorize(pd.Index([_display_shape(d) for d in dims_values], dtype=object))
        shape_values = [str(v) for v in uniq]
        shape_codes = shape_of_dims[dims_codes]
        del dims_codes
        keys = name_codes * max(1, len(shape_values)) + shape_codes
        del name_codes, shape_codes
        inverse, groups = pd.factorize(keys)  # hashing: leaner than np.unique's sorts
        del keys
        m = len(groups)
        group_of_node = np.full(len(st), m, dtype=np.int64)
        group_of_node[keep] = inverse
        del inverse
    elif not isinstance(names, pd.Categorical):  # (the reader's names are categorical)
        inverse, name_values = codes_and_texts(names[keep])
        groups = np.arange(len(name_values))
        m = len(groups)
        group_of_node = np.full(len(st), m, dtype=np.int64)
        group_of_node[keep] = inverse
        del inverse
    else:  # the name codes are the groups already (names without a table op have no calls): codes_and_texts'
        # codes and texts, without a per-table-node copy
        codes = np.asarray(names.codes)
        name_values = [str(v) for v in names.categories]
        missing = keep & (codes < 0)
        if missing.any():  # missing: its own code, shown as ""
            name_values.append("")
        groups = np.arange(len(name_values))
        m = len(groups)
        group_of_node = np.full(len(st), m, dtype=np.int64)
        group_of_node[keep] = codes[keep]
        group_of_node[missing] = len(names.categories)
        del codes, missing
    calls = np.bincount(group_of_node, minlength=m + 1)[:m]
    sums = {c: _group_sums(group_of_node, st[c].to_numpy(), m) for c in _SUMS}
    tc = np.zeros(m + 1, dtype=bool)
    tc[group_of_node[keep & st["tc_eligible"].to_numpy()]] = True
    if rows is None:  # (no with_stack frame: the Call stack texts alone, over the nodes' rows)
        stack_of_node = per_value(t.events["call_stack"], bool)[st["row"].to_numpy()]
        stack_of_node &= keep
    else:
        stack_of_node = np.zeros(len(st), dtype=bool)
        stack_of_node[keep] = _stack_mask(t, rows)
    del rows, keep
    stack = np.zeros(m + 1, dtype=bool)
    stack[group_of_node[stack_of_node]] = True
    del group_of_node, stack_of_node
    device = _has_device(t)
    metric = "device_self" if device else "host_self"
    out = []
    for g in range(m):
        if not calls[g]:
            continue
        key = int(groups[g])
        row: dict[str, Any] = {
            "name": name_values[key // max(1, len(shape_values))] if shape_values else name_values[key]
        }
        if group_by == "name_shape":
            row["input_shape"] = shape_values[key % max(1, len(shape_values))]
        row.update(
            calls=int(calls[g]),
            host_self_us=ns_to_us(sums["host_self"][g]),
            host_total_us=ns_to_us(sums["host_total"][g]),
            device_self_us=ns_to_us(sums["device_self"][g]),
            device_total_us=ns_to_us(sums["device_total"][g]),
            tc_eligible=bool(tc[g]),
            has_call_stack=bool(stack[g]),
        )
        out.append((-sums[metric][g], row))
    out.sort(key=lambda kr: (kr[0], kr[1]["name"], kr[1].get("input_shape", "")))
    res = {"rows": [r for _, r in out], "device": device, "sort": f"{metric}_us"}
    notes = graph_replay_notes(t)
    return {**res, "notes": notes} if notes else res


def operator_rows(t: Any, name: str, input_shape: str | None = None) -> np.ndarray:
    """The event rows of the operator table's calls of `name` (and of that input shape, as the table's rows show
    it): the calls a row of the table counts, for the timeline's occurrences of that row."""
    st = node_stats(t)
    rows = st["row"].to_numpy()[_table_rows(t, st, name)]
    if input_shape is not None and len(rows):
        dims = t.events["input_dims"].array.take(rows)
        rows = rows[per_value(pd.Series(dims), lambda d: _display_shape(d) == input_shape)]
    return np.asarray(rows, np.int64)


def operator_stacks(t: Any, name: str, input_shape: str | None = None) -> dict:
    """The calls of one operator (and input shape) split by call stack: one row per distinct stack with the
    same columns as the table plus `call_stack` (frames, innermost first). Stacks come from the legacy
    `Call stack` arg, else from the with_stack `python_function` frames running when the op started."""
    if not isinstance(name, str) or not name:
        raise ValueError("name is required")
    ops = _table_ops(t, only_name=name)
    if input_shape is not None:
        ops = ops[per_value(ops["input_dims"], lambda d: _display_shape(d) == input_shape)]
    ops = ops[ops["has_stack"]]
    memo: dict = {}
    prow, prow_parent = python_parents(t)
    parent_of = np.full(len(t.events), -1, np.int64)
    parent_of[prow] = prow_parent
    legacy = ops["call_stack"].astype(str).to_numpy()
    stacks = [
        s if s else _python_stack(t.events["name"], parent_of, int(leaf), memo)
        for s, leaf in zip(legacy, ops["py_leaf"].to_numpy())
    ]
    ops = ops.assign(call_stack=stacks)
    agg = _aggregate(ops, ["call_stack"]) if len(ops) else pd.DataFrame()
    device = _has_device(t)
    rows = []
    if len(agg):
        metric = "device_self" if device else "host_self"
        agg = agg.sort_values([metric, "call_stack"], ascending=[False, True], kind="stable")
        for r in agg.itertuples(index=False):
            stack = str(r.call_stack)
            rows.append(
                {
                    "name": name,
                    **({"input_shape": input_shape} if input_shape is not None else {}),
                    "call_stack": [f for f in stack.split(";") if f] if stack else [],
                    "calls": int(r.calls),
                    "host_self_us": ns_to_us(r.host_self),
                    "host_total_us": ns_to_us(r.host_total),
                    "device_self_us": ns_to_us(r.device_self),
                    "device_total_us": ns_to_us(r.device_total),
                    "tc_eligible": bool(r.tc_eligible),
                }
            )
    return {"name": name, "input_shape": input_shape, "rows": rows}
