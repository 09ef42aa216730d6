"""Issue 26, item 14: no process gpuscope starts imports modules from the working directory."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# "launcher": what Python 3.10 gets (no PYTHONSAFEPATH), forced on 3.11+ too
MECHANISMS = [
    "default",
    pytest.param(
        "launcher", marks=pytest.mark.skipif(os.name != "posix", reason="the launcher is a POSIX shell script")
    ),
]
FORCE_LAUNCHER = """
from profiler_core import child_env
child_env._HAS_SAFEPATH, child_env._USE_LAUNCHER = False, True
"""

PLANTED = """
import os, sys
with open(os.environ["MARKER"], "a") as f:
    f.write(f"{os.getpid()} {__name__}\\n")
# then step aside so that the process still works: the real module, from the standard library
here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if p not in ("", here)]
del sys.modules[__name__]
import importlib
sys.modules[__name__] = importlib.import_module(__name__)
"""


def _trace(path: Path) -> Path:
    ev = [
        {"ph": "X", "name": f"op{i % 7}", "cat": "cpu_op", "ts": i * 10, "dur": 5, "pid": 1, "tid": 1}
        for i in range(3000)
    ]
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    return path


def _run_in_planted_cwd(tmp_path: Path, script: str, mechanism: str = "default", timeout: float = 300) -> list[str]:
    """`script` run from a file in another folder (as a console script such as `tensorboard` runs:
    the cwd is not on its own sys.path) in a working directory holding a planted
    multiprocessing.py; the lines the planted module wrote."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "multiprocessing.py").write_text(PLANTED)
    marker = tmp_path / "ran.txt"
    env = dict(os.environ, PYTHONPATH=str(ROOT), MARKER=str(marker), GPUSCOPE_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("PYTHONSAFEPATH", None)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if mechanism == "launcher":  # and the children did start through it
        script = FORCE_LAUNCHER + textwrap.dedent(script) + "assert child_env._launchers\n"
    body = textwrap.indent(textwrap.dedent(script), "    ")
    # a spawned child imports the main script again (as __mp_main__): the work only in the parent
    (bin_dir / "run.py").write_text(f"def main():\n{body}\n\nif __name__ == '__main__':\n    main()\n")
    out = subprocess.run(
        [sys.executable, str(bin_dir / "run.py")], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "OK" in out.stdout, out.stdout + out.stderr[-3000:]
    return marker.read_text().splitlines() if marker.exists() else []


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_loader_worker_processes_and_parser_processes(tmp_path, mechanism):
    trace = _trace(tmp_path / "w.pt.trace.json")
    ran = _run_in_planted_cwd(
        tmp_path,
        f"""
        import os
        from multiprocessing import spawn
        exe = spawn.get_executable()
        from profiler_core.trace.read import stream
        from profiler_core.trace.read.reader import read_trace
        from tb_plugin.loader import Loader
        from tb_plugin.runs import Scanner
        stream.PARALLEL_MIN_BYTES = 0          # the parallel reader's parser processes too
        t = read_trace({str(trace)!r}, processes=2)
        assert len(t.events) == 3000
        f = [f for r in Scanner({str(tmp_path)!r}, stable_age_s=0).scan().values() for f in r.files()][0]
        loader = Loader(processes=1)
        assert len(loader.get(f).events) == 3000
        loader.close()
        assert "PYTHONSAFEPATH" not in os.environ   # put back once the processes are started
        assert spawn.get_executable() == exe
        print("OK")
    """,
        mechanism,
    )
    assert ran == []


@pytest.mark.slow
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_dask_local_workers(tmp_path, mechanism):
    pytest.importorskip("distributed")
    logdir = tmp_path / "logs" / "run"
    logdir.mkdir(parents=True)
    _trace(logdir / "w0.pt.trace.json")
    os.utime(logdir / "w0.pt.trace.json", (1, 1))
    ran = _run_in_planted_cwd(
        tmp_path,
        f"""
        from tb_plugin.summaries.cli import summarize_logdir
        res = summarize_logdir({str(tmp_path / "logs")!r}, local=1, log=lambda m: None)
        assert res["done"] == 1 and not res["failed"], res
        print("OK")
    """,
        mechanism,
    )
    assert ran == []


@pytest.mark.skipif(os.name != "posix", reason="the launcher is a POSIX shell script")
def test_launcher_starts_python_outside_the_working_directory(tmp_path):
    from profiler_core import child_env

    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "multiprocessing.py").write_text("raise SystemExit('planted module ran')")
    probe = ["-c", "import os, multiprocessing; print(os.path.dirname(multiprocessing.__file__))"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONSAFEPATH", "PYTHONPATH")}
    planted = subprocess.run([sys.executable, *probe], cwd=cwd, env=env, capture_output=True, text=True)
    assert "planted module ran" in planted.stderr  # what multiprocessing's children meet unguarded
    exe = child_env.launcher(sys.executable)
    assert child_env.launcher(sys.executable) == exe
    out = subprocess.run([exe, *probe], cwd=cwd, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()).parent != cwd
    folder = Path(exe).parent
    assert os.listdir(folder) == ["python"] and (folder.stat().st_mode & 0o077) == 0
