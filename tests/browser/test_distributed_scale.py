"""The distributed view at scale in headless Chromium against a real TensorBoard: generated NCCL jobs
of 2, 16 and 256 ranks whose summaries come from `gpuscope summarize --local 2` (a Dask
LocalCluster of two processes); the 256-rank job is read from a moto-served S3 bucket. Step and
worker selectors, the step x worker heatmap and its colour scale, drill-down into a worker's step,
stragglers, collectives with bandwidth, labels that never overlap, and the single-worker empty state."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..conftest import built_once
from .conftest import (
    HTML_RUN,
    Guard,
    TensorBoard,
    browser_available,
    get_json,
    missing,
    open_view,
    require_module,
    screenshot,
)

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))
from gen_distributed import generate  # noqa: E402

OLD = time.time() - 3600
STEPS = 3

# x-axis labels of every chart of the view: no two may overlap
NO_OVERLAP_JS = """(sel) => {
  const boxes = Array.from(document.querySelectorAll(sel)).map((t) => t.getBoundingClientRect());
  let bad = 0;
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const a = boxes[i], b = boxes[j];
    if (a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5) bad++;
  }
  return [boxes.length, bad];
}"""


def _summarize(logdir: str, env: dict | None = None) -> str:
    """`gpuscope summarize LOGDIR --local 2`: the summaries come from a LocalCluster."""
    env = dict(env or os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    r = subprocess.run(
        [sys.executable, "-m", "tb_plugin.summaries.cli", "summarize", logdir, "--local", "2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=str(ROOT),
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return r.stdout


@pytest.fixture
def page_factory(browser):
    """Makes guarded pages on a given TensorBoard (console errors or foreign requests fail the test)."""
    made = []

    def make(tb: TensorBoard):
        context = browser.new_context(viewport={"width": 1200, "height": 820}, color_scheme="light")
        page = context.new_page()
        guard = Guard(tb.url)
        guard.attach(context, page)
        made.append((context, guard))
        return page

    yield make
    for context, guard in made:
        context.close()
        guard.check()


@pytest.fixture(scope="module")
def local_tb(tmp_path_factory):
    if browser_available():
        missing(browser_available())
    require_module("distributed", "Dask is an extra: pip install 'gpuscope[dask]'")
    d = tmp_path_factory.mktemp("dist_logdir")
    for ranks in (2, 16):
        for p in generate(str(d / f"job{ranks}"), ranks, events=600, steps=STEPS):
            os.utime(p, (OLD, OLD))
    out = _summarize(str(d))
    assert "18 summarized" in out
    tb = TensorBoard(d)
    try:
        tb.wait_ready()
        yield tb
    finally:
        tb.stop()


def _labels_never_overlap(page) -> None:
    for chart in ("#dist-bars", "#dist-wait", "#dist-heatmap"):
        n, bad = page.evaluate(NO_OVERLAP_JS, f"{chart} text.xlabel")
        assert n >= 1 and bad == 0, (chart, n, bad)
        n, bad = page.evaluate(NO_OVERLAP_JS, f"{chart} text.axis")
        assert bad == 0, (chart, n, bad)


def test_two_workers_step_selector_worker_filter_and_drill_down(page_factory, local_tb):
    page = open_view(page_factory(local_tb), local_tb, "distributed", "job2")
    assert page.locator("#dist-heatmap rect.cell").count() == 2 * STEPS
    assert page.locator("#dist-bars g.bar-group").count() == 2
    assert page.locator(".heat-scale .heat-bar").count() == 1
    assert page.inner_text(".heat-scale .heat-hi") != page.inner_text(".heat-scale .heat-lo")
    _labels_never_overlap(page)
    # bandwidth per worker and collective
    assert page.locator("#comm-table tbody tr").count() == 2
    assert "GB/s" in page.inner_text("#comm-table tbody tr >> nth=0")
    # the all-reduce's bus bandwidth beside its algorithm bandwidth, and whether it is latency-bound
    head = page.inner_text("#comm-table thead")
    assert "Bus bandwidth" in head and "Latency-bound" in head
    assert page.inner_text("#comm-table tbody tr >> nth=0").count("GB/s") == 2
    # worker filter: one worker's collectives
    page.select_option("#dist-worker", "node0_rank00001")
    page.wait_for_function("() => document.querySelectorAll('#comm-table tbody tr').length === 1")
    assert "node0_rank00001" in page.inner_text("#comm-table tbody")
    assert "dworker=node0_rank00001" in page.evaluate("location.hash")
    # step selector: the bars show that step
    page.select_option("#dist-step", "2")
    page.wait_for_function("() => document.querySelector('#dist-bars figcaption').textContent.includes('step 2')")
    assert "step=2" in page.evaluate("location.hash")
    # drill-down: a heatmap cell opens that worker's step with its collectives
    page.click("#dist-heatmap rect.cell[data-row='2'][data-col='node0_rank00000']")
    page.wait_for_selector("#dist-drill #dist-drill-table tbody tr")
    assert "node0_rank00000 · step 2" in page.inner_text("#dist-drill h3")
    assert page.locator("#dist-drill-table tbody tr").count() == 12
    assert page.locator("#dist-heatmap rect.cell.selected").count() == 1
    # ... and from there to the timeline of that worker, on that step
    page.click("#dist-open-timeline")
    page.wait_for_selector("#view-timeline")
    h = page.evaluate("location.hash")
    assert "view=timeline" in h and "worker=node0_rank00000" in h and "win=" in h
    assert page.input_value("#gs-worker") == "node0_rank00000"


def test_sixteen_workers_labels_never_overlap_and_stragglers(page_factory, local_tb):
    page = open_view(page_factory(local_tb), local_tb, "distributed", "job16")
    assert page.locator("#dist-heatmap rect.cell").count() == 16 * STEPS
    _labels_never_overlap(page)
    # the straggler (rank 16 // 3 = 5) is ranked first; its row's "step detail" opens its step
    first = page.locator("#dist-stragglers tbody tr >> nth=0")
    coll = page.inner_text("#comm-table tbody tr >> nth=0 >> td >> nth=1")  # the all-reduce's name
    assert "node0_rank00005" in first.inner_text() and f"{coll} #" in first.inner_text()
    first.locator("button", has_text="step detail").click()
    page.wait_for_selector("#dist-drill #dist-drill-table tbody tr")
    assert "node0_rank00005" in page.inner_text("#dist-drill h3")
    for metric in ("computation", "communication"):
        page.click(f"#view-distributed .seg button[data-value={metric}]")
        page.wait_for_function(
            "(m) => document.querySelector(`#view-distributed .seg button[data-value=${m}]`)"
            ".getAttribute('aria-pressed') === 'true'",
            arg=metric,
        )
        assert page.locator("#dist-heatmap rect.cell").count() == 16 * STEPS


def test_single_worker_shows_the_empty_state(guarded_page, tensorboard):
    page = open_view(guarded_page, tensorboard, "distributed", HTML_RUN)
    assert page.is_visible("#no-distributed")
    assert "single worker" in page.inner_text("#no-distributed")
    assert page.locator("#view-distributed svg.chart").count() == 0


# ------------------------------------------------------------------- 256 ranks in an S3 bucket
@contextlib.contextmanager
def _s3_server():
    """A moto S3 server with the bucket `jobs`, this process's AWS variables pointing at it meanwhile."""
    from .. import s3_server

    server = s3_server.start()
    saved = {k: os.environ.get(k) for k in list(server.env) + ["AWS_PROFILE", "AWS_SESSION_TOKEN"]}
    try:
        for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
            os.environ.pop(k, None)
        os.environ.update(server.env)
        server.make_bucket("jobs")
        yield server
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _build_job256(d: Path) -> None:
    """Into `d`: the 256-rank job's traces (job256/) and the summaries that `gpuscope summarize
    s3://jobs/logs --local 2` writes for them into the bucket (.gpuscope/), copied back from it."""
    generate(str(d / "job256"), 256, events=300, steps=STEPS)
    with _s3_server() as server:
        fs = server.fs()
        fs.put(str(d) + "/", "jobs/logs/", recursive=True)
        assert len(fs.find("jobs/logs/job256")) == 256
        out = _summarize("s3://jobs/logs")
        assert "256 summarized" in out
        for key in fs.find("jobs/logs/.gpuscope"):
            local = d / key.removeprefix("jobs/logs/")
            local.parent.mkdir(parents=True, exist_ok=True)
            fs.get_file(key, str(local))


