"""Issue 37 item 7 (reader side): a file holding several ranks fused together by a trace-merging tool (pids
rank * 1e8 + pid, args.rank) is read as one worker per rank (profiler_core/trace/read/fused.py): the scanner
lists `<worker>_rank<R>`, each the file's events of that rank with the raw pids given back and a distributedInfo
of its own. Files fused here from generated ranks (benchmarks/gen_distributed.py) split back into exactly the
originals; the shared 4-rank MI300X file (traces/public/amd_mi300x_merged_4rank) is a 4-worker run in the plugin
and in `gpuscope diagnose`. Its facts (events per rank, ProfilerSteps per rank) come from the raw JSON."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler_core.trace.read.decode import TraceReadError
from profiler_core.trace.read.fused import RANK_PID_STRIDE, maybe_fused, part_path
from profiler_core.trace.read.reader import fused_ranks, read_trace
from tb_plugin.runs import Scanner

from .conftest import missing
from .real_traces_support import PUBLIC
from .summaries_support import gpuscope
from .test_plugin import P, _client, _wait_loaded

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from gen_distributed import generate  # noqa: E402

SHARED_FUSED = PUBLIC / "amd_mi300x_merged_4rank" / "merged_all_events.json.gz"


def _load(p: Path) -> dict:
    with gzip.open(p, "rt") if p.suffix == ".gz" else open(p) as f:
        return json.load(f)


def _fuse(out: Path, paths: list[Path]) -> list[dict]:
    """The ranks' traces fused the way trace-merging tools do: pid = rank * 1e8 + pid, args.rank on every
    event, rank after rank; the first rank's top-level keys kept (its distributedInfo dropped)."""
    docs = [_load(p) for p in paths]
    events = []
    for rank, d in enumerate(docs):
        for e in d["traceEvents"]:
            e = dict(e)
            if isinstance(e.get("pid"), int):
                e["pid"] = rank * RANK_PID_STRIDE + e["pid"]
            e["args"] = {**(e.get("args") or {}), "rank": rank}
            events.append(e)
    fused = {k: v for k, v in docs[0].items() if k not in ("traceEvents", "distributedInfo")}
    fused["traceEvents"] = events
    out.write_text(json.dumps(fused))
    return docs


def _frame(df: pd.DataFrame) -> pd.DataFrame:
    """A frame compared by value: without the file positions (idx), texts as objects."""
    df = df.drop(columns=[c for c in ("idx",) if c in df.columns]).reset_index(drop=True)
    return df.apply(lambda s: s.astype(object) if isinstance(s.dtype, pd.CategoricalDtype) else s)


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> tuple[Path, list[Path]]:
    root = tmp_path_factory.mktemp("fused")
    paths = [Path(p) for p in generate(str(root / "ranks"), 3, events=300, steps=2, buckets=2)]
    run = root / "logs" / "job"
    run.mkdir(parents=True)
    _fuse(run / "merged.json", paths)
    old = time.time() - 3600
    os.utime(run / "merged.json", (old, old))
    return run / "merged.json", sorted(paths)


def test_a_fused_file_splits_back_into_exactly_the_originals(job):
    fused, originals = job
    assert fused_ranks(fused) == [0, 1, 2]
    for rank, orig in enumerate(originals):
        want = read_trace(orig, processes=0)
        got = read_trace(part_path(str(fused), rank), processes=0)
        assert want.metadata["distributedInfo"]["rank"] == rank
        assert got.metadata["distributedInfo"] == {"rank": rank, "world_size": 3}
        assert got.base_ns == want.base_ns and got.device_properties == want.device_properties
        pd.testing.assert_frame_equal(_frame(got.dense_events()), _frame(want.dense_events()))
        for name in ("memory", "flows", "names"):
            pd.testing.assert_frame_equal(_frame(getattr(got, name)), _frame(getattr(want, name)), obj=name)
        # the event look-up reads the fused file at the event's position there: the same event
        from profiler_core.trace.read.lookup import trace_event

        row = len(got.events) // 2
        raw = trace_event(got, int(got.events["idx"].iloc[row]))
        assert raw["name"] == str(got.events["name"].iloc[row]) and raw["args"]["rank"] == rank


def test_the_whole_fused_file_is_refused_with_the_parts_paths(job):
    fused, _ = job
    with pytest.raises(TraceReadError) as err:
        read_trace(fused, processes=0)
    assert "3 ranks fused into one file" in str(err.value) and "@rank0" in str(err.value)
    with pytest.raises(TraceReadError, match="no rank 7"):
        read_trace(part_path(str(fused), 7), processes=0)


