"""Worker identity: which rank of which job this process is, from MPI, launchers and SLURM.

Used by the profiler for the trace's ``distributedInfo`` and by ``tensorboard_trace_handler``
for the default worker name. Cheap and import-free: it reads ``os.environ`` and only looks at
mpi4py / torch.distributed when the user has already imported them (never initialises MPI).
"""

from __future__ import annotations

import os
import re
import socket
import sys
import warnings
from collections.abc import Mapping

__all__ = ["distributed_info", "detect", "default_worker_name", "hostname", "warn_once", "MPI_NOT_INITIALISED"]

# (source name, backend, rank var, size vars (first present wins), local rank var, local size var)
# Checked in this order: MPI launchers first (they are specific), then torchrun, then SLURM
# (which is set in every job step, also around a torchrun or mpiexec launch).
_ENV_SOURCES: tuple[tuple[str, str, str, tuple[str, ...], str, str], ...] = (
    (
        "OMPI_COMM_WORLD",
        "mpi",
        "OMPI_COMM_WORLD_RANK",
        ("OMPI_COMM_WORLD_SIZE",),
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
    ),
    (
        "MV2_COMM_WORLD",
        "mpi",
        "MV2_COMM_WORLD_RANK",
        ("MV2_COMM_WORLD_SIZE",),
        "MV2_COMM_WORLD_LOCAL_RANK",
        "MV2_COMM_WORLD_LOCAL_SIZE",
    ),
    ("PMI", "mpi", "PMI_RANK", ("PMI_SIZE",), "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ("torchrun", "env", "RANK", ("WORLD_SIZE",), "LOCAL_RANK", "LOCAL_WORLD_SIZE"),
    (
        "SLURM",
        "slurm",
        "SLURM_PROCID",
        ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"),
        "SLURM_LOCALID",
        "SLURM_STEP_TASKS_PER_NODE",
    ),
)

_warned: set[str] = set()

#: The note for a process that imported mpi4py without an initialised MPI (shared with the integration).
MPI_NOT_INITIALISED = (
    "mpi4py is imported but MPI is not initialised (or already finalised): this process "
    "is profiled as a single worker, unless launcher variables give its rank"
)


def warn_once(note: str) -> None:
    """One RuntimeWarning per distinct note per process."""
    if note not in _warned:
        _warned.add(note)
        warnings.warn(f"gpuscope: {note}", RuntimeWarning, stacklevel=3)


def _int_or_none(value: str | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    value = str(value).strip()
    # SLURM_STEP_TASKS_PER_NODE looks like "4(x2)" or "3,2": take the first count.
    m = re.match(r"^(\d+)", value)
    return int(m.group(1)) if m else None


def _from_mpi4py(notes: list[str]) -> dict | None:
    """Rank and size from mpi4py, only if the user imported it and MPI is initialised."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None:
        return None
    try:
        if not mpi.Is_initialized() or mpi.Is_finalized():
            notes.append(MPI_NOT_INITIALISED)
            return None
        comm = mpi.COMM_WORLD
        info = {"backend": "mpi", "rank": int(comm.Get_rank()), "world_size": int(comm.Get_size()), "source": "mpi4py"}
    except Exception as exc:  # a broken MPI must never break profiling
        notes.append(f"could not query mpi4py ({type(exc).__name__}: {exc}); using launcher variables")
        return None
    try:
        version = mpi.Get_library_version().strip().splitlines()
        if version:
            info["mpi_library"] = version[0].strip()[:200]
    except Exception:
        pass
    return info


def _from_torch(notes: list[str]) -> dict | None:
    """Rank, size and backend from torch.distributed, only if already imported and initialised."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if not (dist.is_available() and dist.is_initialized()):
            return None
        return {
            "backend": str(dist.get_backend()),
            "rank": int(dist.get_rank()),
            "world_size": int(dist.get_world_size()),
            "source": "torch.distributed",
        }
    except Exception as exc:
        notes.append(f"could not query torch.distributed ({type(exc).__name__}: {exc})")
        return None


def _from_env(env: Mapping[str, str], notes: list[str]) -> dict | None:
    """The first launcher whose rank and size variables are both present and valid."""
    for source, backend, rank_var, size_vars, lrank_var, lsize_var in _ENV_SOURCES:
        if rank_var not in env:
            continue
        size_var = next((v for v in size_vars if v in env), None)
        if size_var is None:
            continue
        rank, size = _int_or_none(env[rank_var]), _int_or_none(env[size_var])
        if rank is None or size is None or size < 1 or not 0 <= rank < size:
            notes.append(
                f"ignored invalid launcher variables {rank_var}={env[rank_var]!r} "
                f"{size_var}={env[size_var]!r} (need 0 <= rank < size)"
            )
            continue
        info: dict = {"backend": backend, "rank": rank, "world_size": size, "source": source}
        lrank, lsize = _int_or_none(env.get(lrank_var)), _int_or_none(env.get(lsize_var))
        if lrank is not None:
            info["local_rank"] = lrank
        if lsize is not None and lsize >= 1:
            info["local_world_size"] = lsize
        return info
    return None


def detect(env: Mapping[str, str] | None = None) -> tuple[dict | None, list[str]]:
    """Return (distributed info or None, notes about what was skipped or ignored).

    Precedence: an initialised mpi4py, an initialised torch.distributed, then launcher
    variables (Open MPI, MVAPICH, MPICH/Hydra/Intel PMI, torchrun, SLURM).
    """
    env = os.environ if env is None else env
    if not isinstance(env, Mapping):
        raise TypeError(
            f"env must be a mapping of environment variables (like os.environ), got {type(env).__name__} {env!r}"
        )
    notes: list[str] = []
    info = _from_mpi4py(notes) or _from_torch(notes)
    from_env = _from_env(env, notes)
    if info is None:
        info = from_env
    elif from_env is not None:
        # The runtime is authoritative for rank/size; the launcher knows the node-local layout.
        for key in ("local_rank", "local_world_size"):
            if key in from_env and from_env["rank"] == info["rank"]:
                info.setdefault(key, from_env[key])
    return info, notes


def distributed_info(env: Mapping[str, str] | None = None) -> dict | None:
    """The trace's ``distributedInfo``: {"backend", "rank", "world_size", ...}, None if not distributed.

    Problems (invalid variables, MPI imported but not initialised) become one warning each, never an error.
    """
    info, notes = detect(env)
    for note in notes:
        warn_once(note)
    return info


def hostname() -> str:
    """This host's name, reduced to characters that are safe in a file name."""
    try:
        name = socket.gethostname() or "localhost"
    except OSError:
        name = "localhost"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def default_worker_name(info: dict | None = None, env: Mapping[str, str] | None = None) -> str:
    """``{host}_rank{rank:05d}`` when one of several workers (distinct, and sorts by rank within a
    host), else ``{host}_{pid}`` as torch's ``tensorboard_trace_handler`` does."""
    if info is None:
        info, _ = detect(env)
    if info is None:
        return f"{hostname()}_{os.getpid()}"  # not distributed
    if not isinstance(info, Mapping):
        raise TypeError(f"default_worker_name: info must be a dict like distributed_info()'s, got {info!r}")
    rank, size = _int_or_none(info.get("rank")), _int_or_none(info.get("world_size", 1))
    if size is None or size <= 1:
        return f"{hostname()}_{os.getpid()}"  # a lone process: ranks would collide across runs
    if rank is None or not 0 <= rank < size:
        raise ValueError(
            f"default_worker_name: info needs 0 <= rank < world_size, got rank={info.get('rank')!r} "
            f"world_size={info.get('world_size')!r}"
        )
    width = max(5, len(str(size - 1)))
    return f"{hostname()}_rank{rank:0{width}d}"
