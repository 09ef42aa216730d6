"""Where the real CUDA-side packages that .ci/run installs (no GPU needed) are found, for the oracle tests.

.ci/run (through .ci/install_gpu_oracles.sh) puts them under `.venvs/` of the repository, or under
`$GPUSCOPE_ORACLES_DIR`: `cuda-headers/cu12|cu13/cuda_occupancy.h` (NVIDIA's occupancy calculator from the
nvidia-cuda-runtime wheels), `cupti12`, `cupti13` (cupti-python 12.x / 13.x, `pip install --target`) and
`pycuda` (the PyCUDA wheel from ../shared/wheels). Each test skips with the reason when its piece is absent.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .conftest import ROOT, SHARED

ORACLES = Path(os.environ.get("GPUSCOPE_ORACLES_DIR", ROOT / ".venvs"))
CUPTI_TARGETS = {"12": ORACLES / "cupti12", "13": ORACLES / "cupti13"}
PYCUDA_TARGET = ORACLES / "pycuda"
LIBCUDA_SYMBOLS = SHARED / "tools" / "gpu_oracles" / "libcuda_symbols.txt"


def occupancy_headers() -> dict[str, Path]:
    """{"cu12": path, "cu13": path} of every cuda_occupancy.h installed for the tests."""
    out = {}
    for tag in ("cu12", "cu13"):
        h = ORACLES / "cuda-headers" / tag / "cuda_occupancy.h"
        if h.is_file():
            out[tag] = h
    return out


def run_with(target: Path, code: str, *, env: dict | None = None, timeout: int = 120) -> dict:
    """Run `code` in a fresh interpreter with `target` first on sys.path; it prints one JSON object."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join([str(target), str(ROOT)])
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=timeout, cwd=str(ROOT)
    )
    if proc.returncode != 0:
        raise AssertionError(f"subprocess failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def build_libcuda_stub(out_dir: Path) -> Path | None:
    """A stub libcuda.so.1 exporting every cu* symbol PyCUDA links (each returns CUDA_ERROR_NO_DEVICE)."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None or not LIBCUDA_SYMBOLS.is_file():
        return None
    symbols = [s.strip() for s in LIBCUDA_SYMBOLS.read_text().split() if s.strip()]
    src = out_dir / "libcuda_stub.c"
    src.write_text("".join(f"int {s}(void) {{ return 100; }}\n" for s in symbols))
    lib = out_dir / "libcuda.so.1"
    subprocess.run(
        [cc, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(lib), str(src)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return lib
