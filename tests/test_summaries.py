"""Per-worker summaries: what they hold, their size, their files (versioned gzipped JSON, never
pickle), and that the distributed view built from them equals the one built from whole traces;
the plugin reads only summaries for a run's distributed view; `gpuscope summarize`."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path

import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

import tb_plugin.plugin as plugin_mod
from profiler_core.analysis.roofline import worker as worker_roofline
from profiler_core.analysis.worker import kernel_table, worker_facts
from profiler_core.analysis.worker.buckets import BUCKETS
from profiler_core.trace.read.reader import read_trace
from tb_plugin import workspace
from tb_plugin.runs import Scanner
from tb_plugin.summaries import cli, schema, store
from tb_plugin.summaries import summary as S
from tb_plugin.summaries.engine import Summaries
from tb_plugin.views import distributed as dv

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from gen_distributed import generate  # noqa: E402

P = "/data/plugin/gpuscope"
OLD = time.time() - 3600


def _job(root: Path, ranks: int = 4, events: int = 3000, steps: int = 4) -> Path:
    run = root / "job"
    for p in generate(str(run), ranks, events=events, steps=steps):
        os.utime(p, (OLD, OLD))
    return run


def _traces(run: Path) -> dict:
    return {p.name.split(".")[0]: read_trace(str(p), processes=0) for p in sorted(run.glob("*.pt.trace.json*"))}


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_view_from_stored_summaries_equals_view_from_traces(tmp_path, cache):
    run = _job(tmp_path / "logs")
    traces = _traces(run)
    whole = dv.distributed(traces)
    stored = {}
    for w, t in traces.items():
        data = S.encode(S.summarize(t))
        stored[w] = S.decode(data).distributed
    assert dv.from_summaries(stored) == whole
    # the straggler (rank ranks // 3 = 1) is the first one ranked, with the collective that waited on it
    top = whole["stragglers"][0]
    assert top["worker"] == "node0_rank00001" and top["excess_us"] > 0
    coll = whole["comm_ops"]["node0_rank00001"][0]["name"]  # the all-reduce, however the view names it
    assert top["collective"].startswith(coll + " #") and top["others_wait_us"] > 0
    assert whole["workers"]["node0_rank00000"]["wait_us"] > whole["workers"]["node0_rank00001"]["wait_us"]
    row = whole["comm_ops"]["node0_rank00000"][0]
    assert row["total_bytes"] > 0 and row["bandwidth_gbps"] == pytest.approx(
        row["total_bytes"] / (row["transfer_us"] * 1e3), rel=1e-3
    )
    # NCCL-tests' bus bandwidth of an all-reduce over its group of n: the algorithm bandwidth x 2(n-1)/n
    n = row["group_size"]
    assert row["name"].endswith("all_reduce") and n > 1
    assert row["busbw_gbps"] == pytest.approx(row["bandwidth_gbps"] * 2 * (n - 1) / n, rel=1e-3)


def test_view_from_summaries_on_real_ddp_trace(shared_traces):
    run = shared_traces / "torch_cpu_cnn" / "ddp_gloo"
    traces = {p.name.split(".")[0]: read_trace(str(p), processes=0) for p in sorted(run.glob("*.pt.trace.json*"))}
    parts = {w: S.decode(S.encode(S.summarize(t))).distributed for w, t in traces.items()}
    assert dv.from_summaries(parts) == dv.distributed(traces)


def test_summary_content_and_size(tmp_path):
    run = _job(tmp_path, ranks=2, events=30000, steps=10)
    p = sorted(run.glob("*.gz"))[0]
    t = read_trace(str(p), processes=0)
    s = S.summarize(t)
    data = S.encode(s)
    assert len(data) < 0.01 * p.stat().st_size, (len(data), p.stat().st_size)
    obj = json.loads(gzip.decompress(data))  # plain JSON inside gzip, no pickle
    assert obj["kind"] == "gpuscope-summary" and obj["version"] == S.VERSION
    assert len(obj["overview"]["steps"]) == 10 and obj["overview"]["average"]["total_us"] > 0
    d = obj["distributed"]
    assert len(d["steps"]["step"]) == 10 and all(c > 0 for c in d["steps"]["comm"])
    assert len(d["collectives"]["name"]) == 10 * 12
    assert obj["top_kernels"][0]["name"] and len(obj["top_operators"]) <= S.TOP
    assert obj["memory_peak"]["GPU0"]["allocated"] == 6 << 30 and obj["memory_peak"]["GPU0"]["reserved"] == 8 << 30
    assert obj["devices"] == {
        "rank": 0,
        "world_size": 2,
        "backend": "nccl",
        "host": None,  # the trace names no host_name
        "gpus": {
            "GPU0": {"name": "NVIDIA H100 80GB HBM3", "memory_bytes": 85_031_714_816, "compute_capability": "9.0"}
        },
    }


def test_stale_damaged_and_other_version_summaries_are_ignored(tmp_path):
    src = S.fs.Stat(100, 5)
    steps = {k: [] for k in ("step", "start", "end", "comp", "comm", "overlap")}
    coll = {k: [] for k in ("names", "pg", "group_size", "name", "step", "dur", "bytes", "wait")}
    s = {
        "kind": S.KIND,
        "version": S.VERSION,
        "source": {"size": 100, "mtime_ns": 5, "etag": "", "ident": []},
        "events": 0,
        "overview": {"steps": [], "average": {}, "gpu": None},
        "memory_peak": {},
        "top_operators": [],
        "top_kernels": [],
        "devices": {},
        "distributed": {"origin": 0, "base_ns": 0, "steps": steps, "collectives": coll, "info": {}, "gpus": {}},
        "ledger": {
            "steps": [],
            "wall_ns": [],
            "has_gpu": False,
            "reason": "no steps",
            "buckets": {b: {"ns": None, "recoverable_ns": None, "reason": "no steps"} for b in BUCKETS},
        },
        "gpu_idle": {
            "steps": [],
            "kernel_wait_threshold_ns": 30000,
            "devices": None,
            "launches": None,
            "queue_max": {},
            "reasons": [],
        },
        **worker_facts.empty_facts(),
        "pipeline": {"version": 1, "rank": None, "base_ns": 0, "steps": [], "steps_dropped": 0, "reason": "none"},
        "kernel_table": kernel_table.empty(),
        "roofline": worker_roofline.empty(),
    }
    where = str(tmp_path / "a.summary.json.gz")
    store.write(where, s)
    assert store.read(where, src) == schema.from_dict(s)
    assert store.read(where, S.fs.Stat(101, 5)) is None  # the trace changed
    store.write(where, {**s, "version": S.VERSION + 1})
    assert store.read(where, src) is None  # another gpuscope's
    store.write(where, {**s, "version": 2})
    assert store.read(where, src) is None  # a version-2 summary (no diagnosis facts): recomputed, never misread
    v3_without_facts = {k: v for k, v in s.items() if k != "phases"}
    store.write(where, v3_without_facts)
    assert store.read(where, src) is None
    store.write(where, {**{k: v for k, v in s.items() if k != "pipeline"}, "version": 6})
    assert store.read(where, src) is None  # a version-6 summary (no pipeline projection): recomputed
    store.write(where, {k: v for k, v in s.items() if k != "pipeline"})
    assert store.read(where, src) is None
    cc = {
        **s["collective_calls"],
        "groups": ["0 [0, 1]"],
        "group_pg": ["0"],
        "group_ranks": [[0, 1]],
        "group_how": ["pg+seq"],
    }
    cc.update(group_size=[2], names=["nccl:all_reduce"], group=[3], name=[0], step=[-1])
    cc.update(start=[0], dur=[5], bytes=[-1], wait=[0], covered=[0], lead=[0], tail=[5])
    store.write(where, {**s, "collective_calls": cc})
    assert store.read(where, src) is None  # group index 3 of 1 group
    store.write(where, {**s, "collective_calls": {**cc, "group": [0]}})
    assert store.read(where, src) == schema.from_dict({**s, "collective_calls": {**cc, "group": [0]}})
    for bad in ({"lead": [-1]}, {"tail": [-1]}):  # ready after its start, idle for less than nothing
        store.write(where, {**s, "collective_calls": {**cc, "group": [0], **bad}})
        assert store.read(where, src) is None, bad
    Path(where).write_bytes(b"\x1f\x8b not gzip")
    assert store.read(where, src) is None  # damaged
    with pytest.raises(S.SummaryError, match="not a gpuscope summary"):
        S.decode(b'{"a": 1}')


def _plugin(logdir: Path, scheduler: str | None = None):
    flags = argparse.Namespace(gpuscope_dask_scheduler=scheduler)
    p = plugin_mod.GpuscopePlugin(base_plugin.TBContext(logdir=str(logdir), flags=flags))
    return Client(application.TensorBoardWSGI([p])), p


def test_plugin_distributed_reads_only_summaries(tmp_path, cache, monkeypatch):
    logdir = tmp_path / "logs"
    run = _job(logdir)
    expected = dv.distributed(_traces(run))
    res = cli.summarize_logdir(str(logdir))
    assert res["done"] == 4 and not res["failed"]
    assert (logdir / ".gpuscope" / "summaries" / "job").is_dir()
    monkeypatch.setattr(workspace, "PREPARE_MAX_WORKERS", 2)  # a "big" run: never parsed in the background

    def no_read(*a, **k):
        raise AssertionError("a whole trace was read")

    monkeypatch.setattr("profiler_core.trace.read.reader.read_trace", no_read)
    monkeypatch.setattr("tb_plugin.summaries.summary.summarize_path", no_read)
    c, p = _plugin(logdir)
    assert c.get(f"{P}/runs").json["runs"] == ["job"]
    got = c.get(f"{P}/distributed?run=job&span=1")
    assert got.status_code == 200, got.json
    d = got.json
    assert d["workers"] == expected["workers"]
    added = ("why", "what_if_ms", "diff")
    assert [{k: v for k, v in r.items() if k not in added} for r in d["stragglers"]] == expected["stragglers"]
    # the straggler rows carry the diagnosis (gen_distributed's straggler is rank 4 // 3 = 1, its kernels slower)
    top = d["stragglers"][0]
    assert top["worker"] == "node0_rank00001" and top["why"].startswith("compute +")
    assert 0 < top["what_if_ms"] < top["busy_us"] / 1e3
    # the median worker is the Diff's baseline, the straggler the compared profile
    assert top["diff"]["exp_worker"] == "node0_rank00001" and top["diff"]["step"] == top["step"]
    assert top["diff"]["worker"] in d["workers"] and top["diff"]["worker"] != "node0_rank00001"
    diag = c.get(f"{P}/diagnosis?run=job&span=1")
    assert diag.status_code == 200, diag.json
    assert diag.json["worst"]["worker"] == "node0_rank00001" and len(diag.json["steps"]) == 4
    assert c.get(f"{P}/diagnosis?run=nope&span=1").status_code == 404
    assert d["devices"]["node0_rank00002"]["memory_peak"]["GPU0"]["allocated"] == (6 << 30) + 2 * (1 << 20)
    assert d["devices"]["node0_rank00002"]["step_avg_us"] > 0
    state = p.state()
    assert state.loader.loaded_keys() == [] and state.loader.progress()["files_total"] == 0
    assert state.summaries.computed == 0
    step = c.get(f"{P}/distributed/step?run=job&span=1&worker=node0_rank00000&step=2").json
    assert step["parts"] == expected["steps"]["2"]["node0_rank00000"]
    assert len(step["collectives"]) == 12 and all(r["wait_us"] >= 0 for r in step["collectives"])
    assert sum(r["wait_us"] for r in step["collectives"]) == pytest.approx(step["parts"]["wait_us"], abs=0.01)
    assert c.get(f"{P}/distributed/step?run=job&span=1&worker=node0_rank00000&step=99").status_code == 400
    assert c.get(f"{P}/distributed/step?run=job&span=1&worker=nope&step=1").status_code == 404


def test_plugin_computes_missing_summaries_and_keeps_them_in_the_cache(tmp_path, cache, monkeypatch):
    logdir = tmp_path / "logs"
    run = _job(logdir, ranks=3)
    (run / "node9_rank00099.1790900000099.pt.trace.json").write_text('{"traceEvents": [{"ph": "X", "na')
    os.utime(run / "node9_rank00099.1790900000099.pt.trace.json", (OLD, OLD))
    monkeypatch.setattr(workspace, "PREPARE_MAX_WORKERS", 2)
    from tb_plugin.summaries import engine

    reads: list = []
    real = engine.summarize_path
    monkeypatch.setattr(engine, "summarize_path", lambda path: (reads.append(path), real(path))[1])
    c, p = _plugin(logdir)
    d = c.get(f"{P}/distributed?run=job&span=1").json
    assert sorted(d["workers"]) == ["node0_rank00000", "node0_rank00001", "node0_rank00002"]
    assert [e["worker"] for e in d["errors"]] == ["node9_rank00099"]
    assert "job/node9_rank00099" in d["errors"][0]["file"] and "/tmp" not in d["errors"][0]["error"]
    assert p.state().summaries.computed == 3
    assert len(list((cache / "summaries").glob("*.summary.json.gz"))) == 3
    assert not (logdir / ".gpuscope").exists()  # the plugin never writes into the logdir
    # a file that failed is not retried in the background at every rescan (only when asked for)
    for _ in range(3):
        p.state().refresh(force=True)
        for fut in p.state().summaries.on_their_way():
            fut.result(timeout=60)
    assert sum("rank00099" in r for r in reads) == 1, reads
    # a new process finds them beside the parse cache
    fresh = Summaries(str(logdir))
    files = [f for r in Scanner(str(logdir)).scan().values() for f in r.files()]
    assert sum(fresh.find(f) is not None for f in files) == 3 and fresh.computed == 0


def test_tensorboard_flag_names_the_scheduler():
    import argparse as ap

    parser = ap.ArgumentParser()
    loader = plugin_mod.GpuscopeLoader()
    loader.define_flags(parser)
    flags = parser.parse_args(["--gpuscope_dask_scheduler", "tcp://127.0.0.1:1"])
    p = loader.load(base_plugin.TBContext(logdir="", flags=flags))
    assert p._scheduler == "tcp://127.0.0.1:1"
    none = plugin_mod.GpuscopeLoader().load(base_plugin.TBContext(logdir="", flags=parser.parse_args([])))
    assert none._scheduler is None


def test_cli_in_process_skips_up_to_date_and_reports_bad_files(tmp_path, cache, capsys):
    logdir = tmp_path / "logs"
    _job(logdir, ranks=2)
    assert cli.main(["summarize", str(logdir)]) == 0
    assert "2 summarized, 0 up to date, 0 failed" in capsys.readouterr().out
    assert cli.main(["summarize", str(logdir)]) == 0
    assert "0 summarized, 2 up to date" in capsys.readouterr().out
    bad = logdir / "job" / "bad.pt.trace.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "na')
    os.utime(bad, (OLD, OLD))
    out = tmp_path / "elsewhere"
    assert cli.main(["summarize", str(logdir), "--out", str(out)]) == 1
    o = capsys.readouterr()
    assert "2 summarized, 0 up to date, 1 failed" in o.out and "job/bad.pt.trace.json" in o.err
    assert "Traceback" not in o.err and str(tmp_path) not in o.err
    assert len(list(out.rglob("*.summary.json.gz"))) == 2
    assert cli.main(["summarize", str(tmp_path / "missing")]) == 2


def test_cli_on_s3_writes_beside_the_traces_and_reports_a_missing_bucket(tmp_path, cache, monkeypatch, capsys):
    from . import s3_server

    server = s3_server.start()
    try:
        s3_server.use(server, monkeypatch)
        server.make_bucket("bkt")
        generate(str(tmp_path / "job"), 2, events=600, steps=2)
        server.fs().put(str(tmp_path / "job") + "/", "bkt/logs/job/", recursive=True)
        assert cli.main(["summarize", "s3://bkt/logs"]) == 0
        assert "2 summarized" in capsys.readouterr().out
        names = sorted(server.fs().find("bkt/logs/.gpuscope/summaries"))
        assert len(names) == 2 and all(n.endswith(".summary.json.gz") for n in names)
        assert cli.main(["summarize", "s3://bkt/logs"]) == 0  # ETags match: nothing to do
        assert "0 summarized, 2 up to date" in capsys.readouterr().out
        assert cli.main(["summarize", "s3://no-such-bucket-gpuscope/logs"]) == 2
        err = capsys.readouterr().err
        assert "cannot list the logdir" in err and "Traceback" not in err and s3_server.SECRET not in err
    finally:
        server.stop()
