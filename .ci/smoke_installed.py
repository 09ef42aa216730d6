"""Smoke test of an installed gpuscope wheel: run it with the Python of a venv holding only the wheel.

    VENV/bin/python .ci/smoke_installed.py samples/cpu_train.py [--native built|missing]

`--native` says what the install should hold: the C extensions built (the default: a wheel built where a C
compiler was found), or missing (the pure-Python install of a machine without one, where everything must work
and `gpuscope --version` must say what is missing). It refuses to run when gpuscope would be imported from a
source tree, then checks what a user gets: `gpuscope --version` (and its detail on the C extensions), the CPU
sample writing traces, TensorBoard's own WSGI app discovering the plugin and its routes answering on those
traces (views, the bundle, 400/404 errors), and `gpuscope summarize` on a local Dask cluster. Any failure ends
it with exit status 1 and a line saying what failed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any, NoReturn

RUN = "cpu_train"


def fail(message: str) -> NoReturn:
    """Ends the smoke test with `message`."""
    print(f"smoke: FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def check(condition: object, message: str) -> None:
    """Fails with `message` unless `condition` holds."""
    if not condition:
        fail(message)


def run(cmd: list[str], cwd: Path, timeout: float = 300) -> str:
    """Runs `cmd`; its stdout, or a failure with its output's tail."""
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        fail(f"{' '.join(cmd)} exited {p.returncode}:\n{(p.stdout + p.stderr)[-3000:]}")
    return p.stdout


def site_of(mod: Any) -> Path | None:
    """This venv's site-packages when `mod` was imported from there, else None."""
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    return site if site in Path(mod.__file__ or "").resolve().parents else None


def check_installed() -> str:
    """The packages come from this venv's site-packages, not from a source tree; returns the version."""
    import importlib.metadata

    import profiler_core
    import tb_plugin

    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    for mod in (profiler_core, tb_plugin):
        where = Path(mod.__file__ or "").resolve()
        check(site in where.parents, f"{mod.__name__} imported from {where}, not from {site}")
    for pkg in ("profiler_core", "tb_plugin"):
        check((site / pkg / "py.typed").is_file(), f"{pkg}/py.typed is not installed")
    check((site / "tb_plugin" / "static" / "index.js").is_file(), "the frontend bundle is not installed")
    dist = importlib.metadata.distribution("gpuscope")
    check(any(str(f).endswith("licenses/LICENSE") for f in dist.files or []), "LICENSE is not in the wheel")
    check(dist.metadata["License-Expression"] == "BSD-3-Clause", "no BSD-3-Clause license in the metadata")
    version = dist.version
    check(profiler_core.__version__ == version, f"__version__ {profiler_core.__version__!r} != {version!r}")
    return version


def get(client: Any, url: str, status: int = 200) -> Any:
    """GET `url` through the WSGI test client; the JSON body, or a failure on another status."""
    r = client.get(url)
    check(r.status_code == status, f"GET {url}: status {r.status_code}, wanted {status}: {r.get_data(True)[:500]}")
    if r.mimetype == "application/json":
        return json.loads(r.get_data())
    return r.get_data()


def check_plugin(logdir: Path, native: str) -> None:
    """TensorBoard's application (as `tensorboard --logdir` builds it) serves gpuscope on `logdir`; the plugin's
    start says, once in the log, which C extension is not built (and nothing when both are)."""
    import logging

    from tensorboard import program
    from tensorboard.backend import application
    from werkzeug.test import Client

    tb = program.TensorBoard()
    tb.configure(argv=["tensorboard", "--logdir", str(logdir), "--load_fast", "false"])
    provider, multiplexer = tb._make_data_provider()  # what TensorBoard's own _make_server does
    said: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("tb_plugin.plugin").addHandler(handler)
    app = application.TensorBoardWSGIApp(tb.flags, tb.plugin_loaders, provider, tb.assets_zip_provider, multiplexer)
    logging.getLogger("tb_plugin.plugin").removeHandler(handler)
    missing = [m for m in said if "is not built" in m]
    if native == "built":
        check(not missing, f"the plugin's start says a C extension is missing: {missing}")
    else:
        check(len(missing) == 1 and "native trace reader" in missing[0], f"the plugin's start said {said}")
    c = Client(app)
    listing = get(c, "/data/plugins_listing")
    check("gpuscope" in listing, f"the gpuscope plugin is not discovered: {sorted(listing)}")
    check(listing["gpuscope"]["enabled"], "the gpuscope plugin is not enabled on a logdir with traces")
    base = "/data/plugin/gpuscope"
    deadline = time.monotonic() + 60
    while RUN not in (runs := get(c, f"{base}/runs"))["runs"]:
        check(time.monotonic() < deadline, f"run {RUN!r} never listed: {runs}")
        time.sleep(0.5)
    workers = get(c, f"{base}/workers?run={RUN}")["workers"]
    check(len(workers) == 1, f"one worker expected: {workers}")
    spans = get(c, f"{base}/spans?run={RUN}&worker={workers[0]}")["spans"]
    check(spans == ["1", "2"], f"two spans expected (schedule repeat=2): {spans}")
    q = f"run={RUN}&worker={workers[0]}&span=1"
    overview = get(c, f"{base}/overview?{q}")
    check(len(overview["steps"]) == 3, f"three profiled steps expected: {overview['steps']}")
    ops = get(c, f"{base}/operators?{q}&group_by=name")["rows"]
    check("mlp::linear" in {r["name"] for r in ops}, f"mlp::linear missing from operators: {ops[:5]}")
    for route in ("kernels?group_by=name&", "memory/curve?", "modules?", "timeline?"):
        path, _, extra = route.partition("?")
        get(c, f"{base}/{path}?{extra}{q}")
    bundle = get(c, f"{base}/index.js")
    check(len(bundle) > 10_000, f"the frontend bundle is {len(bundle)} bytes")
    bad = get(c, f"{base}/operators?{q}&group_by=nonsense", status=400)
    check("error" in bad, f"a bad parameter gives no error message: {bad}")
    get(c, f"{base}/overview?run=no-such-run&worker={workers[0]}&span=1", status=404)


