"""Kernel diff: kernels aligned by name, renamed ones by their place under the same op path, the rest unmatched."""

import json
from pathlib import Path

import pytest

from tb_plugin.views.kernel_diff import kernel_diff

from . import trace_builder as tb
from .test_plugin import P, _client, _put
from .trace_builder import read_events

COLS = ["cat", "name", "pid", "tid", "ts", "dur", "external_id", "correlation"]
US = 1000


def events(
    gemm: str,
    gemm_us: float,
    relu_us: float,
    last_op: str,
    last_kernel: str,
    last_us: float,
    steps: int = 2,
    relu_op: str = "aten::relu",
):
    """Steps of 100 µs: "fwd" [10,60] holding aten::mm [11,30] (launching `gemm` at 20 then elementwise_add
    (2 µs) at 30), `relu_op` [40,50] (relu_kernel at 45) and `last_op` [52,58] (`last_kernel` at 55)."""
    rows = []
    for i in range(steps):
        b = i * 100 * US
        x = 10 * (i + 1)  # External ids
        c = 100 * (i + 1)  # correlations

        def launch(ext, corr, ts_us, b=b):
            return ("cuda_runtime", "cudaLaunchKernel", 1, 1, b + ts_us * US, 1 * US, ext, corr)

        rows += [
            ("user_annotation", f"ProfilerStep#{i + 1}", 1, 1, b, 100 * US),
            ("user_annotation", "fwd", 1, 1, b + 10 * US, 50 * US),
            ("cpu_op", "aten::mm", 1, 1, b + 11 * US, 19 * US, x),
            launch(x, c, 12),
            launch(x, c + 1, 14),
            ("kernel", gemm, 0, 7, b + 20 * US, int(gemm_us * US), x, c),
            ("kernel", "elementwise_add", 0, 7, b + 30 * US, 2 * US, x, c + 1),
            ("cpu_op", relu_op, 1, 1, b + 40 * US, 10 * US, x + 1),
            launch(x + 1, c + 2, 41),
            ("kernel", "relu_kernel", 0, 7, b + 45 * US, int(relu_us * US), x + 1, c + 2),
            ("cpu_op", last_op, 1, 1, b + 52 * US, 6 * US, x + 2),
            launch(x + 2, c + 3, 53),
            ("kernel", last_kernel, 0, 7, b + 55 * US, int(last_us * US), x + 2, c + 3),
        ]
    return tb.rows(rows, COLS)


BASE = dict(gemm="sm80_xmma_gemm_f16f16_128x128", gemm_us=8, relu_us=3, last_op="aten::softmax")
EXP = dict(gemm="sm90_xmma_gemm_f16f16_128x256", gemm_us=5, relu_us=8.5, last_op="aten::gelu")


def pair():
    base = read_events(events(**BASE, last_kernel="softmax_kernel", last_us=4))
    exp = read_events(events(**EXP, last_kernel="gelu_kernel", last_us=1))
    return base, exp


