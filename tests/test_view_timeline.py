"""Timeline tiles: events vs bucket mode, nesting depth, busy fractions, flows, search."""

import json

import numpy as np
import pytest

from tb_plugin.views import timeline as tv

from . import trace_builder as tb
from .trace_builder import read_events


def mk(events, flows=(), names=()):
    """events: (cat, name, pid, tid, ts_ns, dur_ns); flows: (cat, id, ph, pid, tid, ts_ns, bp);
    names: (pid, tid, kind, value) metadata events."""
    return read_events([tb.name_event(*n) for n in names] + tb.rows(events, []) + [tb.flow_event(*f) for f in flows])


def nested_trace():
    # thread 1: step [0,100us] > op A [10,50] > op B [20,30]; op C [60,90]
    # GPU 0 stream 7: kernel K [40,45]; flow ac2g from B (launch at 20us) to K
    us = 1000
    return mk(
        [
            ("user_annotation", "ProfilerStep#1", 100, 1, 0, 100 * us),
            ("cpu_op", "aten::A", 100, 1, 10 * us, 40 * us),
            ("cpu_op", "aten::B", 100, 1, 20 * us, 10 * us),
            ("cpu_op", "aten::C", 100, 1, 60 * us, 30 * us),
            ("kernel", "K", 0, 7, 40 * us, 5 * us),
        ],
        flows=[("ac2g", 5, "s", 100, 1, 20 * us, ""), ("ac2g", 5, "f", 0, 7, 40 * us, "e")],
        names=[(100, 0, "process_name", "python"), (100, 1, "thread_name", "thread 1 (python)")],
    )


def test_events_mode_depth_and_tracks():
    out = tv.timeline(nested_trace(), width_px=1000)
    json.dumps(out)
    assert [tr["kind"] for tr in out["tracks"]] == ["cpu", "gpu"]
    cpu = out["tracks"][0]
    assert cpu["process"] == "python" and cpu["thread"] == "thread 1 (python)"
    assert cpu["depth_count"] == 3 and cpu["event_count"] == 4
    by_depth = {r["depth"]: r for r in cpu["rows"]}
    assert all(r["mode"] == "events" for r in cpu["rows"])
    assert [out["names"][i] for i in by_depth[1]["name"]] == ["aten::A", "aten::C"]
    assert [out["names"][i] for i in by_depth[2]["name"]] == ["aten::B"]
    assert by_depth[1]["ts_us"] == [10.0, 60.0] and by_depth[1]["dur_us"] == [40.0, 30.0]
    assert out["trace_end_us"] == 100.0


def test_flow_ends_located():
    out = tv.timeline(nested_trace(), width_px=1000)
    f = out["flows"]
    assert f["id"] == [5]
    assert (f["from_track"], f["from_depth"], f["from_us"]) == ([0], [2], [20.0])
    assert (f["to_track"], f["to_depth"], f["to_us"]) == ([1], [0], [40.0])
    assert out["cats"][f["cat"][0]] == "ac2g"
    # a window that the flow does not cross has no flows
    assert tv.timeline(nested_trace(), 50, 100, 100)["flows"]["id"] == []


def test_bucket_mode_busy_and_count():
    # 1000 back-to-back 1us events, 50% duty cycle, at 10 px: buckets, busy ~0.5, count 100
    ev = [("cpu_op", f"op{i % 3}", 1, 1, i * 2000, 1000) for i in range(1000)]
    out = tv.timeline(mk(ev), 0, 2000, 10)
    row = out["tracks"][0]["rows"][0]
    assert row["mode"] == "buckets"
    assert row["px"] == list(range(10))
    assert row["count"] == [100] * 10
    assert row["busy"] == pytest.approx([0.5] * 10, abs=1e-3)
    # zooming in to fewer events than pixels switches to events
    out2 = tv.timeline(mk(ev), 0, 20, 100)
    row2 = out2["tracks"][0]["rows"][0]
    assert row2["mode"] == "events" and len(row2["ts_us"]) == 11  # [0, 20] inclusive


