"""benchmarks/gen_distributed.py's planted causes: each puts its delay where the docstring says, on the chosen
rank and step only, and every rank's step grows by it (the others wait at the next collective)."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from gen_distributed import DATALOADER, SLOW_KERNEL, Plant, generate, main, parse_plant, subgroups  # noqa: E402

RANKS, STEPS, RANK, STEP, MS = 4, 3, 2, 1, 8.0


def _job(tmp_path: Path, plant: str) -> list[dict]:
    paths = generate(str(tmp_path / "job"), RANKS, events=1500, steps=STEPS, gz=False, plants=(parse_plant(plant),))
    return [json.loads(Path(p).read_text()) for p in paths]


def _x(trace: dict, name: str) -> list[dict]:
    return [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["name"] == name]


def _steps_ms(trace: dict) -> list[float]:
    spans = sorted((e for e in trace["traceEvents"] if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])
    return [e["dur"] / 1000 for e in spans]


def _in_step(trace: dict, events: list[dict], step: int) -> list[dict]:
    span = sorted((e for e in trace["traceEvents"] if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])[
        step
    ]
    return [e for e in events if span["ts"] <= e["ts"] < span["ts"] + span["dur"]]


def _every_rank_waits(traces: list[dict]) -> None:
    """Step STEP is about MS longer than the other steps on every rank (the rank spread is < 1 ms here)."""
    for t in traces:
        st = _steps_ms(t)
        others = [d for i, d in enumerate(st) if i != STEP]
        assert MS - 1.0 < st[STEP] - max(others) < MS + 1.0, st


def test_data_plant_lengthens_the_rank_dataloader_span(tmp_path):
    traces = _job(tmp_path, f"{RANK}:data:{MS:g}:{STEP}")
    for r, t in enumerate(traces):
        spans = [e["dur"] / 1000 for e in sorted(_x(t, DATALOADER), key=lambda e: e["ts"])]
        assert len(spans) == STEPS
        for s, d in enumerate(spans):
            planted = MS if (r, s) == (RANK, STEP) else 0.0
            assert planted + 0.1 <= d <= planted + 0.14, (r, s, d)  # 100-140 µs loader, plus the plant
    _every_rank_waits(traces)


def test_kernel_plant_lengthens_one_named_kernel(tmp_path):
    traces = _job(tmp_path, f"{RANK}:kernel:{MS:g}:{STEP}")
    longest = {
        (r, s): max(e["dur"] for e in _in_step(t, _x(t, SLOW_KERNEL), s))
        for r, t in enumerate(traces)
        for s in range(STEPS)
    }
    for (r, s), d in longest.items():
        if (r, s) == (RANK, STEP):
            assert MS * 1000 < d < MS * 1000 + 100, d  # one launch of it: its 15-60 µs, plus the plant
        else:
            assert d < 100, (r, s, d)
    _every_rank_waits(traces)


def test_sync_plant_blocks_the_host_in_a_stream_sync(tmp_path):
    traces = _job(tmp_path, f"{RANK}:sync:{MS:g}:{STEP}")
    for r, t in enumerate(traces):
        syncs = _x(t, "cudaStreamSynchronize")
        if r != RANK:
            assert syncs == [] and _x(t, "aten::item") == []
            continue
        (sync,) = syncs
        assert sync["args"]["cbid"] == 131 and sync["dur"] >= MS * 1000
        assert _in_step(t, syncs, STEP) == syncs
        (copy,) = _x(t, "Memcpy DtoH (Device -> Pageable)")
        assert copy["args"]["correlation"] == _x(t, "cudaMemcpyAsync")[0]["args"]["correlation"]
        # the GPU is idle while the host is blocked: no kernel runs inside the sync (beyond the launch gap)
        kernels = [e for e in t["traceEvents"] if e.get("cat") == "kernel"]
        inside = [
            k for k in kernels if k["ts"] < sync["ts"] + sync["dur"] - 50 and k["ts"] + k["dur"] > sync["ts"] + 50
        ]
        assert inside == []
    _every_rank_waits(traces)


def test_link_plant_slows_the_groups_of_the_rank(tmp_path):
    traces = _job(tmp_path, f"{RANK}:link:{MS:g}:{STEP}")
    # 4 ranks: nodes of 2 -> node groups [0, 1], [2, 3]; rail groups [0, 2], [1, 3]
    assert subgroups(RANKS) == [
        ("1", "node0", [0, 1]),
        ("2", "node1", [2, 3]),
        ("3", "rail0", [0, 2]),
        ("4", "rail1", [1, 3]),
    ]
    calls: dict[str, list[dict]] = {}  # pg name -> the subgroup kernel of step STEP on each member
    for r, t in enumerate(traces):
        pgs = {c["pg_name"]: c["ranks"] for c in t["distributedInfo"]["pg_config"]}
        assert pgs["0"] == list(range(RANKS)) and len(pgs) == 3 and all(r in v for k, v in pgs.items() if k != "0")
        comms = sorted(_x(t, "record_param_comms"), key=lambda e: e["ts"])
        sub = [e for e in _in_step(t, comms, STEP) if e["args"]["Process Group Name"] != "0"]
        assert [e["args"]["Process Group Ranks"] for e in sub] == [
            str(pgs[e["args"]["Process Group Name"]]) for e in sub
        ]
        kernels = {e["args"]["correlation"]: e for e in t["traceEvents"] if e.get("cat") == "kernel"}
        for op in sub:
            (launch,) = [e for e in _x(t, "cudaLaunchKernel") if e["args"]["External id"] == op["args"]["External id"]]
            k = kernels[launch["args"]["correlation"]]
            assert k["args"]["Process Group Name"] == op["args"]["Process Group Name"]
            calls.setdefault(op["args"]["Process Group Name"], []).append(k)
    assert sorted(calls) == ["1", "2", "3", "4"] and all(len(ks) == 2 for ks in calls.values())
    for pg, ks in calls.items():
        # transfer = the call's end minus the last member's arrival: 4 MiB at 200 GB/s (node, 21 µs) or 25 GB/s
        # (rail, 168 µs), plus MS / 2 in the two groups with the slow link (node1 = "2", rail0 = "3")
        end = {k["ts"] + k["dur"] for k in ks}
        assert max(end) - min(end) < 0.01
        transfer = max(end) - max(k["ts"] for k in ks)
        planted = MS / 2 * 1000 if pg in ("2", "3") else 0.0
        assert planted + 20 < transfer < planted + 170, (pg, transfer)
    _every_rank_waits(traces)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--plant", "1:cpu:5"], "unknown cause 'cpu'"),
        (["--plant", "1:data"], "expected RANK:CAUSE:MS[:STEP]"),
        (["--plant", "x:data:5"], "must be integers"),
        (["--plant", "1:data:-5"], "MS must be positive"),
        (["--plant", "9:data:5"], "rank 9 is not in 0..3"),
        (["--plant", "1:data:5:7"], "step 7 is not in 0..2"),
        (["--ranks", "3", "--plant", "1:link:5"], "a link plant needs an even number of ranks"),
        (["--cuda-graph", "--plant", "1:data:5"], "--plant applies to the data-parallel job"),
    ],
)
def test_bad_plants_are_clear(tmp_path, capsys, argv, message):
    base = ["--out", str(tmp_path / "job"), "--ranks", "4", "--steps", "3"]
    with pytest.raises(SystemExit):
        main(base + argv)
    assert message in capsys.readouterr().err
    assert not (tmp_path / "job").exists()


def test_plant_text_round_trips():
    assert str(parse_plant("3:link:2.5:4")) == "3:link:2.5:4"
    assert parse_plant("0:sync:10") == Plant(0, "sync", 10.0, None)


def test_plants_repeat_and_default_to_every_step(tmp_path):
    plants = (parse_plant("1:data:5"), parse_plant("3:sync:4:2"))
    paths = generate(str(tmp_path / "job"), RANKS, events=1500, steps=STEPS, gz=False, plants=plants)
    traces = [json.loads(Path(p).read_text()) for p in paths]
    loads = [[e["dur"] / 1000 for e in sorted(_x(t, DATALOADER), key=lambda e: e["ts"])] for t in traces]
    assert all(5.1 <= d <= 5.14 for d in loads[1]) and all(d <= 0.14 for r in (0, 2, 3) for d in loads[r])
    (sync,) = _x(traces[3], "cudaStreamSynchronize")
    assert _in_step(traces[3], [sync], 2) == [sync] and sync["dur"] >= 4000
    assert all(_x(traces[r], "cudaStreamSynchronize") == [] for r in (0, 1, 2))
    # no built-in straggler with plants (it would be rank RANKS // 3 = 1, its kernels 35 % longer): the ranks'
    # compute kernels (stream 7) in step 1 take the same time within the 6 % rank spread
    busy = [sum(e["dur"] for e in _in_step(t, _x(t, "ampere_sgemm_128x64_nn"), 1)) for t in traces]
    assert max(busy) < 1.13 * min(busy), busy