@pytest.fixture(scope="session")
def job256(tmp_path_factory) -> Path:
    """The 256-rank job and its summaries, built (through S3 and a LocalCluster) once per test session and
    shared by the xdist workers; in a fresh bucket the summaries still match their traces (same size and
    ETag), so each use only uploads the folder."""
    require_module("distributed", "Dask is an extra: pip install 'gpuscope[dask]'")
    return built_once(tmp_path_factory, "job256", _build_job256)


@pytest.fixture(scope="module")
def s3_tb(request):
    if browser_available():
        missing(browser_available())
    local = request.getfixturevalue("job256")
    with _s3_server() as server:
        fs = server.fs()
        fs.put(str(local) + "/", "jobs/logs/", recursive=True)
        assert len(fs.find("jobs/logs/job256")) == 256
        assert len(fs.find("jobs/logs/.gpuscope")) >= 256
        tb = TensorBoard_s3("s3://jobs/logs", local)
        try:
            tb.wait_ready(timeout=180)
            yield tb
        finally:
            tb.stop()


class TensorBoard_s3(TensorBoard):
    """`tensorboard --logdir s3://...` (its log beside the local copy)."""

    def __init__(self, url: str, logdir_local: Path):
        super().__init__(logdir_local)
        self.proc.terminate()
        self.proc.wait(10)
        self.log.seek(0)
        self.log.truncate()
        cmd = [
            sys.executable,
            "-m",
            "tensorboard.main",
            "--logdir",
            url,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--load_fast=false",
        ]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, cwd=str(ROOT))