def test_the_scanner_lists_a_worker_per_rank(job):
    fused, originals = job
    head = fused.read_bytes()[:65536]
    assert maybe_fused(head) and not any(maybe_fused(gzip.decompress(p.read_bytes())[:65536]) for p in originals)
    runs = Scanner(str(fused.parent.parent)).scan()
    assert sorted(runs["job"].workers) == ["merged_rank0", "merged_rank1", "merged_rank2"]
    f = runs["job"].file("merged_rank1", "1")
    assert f.path == f"{fused}@rank1" and f.relpath == "job/merged.json@rank1" and f.file_path == str(fused)
    assert len({x.key for x in runs["job"].files()}) == 3  # a rank's identity is its own


def test_the_plugin_serves_each_rank_and_the_distributed_view_sees_three(job, tmp_path, monkeypatch):
    fused, _ = job
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    c, _ = _client(fused.parent.parent)
    listing = _wait_loaded(c, 120)
    assert listing["errors"] == [], listing
    assert c.get(f"{P}/workers?run=job").json["workers"] == ["merged_rank0", "merged_rank1", "merged_rank2"]
    for r in range(3):
        ov = c.get(f"{P}/overview?run=job&worker=merged_rank{r}&span=1")
        assert ov.status_code == 200, ov.get_data()[:300]
    d = _distributed(c, "job")
    assert sorted(d["workers"]) == ["merged_rank0", "merged_rank1", "merged_rank2"]


def _distributed(c, run: str) -> dict:
    end = time.time() + 300
    while True:
        r = c.get(f"{P}/distributed?run={run}&span=1")
        assert r.status_code in (200, 503), r.get_data()[:300]
        if r.status_code == 200 and "pending" not in r.json or time.time() > end:
            return r.json
        time.sleep(0.2)


# ------------------------------------------------------------------ the shared 4-rank MI300X file
@pytest.fixture(scope="module")
def shared_raw() -> dict:
    if not SHARED_FUSED.is_file():
        missing(f"{SHARED_FUSED} is absent")
    return _load(SHARED_FUSED)


@pytest.fixture(scope="module")
def shared_logdir(tmp_path_factory) -> Path:
    if not SHARED_FUSED.is_file():
        missing(f"{SHARED_FUSED} is absent")
    run = tmp_path_factory.mktemp("shared_fused") / "logs" / "mi300x"
    run.mkdir(parents=True)
    shutil.copy2(SHARED_FUSED, run / SHARED_FUSED.name)
    return run.parent


def test_the_shared_fused_file_is_four_workers_with_their_steps(shared_raw, shared_logdir, tmp_path, monkeypatch):
    ranks = sorted({e["pid"] // RANK_PID_STRIDE for e in shared_raw["traceEvents"] if isinstance(e.get("pid"), int)})
    assert ranks == [0, 1, 2, 3]
    assert all(
        e["args"]["rank"] == e["pid"] // RANK_PID_STRIDE
        for e in shared_raw["traceEvents"]
        if isinstance(e.get("pid"), int) and isinstance(e.get("args"), dict) and "rank" in e["args"]
    )
    steps = Counter(
        e["pid"] // RANK_PID_STRIDE
        for e in shared_raw["traceEvents"]
        if e.get("ph") == "X"
        and re.fullmatch(r"ProfilerStep#\d+", str(e.get("name")))
        and e.get("cat") != "gpu_user_annotation"
    )
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    c, _ = _client(shared_logdir)
    listing = _wait_loaded(c, 300)
    assert listing["errors"] == [], listing
    workers = [f"merged_all_events_rank{r}" for r in ranks]
    assert c.get(f"{P}/workers?run=mi300x").json["workers"] == workers
    for r, w in zip(ranks, workers):
        ov = c.get(f"{P}/overview?run=mi300x&worker={w}&span=1")
        assert ov.status_code == 200, ov.get_data()[:300]
        t = read_trace(part_path(str(shared_logdir / "mi300x" / SHARED_FUSED.name), r), processes=0)
        got = np.unique(t.events["pid"].to_numpy())
        assert (got < RANK_PID_STRIDE).all() and t.metadata["distributedInfo"] == {"rank": r, "world_size": 4}
        assert len(ov.json["steps"]) == steps[r], ov.json["steps"]
    d = _distributed(c, "mi300x")
    assert sorted(d["workers"]) == workers


def test_gpuscope_diagnose_reads_the_shared_fused_file_as_four_ranks(shared_logdir):
    r = gpuscope("diagnose", str(shared_logdir), "mi300x", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["run"] == "mi300x" and rep["workers"] == 4


def test_a_trace_whose_distributed_info_follows_its_events_is_not_taken_for_a_fused_one():
    """Kineto may write `distributedInfo` after traceEvents (three shared real traces do): its `rank` is the
    file's own, and listing such a file must not read it whole; a rank among the events still counts."""
    from profiler_core.trace.read.fused import maybe_fused

    after = b'{"traceEvents": [{"ph": "X", "pid": 7, "ts": 1}], "distributedInfo": {"rank": 1, "world_size": 2}}'
    assert not maybe_fused(after)
    assert maybe_fused(b'{"traceEvents": [{"ph": "X", "pid": 7, "args": {"rank": 0}}]}')
