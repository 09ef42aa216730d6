"""The telemetry of a whole job (tb_plugin/telemetry.py, `gpuscope telemetry`, the /telemetry routes): ranks aligned
by step, the straggler rule (chronic: late in most steps; occasional: bursts), the captures with their reason, and
the heatmap downsampled by step ranges. The job is written with the recorder's own record encoder, with known
stragglers: rank 1 is 5 ms over the others in every step, rank 3 20 ms over them in steps 100-109, rank 0 once."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from profiler_core.flight import format
from tb_plugin import telemetry
from tb_plugin.summaries import cli

RANKS, STEPS = 4, 200


def _job(root: Path, world: int = RANKS, steps: int = STEPS, ended: bool = True) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for r in range(world):
        lines = [format.encode_event({"k": "start", "v": 1, "rank": r, "world": world, "worker": f"h_rank{r:05d}"})]
        for s in range(steps):
            work = 10.0 + 0.01 * r
            if r == 1:
                work += 5.0
            if r == 3 and 100 <= s < 110:
                work += 20.0
            if r == 0 and s == 50:
                work += 30.0
            wall = 40.0  # the collectives make every rank's step as long as the slowest
            gpu = [(s - 1, 9.0)] if s else None
            lines.append(
                format.encode_step(s, 1e9 + s * 0.04, wall, 1.0, work, 500.0 + r, wall - work, None, None, gpu)
            )
            if s == 105 and r in (3, 0):
                lines.append(
                    format.encode_event(
                        {
                            "k": "capture",
                            "s": 106,
                            "first": 107,
                            "rule": "slow_rank",
                            "why": "rank 3 +20.0 ms over the other ranks' median",
                            "ranks": [3],
                            "healthy": 0,
                            "role": "affected" if r == 3 else "healthy",
                            "steps": 5,
                            "dir": "capture_step000106",
                            "tool": "gpuscope",
                        }
                    )
                )
        if ended:
            lines.append(format.encode_event({"k": "end", "s": steps - 1}))
        (root / f"h_rank{r:05d}{format.SUFFIX}").write_bytes(b"".join(lines))
    return root


def test_ranks_aligned_by_step(tmp_path):
    job = telemetry.load(str(_job(tmp_path / "log")))
    assert job.ranks == [0, 1, 2, 3] and len(job.steps) == STEPS
    work = job.matrix("work_ms")
    assert work.shape == (RANKS, STEPS)
    assert work[1, 0] == pytest.approx(15.01) and work[3, 100] == pytest.approx(30.03)
    gpu = job.matrix("gpu_ms")
    assert np.isnan(gpu[:, -1]).all() and (gpu[:, :-1] == 9.0).all()  # the last step's GPU time never came


def test_chronic_and_occasional_stragglers(tmp_path):
    s = telemetry.summary(telemetry.load(str(_job(tmp_path / "log"))))
    assert s["metric"] == "work_ms"
    assert [c["rank"] for c in s["chronic"]] == [1]
    assert s["chronic"][0]["late_steps"] == STEPS - 11  # not where rank 3 (10 steps) or rank 0 (1) is slower
    occ = {o["rank"]: o for o in s["occasional"]}
    assert list(occ) == [3]  # rank 0's single late step is no burst
    assert occ[3]["bursts"] == [{"first": 100, "last": 109, "steps": 10, "excess_ms": pytest.approx(20.0, abs=0.1)}]
    by_rank = {r["rank"]: r for r in s["ranks"]}
    assert by_rank[0]["late_steps"] == 1 and by_rank[2]["late_steps"] == 0
    assert by_rank[1]["wall_ms"]["median"] == 40.0 and by_rank[1]["gpu_ms"] == 9.0 and by_rank[3]["rss_mib"] == 503.0
    assert "chronic: late in more than 50 %" in s["rule"]


def test_captures_grouped_with_their_reason(tmp_path):
    s = telemetry.summary(telemetry.load(str(_job(tmp_path / "log"))))
    (c,) = s["captures"]
    assert c["dir"] == "capture_step000106" and c["step"] == 106 and c["rule"] == "slow_rank"
    assert c["why"].startswith("rank 3 +20.0 ms") and c["ranks"] == [3] and c["healthy"] == 0
    assert c["captured"] == [{"rank": 0, "role": "healthy"}, {"rank": 3, "role": "affected"}]


def test_heatmap_downsampled_by_step_ranges(tmp_path):
    job = telemetry.load(str(_job(tmp_path / "log")))
    h = telemetry.heatmap(job, "work_ms", max_steps=20, agg="max")
    assert h["step_bin"] == 10 and len(h["cells"]) == RANKS and all(len(row) == 20 for row in h["cells"])
    assert h["step_starts"][:3] == [0, 10, 20]
    assert h["cells"][3][10] == pytest.approx(30.03)  # steps 100-109: rank 3's burst
    assert h["cells"][3][9] == pytest.approx(10.03)
    assert h["cells"][0][5] == pytest.approx(40.0)  # step 50's one slow step is the max of its bin
    mean = telemetry.heatmap(job, "work_ms", max_steps=20, agg="mean")
    assert mean["cells"][0][5] == pytest.approx(13.0)  # (9 x 10 + 40) / 10
    big = telemetry.heatmap(job, "work_ms", max_steps=5000)
    assert big["step_bin"] == 1 and len(big["cells"][0]) == STEPS
    with pytest.raises(ValueError, match="metric"):
        telemetry.heatmap(job, "nope")


def test_a_growing_file_is_read_from_where_it_ended(tmp_path):
    root = _job(tmp_path / "log", world=2, steps=50, ended=False)
    p = root / f"h_rank00001{format.SUFFIX}"
    first = telemetry.read_file(str(p))
    assert len(first.steps) == 50 and not first.ended
    with open(p, "ab") as f:
        f.write(format.encode_step(50, 1.0, 40.0, 1.0, 10.0, 500.0, 30.0, None, None, [(49, 8.5), (50, 8.0)]))
        f.write(b'{"s":51,"t":1.0,"w":4')  # a line still being written
    grown = telemetry.read_file(str(p))
    assert grown.steps.tolist() == list(range(51)) and grown.gpu_ms[49] == 8.5 and grown.gpu_ms[50] == 8.0
    with open(p, "ab") as f:
        f.write(b'0.0,"d":1.0,"h":10.0,"m":500.0}\n')
    assert telemetry.read_file(str(p)).steps.tolist() == list(range(52))
    assert telemetry.read_file(str(p)).columns["wall_ms"][51] == 40.0


def test_runs_and_paths_inside_the_logdir(tmp_path):
    _job(tmp_path / "log" / "jobA")
    _job(tmp_path / "log" / "jobB", world=2)
    assert telemetry.runs(str(tmp_path / "log")) == ["jobA", "jobB"]
    assert telemetry.load(str(tmp_path / "log"), "jobB").ranks == [0, 1]
    with pytest.raises(ValueError):
        telemetry.load(str(tmp_path / "log"), "../x")
    with pytest.raises(FileNotFoundError):
        telemetry.load(str(tmp_path / "log"), ".")  # no telemetry in the logdir itself


def test_cli_prints_summaries_stragglers_and_captures(tmp_path, capsys):
    log = _job(tmp_path / "log")
    assert cli.main(["telemetry", str(log), "--heatmap", "20"]) == 0
    out = capsys.readouterr().out
    assert "4 ranks, 200 steps (metric: work_ms)" in out
    assert "chronic straggler: rank 1, late in 189 steps (94 %)" in out, out
    assert "occasional straggler: rank 3, late in 10 steps; bursts: steps 100-109 (+20.0 ms)" in out, out
    assert "capture at step 106 (slow_rank) into capture_step000106/ on rank 0 (healthy), rank 3 (affected)" in out
    assert f"gpuscope diagnose {log} capture_step000106" in out
    assert "heatmap of work_ms (max of 10 steps per column" in out
    assert cli.main(["telemetry", str(log), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["captures"][0]["run"] == "capture_step000106" and [c["rank"] for c in d["chronic"]] == [1]
    _job(tmp_path / "other", world=2)
    assert cli.main(["telemetry", str(tmp_path)]) == 2  # two folders of telemetry: which one?
    assert "telemetry in several folders; name one: log other" in capsys.readouterr().err
    assert cli.main(["telemetry", str(tmp_path / "nowhere")]) == 2


def test_routes_answer_the_same(tmp_path, monkeypatch):
    from .test_plugin import P, _client

    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    _job(tmp_path / "log" / "job")
    c, _ = _client(tmp_path / "log")
    assert c.get(f"{P}/telemetry/runs").json == {"runs": ["job"]}
    d = c.get(f"{P}/telemetry?run=job").json
    assert [x["rank"] for x in d["chronic"]] == [1] and d["captures"][0]["run"] == "job/capture_step000106"
    h = c.get(f"{P}/telemetry/heatmap?run=job&max_steps=20&metric=work_ms").json
    assert h["step_bin"] == 10 and h["cells"][3][10] == pytest.approx(30.03)
    assert c.get(f"{P}/telemetry?run=../x").status_code == 400
    assert c.get(f"{P}/telemetry?run=nothing").status_code == 404


def test_finished_files_are_cached_decoded(tmp_path, monkeypatch):
    """A finished file's columns go to $GPUSCOPE_CACHE_DIR/telemetry/ and a new process (here: the in-memory
    entries dropped) reads them from there, equal; a file without its end record (still written) is not cached."""
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    root = _job(tmp_path / "log", world=2, steps=30)
    first = telemetry.summary(telemetry.load(str(root)))
    entries = sorted((tmp_path / "cache" / "telemetry").glob("*.npz"))
    assert len(entries) == 2
    telemetry._files.clear()
    monkeypatch.setattr(format, "decode", lambda *a: pytest.fail("decoded again instead of read from the cache"))
    again = telemetry.load(str(root))
    assert telemetry.summary(again) == first
    assert again.files[0].columns["wall_ms"].dtype == np.float32 and again.files[0].header["rank"] == 0
    monkeypatch.undo()
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache2"))
    telemetry.load(str(_job(tmp_path / "live", world=2, steps=30, ended=False)))
    assert not list((tmp_path / "cache2" / "telemetry").glob("*.npz"))