def test_rows_aligned_by_name_structure_and_unmatched():
    out = kernel_diff(*pair())
    json.dumps(out)
    got = [
        (r["align"], r["path"], (r["base"] or {}).get("name"), (r["exp"] or {}).get("name"), r["delta_us"])
        for r in out["rows"]
    ]
    # two steps each; the step annotation is not part of the path, so both steps add up
    assert got == [
        ("name", "fwd > aten::relu", "relu_kernel", "relu_kernel", 11.0),  # 2 x (8.5 - 3)
        ("unmatched", "fwd > aten::softmax", "softmax_kernel", None, -8.0),  # 2 x 4 gone
        ("structure", "fwd > aten::mm", BASE["gemm"], EXP["gemm"], -6.0),  # 2 x (5 - 8), 1st kernel of aten::mm
        ("unmatched", "fwd > aten::gelu", None, "gelu_kernel", 2.0),
        ("name", "fwd > aten::mm", "elementwise_add", "elementwise_add", 0.0),
    ]
    relu = out["rows"][0]
    assert relu["base"]["count"] == 2 and relu["exp"]["count"] == 2
    assert (relu["base"]["total_us"], relu["base"]["mean_us"], relu["exp"]["mean_us"]) == (6.0, 3.0, 8.5)
    assert relu["delta_mean_us"] == 5.5
    # first occurrence: step 1's kernel at 45 µs (the trace starts at 0 with ProfilerStep#1)
    assert (relu["base"]["first_us"], relu["base"]["first_dur_us"]) == (45.0, 3.0)
    assert relu["exp"]["first_us"] == 45.0
    # traceEvents index: step 1's rows are 13 events, relu_kernel is the 10th (index 9)
    assert relu["base"]["first_idx"] == 9
    assert out["rows"][1]["exp"] is None and out["rows"][1]["delta_mean_us"] is None
    assert out["base"] == {"kernels": 8, "device_us": 2 * (8 + 2 + 3 + 4.0)}
    assert out["exp"] == {"kernels": 8, "device_us": 2 * (5 + 2 + 8.5 + 1.0)}
    assert out["notes"] == []


def test_renamed_kernels_pair_by_position_under_the_op():
    """Two renamed kernels under one op: the k-th one pairs with the other side's k-th one."""
    base = read_events(events(**{**BASE, "last_op": "aten::mm"}, last_kernel="ampere_tail", last_us=4, steps=1))
    exp = read_events(events(**{**EXP, "last_op": "aten::mm"}, last_kernel="hopper_tail", last_us=1, steps=1))
    out = kernel_diff(base, exp)
    pairs = {(r["base"]["name"], r["exp"]["name"]): r["align"] for r in out["rows"]}
    # each aten::mm call launches gemm (k=0) then elementwise_add (k=1); the second aten::mm launches the tail (k=0)
    # so both gemm and tail are k=0: they pair in order of first appearance (gemm at 20 µs before tail at 55)
    assert pairs == {
        (BASE["gemm"], EXP["gemm"]): "structure",
        ("ampere_tail", "hopper_tail"): "structure",
        ("elementwise_add", "elementwise_add"): "name",
        ("relu_kernel", "relu_kernel"): "name",
    }


def test_a_kernel_under_a_renamed_op_aligns_by_name():
    """relu_kernel runs under aten::relu in base and aten::clamp in exp: neither (path, name) nor (path, k)
    pairs it, its name does; each side keeps its own path."""
    base = read_events(events(**BASE, last_kernel="softmax_kernel", last_us=4, steps=1))
    exp = read_events(events(**EXP, last_kernel="gelu_kernel", last_us=1, steps=1, relu_op="aten::clamp"))
    rows = {(r["base"] or r["exp"])["name"]: r for r in kernel_diff(base, exp)["rows"]}
    relu = rows["relu_kernel"]
    assert relu["align"] == "name" and relu["delta_us"] == 5.5
    assert (relu["path"], relu["base"]["path"], relu["exp"]["path"]) == (
        "fwd > aten::relu",
        "fwd > aten::relu",
        "fwd > aten::clamp",
    )
    assert rows["softmax_kernel"]["align"] == "unmatched" and rows["gelu_kernel"]["align"] == "unmatched"


def test_a_kernel_without_op_is_never_aligned_by_structure():
    base = read_events(tb.rows([("kernel", "lonely_a", 0, 7, 0, 5 * US)], COLS[:6]))
    exp = read_events(tb.rows([("kernel", "lonely_b", 0, 7, 0, 7 * US)], COLS[:6]))
    out = kernel_diff(base, exp)
    assert [(r["align"], r["path"], r["delta_us"]) for r in out["rows"]] == [
        ("unmatched", "", 7.0),
        ("unmatched", "", -5.0),
    ]