def test_bucket_partial_coverage_exact():
    # one long event [0, 250us] plus 300 tiny ones after it: busy of the first buckets
    ev = [("cpu_op", "long", 1, 1, 0, 250_000)] + [("cpu_op", "t", 1, 1, 300_000 + i * 100, 50) for i in range(300)]
    out = tv.timeline(mk(ev), 0, 400, 4)  # buckets of 100us
    row = out["tracks"][0]["rows"][0]
    assert row["mode"] == "buckets"
    busy = dict(zip(row["px"], row["busy"]))
    assert busy[0] == 1.0 and busy[1] == 1.0 and busy[2] == pytest.approx(0.5)
    assert busy[3] == pytest.approx(300 * 50 / 100_000, abs=1e-4)
    assert out["names"][row["name"][row["px"].index(0)]] == "long"


def test_window_includes_event_started_before():
    out = tv.timeline(nested_trace(), 25, 35, 100)
    cpu = {r["depth"]: r for r in out["tracks"][0]["rows"]}
    assert [out["names"][i] for i in cpu[0]["name"]] == ["ProfilerStep#1"]
    assert [out["names"][i] for i in cpu[2]["name"]] == ["aten::B"]
    assert [out["names"][i] for i in cpu[1]["name"]] == ["aten::A"]  # started at 10us, still open
    assert out["tracks"][1]["rows"] == []  # kernel at 40us is outside


def test_partial_overlap_gets_separate_rows():
    # A [0,10], B [5,15] partially overlap, C [12,20]: no row may hold overlapping events
    ev = [("cpu_op", "A", 1, 1, 0, 10), ("cpu_op", "B", 1, 1, 5, 10), ("cpu_op", "C", 1, 1, 12, 8)]
    out = tv.timeline(mk(ev), 0, 0.02, 1000)
    for row in out["tracks"][0]["rows"]:
        ends = [s + d for s, d in zip(row["ts_us"], row["dur_us"])]
        assert all(s >= e for s, e in zip(row["ts_us"][1:], ends[:-1]))
    assert sum(len(r["ts_us"]) for r in out["tracks"][0]["rows"]) == 3


def test_zero_duration_events_stack():
    ev = [("cpu_op", "A", 1, 1, 0, 10_000), ("cpu_op", "i1", 1, 1, 5000, 0), ("cpu_op", "i2", 1, 1, 10_000, 0)]
    out = tv.timeline(mk(ev), width_px=100)
    rows = {r["depth"]: [out["names"][i] for i in r["name"]] for r in out["tracks"][0]["rows"]}
    assert rows[0][0] == "A" and "i1" in rows[1]


def test_search():
    t = nested_trace()
    res = tv.search(t, "aten::", limit=2)
    assert res["total"] == 3
    assert [r["name"] for r in res["results"]] == ["aten::A", "aten::B"]
    assert res["results"][1]["depth"] == 2 and res["results"][1]["track"] == 0
    assert tv.search(t, "k", 10)["results"][0]["track"] == 1  # case-insensitive: "K"
    assert tv.search(t, "nomatch")["total"] == 0


@pytest.mark.parametrize(
    "args",
    [
        dict(width_px=0),
        dict(width_px="x"),
        dict(start_us=5, end_us=5),
        dict(start_us="nan", end_us=3),
        dict(start_us="abc"),
    ],
)
def test_bad_parameters(args):
    with pytest.raises(tv.BadRequest):
        tv.timeline(nested_trace(), **args)


def test_bad_search_parameters():
    with pytest.raises(tv.BadRequest):
        tv.search(nested_trace(), "")
    with pytest.raises(tv.BadRequest):
        tv.search(nested_trace(), "a", limit=0)


def test_empty_trace():
    out = tv.timeline(mk([]))
    assert out["tracks"] == [] and out["flows"]["id"] == []


