"""Issue 26, items 18 and 23: planted or corrupt summary files and FIFOs at cache entry paths."""

from __future__ import annotations

import copy
import gzip
import json
import os
import threading
from pathlib import Path

import msgspec
import pytest

from profiler_core.trace.read import cache
from profiler_core.trace.read.reader import read_trace
from tb_plugin.summaries import cli, store
from tb_plugin.summaries import summary as S

from .test_summaries import P, _job, _plugin


def _answer(fn, timeout: float = 60):
    """fn() in a thread: something that blocks fails the test instead of hanging it."""
    out: list = []
    th = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    th.start()
    th.join(timeout)
    assert out, f"no answer in {timeout} s"
    return out[0]


def test_a_fifo_at_a_cache_entry_path_is_not_waited_on(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    trace = tmp_path / "w.pt.trace.json"
    trace.write_text(
        json.dumps(
            {"schemaVersion": 1, "traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]}
        )
    )
    assert cache.usable_dir(create=True) is not None
    entry = cache.entry_path(str(trace))
    os.mkfifo(entry)
    assert _answer(lambda: cache.load(str(trace))) is None
    assert not entry.exists()  # removed, so that the next store writes a real one
    t = read_trace(trace)
    assert cache.store(str(trace), t) == entry and cache.load(str(trace)) is not None


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A 3-rank job with stored summaries (made once), and the distributed view they give."""
    root = tmp_path_factory.mktemp("job")
    logdir = root / "logs"
    _job(logdir, ranks=3, events=1500, steps=3)
    res = cli.summarize_logdir(str(logdir))
    assert res["done"] == 3 and not res["failed"]
    return logdir


def _summary_file(logdir: Path) -> Path:
    return sorted((logdir / ".gpuscope" / "summaries" / "job").glob("*" + store.SUFFIX))[0]


def _variants(s: dict) -> dict:
    out = {}

    def v(name, fn):
        c = copy.deepcopy(s)
        fn(c)
        out[name] = c

    v("steps not an object", lambda c: c["distributed"].update(steps=[1, 2]))
    v("step names numbers", lambda c: c["distributed"]["steps"].update(step=[1, 2, 3]))
    v(
        "start strings",
        lambda c: c["distributed"]["steps"].update(start=["a"] * len(c["distributed"]["steps"]["start"])),
    )
    v("short end", lambda c: c["distributed"]["steps"]["end"].pop())
    v("collective name out of range", lambda c: c["distributed"]["collectives"]["name"].__setitem__(0, 10**9))
    v("dur text", lambda c: c["distributed"]["collectives"]["dur"].__setitem__(0, "x"))
    v("collectives null", lambda c: c["distributed"].update(collectives=None))
    v("info a list", lambda c: c["distributed"].update(info=[1]))
    v("origin text", lambda c: c["distributed"].update(origin="now"))
    v("average a list", lambda c: c["overview"].update(average=[]))
    v("memory_peak text", lambda c: c.update(memory_peak="lots"))
    v("events text", lambda c: c.update(events="many"))
    v("gpus a list", lambda c: c["distributed"].update(gpus=[1]))
    # each list check that works on a whole list at once (summary._FAST, _ints_ok, the tops)
    v("call dur a bool", lambda c: c["collective_calls"]["dur"].__setitem__(0, True))
    v("call start beyond int64", lambda c: c["collective_calls"]["start"].__setitem__(0, 1 << 63))
    v("call group a float", lambda c: c["collective_calls"]["group"].__setitem__(0, 0.0))
    v("phase start a bool", lambda c: c["phases"]["start"].__setitem__(0, False))
    v("phase step a number", lambda c: c["phases"]["step"].__setitem__(0, 1))
    v("phase value text", lambda c: c["phases"]["compute"].__setitem__(0, "x"))
    v("top name out of range", lambda c: c["phases"]["top_kernels"][0].append([10**6, 1.0]))
    v("top pair of three", lambda c: c["phases"]["top_ops"][0].append([0, 1.0, 2]))
    v("top value text", lambda c: c["phases"]["top_ops"][0].append([0, "x"]))
    v("top not a list", lambda c: c["phases"]["top_ops"].__setitem__(0, {"a": 1}))
    v("ledger ns a float", lambda c: c["ledger"]["buckets"]["compute"]["ns"].__setitem__(0, 1.5))
    v("step start beyond int64", lambda c: c["distributed"]["steps"]["start"].__setitem__(0, -(1 << 64)))
    v("idle launches a bool", lambda c: next(iter(c["gpu_idle"]["launches"].values())).__setitem__(0, True))
    v("kernel path out of range", lambda c: c["kernel_table"]["path"].__setitem__(0, 10**6))
    v("kernel total a float", lambda c: c["kernel_table"]["total"].__setitem__(0, 1.5))
    v("kernel names short", lambda c: c["kernel_table"]["name"].pop())
    v("kernel table null", lambda c: c.update(kernel_table=None))
    # the schema's types (`schema.Summary`): a required field missing, or one of another type, at any depth
    v("source missing", lambda c: c.pop("source"))
    v("phases missing", lambda c: c.pop("phases"))
    v("call dur missing", lambda c: c["collective_calls"].pop("dur"))
    v("call tail missing", lambda c: c["collective_calls"].pop("tail"))
    v("ledger has_gpu missing", lambda c: c["ledger"].pop("has_gpu"))
    v("collective pg missing", lambda c: c["distributed"]["collectives"].pop("pg"))
    v("devices a list", lambda c: c.update(devices=[0]))
    v("source size text", lambda c: c["source"].update(size="big"))
    v("phase reasons numbers", lambda c: c["phases"].update(reasons={"h2d": 1}))
    v(
        "group ranks texts",
        lambda c: c["collective_calls"].update(group_ranks=[["a"]] * len(c["collective_calls"]["groups"])),
    )
    v("ledger has_gpu a number", lambda c: c["ledger"].update(has_gpu=1))
    v("overview gpu a list", lambda c: c["overview"].update(gpu=[]))
    v("top row a list", lambda c: c["top_operators"].append([1]))
    # the parts typed as Structs since (issue 36 item 2): distributed, ledger, gpu_idle, pipeline, kernel_table
    v("distributed steps comp missing", lambda c: c["distributed"]["steps"].pop("comp"))
    v("distributed collectives wait texts", lambda c: c["distributed"]["collectives"].update(wait=["no"]))
    v("distributed origin missing", lambda c: c["distributed"].pop("origin"))
    v("distributed info missing", lambda c: c["distributed"].pop("info"))
    v("ledger steps missing", lambda c: c["ledger"].pop("steps"))
    v("ledger reason a number", lambda c: c["ledger"].update(reason=1))
    v("ledger bucket reason missing", lambda c: c["ledger"]["buckets"]["compute"].pop("reason"))
    v("ledger bucket a list", lambda c: c["ledger"]["buckets"].update(compute=[1]))
    v("idle steps missing", lambda c: c["gpu_idle"].pop("steps"))
    v("idle threshold text", lambda c: c["gpu_idle"].update(kernel_wait_threshold_ns="30us"))
    v("idle queue_max a float", lambda c: c["gpu_idle"].update(queue_max={"0:7": 1.5}))
    v("idle reasons numbers", lambda c: c["gpu_idle"].update(reasons=[1]))
    v("pipeline version missing", lambda c: c["pipeline"].pop("version"))
    v("pipeline base_ns text", lambda c: c["pipeline"].update(base_ns="0"))
    v("pipeline steps_dropped negative", lambda c: c["pipeline"].update(steps_dropped=-1))
    v("pipeline reason a number", lambda c: c["pipeline"].update(reason=2))
    v("pipeline of another version", lambda c: c["pipeline"].update(version=99))
    step = {"step": "1", "spans": [["F", 0, -1, 0, 5]], "p2p": [], "busy": [[0, 5]], "closed_gap_ns": 0}
    for name, change in {
        "span kind unknown": {"spans": [["X", 0, -1, 0, 5]]},
        "span of four": {"spans": [["F", 0, -1, 0]]},
        "p2p of another coll": {"p2p": [["all_reduce", 0, 1, -1]]},
        "p2p span out of range": {"p2p": [["send", 0, 1, 1]]},
        "busy a float": {"busy": [[0, 5.5]]},
        "closed gap missing": {"closed_gap_ns": None},
        "step a number": {"step": 1},
    }.items():
        bad = {k: x for k, x in {**step, **change}.items() if x is not None}
        v(f"pipeline {name}", lambda c, bad=bad: c["pipeline"].update(steps=[bad]))
    v("kernel table steps missing", lambda c: c["kernel_table"].pop("steps"))
    v("kernel table dropped negative", lambda c: c["kernel_table"].update(dropped=-1))
    v("kernel table paths numbers", lambda c: c["kernel_table"].update(paths=[1]))
    v("kernel table count negative", lambda c: c["kernel_table"]["count"].__setitem__(0, -1))
    return out


def test_every_malformed_summary_is_refused_by_decode(job):
    good = msgspec.to_builtins(S.decode(_summary_file(job).read_bytes()))
    step = {
        "step": "1",
        "spans": [["F", 0, -1, 0, 5]],
        "p2p": [["send", 5, 6, 0]],
        "busy": [[0, 5]],
        "closed_gap_ns": 0,
    }
    assert S.decode(S.encode({**good, "pipeline": {**good["pipeline"], "steps": [step]}})).pipeline is not None
    for name, bad in _variants(good).items():
        with pytest.raises(S.SummaryError, match="malformed"):
            S.decode(S.encode(bad))
        assert name


def _view(logdir: Path, monkeypatch):
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(logdir.parent / f"cache-{os.urandom(4).hex()}"))
    c, p = _plugin(logdir)
    r = _answer(lambda: c.get(f"{P}/distributed?run=job&span=1"))
    return r, p


@pytest.mark.slow
def test_planted_summaries_are_recomputed_never_served(job, monkeypatch):
    expected, p = _view(job, monkeypatch)
    assert expected.status_code == 200 and p.state().summaries.computed == 0
    path = _summary_file(job)
    original = path.read_bytes()
    good = msgspec.to_builtins(S.decode(original))
    try:
        for name, bad in _variants(good).items():
            path.write_bytes(S.encode(bad))
            r, p = _view(job, monkeypatch)
            assert r.status_code == 200, (name, r.json)
            assert r.json["workers"] == expected.json["workers"], name
            assert p.state().summaries.computed == 1, name
    finally:
        path.write_bytes(original)


def test_big_fifo_device_and_foreign_summaries_are_not_read(job, monkeypatch):
    expected, _ = _view(job, monkeypatch)
    path = _summary_file(job)
    original = path.read_bytes()
    folder = path.parent
    monkeypatch.setattr(S, "MAX_FILE_BYTES", 1 << 20)
    monkeypatch.setattr(store, "MAX_FILE_BYTES", 1 << 20)
    bomb = gzip.compress(b" " * (8 << 20) + original[:0])
    try:
        for name, plant in [
            ("gzip bomb", lambda: path.write_bytes(bomb)),
            ("too big", lambda: path.write_bytes(b" " * (2 << 20))),
            ("fifo", lambda: os.mkfifo(path)),
            ("zero device", lambda: path.symlink_to("/dev/zero")),
        ]:
            path.unlink()
            plant()
            r, p = _view(job, monkeypatch)
            assert r.status_code == 200 and r.json["workers"] == expected.json["workers"], name
            assert p.state().summaries.computed == 1, name
        path.unlink()
        path.write_bytes(original)
        if os.getuid() == 0:  # another user's folder (root can make one): refused
            os.chown(folder, 12345, 12345)
            try:
                r, p = _view(job, monkeypatch)
                assert r.status_code == 200 and p.state().summaries.computed == 3
            finally:
                os.chown(folder, 0, 0)
        os.chmod(folder, 0o777)  # a folder anyone may write into: refused too
        try:
            r, p = _view(job, monkeypatch)
            assert r.status_code == 200 and p.state().summaries.computed == 3
        finally:
            os.chmod(folder, 0o755)
        r, p = _view(job, monkeypatch)
        assert p.state().summaries.computed == 0
    finally:
        if path.is_symlink() or path.exists():
            path.unlink()
        path.write_bytes(original)


GROUPING = r"""
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))  # fail fast instead of taking the machine
import msgspec
from tb_plugin.summaries.schema import Distributed
from tb_plugin.views.distributed import from_summaries
N = 20000   # 20000 names, and 20000 calls of the first: 4e8 (name, call) pairs if grouped densely
def part():
    steps = {"step": ["1"], "start": [0], "end": [10**9], "comp": [0], "comm": [0], "overlap": [0]}
    coll = {"names": [f"n{i}" for i in range(N)], "pg": [""] * N, "group_size": [2] * N,
            "name": list(range(N)) + [0] * N, "step": [0] * (2 * N), "dur": [5] * (2 * N),
            "bytes": [1] * (2 * N), "wait": [0] * (2 * N)}
    return msgspec.convert({"origin": 0, "steps": steps, "collectives": coll, "info": {}, "gpus": {}}, Distributed)
r = from_summaries({"a": part(), "b": part()})
print("OK", len(r["comm_ops"]))
"""


def test_collectives_of_a_planted_summary_group_in_memory_linear_in_their_count():
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=str(root), OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", GROUPING], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-2000:]