def check_native(detail: list[str], native: str) -> None:
    """`gpuscope --version`'s detail lines say the C extensions are built, or name each one missing."""
    import profiler_core.analysis.stages.op_tree as op_tree
    import profiler_core.trace.read.native as reader

    built = reader.available() and op_tree._tree is not None
    if native == "built":
        check(built, f"the C extensions are not built in this install: {detail}")
        check(detail == ["native trace reader: built", "op tree's C pass: built"], f"--version's detail: {detail}")
    else:
        check(not reader.available() and op_tree._tree is None, "the C extensions are built, wanted missing")
        said = "\n".join(detail)
        for what in ("native trace reader: not built", "op tree's C pass: not built", "C compiler"):
            check(what in said, f"gpuscope --version does not say {what!r}: {detail}")


def main(argv: list[str]) -> int:
    """Runs every check with the sample at argv[0]; 0 when all pass."""
    native = "built"
    if len(argv) == 3 and argv[1] == "--native" and argv[2] in ("built", "missing"):
        argv, native = argv[:1], argv[2]
    if len(argv) != 1 or not Path(argv[0]).is_file():
        print(__doc__, file=sys.stderr)
        return 2
    sample = Path(argv[0]).resolve()
    with tempfile.TemporaryDirectory(prefix="gpuscope-smoke-") as tmp:
        work = Path(tmp)
        os.chdir(work)
        os.environ["GPUSCOPE_CACHE_DIR"] = str(work / "cache")
        version = check_installed()
        bin_dir = Path(sys.executable).parent
        out, *detail = run([str(bin_dir / "gpuscope"), "--version"], work).strip().splitlines()
        check(out == f"gpuscope {version}", f"gpuscope --version printed {out!r}, wanted 'gpuscope {version}'")
        check_native(detail, native)
        print(f"smoke: {out} (Python {sys.version.split()[0]}) from {Path(sysconfig.get_paths()['purelib'])}")
        print(f"smoke: C extensions {native}: {detail[0]}")

        shutil.copy(sample, work / "cpu_train.py")  # run from here: nothing of the source tree on sys.path
        logdir = work / "log"
        run([sys.executable, "cpu_train.py", "--logdir", str(logdir / RUN), "--steps", "12"], work)
        traces = sorted((logdir / RUN).glob("*.pt.trace.json"))
        check(len(traces) == 2, f"the CPU sample wrote {[t.name for t in traces]}, wanted two traces")
        print(f"smoke: the CPU sample wrote {len(traces)} traces")

        check_plugin(logdir, native)
        print("smoke: TensorBoard's app serves the gpuscope routes on them")

        run([str(bin_dir / "gpuscope"), "summarize", str(logdir), "--local", "1"], work, timeout=300)
        summaries = list((logdir / ".gpuscope" / "summaries").rglob("*"))
        check(sum(p.is_file() for p in summaries) == 2, f"gpuscope summarize wrote {summaries}")
        print("smoke: gpuscope summarize --local 1 (Dask) summarized both traces")

        import gpuscope  # the Python API, from the installed wheel

        check(site_of(gpuscope) is not None, f"gpuscope imported from {gpuscope.__file__}, not from the venv")
        with gpuscope.open(logdir / RUN) as prof:
            steps = prof.steps()
            check(len(steps) == 3, f"gpuscope.open(...).steps(): three steps expected: {steps}")
        print("smoke: import gpuscope answers the steps")
        import s3fs  # noqa: F401  (the [s3] extra)
    print("smoke: the installed wheel works")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