def test_derived_arrays_cached():
    t = nested_trace()
    tv.timeline(t)
    first = tv.tiles_for(t)
    tv.timeline(t, 0, 10, 50)
    assert tv.tiles_for(t) is first


def test_random_nested_agrees_with_bruteforce():
    # random properly nested intervals: bucket busy/count must equal a brute-force computation
    rng = np.random.default_rng(1)
    ev = []

    def gen(lo, hi, d):
        x = lo
        while x < hi and d < 4:
            s = x + int(rng.integers(0, 50))
            e = min(hi, s + int(rng.integers(1, 400)))
            if s >= e:
                break
            ev.append(("cpu_op", f"n{d}", 1, 1, s, e - s))
            gen(s, e, d + 1)
            x = e

    gen(0, 200_000, 0)
    t = mk(ev)
    w = 37
    out = tv.timeline(t, 0, 200, w)
    edges = np.linspace(0, 200_000, w + 1)
    evd = t.events
    depth = tv.tiles_for(t).ev_depth
    for row in out["tracks"][0]["rows"]:
        m = depth == row["depth"]
        s = evd["ts"].to_numpy()[m].astype(float) - evd["ts"].min()
        e = s + evd["dur"].to_numpy()[m]
        if row["mode"] != "buckets":
            continue
        for px, c, b in zip(row["px"], row["count"], row["busy"]):
            a0, a1 = edges[px], edges[px + 1]
            cover = np.clip(np.minimum(e, a1) - np.maximum(s, a0), 0, None).sum()
            assert b == pytest.approx(cover / (a1 - a0), abs=1e-4)
            assert c == int(((s < a1) & (e > a0)).sum())


def _rows_never_overlap(tl):
    for lo, hi in zip(tl.row_lo.tolist(), tl.row_hi.tolist()):
        s, e = tl.start[lo:hi], tl.end[lo:hi]
        assert (s[1:] >= e[:-1]).all()


def test_real_traces_tiles(shared_traces):
    from profiler_core.trace.read.reader import read_trace

    gpu = read_trace(sorted((shared_traces / "kineto_resnet50_v100" / "num_workers_0").glob("*.gz"))[0])
    out = tv.timeline(gpu, width_px=800)
    json.dumps(out)
    kinds = [tr["kind"] for tr in out["tracks"]]
    assert kinds.count("gpu") == 1 and kinds[-1] == "gpu"
    assert out["tracks"][-1]["label"].startswith("GPU 0")
    # every ac2g flow ends on the GPU track, on a kernel/memcpy/memset at depth 0
    f = out["flows"]
    assert len(f["id"]) > 1000
    gpu_index = out["tracks"][-1]["index"]
    assert set(f["to_track"]) == {gpu_index} and set(f["to_depth"]) == {0}
    assert all(a <= b for a, b in zip(f["from_us"], f["to_us"]))
    # zoomed out: the busiest rows are summarised; every event is still counted once per bucket
    total = sum(
        sum(r["count"]) if r["mode"] == "buckets" else len(r["ts_us"]) for tr in out["tracks"] for r in tr["rows"]
    )
    assert total >= len(gpu.events)
    _rows_never_overlap(tv.tiles_for(gpu))
    cpu = read_trace(next((shared_traces / "torch_cpu_cnn" / "single").glob("*.gz")))
    out = tv.timeline(cpu, width_px=500)
    assert out["tracks"][0]["process"] == "python" and out["tracks"][-1]["id"] == "Spans:PyTorch Profiler"
    _rows_never_overlap(tv.tiles_for(cpu))
    hits = tv.search(cpu, "ProfilerStep")
    # the steps sit under the Python frames of the training loop (with_stack), all at one depth
    assert hits["total"] == 4 and len({r["depth"] for r in hits["results"]}) == 1
    assert [r["name"] for r in hits["results"]] == [f"ProfilerStep#{i}" for i in range(2, 6)]