@pytest.mark.slow
def test_256_ranks_in_s3_open_from_summaries(page_factory, s3_tb, tmp_path):
    page = open_view(page_factory(s3_tb), s3_tb, "distributed", "job256", timeout=120000)
    assert page.locator("#dist-heatmap rect.cell").count() == 256 * STEPS
    assert page.locator("#dist-bars g.bar-group").count() == 256
    _labels_never_overlap(page)
    # readable: at least a label every 32 workers, at most one per 3 % of the width
    n = page.locator("#dist-heatmap text.xlabel").count()
    assert 8 <= n <= 34, n
    # workers in rank order, not in the text order of their names ("node10_..." < "node2_...")
    texts = page.eval_on_selector_all("#dist-heatmap text.xlabel", "ts => ts.map(t => t.textContent)")
    ranks = [int(t[1:]) for t in texts]
    assert ranks[0] == 0 and ranks == sorted(ranks), ranks
    first = page.locator("#dist-stragglers tbody tr >> nth=0")
    assert "node10_rank00085" in first.inner_text()  # rank 256 // 3
    page.click("#dist-heatmap rect.cell[data-row='1'][data-col='node31_rank00255']")
    page.wait_for_selector("#dist-drill #dist-drill-table tbody tr")
    assert "node31_rank00255 · step 1" in page.inner_text("#dist-drill h3")
    screenshot(page, "distributed_256", tmp_path)
    # the view came from the summaries: TensorBoard parsed no trace of this 256-worker run
    runs = get_json(f"{s3_tb.api}/runs")
    assert runs["progress"]["files_total"] == 0, runs["progress"]


def test_heatmap_draws_a_window_of_steps_when_there_are_too_many_cells(page_factory, local_tb):
    """300 steps x 64 workers: the heatmap draws at most 16384 cells, around the chosen step."""
    import json

    parts = {
        "computation_us": 10.0,
        "overlap_us": 1.0,
        "communication_us": 2.0,
        "other_us": 0.5,
        "transfer_us": 1.5,
        "wait_us": 1.5,
    }
    workers = [f"w{i:03d}" for i in range(64)]
    body = {
        "workers": dict.fromkeys(workers, parts),
        "steps": {
            str(s): {w: {**parts, "wait_us": float(s % 7 + i % 5)} for i, w in enumerate(workers)}
            for s in range(1, 301)
        },
        "comm_ops": {w: [] for w in workers},
        "devices": {},
        "stragglers": [],
        "notes": [],
    }
    page = page_factory(local_tb)
    page.route(
        "**/data/plugin/gpuscope/distributed?*",
        lambda r: r.fulfill(status=200, content_type="application/json", body=json.dumps(body)),
    )
    open_view(page, local_tb, "distributed", "job2")
    assert page.locator("#dist-heatmap rect.cell").count() == 256 * 64
    assert "steps 1–256 of 300" in page.inner_text(".heat-caption")
    page.select_option("#dist-step", "290")
    page.wait_for_function("() => document.querySelector('.heat-caption')?.textContent.includes('steps 45–300')")
    assert page.locator("#dist-heatmap rect.cell[data-row='290']").count() == 64
    assert page.locator("#dist-heatmap rect.cell").count() == 256 * 64
    n, bad = page.evaluate(NO_OVERLAP_JS, "#dist-heatmap text.ylabel")
    assert n >= 8 and bad == 0, (n, bad)
