"""Regenerate tests/data/hta/hta_critical_path_reference.json: Holistic Trace Analysis' critical path analysis
on the shared traces made for it (`CASES`).

Run with the compatibility venv (HolisticTraceAnalysis installed), from the repository root:

    $GPUSCOPE_COMPAT_VENV/bin/python tests/data/hta/make_hta_critical_path_reference.py [../shared/traces]

Each trace file is analysed alone (copied into a temporary directory of its own, as its own rank) with
`TraceAnalysis.critical_path_analysis(rank, annotation, instance_id)`, the windows HTA's own tests use. Per case
it records:

* `window_us`: the annotation instance's range HTA clipped to (end - start, µs; the whole trace for "");
* `total_us`: the critical path's length (sum of its edge weights, µs);
* `by_bound_us`: the weights per HTA `bound_by` class (cpu_bound, gpu_compute_bound, gpu_communication_bound,
  gpu_kernel_kernel_overhead, gpu_kernel_launch_overhead; "" for its zero-weight dependency edges);
* `path`: the path's weighted edges in order, consecutive edges of one event joined: [bound_by, event name,
  µs].

HTA 0.5 was written for pandas 2; under pandas 3 (the compatibility venv's) two of its idioms fail or do nothing:
`DataFrame.drop(axis=1, columns=...)` raises, and `df.col.fillna(..., inplace=True)` leaves `df` unchanged
(copy-on-write), which drops its CUDA event synchronisation edges. `_pandas2_idioms()` makes both behave as under
pandas 2 before HTA runs; with it HTA's own test expectations hold (315 path nodes on simple_add, 149 on alexnet,
the event record of correlation 1385 resolved to launch 27 on cuda_event_sync_multi_stream).

tests/test_single_rank_path.py compares gpuscope's single-rank critical path with these.
"""

from __future__ import annotations

import datetime
import logging
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

from hta_refs import hta_version, write_reference

HERE = Path(__file__).resolve().parent
ALEXNET_FORWARD = "[param|pytorch.model.alex_net|0|0|0|measure|forward]"
#: (trace relative to the traces folder, annotation, instance_id): the windows of HTA's own critical path tests
CASES = (
    ("public/hta_cp_simple_add/benchmark_result_493459_1694039959_trace.json.gz", ALEXNET_FORWARD, 1),
    ("public/hta_cp_alexnet/benchmark_result_2869224_1695835535_trace.json.gz", ALEXNET_FORWARD, 1),
    ("public/hta_cp_event_sync/event_sync_trace.json.gz", "ProfilerStep", 0),
    ("public/hta_cp_event_sync_ms/event_sync_trace.json.gz", "", None),
    ("public/hta_ns_resolution/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", "ProfilerStep", 1),
)


def _pandas2_idioms() -> None:
    """Under pandas >= 3: DataFrame.drop accepts axis= with columns=, and `frame.column.fillna(inplace=True)`
    updates the frame (both as in pandas 2, which HTA 0.5 relies on)."""
    import pandas as pd

    if int(pd.__version__.split(".")[0]) < 3:
        return
    drop = pd.DataFrame.drop

    def drop_compat(self, labels=None, *, axis=0, index=None, columns=None, **kw):
        if index is not None or columns is not None:
            return drop(self, labels, index=index, columns=columns, **kw)
        return drop(self, labels, axis=axis, **kw)

    getattr_ = pd.DataFrame.__getattr__

    def getattr_compat(self, name):
        value = getattr_(self, name)
        if isinstance(value, pd.Series):
            object.__setattr__(value, "_column_of", (self, name))
        return value

    fillna = pd.Series.fillna

    def fillna_compat(self, value=None, *args, inplace=False, **kw):
        owner = self.__dict__.get("_column_of")
        if inplace and owner is not None:
            frame, name = owner
            frame[name] = fillna(self, value, *args, **kw)
            return None
        return fillna(self, value, *args, inplace=inplace, **kw)

    pd.DataFrame.drop = drop_compat
    pd.DataFrame.__getattr__ = getattr_compat
    pd.Series.fillna = fillna_compat


