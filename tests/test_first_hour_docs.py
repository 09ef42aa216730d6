"""Issue 39 item 8, what a new user reads: samples/README.md covers every sample, the samples' output folders
are ignored by git, and the README's bundle size is the built bundle's."""

import gzip
import re
import subprocess

import pytest

from .conftest import ROOT

SAMPLES = ROOT / "samples"


def test_samples_readme_covers_every_sample_with_a_command():
    readme = (SAMPLES / "README.md").read_text(encoding="utf-8")
    samples = sorted(p.name for p in SAMPLES.iterdir() if p.suffix in (".py", ".ipynb"))
    assert len(samples) >= 5, samples
    for name in samples:
        assert f"`{name}`:" in readme, f"samples/README.md does not describe {name}"
        if name.endswith(".py"):  # how to run it, as typed
            assert f"python3 samples/{name}" in readme, f"samples/README.md has no command line for {name}"


@pytest.mark.parametrize("folder", ["log", "log_mpi", "log_flight", "runs"])
def test_the_samples_output_folders_are_ignored(folder):
    """The README's and samples/README.md's commands write there, from the clone's root."""
    said = (ROOT / "README.md").read_text(encoding="utf-8") + (SAMPLES / "README.md").read_text(encoding="utf-8")
    assert f"--logdir {folder}" in said
    out = subprocess.run(
        ["git", "check-ignore", "-q", f"{folder}/x.pt.trace.json"], cwd=ROOT, capture_output=True, timeout=30
    )
    if out.returncode == 128:
        pytest.skip(f"not a git checkout: {out.stderr.decode()[-200:]}")
    assert out.returncode == 0, f"{folder}/ is not ignored by .gitignore"


def test_the_readmes_bundle_size_is_the_built_bundles():
    """The README's figures (KB = 1000 bytes) are the committed bundle's, within 5 % (rebuild: npm run build)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"The whole frontend is one (\d+) KB file \((\d+) KB\s+gzipped\)", readme)
    assert m, "README.md no longer says the bundle's size as 'one N KB file (M KB gzipped)'"
    data = (ROOT / "tb_plugin" / "static" / "index.js").read_bytes()
    said_kb, said_gz_kb = int(m.group(1)), int(m.group(2))
    kb, gz_kb = len(data) / 1000, len(gzip.compress(data, 9)) / 1000
    assert abs(said_kb - kb) <= 0.05 * kb, f"README says {said_kb} KB, the bundle is {kb:.0f} KB"
    assert abs(said_gz_kb - gz_kb) <= 0.05 * gz_kb, f"README says {said_gz_kb} KB gzipped, it is {gz_kb:.0f} KB"