def test_no_kernels_is_said():
    base = read_events(tb.rows([("cpu_op", "aten::mm", 1, 1, 0, 5 * US)], COLS[:6]))
    out = kernel_diff(base, base)
    assert out["rows"] == [] and out["base"] == {"kernels": 0, "device_us": 0.0}
    assert any("base has no kernels" in n for n in out["notes"])


@pytest.fixture
def client(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    logs = tmp_path / "logs"
    for run, kw, last in (("a", BASE, ("softmax_kernel", 4)), ("b", EXP, ("gelu_kernel", 1))):
        doc = {
            "schemaVersion": 1,
            "baseTimeNanoseconds": 0,
            "traceEvents": events(**kw, last_kernel=last[0], last_us=last[1]),
        }
        _put(logs / run / "w0.1000.pt.trace.json", doc)
    c, _ = _client(logs)
    return c


def test_route_answers_and_refuses(client):
    q = "run=a&worker=w0&span=1"
    r = client.get(f"{P}/diff/kernels?{q}&exp_run=b&exp_worker=w0&exp_span=1")
    assert r.status_code == 200, r.get_data()[:300]
    assert [row["delta_us"] for row in r.json["rows"]] == [11.0, -8.0, -6.0, 2.0, 0.0]
    r = client.get(f"{P}/diff/kernels?{q}")  # no exp_*: the other run
    assert r.status_code == 200 and r.json["compared_with"] == {"run": "b", "worker": "w0", "span": "1"}
    r = client.get(f"{P}/diff/kernels?{q}&exp_run=b")
    assert r.status_code == 400 and "exp_worker" in r.json["error"]
    r = client.get(f"{P}/diff/kernels?{q}&exp_run=b&exp_worker=w0&exp_span={'1' * 5000}")  # longer than any span
    assert r.status_code == 400 and "exp_span" in r.json["error"]
    r = client.get(f"{P}/diff/kernels?{q}&exp_run=b&exp_worker=w0&exp_span=7")
    assert r.status_code == 404
    r = client.get(f"{P}/diff/kernels?run=nope&worker=w0&span=1")
    assert r.status_code == 404
    r = client.get(f"{P}/diff/kernels?{q}&exp_run=nope&exp_worker=w0&exp_span=1")
    assert r.status_code == 404


HTA_REF = Path(__file__).parent / "data" / "hta" / "hta_trace_diff_reference.json"


def test_per_name_totals_agree_with_hta(shared_traces):
    """HTA's TraceDiff summary (tests/data/hta/make_hta_trace_diff_reference.py) on the pair of traces its own
    trace-diff tests compare: summed over op paths, each side's kernel count and total time per name are HTA's
    (to the µs: HTA reads the trace's µs); HTA's other names are its memcpys and memsets, not kernels."""
    from .test_views_common_support import load_shared

    traces = shared_traces
    ref = json.loads(HTA_REF.read_text())
    inputs = ref["provenance"]["inputs"]
    base, exp = (load_shared(next((traces / inputs[s].split("traces/", 1)[1]).iterdir())) for s in ("base", "exp"))
    out = kernel_diff(base, exp)
    for side in ("base", "exp"):
        ours: dict = {}
        for r in out["rows"]:
            s = r[side]
            if s is not None:
                c = ours.setdefault(s["name"], [0, 0.0])
                c[0] += s["count"]
                c[1] += s["total_us"]
        hta = ref[side]
        assert set(hta) - set(ours) == {n for n in hta if n.startswith(("Memcpy", "Memset"))}, side
        for name, (count, total) in ours.items():
            assert hta[name][0] == count and abs(hta[name][1] - total) <= 1.0, (side, name, hta[name], count, total)
    # the hardware change between the two (ampere_sgemm_* -> volta_sgemm_*) is aligned by structure
    renamed = [r for r in out["rows"] if r["align"] == "structure"]
    assert any(r["base"]["name"].startswith("ampere_sgemm") and "volta_sgemm" in r["exp"]["name"] for r in renamed)
