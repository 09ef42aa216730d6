"""Agreement with Holistic Trace Analysis (HTA) on every shared trace: temporal breakdown, kernel type breakdown
and communication/computation overlap within 1%, or the intentional difference named below.

HTA's numbers are precomputed in tests/data/hta/hta_reference.json by tests/data/hta/make_hta_reference.py
(run in the compatibility venv; its provenance block says which HTA), so this test needs no HTA. Besides the
shared traces (none has communication kernels) it holds HTA's numbers for two hand-made fixtures with NCCL
kernels (tests/data/issue11/idle_gpu, nccl_rpc_rank0), so the overlap comparison runs too. With
GPUSCOPE_COMPAT_VENV set, test_reference_is_current re-runs HTA and checks the file is up to date.

Intentional differences:

* HTA_WINDOW: HTA analyses only the GPU activities launched by CPU calls that start before the last
  ProfilerStep (it drops the last step), over [first such activity, last one's end]. Our overview measures each
  step's window (steps as in tests/test_agreement.py) and all GPU activity in it. The comparison below applies
  HTA's selection and window to our functions (`temporal.window_breakdown`, `temporal.kernel_type_times`).
* HTA_CPU_ONLY: on traces without GPU activity HTA's temporal breakdown raises (IndexError) and its other
  analyses return nothing; ours reports no GPU summary (`gpu` is None).
* HTA_CLOCK: HTA reads absolute µs as float64 and rounds each start up and each end down to the µs, which
  matters on traces written with ns decimals (`hta_ns_resolution`); the comparison applies that clock to our
  input (`tests.test_hta_idle.hta_clock`), the numbers of the views themselves keep the trace's ns.
* HTA_NO_COMM: on traces without communication kernels HTA's overlap ratio is 0/0 (NaN); ours counts no
  communication kernels (the distributed view's GPU communication is 0).
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from .test_hta_idle import hta_clock
from .test_views_common_support import load_shared

REF = Path(__file__).parent / "data" / "hta" / "hta_reference.json"


def close(ours: float, ref: float) -> bool:
    return abs(ours - ref) <= max(1.0, 0.01 * abs(ref))


def reference() -> dict:
    return json.loads(REF.read_text())


def hta_selection(t):
    """HTA's GPU events: kernels/copies/memsets whose correlation matches a launch call starting before the last
    ProfilerStep's start (HTA_WINDOW)."""
    from tb_plugin.views import common, temporal

    ev = t.events
    rows, kinds = temporal.gpu_kinds(t)
    st_mask = common.category_mask(ev, common.CPU_OP_CATS) & common.name_mask(
        ev, lambda n: n.startswith(common.STEP_PREFIX))
    # without ProfilerStep spans HTA keeps every launch
    last_start = int(ev["ts"].to_numpy()[st_mask].max()) if st_mask.any() else np.iinfo(np.int64).max
    launches = np.flatnonzero(common.category_mask(ev, common.LAUNCH_CATS))
    corr = ev["correlation"].to_numpy(np.int64)
    early_corr = corr[launches][ev["ts"].to_numpy(np.int64)[launches] < last_start]
    keep = np.isin(corr[rows], early_corr[early_corr >= 0])
    return rows[keep], kinds[keep]


FIXTURES = Path(__file__).parent / "data" / "issue11"


def cases(shared: Path):
    """(name, path, HTA's numbers) for every shared trace, then for the hand-made fixtures with NCCL kernels."""
    ref = reference()
    assert ref["traces"] and ref["fixtures"], "empty HTA reference"
    for rel, r in sorted(ref["traces"].items()):
        path = shared / rel
        if not path.exists():
            pytest.skip(f"{path} is missing")
        yield rel, path, r
    for name, r in sorted(ref["fixtures"].items()):
        yield name, FIXTURES / f"{name}.pt.trace.json.gz", r


def test_reference_covers_every_shared_trace(shared_traces):
    files = {p.relative_to(shared_traces).as_posix() for p in shared_traces.rglob("*.pt.trace.json*")}
    assert files == set(reference()["traces"])
    prov = reference()["provenance"]
    assert prov["tool"] == "HolisticTraceAnalysis" and prov["version"]


