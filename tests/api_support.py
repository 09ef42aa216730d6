"""Jobs generated for the Python API's tests (benchmarks/gen_distributed.py): one planted job beside its baseline,
and a series of nightly runs with a planted regression, their file-name timestamps one day apart."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gen_distributed as gen  # noqa: E402

#: the planted cause of the jobs here: rank 1's SLOW_KERNEL runs this many ms longer in every step
PLANT_MS = 1.5
PLANT_RANK = 1
SLOW_KERNEL = gen.SLOW_KERNEL
DAY_MS = 86_400_000


def job(out: Path, planted: bool, seed: int = 7, ranks: int = 2, steps: int = 6) -> None:
    """One data-parallel job of `ranks` ranks (the planted layout: kernels named by their place, no straggler); with
    `planted`, rank PLANT_RANK's SLOW_KERNEL runs PLANT_MS longer in every step."""
    plants = (gen.parse_plant(f"{PLANT_RANK}:kernel:{PLANT_MS}"),) if planted else ()
    gen.generate(str(out), ranks, events=2000, steps=steps, seed=seed, layout=True, plants=plants)


def series(root: Path, runs: int = 20, regressed_from: int | None = 13, prefix: str = "nightly-") -> list[str]:
    """`runs` runs of one job under `root`, the i-th (0-based, in time order) made on day i with seed 100 + i, and
    planted from run `regressed_from` on (None: never). Named in the reverse of their time order (run 0 is
    `<prefix>{runs-1}`), so that only their time orders them. Returns the run names in time order."""
    names = []
    for i in range(runs):
        name = f"{prefix}{runs - 1 - i:02d}"
        out = root / name
        job(out, planted=regressed_from is not None and i >= regressed_from, seed=100 + i)
        for p in out.glob("*.pt.trace.json.gz"):
            worker, _, rest = p.name.split(".", 2)
            p.rename(out / f"{worker}.{1790900000000 + i * DAY_MS}.{rest}")
        names.append(name)
    return names
