"""Which ops of a trace have a performance model, what each call must do, and which calls count.

`op_models(t)`: one row per cpu_op whose name has a model (`perf_models.has_model`), with the model applied to
its `Input Dims` / `Input type` columns. `Concrete Inputs` is not a column of the trace model, so the facts only it
holds come from elsewhere in the trace where the trace has them, else the call has no model: a forward
convolution's output shape from the autograd node of the same sequence number (`ConvolutionBackward0`,
`CudnnConvolutionBackward`, ...: its input is the output's gradient), a backward convolution's output mask from
the grad-input / grad-weight sub-ops it ran (torch <= 1.10).

A composite op and the ops it calls are modelled alike (linear and its addmm; conv2d and its cudnn_convolution;
SDPA and its flash op): only the **outermost** modelled call of a nesting counts (`counted`), so no FLOP is
counted twice and the counted call holds the device time of every kernel launched inside it.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pandas as pd

from ...trace.categories import CPU_OP
from .. import perf_models
from ..stages.columns import category_mask, codes_and_texts
from ..stages.op_tree import op_tree
from ..stages.registry import stage

#: autograd nodes of a convolution (their one input: the gradient of the forward call's output)
_CONV_NODE = re.compile(r"^(?:[A-Za-z]+)?Convolution(?:Transpose)?Backward\d*$")
_CONV_FORWARD = frozenset(("conv1d", "conv2d", "conv3d", "convolution", "_convolution", "cudnn_convolution",
                           "miopen_convolution", "mkldnn_convolution", "convolution_overrideable"))  # fmt: skip
_BWD_PARTS = (("_backward_input", 0), ("_backward_weight", 1))

COLUMNS = ("row", "family", "flops", "bytes", "dtype", "matrix", "counted", "note")


def _parse(text: str) -> list:
    if not text:
        return []
    try:
        v = json.loads(text)
    except ValueError:
        return []
    return v if isinstance(v, list) else []


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: np.zeros(0, np.int64) for c in COLUMNS})


@stage(op_tree)
def op_models(t: Any) -> pd.DataFrame:
    """One row per op call with a model: `row` (position in t.events), `family` ("" where this call has no model),
    `flops`, `bytes` (0 without a model), `dtype`, `matrix` (model FLOPs), `counted` (the outermost call of a
    nesting of modelled calls: the one whose FLOPs and kernels count), `note` (an assumption, or why no model)."""
    ev = t.events
    if len(ev) == 0:
        return _empty()
    is_op = category_mask(ev, (CPU_OP,))
    name_codes, names = codes_and_texts(ev["name"].array)
    modelled_code = np.array([perf_models.has_model(n) for n in names] + [False])
    rows = np.flatnonzero(is_op & modelled_code[name_codes])
    if len(rows) == 0:
        return _empty()
    dims_codes, dims_texts = codes_and_texts(ev["input_dims"].array)
    type_codes, type_texts = codes_and_texts(ev["input_type"].array)
    hints = _hints(t, is_op, name_codes, names, dims_codes, dims_texts)
    # one model per distinct (name, dims, types) of the rows without a hint; a row with a hint alone
    hinted = np.array([r in hints for r in rows.tolist()], bool) if hints else np.zeros(len(rows), bool)
    key = (name_codes[rows] * (len(dims_texts) + 1) + dims_codes[rows]) * (len(type_texts) + 1) + type_codes[rows]
    key = np.where(hinted, -1 - np.arange(len(rows)), key)
    uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    models: list[tuple] = []
    for i in first.tolist():
        r = int(rows[i])
        dims, types = _parse(dims_texts[dims_codes[r]]), _parse(type_texts[type_codes[r]])
        m = perf_models.model_op(names[name_codes[r]], dims, types, None, hints.get(r))
        if isinstance(m, perf_models.OpModel):
            models.append((m.family, m.flops, m.bytes, m.dtype, m.matrix, m.note))
        else:
            models.append(("", 0, 0, "", False, str(m) if m is not None else "no model"))
    cols = list(zip(*models)) if models else [()] * 6
    fam = np.array(cols[0], dtype=object)[inverse]
    flops = np.array(cols[1], dtype=np.int64)[inverse]
    nbytes = np.array(cols[2], dtype=np.int64)[inverse]
    dtype = np.array(cols[3], dtype=object)[inverse]
    matrix = np.array(cols[4], dtype=bool)[inverse]
    note = np.array(cols[5], dtype=object)[inverse]
    ok = fam != ""
    counted = _outermost(t, rows, ok)
    return pd.DataFrame(
        {
            "row": rows.astype(np.int64),
            "family": fam,
            "flops": flops,
            "bytes": nbytes,
            "dtype": dtype,
            "matrix": matrix,
            "counted": counted,
            "note": note,
        }
    )


def _outermost(t: Any, rows: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """For each of `rows` (with a working model where `ok`): no ancestor in the op tree has a working model."""
    n = len(t.events)
    good = np.zeros(n, bool)
    good[rows[ok]] = True
    covered = _covered(t, good)
    return ok & ~covered[rows]


def _covered(t: Any, marked: np.ndarray) -> np.ndarray:
    """Per event row: some ancestor in the op tree is `marked` (level by level from the roots)."""
    tree = op_tree(t)
    n = len(t.events)
    covered = np.zeros(n, bool)
    if len(tree) == 0:
        return covered
    row = tree["row"].to_numpy(np.int64)
    parent = tree["parent"].to_numpy(np.int64)
    depth = tree["depth"].to_numpy(np.int64)
    order = np.argsort(depth, kind="stable")
    bounds = np.searchsorted(depth[order], np.arange(depth.max() + 2))
    for d in range(1, len(bounds) - 1):
        at = order[bounds[d] : bounds[d + 1]]
        p = parent[at]
        has = p >= 0
        covered[row[at[has]]] = covered[p[has]] | marked[p[has]]
    return covered


def owners(t: Any, counted_rows: np.ndarray) -> np.ndarray:
    """Per event row: the nearest counted op at or above it in the op tree (the row), else -1."""
    tree = op_tree(t)
    n = len(t.events)
    owner = np.full(n, -1, np.int64)
    owner[counted_rows] = counted_rows
    if len(tree) == 0:
        return owner
    row = tree["row"].to_numpy(np.int64)
    parent = tree["parent"].to_numpy(np.int64)
    depth = tree["depth"].to_numpy(np.int64)
    order = np.argsort(depth, kind="stable")
    bounds = np.searchsorted(depth[order], np.arange(depth.max() + 2))
    for d in range(1, len(bounds) - 1):
        at = order[bounds[d] : bounds[d + 1]]
        r, p = row[at], parent[at]
        take = (p >= 0) & (owner[r] < 0)
        owner[r[take]] = owner[p[take]]
    return owner


def _hints(
    t: Any, is_op: np.ndarray, name_codes: np.ndarray, names: list[str], dims_codes: np.ndarray, dims_texts: list
) -> dict[int, dict]:
    """Per op row, what the trace says elsewhere about the facts `Concrete Inputs` would hold (module docstring)."""
    ev = t.events
    hints: dict[int, dict] = {}
    node_code = np.array([bool(_CONV_NODE.match(n)) for n in names] + [False])
    fwd_code = np.array([perf_models.short_name(n) in _CONV_FORWARD for n in names] + [False])
    seq = ev["sequence_nr"].to_numpy(np.int64)
    pid = ev["pid"].to_numpy(np.int64)
    nodes = np.flatnonzero(is_op & node_code[name_codes] & (seq >= 0))
    if len(nodes):
        out: dict[tuple, Any] = {}
        for r in nodes.tolist():
            dims = _parse(dims_texts[dims_codes[r]])
            shape = dims[0] if dims and isinstance(dims[0], list) and dims[0] else None
            key = (int(pid[r]), int(seq[r]))
            out[key] = shape if key not in out or out[key] == shape else None  # two different: no answer
        for r in np.flatnonzero(is_op & fwd_code[name_codes] & (seq >= 0)).tolist():
            shape = out.get((int(pid[r]), int(seq[r])))
            if shape is not None:
                hints[r] = {"out": shape}
    parts = [i for i, n in enumerate(names) if n.endswith((_BWD_PARTS[0][0], _BWD_PARTS[1][0]))]
    if parts:
        part_rows = np.flatnonzero(is_op & np.isin(name_codes, parts))
        tree = op_tree(t)
        parent_of = np.full(len(ev), -1, np.int64)
        parent_of[tree["row"].to_numpy(np.int64)] = tree["parent"].to_numpy(np.int64)
        for r in part_rows.tolist():
            p = int(parent_of[r])
            if p < 0:
                continue
            mask = hints.setdefault(p, {}).setdefault("mask", [False, False, False])
            mask[0 if names[name_codes[r]].endswith(_BWD_PARTS[0][0]) else 1] = True
    return hints
