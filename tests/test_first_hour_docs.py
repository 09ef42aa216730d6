"""Issue 39 item 8, what a new user reads: samples/README.md covers every sample, the samples' output folders
are ignored by git, and the README's bundle size is the built bundle's."""

import gzip
import os
import re
import subprocess
import sys

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


def _fetcher():
    import importlib.util

    spec = importlib.util.spec_from_file_location("fetch_public_traces", ROOT / ".ci" / "fetch_public_traces.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_public_traces_fetch_list_is_the_docs_table_and_well_formed():
    """The README says how to get the public traces: the script reads docs/public-traces.md's table (one row a
    file, at a pinned commit) and puts each file where the tests read it (never run here: no network)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "python3 .ci/fetch_public_traces.py" in readme and "docs/public-traces.md" in readme
    fetch = _fetcher()
    rows = fetch.sources()
    assert len(rows) >= 38 and len({(r.run, r.name) for r in rows}) == len(rows), "a file listed twice"
    for r in rows:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+", r.repo) and re.fullmatch(r"[0-9a-f]{12,40}", r.commit), r
        assert r.name.endswith((".json", ".json.gz")) and r.url.startswith("https://github.com/"), r
        assert r.url.endswith(f"/raw/{r.commit}/{r.path}"), r
    # the runs the README's table of claims names are among them
    claims = readme.split("**Which claims rest on which real traces**", 1)[1].split("## Settings", 1)[0]
    named = set(re.findall(r"`(?:public/)?((?:hta|tl|kineto_rn50)_[a-z0-9_]+)`", claims))
    assert named and named <= {r.run for r in rows}, named - {r.run for r in rows}


def test_the_fetch_list_matches_the_shared_folder(monkeypatch):
    """Where the shared folder is present: its own list of sources is the script's, and every file the script
    would fetch is there under the name the script gives it (so a fetched folder is the shared one)."""
    from .conftest import TRACES

    public = TRACES / "public"
    if not (public / "README.md").is_file():
        pytest.skip(f"no shared public traces at {public}")
    fetch = _fetcher()
    ours = fetch.sources()
    assert fetch.sources(public / "README.md") == ours
    assert [r for r in ours if not (public / r.run / r.name).is_file()] == []
    on_disk = {p.parent.name for p in public.glob("*/*") if p.is_file()}
    assert on_disk == {r.run for r in ours}
    monkeypatch.setenv("GPUSCOPE_SHARED", str(TRACES.parent))
    assert fetch.default_dest() == public


def test_the_fetch_script_lists_without_fetching(tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "fetch_public_traces.py"), "--list"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "GPUSCOPE_SHARED": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) >= 38 and all(
        line.split("\t")[2].startswith(str(tmp_path / "traces" / "public")) for line in lines
    )
    assert not list(tmp_path.iterdir())  # nothing fetched, nothing written
