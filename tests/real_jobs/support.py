"""Running tests/real_jobs/gloo_job.py (a real gloo job, profiled by torch.profiler) with the compat venv's
python, sharing each job between the tests of a session, and reading the traces it writes with `json` and
`gzip` only (never gpuscope): the facts the plants must produce are checked on what torch wrote."""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..conftest import COMPAT_VENV, missing

JOB = Path(__file__).resolve().parent / "gloo_job.py"
#: a job takes about 3 s on 2 shared cores; this is a hang guard, never a timing
TIMEOUT_S = 120.0


def compat_python() -> Path:
    """The compat venv's python (torch 2.13 CPU with gloo); missing() when absent."""
    py = COMPAT_VENV / "bin" / "python"
    if not py.exists():
        missing(f"no compat venv at {COMPAT_VENV} (torch 2.13 CPU; set GPUSCOPE_COMPAT_VENV)")
    return py


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_gloo_job(
    out_dir: Path,
    *,
    run: str = "job",
    world: int = 4,
    steps: int = 5,
    collective: str = "all_reduce",
    data: dict[int, float] | None = None,
    compute: dict[int, float] | None = None,
    stagger: float = 0.0,
) -> Path:
    """Run one job into `out_dir`/`run` and return that run folder (one trace per rank). `data` and
    `compute` map a rank to the milliseconds planted on it per step; `stagger` (ms): rank r starts its
    profiled window r * stagger after rank 0."""
    py = compat_python()
    plants = [f"{r}:data:{ms}" for r, ms in (data or {}).items()]
    plants += [f"{r}:compute:{ms}" for r, ms in (compute or {}).items()]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)  # the job needs torch from the venv, nothing of this checkout
    last = None
    for _ in range(2):  # the free port may be taken between free_port() and the rendezvous: one retry
        cmd = [str(py), str(JOB), "--out", str(out_dir), "--run", run, "--port", str(free_port())]
        cmd += ["--world", str(world), "--steps", str(steps), "--collective", collective, "--stagger", str(stagger)]
        for p in plants:
            cmd += ["--plant", p]
        last = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
        if last.returncode == 0:
            folder = out_dir / run
            assert len(traces(folder)) == world, (sorted(os.listdir(folder)), last.stderr[-3000:])
            return folder
    raise AssertionError(f"gloo job failed ({last.returncode}): {' '.join(cmd)}\n{last.stderr[-4000:]}")


class JobCache:
    """Each distinct job once per session: `get(**kwargs)` runs it into its own log directory the first time."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.jobs: dict[tuple, Path] = {}

    def get(self, **kwargs) -> Path:
        key = tuple(sorted((k, tuple(sorted(v.items())) if isinstance(v, dict) else v) for k, v in kwargs.items()))
        if key not in self.jobs:
            logdir = self.root / f"job{len(self.jobs)}"
            logdir.mkdir()
            self.jobs[key] = run_gloo_job(logdir, **kwargs)
        return self.jobs[key]


# --- the raw traces -------------------------------------------------------------------------------------------


def traces(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.endswith((".pt.trace.json", ".pt.trace.json.gz")))


@dataclass
class Rank:
    """One rank's trace: its complete events (ph X) and metadata."""

    rank: int
    meta: dict
    events: list[dict]

    def named(self, name: str) -> list[dict]:
        return sorted((e for e in self.events if e["name"] == name), key=lambda e: e["ts"])

    def starting(self, prefix: str) -> list[dict]:
        return sorted((e for e in self.events if e["name"].startswith(prefix)), key=lambda e: e["ts"])

    @property
    def steps(self) -> list[dict]:
        return self.starting("ProfilerStep#")

    @property
    def main_tid(self):
        """The thread of the ProfilerSteps (the Python thread that runs the loop)."""
        return self.steps[0]["tid"]

    def in_step(self, step: dict, name: str) -> list[dict]:
        """Events of `name` that start inside `step` (any thread)."""
        return [e for e in self.named(name) if step["ts"] <= e["ts"] < step["ts"] + step["dur"]]


def load(folder: Path) -> dict[int, Rank]:
    """Every rank of a run folder, by distributedInfo.rank."""
    out = {}
    for path in traces(folder):
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt") as f:
            doc = json.load(f)
        meta = {k: v for k, v in doc.items() if k != "traceEvents"}
        events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
        rank = meta["distributedInfo"]["rank"]
        out[rank] = Rank(rank, meta, events)
    return out


DATALOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
