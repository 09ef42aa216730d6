"""Checks the built wheel and sdist against the git tree: `python3 .ci/check_dists.py DIST_DIR`.

The wheel must hold exactly the three packages (every tracked file under profiler_core/,
tb_plugin/ and gpuscope/, the built bundle and py.typed included), the license and the entry points; the sdist
every tracked file of the repository, and neither holds caches or node_modules. Prints both files'
sizes and counts; exit status 1 with the reasons otherwise.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

PACKAGES = ("profiler_core/", "tb_plugin/", "gpuscope/")
NEVER = ("__pycache__/", ".pyc", "node_modules/", ".pytest_cache/")
NOT_IN_SDIST = {".gitignore"}


def tracked(root: Path) -> list[str]:
    """The files git tracks under `root`."""
    out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p]


def check_wheel(path: Path, files: list[str]) -> list[str]:
    """What is wrong with the wheel at `path`."""
    problems = []
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        info = next(n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info"))
        entry_points = z.read(f"{info}/entry_points.txt").decode()
    for n in sorted(names):
        if not n.startswith((*PACKAGES, info + "/")):
            problems.append(f"wheel: {n} is neither in a package nor in {info}/")
        if any(bad in n for bad in NEVER):
            problems.append(f"wheel: {n} should not be shipped")
    for f in files:
        if f.startswith(PACKAGES) and f not in names:
            problems.append(f"wheel: {f} is missing")
    for need in (
        f"{info}/licenses/LICENSE",
        "tb_plugin/static/index.js",
        "profiler_core/py.typed",
        "tb_plugin/py.typed",
        "gpuscope/py.typed",
    ):
        if need not in names:
            problems.append(f"wheel: {need} is missing")
    for line in ("gpuscope = tb_plugin.plugin:GpuscopeLoader", "gpuscope = tb_plugin.summaries.cli:main"):
        if line not in entry_points:
            problems.append(f"wheel: entry point '{line}' is missing")
    print(f"check_dists: {path.name}: {path.stat().st_size:,} bytes, {len(names)} files")
    return problems


def check_sdist(path: Path, files: list[str]) -> list[str]:
    """What is wrong with the sdist at `path`."""
    problems = []
    with tarfile.open(path) as t:
        members = [m.name.split("/", 1)[1] for m in t.getmembers() if m.isfile() and "/" in m.name]
    names = set(members)
    for f in files:
        if f not in names and f not in NOT_IN_SDIST:
            problems.append(f"sdist: {f} is missing")
    for n in sorted(names):
        if any(bad in n for bad in NEVER):
            problems.append(f"sdist: {n} should not be shipped")
    print(f"check_dists: {path.name}: {path.stat().st_size:,} bytes, {len(names)} files")
    return problems


def main(argv: list[str]) -> int:
    """Checks the one wheel and the one sdist in argv[0]; 0 when both are as they should be."""
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print(__doc__, file=sys.stderr)
        return 2
    dist = Path(argv[0])
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        print(
            f"check_dists: FAILED: want one wheel and one sdist in {dist}, found {[p.name for p in wheels + sdists]}",
            file=sys.stderr,
        )
        return 1
    files = tracked(Path(__file__).resolve().parent.parent)
    problems = check_wheel(wheels[0], files) + check_sdist(sdists[0], files)
    for p in problems:
        print(f"check_dists: FAILED: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
