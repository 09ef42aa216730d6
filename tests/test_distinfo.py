"""Worker identity from MPI / torchrun / SLURM variables and the default worker name."""

import os
import re
import subprocess
import sys
import types
import warnings

import pytest

from profiler_core import distinfo
from profiler_core.distinfo import default_worker_name, detect, distributed_info


@pytest.fixture(autouse=True)
def _no_runtime_modules(monkeypatch):
    """Detection must not see a real mpi4py/torch the test process may have imported."""
    monkeypatch.delitem(sys.modules, "mpi4py.MPI", raising=False)
    monkeypatch.delitem(sys.modules, "torch.distributed", raising=False)
    distinfo._warned.clear()


@pytest.mark.parametrize(
    "env, expected",
    [
        (
            {
                "OMPI_COMM_WORLD_RANK": "3",
                "OMPI_COMM_WORLD_SIZE": "8",
                "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
            },
            {
                "backend": "mpi",
                "rank": 3,
                "world_size": 8,
                "local_rank": 1,
                "local_world_size": 2,
                "source": "OMPI_COMM_WORLD",
            },
        ),
        (
            {"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"},
            {"backend": "mpi", "rank": 2, "world_size": 4, "local_rank": 0, "local_world_size": 2, "source": "PMI"},
        ),
        ({"PMI_RANK": "1", "PMI_SIZE": "2"}, {"backend": "mpi", "rank": 1, "world_size": 2, "source": "PMI"}),
        (
            {"MV2_COMM_WORLD_RANK": "5", "MV2_COMM_WORLD_SIZE": "6"},
            {"backend": "mpi", "rank": 5, "world_size": 6, "source": "MV2_COMM_WORLD"},
        ),
        (
            {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"},
            {
                "backend": "env",
                "rank": 1,
                "world_size": 2,
                "local_rank": 1,
                "local_world_size": 2,
                "source": "torchrun",
            },
        ),
        (
            {"SLURM_PROCID": "7", "SLURM_NTASKS": "16", "SLURM_LOCALID": "3", "SLURM_STEP_TASKS_PER_NODE": "4(x4)"},
            {
                "backend": "slurm",
                "rank": 7,
                "world_size": 16,
                "local_rank": 3,
                "local_world_size": 4,
                "source": "SLURM",
            },
        ),
        (
            {"SLURM_PROCID": "1", "SLURM_NTASKS": "16", "SLURM_STEP_NUM_TASKS": "2"},
            {"backend": "slurm", "rank": 1, "world_size": 2, "source": "SLURM"},
        ),
    ],
)
def test_launcher_variables(env, expected):
    assert distributed_info(env) == expected


def test_precedence_mpi_launcher_over_torchrun_over_slurm():
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "RANK": "1", "WORLD_SIZE": "2"}
    assert distributed_info(env)["source"] == "torchrun"
    env.update({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4"})
    assert distributed_info(env)["rank"] == 3


def test_not_distributed():
    assert distributed_info({"PATH": "/bin", "RANK": "1"}) is None  # rank without size is not enough


@pytest.mark.parametrize(
    "env",
    [
        {"RANK": "x", "WORLD_SIZE": "2"},
        {"RANK": "2", "WORLD_SIZE": "2"},
        {"RANK": "-1", "WORLD_SIZE": "2"},
        {"PMI_RANK": "0", "PMI_SIZE": "0"},
    ],
)
def test_invalid_variables_warn_and_are_ignored(env):
    with pytest.warns(RuntimeWarning, match="invalid launcher variables"):
        assert distributed_info(env) is None


def test_invalid_source_falls_through_to_next():
    env = {"OMPI_COMM_WORLD_RANK": "bad", "OMPI_COMM_WORLD_SIZE": "4", "SLURM_PROCID": "2", "SLURM_NTASKS": "4"}
    with pytest.warns(RuntimeWarning):
        info = distributed_info(env)
    assert info["source"] == "SLURM" and info["rank"] == 2


def _fake_mpi(rank, size, initialized=True, finalized=False):
    comm = types.SimpleNamespace(Get_rank=lambda: rank, Get_size=lambda: size)
    return types.SimpleNamespace(
        Is_initialized=lambda: initialized,
        Is_finalized=lambda: finalized,
        COMM_WORLD=comm,
        Get_library_version=lambda: "MPICH Version: 4.3.0\nmore",
    )


def test_initialised_mpi4py_wins_and_keeps_local_rank(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py.MPI", _fake_mpi(2, 3))
    info = distributed_info({"PMI_RANK": "2", "PMI_SIZE": "3", "MPI_LOCALRANKID": "0"})
    assert info == {
        "backend": "mpi",
        "rank": 2,
        "world_size": 3,
        "source": "mpi4py",
        "mpi_library": "MPICH Version: 4.3.0",
        "local_rank": 0,
    }


def test_uninitialised_mpi4py_is_a_note_not_an_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py.MPI", _fake_mpi(0, 1, initialized=False))
    with pytest.warns(RuntimeWarning, match="not initialised"):
        assert distributed_info({}) is None
    info, notes = detect({})
    assert info is None and any("single worker" in n for n in notes)


def test_broken_mpi4py_falls_back_to_env(monkeypatch):
    def boom():
        raise RuntimeError("no MPI")

    fake = _fake_mpi(0, 1)
    fake.Is_initialized = boom
    monkeypatch.setitem(sys.modules, "mpi4py.MPI", fake)
    with pytest.warns(RuntimeWarning, match="no MPI"):
        info = distributed_info({"RANK": "0", "WORLD_SIZE": "2"})
    assert info["source"] == "torchrun"


def test_initialised_torch_distributed(monkeypatch):
    fake = types.SimpleNamespace(
        is_available=lambda: True,
        is_initialized=lambda: True,
        get_backend=lambda: "nccl",
        get_rank=lambda: 1,
        get_world_size=lambda: 2,
    )
    monkeypatch.setitem(sys.modules, "torch.distributed", fake)
    assert distributed_info({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}) == {
        "backend": "nccl",
        "rank": 1,
        "world_size": 2,
        "source": "torch.distributed",
        "local_rank": 1,
    }


def test_each_warning_once():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        distributed_info({"RANK": "z", "WORLD_SIZE": "2"})
        distributed_info({"RANK": "z", "WORLD_SIZE": "2"})
    assert len(caught) == 1


def test_default_worker_name_distinct_and_sortable(monkeypatch):
    monkeypatch.setattr(distinfo.socket, "gethostname", lambda: "node-a.cluster")
    names = [default_worker_name({"rank": r, "world_size": 12}) for r in (10, 2, 0, 11)]
    assert names == [
        "node-a.cluster_rank00010",
        "node-a.cluster_rank00002",
        "node-a.cluster_rank00000",
        "node-a.cluster_rank00011",
    ]
    assert sorted(names) == [names[2], names[1], names[0], names[3]]
    assert default_worker_name({"rank": 123456, "world_size": 200000}).endswith("_rank123456")
    assert len({default_worker_name({"rank": r, "world_size": 200000}) for r in (5, 50000)}) == 2


def test_default_worker_name_single_process_is_host_pid(monkeypatch):
    monkeypatch.setattr(distinfo.socket, "gethostname", lambda: "my host/x")
    assert default_worker_name(env={}) == f"my_host_x_{os.getpid()}"
    assert default_worker_name(env={"PMI_RANK": "1", "PMI_SIZE": "2"}) == "my_host_x_rank00001"
    # A world of one (an MPI singleton, torchrun with one process) keeps the pid: runs must not collide.
    assert default_worker_name(env={"PMI_RANK": "0", "PMI_SIZE": "1"}) == f"my_host_x_{os.getpid()}"
    # The name is usable in torch's file-name pattern (no dots added, no path separators).
    assert re.fullmatch(r"[A-Za-z0-9_.-]+", default_worker_name(env={}))


def test_import_is_cheap_and_never_imports_mpi4py():
    code = (
        "import sys, profiler_core.distinfo as d; d.distributed_info(); d.default_worker_name();"
        "bad = [m for m in ('mpi4py', 'mpi4py.MPI', 'pandas', 'torch') if m in sys.modules];"
        "print(bad)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"},
    )
    assert out.stdout.strip() == "[]"