def test_temporal_breakdown_matches_hta(shared_traces):
    from tb_plugin.views import overview, temporal

    checked = 0
    for rel, path, r in cases(shared_traces):
        t = hta_clock(load_shared(path))
        tb = r["temporal_breakdown"]
        if isinstance(tb, dict) and "error" in tb:  # HTA_CPU_ONLY
            assert r["gpu_events"] == 0 and "IndexError" in tb["error"], rel
            assert overview.overview(t)["gpu"] is None, rel
            continue
        (h,) = tb
        rows, kinds = hta_selection(t)
        assert len(rows) == r["gpu_events"], rel
        ev = t.events
        s = ev["ts"].to_numpy(np.int64)[rows]
        e = s + ev["dur"].to_numpy(np.int64)[rows]
        ours = temporal.window_breakdown(t, int(s.min()), int(e.max()), rows, kinds)
        for key, ref_key in (("total", "kernel_time(us)"), ("idle", "idle_time(us)"),
                             ("compute", "compute_time(us)"), ("non_compute", "non_compute_time(us)")):
            assert close(ours[key] / 1000.0, h[ref_key]), (rel, key, ours[key] / 1000.0, h[ref_key])
        assert abs(100 * ours["idle"] / ours["total"] - h["idle_time_pctg"]) <= 0.01 * h["idle_time_pctg"] + 0.01
        checked += 1
    ref = reference()  # every trace with GPU activity, and the two fixtures
    assert checked == sum(r["gpu_events"] > 0 for r in ref["traces"].values()) + len(ref["fixtures"])


def test_kernel_type_breakdown_matches_hta(shared_traces):
    from tb_plugin.views import temporal

    for rel, path, r in cases(shared_traces):
        kt = r["kernel_type_breakdown"]
        if not kt:
            assert r["gpu_events"] == 0, rel  # HTA_CPU_ONLY
            continue
        t = hta_clock(load_shared(path))
        ours = temporal.kernel_type_times(t, *hta_selection(t))
        for row in kt:
            assert close(ours.get(row["kernel_type"], 0) / 1000.0, row["sum"]), (rel, row, ours)
        assert {k for k, v in ours.items() if v > 0} <= {row["kernel_type"] for row in kt}, rel


def test_comm_comp_overlap_matches_hta(shared_traces):
    from tb_plugin.views import distributed, temporal

    checked = 0
    for rel, path, r in cases(shared_traces):
        (row,) = r["comm_comp_overlap"]
        t = hta_clock(load_shared(path))
        rows, kinds = temporal.gpu_kinds(t)
        if row["comp_comm_overlap_pctg"] is None:  # HTA_NO_COMM: 0/0
            assert not (kinds == 1).any(), rel
            if len(rows):  # a GPU trace: no GPU communication, so nothing overlaps
                w = distributed.distributed({"w": t})["workers"]["w"]
                assert w["communication_us"] == 0.0 and w["overlap_us"] == 0.0, rel
            continue
        # a trace with communication kernels: overlap of computation with communication / communication time
        both = temporal.kernel_type_times(t, rows, kinds)
        comm = sum(v for k, v in both.items() if "COMMUNICATION" in k)
        ovl = sum(v for k, v in both.items() if "COMMUNICATION" in k and "COMPUTATION" in k)
        assert comm > 0 and abs(100 * ovl / comm - row["comp_comm_overlap_pctg"]) <= 1.0, rel
        checked += 1
    assert checked == 2  # idle_gpu (50%) and nccl_rpc_rank0 (0%)


@pytest.mark.skipif(not os.environ.get("GPUSCOPE_COMPAT_VENV"), reason="GPUSCOPE_COMPAT_VENV not set (needs HTA)")
def test_reference_is_current(shared_traces, tmp_path):
    venv = Path(os.environ["GPUSCOPE_COMPAT_VENV"])
    py = venv / "bin" / "python"
    if not py.exists():
        pytest.skip(f"{py} does not exist")
    script = REF.parent / "make_hta_reference.py"
    env = dict(os.environ, HTA_REFERENCE_OUT=str(tmp_path / "ref.json"))
    subprocess.run([str(py), str(script), str(shared_traces)], check=True, env=env, capture_output=True, timeout=900)
    fresh = json.loads((tmp_path / "ref.json").read_text())
    for key in ("traces", "fixtures"):
        assert same(fresh[key], reference()[key]), "regenerate tests/data/hta/hta_reference.json"


def same(a, b) -> bool:
    """Equal structures, numbers within 1% (another HTA release may round differently)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return close(float(a), float(b))
    return a == b
