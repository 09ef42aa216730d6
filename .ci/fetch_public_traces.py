#!/usr/bin/env python3
"""Fetches the public real traces the tests read (docs/public-traces.md lists them, 31 MB in all) from their
public repositories, at the commits named there, into `traces/public/RUN/` of the shared folder:

    python3 .ci/fetch_public_traces.py              # into $GPUSCOPE_SHARED/traces/public (default ../shared)
    python3 .ci/fetch_public_traces.py --dest DIR   # into DIR/RUN/ (then GPUSCOPE_SHARED=... as DIR/../..)
    python3 .ci/fetch_public_traces.py --list       # print each run, URL and file; fetch nothing

A file already there is kept (`--force` fetches it again); each is written whole (a temporary file renamed),
so an interrupted run leaves no partial trace. A file that git keeps in LFS is fetched from GitHub's media
host. Without these traces their tests skip locally (and fail under CI=true). Standard library only; the
tests never run this script (no network): tests/test_first_hour_docs.py checks its list against the doc.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "public-traces.md"


class Source(NamedTuple):
    """One file of a run: where it comes from (a GitHub repository at a commit) and its path there."""

    run: str
    repo: str
    commit: str
    path: str

    @property
    def url(self) -> str:
        return f"https://github.com/{self.repo}/raw/{self.commit}/{self.path}"

    @property
    def lfs_url(self) -> str:
        return f"https://media.githubusercontent.com/media/{self.repo}/{self.commit}/{self.path}"

    @property
    def name(self) -> str:
        """The file's name in the run's folder: its name in the repository."""
        return self.path.rsplit("/", 1)[-1]


def sources(doc: Path = DOC) -> list[Source]:
    """The table of `doc`: `| run | owner/repo @commit | path |` rows (a path may be followed by a remark)."""
    out = []
    for line in doc.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`") or " @" not in cells[1]:
            continue
        repo, commit = cells[1].split(" @")
        path = cells[2].split("`")[1]
        out.append(Source(cells[0].strip("`"), repo.strip(), commit.strip(), path))
    return out


def default_dest() -> Path:
    """Where the tests read them: GPUSCOPE_SHARED's traces/public (tests/conftest.py), default ../shared."""
    shared = os.environ.get("GPUSCOPE_SHARED") or str(ROOT.parent / "shared")
    return Path(shared) / "traces" / "public"


def _get(url: str, timeout: float) -> bytes:
    req = urllib.request.Request(url, headers={"User-Agent": "gpuscope-fetch-public-traces"})
    with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - https URLs built above
        return r.read()


def fetch(src: Source, dest: Path, force: bool = False, timeout: float = 120) -> str:
    """Fetches one file into dest/RUN/; returns what happened, in words."""
    target = dest / src.run / src.name
    if target.is_file() and target.stat().st_size > 0 and not force:
        return f"kept    {target}"
    data = _get(src.url, timeout)
    if data.startswith(b"version https://git-lfs"):  # a pointer: the bytes are on the media host
        data = _get(src.lfs_url, timeout)
    if not (data[:2] == b"\x1f\x8b" or data.lstrip()[:1] in (b"{", b"[")):
        raise ValueError(f"{src.url}: neither gzip nor JSON ({data[:40]!r})")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{src.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise
    return f"fetched {target} ({len(data):,} bytes)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument(
        "--dest",
        type=Path,
        default=None,
        help="folder of the runs (default: $GPUSCOPE_SHARED/traces/public, GPUSCOPE_SHARED defaulting to ../shared)",
    )
    ap.add_argument("--list", action="store_true", help="print run, URL and file of each source; fetch nothing")
    ap.add_argument("--force", action="store_true", help="fetch files that are already there again")
    ap.add_argument("--run", action="append", help="only this run (repeatable)")
    args = ap.parse_args(argv)
    dest = args.dest or default_dest()
    todo = [s for s in sources() if not args.run or s.run in args.run]
    if not todo:
        print(f"no such run: {args.run}", file=sys.stderr)
        return 2
    failed = 0
    for src in todo:
        if args.list:
            print(f"{src.run}\t{src.url}\t{dest / src.run / src.name}")
            continue
        try:
            print(fetch(src, dest, args.force))
        except Exception as e:  # noqa: BLE001 - say which file failed and go on with the others
            failed += 1
            print(f"FAILED  {src.run}/{src.name}: {src.url}: {type(e).__name__}: {e}", file=sys.stderr)
    if not args.list:
        print(f"{len(todo) - failed} of {len(todo)} files in {dest}" + (f"; {failed} failed" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