def _num(v) -> float:
    return float(v)


def analyse(path: Path, annotation: str, instance_id) -> dict:
    """HTA's critical path of one trace file in one window (or the reason it could not run)."""
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory() as d:
        shutil.copy(path, Path(d) / path.name)
        try:
            ta = TraceAnalysis(trace_dir=d)
        except Exception as e:  # noqa: BLE001 - recorded as the reason
            return {"error": f"TraceAnalysis: {type(e).__name__}: {e}"}
        (rank,) = ta.t.get_ranks()
        try:
            got = ta.critical_path_analysis(rank=rank, annotation=annotation, instance_id=instance_id)
        except Exception as e:  # noqa: BLE001 - recorded as the reason
            return {"error": f"critical_path_analysis: {type(e).__name__}: {e}"}
        if got is None or not got[1]:
            return {"error": "critical_path_analysis found no path"}
        g = got[0]
        df = ta.t.get_trace(rank)
        sym = ta.t.symbol_table.get_sym_table()
        if annotation:
            ids = [i for s, i in ta.t.symbol_table.get_sym_id_map().items() if annotation in s]
            ann = df[df["name"].isin(ids)]
            k0, k1 = (instance_id, instance_id) if isinstance(instance_id, int) else instance_id
            window = float((ann["ts"] + ann["dur"]).iloc[k0 : k1 + 1].max() - ann["ts"].iloc[k0 : k1 + 1].min())
        else:
            window = float((df["ts"] + df["dur"]).max() - df["ts"].min())
        b = g.get_critical_path_breakdown()
        path: list[list] = []
        nodes = g.critical_path_nodes
        for u, v in zip(nodes[:-1], nodes[1:]):
            e = g.edges[u, v]["object"]
            if e.weight == 0:
                continue
            ev = g.get_event_attribution_for_edge(e)
            row = {"type": str(e.type.value), "s_name": sym[int(df["name"].loc[ev])] if ev is not None else ""}
            row["stream"] = int(df["stream"].loc[ev]) if ev is not None else -1
            bound = _bound(row)
            if path and path[-1][0] == bound and path[-1][1] == row["s_name"]:
                path[-1][2] += float(e.weight)
            else:
                path.append([bound, row["s_name"], float(e.weight)])
        return {
            "rank": int(rank),
            "annotation": annotation,
            "instance_id": instance_id,
            "window_us": window,
            "total_us": _num(b["duration"].sum()),
            "by_bound_us": {str(k): _num(v) for k, v in b.groupby("bound_by")["duration"].sum().items()},
            "path": path,
        }


def _bound(row: dict) -> str:
    """HTA's bound_by class of an edge (its own function needs the shortened name it decodes)."""
    from hta.analyzers.critical_path_analysis import bound_by

    return bound_by(row)


def main() -> None:
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    _pandas2_idioms()
    import hta

    root = Path(sys.argv[1] if len(sys.argv) > 1 else HERE.parents[2] / ".." / "shared" / "traces").resolve()
    result = {
        "provenance": {
            "tool": "HolisticTraceAnalysis",
            "version": hta_version(hta),
            "generated_by": "tests/data/hta/make_hta_critical_path_reference.py",
            "python": sys.version.split()[0],
            "date": datetime.date.today().isoformat(),
            "inputs": "../shared/traces (CASES in the generator), each file analysed alone (as its rank)",
            "calls": "TraceAnalysis.critical_path_analysis(rank, annotation, instance_id) with HTA's pandas 2 "
            "idioms restored under pandas 3 (_pandas2_idioms); get_critical_path_breakdown() summed per bound_by",
        },
        "traces": {},
    }
    for rel, annotation, instance_id in CASES:
        print("analysing", rel, flush=True)
        result["traces"][rel] = analyse(root / rel, annotation, instance_id)
    write_reference(result, HERE / "hta_critical_path_reference.json")


if __name__ == "__main__":
    main()
