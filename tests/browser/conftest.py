"""Browser-test fixtures: a real `tensorboard --logdir` on a free localhost port over the shared
traces plus generated ones, and headless Debian Chromium driven by Playwright (never
`playwright install`). Everything skips cleanly when chromium or playwright is absent (fails under CI=true, which installs them)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from profiler_core import settings

from ..conftest import missing, require_module  # noqa: F401 (re-exported to the browser tests)
from .browser_traces import (
    deep_modules_trace,
    graph_replay_only_trace,
    html_names_trace,
    many_steps_trace,
    no_steps_trace,
    skipped_events_trace,
    split_smem_trace,
    write,
)

ROOT = Path(__file__).resolve().parents[2]
TRACES = Path(os.environ.get("GPUSCOPE_SHARED", ROOT.parent / "shared")) / "traces"

CHROMIUM = os.environ.get("GPUSCOPE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
SCREENSHOTS = ROOT / "docs" / "screenshots"
HTML_RUN = "xss<img src=x onerror=alert(1)>"
HTML_WORKER = "html<b>worker&amp;"
BROKEN_RUN = "broken"
LINKED_RUN = "linked_job"
MANY_STEPS_RUN = "many_steps"
SPLIT_SMEM_RUN = "split_smem"
NO_STEPS_RUN = "no_steps"
SKIPPED_RUN = "skipped_events"
DEEP_RUN = "deep_modules"
GRAPH_RUN = "graph_replay_only"

# shared trace folder -> run name in the test logdir
SHARED_RUNS = {
    "torch_cpu_cnn/single": "cnn_single",
    "torch_cpu_cnn/ddp_gloo": "cnn_ddp",
    "kineto_resnet50_v100/num_workers_0": "resnet50",
}


def browser_available() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed (pip install playwright)"
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        return f"no chromium at {CHROMIUM} (apt-get install chromium)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def logdir(tmp_path_factory) -> Path:
    """Copies of the shared traces (one run each) plus the HTML-in-names run."""
    d = tmp_path_factory.mktemp("tb_logdir")
    if TRACES.is_dir():
        for src, run in SHARED_RUNS.items():
            if (TRACES / src).is_dir():
                shutil.copytree(TRACES / src, d / run)
    write(html_names_trace(), d / HTML_RUN / f"{HTML_WORKER}.1700000000000.pt.trace.json")
    # a run folder that is a symlink to a folder elsewhere, with a link cycle inside
    linked = d.parent / (d.name + "_elsewhere") / "job1"
    write(html_names_trace(), linked / "linkedworker.1700000000000.pt.trace.json")
    (linked / "loop").symlink_to(linked.parent, target_is_directory=True)
    (d / LINKED_RUN).symlink_to(linked, target_is_directory=True)
    write(many_steps_trace(), d / MANY_STEPS_RUN / "w.1700000000000.pt.trace.json")
    write(split_smem_trace(), d / SPLIT_SMEM_RUN / "w.1700000000000.pt.trace.json")
    write(no_steps_trace(), d / NO_STEPS_RUN / "w.1700000000000.pt.trace.json")
    write(skipped_events_trace(), d / SKIPPED_RUN / "w.1700000000000.pt.trace.json")
    write(deep_modules_trace(), d / DEEP_RUN / "w.1700000000000.pt.trace.json")
    write(graph_replay_only_trace(), d / GRAPH_RUN / "w.1700000000000.pt.trace.json")
    # an unreadable file: the page must list it and keep serving the rest
    (d / BROKEN_RUN).mkdir()
    (d / BROKEN_RUN / "bad.1700000000000.pt.trace.json").write_text(
        '{"traceEvents": [{"ph": "X", "na', encoding="utf-8"
    )
    return d


def get_json(url: str, timeout: float = 10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read().decode("utf-8"))


def wait_summaries(tb: TensorBoard, run: str, workers: int, guard_s: float = 300) -> None:
    """Until every worker of `run` has its summary (the run-level answers read only those); a hang guard."""
    end = time.time() + guard_s
    while time.time() < end:
        dist = get_json(f"{tb.api}/distributed?run={run}&span=1&partial=1", timeout=60)
        if not dist.get("pending") and len(dist.get("workers", {})) == workers:
            return
        time.sleep(0.5)


class TensorBoard:
    """A running `tensorboard --logdir` process; `prelude`: Python code the server process runs first."""

    def __init__(self, logdir: Path, prelude: str = ""):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api = f"{self.url}/data/plugin/gpuscope"
        self.log = open(logdir.parent / f"tensorboard_{self.port}.log", "w+")  # noqa: SIM115 - open for the server process's lifetime
        start = ["-c", f"{prelude}\nimport runpy\nrunpy.run_module('tensorboard.main', run_name='__main__')"]
        cmd = [
            sys.executable,
            *(start if prelude else ["-m", "tensorboard.main"]),
            "--logdir",
            str(logdir),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--load_fast=false",
        ]
        if settings.get("GPUSCOPE_DEV_BACKEND"):  # frontend development only: the plugin without TensorBoard
            cmd = [sys.executable, str(ROOT / "frontend" / "dev" / "dev_server.py"), str(logdir), str(self.port)]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, cwd=str(ROOT))

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-3000:]

    def wait_ready(self, timeout: float = 120) -> None:
        """Waits for the plugin to be listed and the runs to be loaded."""
        end = time.time() + timeout
        listed = False
        while time.time() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tensorboard exited ({self.proc.returncode}):\n{self.output()}")
            try:
                if not listed:
                    listed = "gpuscope" in get_json(f"{self.url}/data/plugins_listing")
                    if not listed:
                        raise RuntimeError("gpuscope is not in /data/plugins_listing")
                runs = get_json(f"{self.api}/runs")
                if runs.get("runs") and not runs.get("loading"):
                    return
            except (OSError, ValueError, RuntimeError):
                pass
            time.sleep(0.5)
        raise RuntimeError(f"tensorboard did not serve gpuscope runs within {timeout}s:\n{self.output()}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


@pytest.fixture(scope="session")
def tensorboard(logdir):
    if browser_available():
        missing(browser_available())
    if importlib.util.find_spec("tb_plugin.plugin") is None and not settings.get("GPUSCOPE_DEV_BACKEND"):
        missing("tb_plugin.plugin (the backend) is not there yet")
    tb = TensorBoard(logdir)
    try:
        tb.wait_ready()
        yield tb
    finally:
        tb.stop()


@pytest.fixture(scope="session")
def browser():
    why = browser_available()
    if why:
        missing(why)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


class Guard:
    """Records console errors, page errors and every request to a host other than the server."""

    def __init__(self, server: str):
        self.server = server
        self.errors: list[str] = []
        self.foreign: list[str] = []

    def attach(self, context, page) -> None:
        def route(r):
            if r.request.url.startswith(self.server + "/") or r.request.url.startswith(("data:", "blob:", "about:")):
                r.continue_()
            else:
                self.foreign.append(r.request.url)
                r.abort()

        context.route("**/*", route)
        page.on(
            "console",
            lambda m: self.errors.append(f"console.{m.type}: {m.text} @ {m.location}") if m.type == "error" else None,
        )
        page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))

    def check(self) -> None:
        assert not self.foreign, f"requests left the server: {self.foreign}"
        assert not self.errors, "console errors:\n" + "\n".join(self.errors)


@pytest.fixture
def guarded_page(browser, tensorboard):
    """A fresh page on the server; fails the test on console errors or foreign requests."""
    context = browser.new_context(viewport={"width": 1200, "height": 820}, color_scheme="light")
    page = context.new_page()
    guard = Guard(tensorboard.url)
    guard.attach(context, page)
    page.guard = guard
    yield page
    context.close()
    guard.check()


def open_view(page, tb: TensorBoard, view: str, run: str, extra: str = "", timeout: float = 60000):
    """Opens the plugin document TensorBoard puts in its iframe, on one view; waits until rendered."""
    from urllib.parse import quote

    frag = f"run={quote(run, safe='')}&view={view}" + (f"&{extra}" if extra else "")
    page.goto(f"{tb.url}/data/plugin_entry.html?name=gpuscope#{frag}")
    page.wait_for_selector(f"#view-{view}[data-ready='1'], #view-{view}[data-ready='error']", timeout=timeout)
    state = page.get_attribute(f"#view-{view}", "data-ready")
    assert state == "1", f"{view} failed: {page.inner_text(f'#view-{view}')}"
    return page


def screenshot(page, name: str, tmp_path: Path) -> Path:
    """Saves a screenshot; into docs/screenshots/ when GPUSCOPE_SCREENSHOTS=1 (commit-worthy)."""
    out = SCREENSHOTS if settings.get("GPUSCOPE_SCREENSHOTS") else tmp_path
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    page.screenshot(path=str(path))
    try:  # shrink to a 256-colour palette when Pillow is around (about 3x smaller)
        from PIL import Image

        Image.open(path).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
    except ImportError:
        pass
    assert path.stat().st_size > 5000
    return path
