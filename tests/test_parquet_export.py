"""`gpuscope export LOGDIR OUT/` and `Profile.to_parquet` (tb_plugin/api.py): each worker's events, kernels,
operators, steps, ledger and collectives as Parquet files of one documented schema per table, which DuckDB and pandas
read as one table per folder and whose numbers are the API's (the routes')."""

from __future__ import annotations

import sys

import fsspec
import pandas as pd
import pytest

import gpuscope
from profiler_core.trace.model import EVENT_COLUMNS
from tb_plugin import api
from tb_plugin.summaries import cli

from . import api_support
from .conftest import TRACES, missing, require_module

pq = require_module("pyarrow.parquet", 'the Parquet export needs pyarrow (pip install "gpuscope[parquet]")')
KEYS = ["run", "worker", "span"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Two runs of a 2-rank GPU job (`base`, and `slow`: rank 1's SLOW_KERNEL planted), exported by the CLI."""
    root = tmp_path_factory.mktemp("export")
    api_support.job(root / "logs" / "base", planted=False)
    api_support.job(root / "logs" / "slow", planted=True)
    assert cli.main(["export", str(root / "logs"), str(root / "out"), "--format", "parquet"]) == 0
    return root


def test_every_table_has_its_documented_schema(exported):
    for table, cols in api.EXPORT_SCHEMA.items():
        files = sorted((exported / "out" / table).glob("*.parquet"))
        assert len(files) == 4, table  # 2 runs x 2 workers, span 1
        for f in files:
            assert pq.read_schema(f).names == KEYS + list(cols), (table, f.name)
    for f in (exported / "out" / "events").glob("*.parquet"):
        assert set(pq.read_schema(f).names) == set(KEYS) | set(EVENT_COLUMNS)


def test_pandas_reads_what_the_api_answers(exported):
    steps = pd.read_parquet(exported / "out" / "steps")
    workers = pd.read_parquet(exported / "out" / "workers")
    events = pd.read_parquet(exported / "out" / "events")
    with gpuscope.open(exported / "logs") as prof:
        for run in prof.runs:
            for w in prof.workers(run):
                mine = steps[(steps["run"] == run) & (steps["worker"] == w)].drop(columns=KEYS)
                want = prof.steps(run=run, worker=w)
                pd.testing.assert_frame_equal(
                    mine.reset_index(drop=True), want.astype(mine.dtypes.to_dict()), check_dtype=False
                )
                n = workers[(workers["run"] == run) & (workers["worker"] == w)]["events"].item()
                assert n == ((events["run"] == run) & (events["worker"] == w)).sum() > 0


def test_a_duckdb_query_over_the_job(exported):
    duckdb = require_module("duckdb", 'the SQL example needs duckdb (pip install "gpuscope[sql]")')
    out = exported / "out"
    got = duckdb.sql(
        f"SELECT run, worker, sum(total_us) AS us FROM '{out}/kernels/*.parquet' "
        f"WHERE name = '{api_support.SLOW_KERNEL}' GROUP BY ALL ORDER BY run, worker"
    ).df()
    from_events = duckdb.sql(
        f"SELECT run, worker, sum(dur) / 1000.0 AS us FROM '{out}/events/*.parquet' "
        f"WHERE cat = 'kernel' AND name = '{api_support.SLOW_KERNEL}' GROUP BY ALL ORDER BY run, worker"
    ).df()
    with gpuscope.open(exported / "logs") as prof:
        for _, row in got.iterrows():
            k = prof.kernels(run=row["run"], worker=row["worker"]).set_index("name")
            assert row["us"] == pytest.approx(k.loc[api_support.SLOW_KERNEL, "total_us"])
    assert list(from_events["us"]) == pytest.approx(list(got["us"]), rel=1e-6)
    # the planted rank: its kernel is the slow one of the slow run, and no other run or rank is
    slow = got.set_index(["run", "worker"])["us"]
    planted = slow.idxmax()
    assert planted[0] == "slow" and planted[1].endswith(f"{api_support.PLANT_RANK:05d}")
    calls = duckdb.sql(
        f"SELECT count(*) AS n, sum(bytes) AS b FROM '{out}/collectives/*.parquet' WHERE run = 'slow' AND wait = 0"
    ).df()
    assert calls["n"].item() > 0 and calls["b"].item() > 0


def test_a_cpu_trace_exports_the_same_schema(tmp_path):
    single = TRACES / "torch_cpu_cnn" / "single"
    if not single.is_dir():
        missing(f"the shared traces are not at {TRACES} (set GPUSCOPE_SHARED to the folder holding traces/)")
    with gpuscope.open(single) as prof:
        written = prof.to_parquet(tmp_path / "out")
    assert written == dict.fromkeys(["events", *api.EXPORT_SCHEMA], 1)
    assert pq.read_schema(next((tmp_path / "out" / "kernels").glob("*.parquet"))).names == KEYS + list(
        api.EXPORT_SCHEMA["kernels"]
    )
    assert len(pd.read_parquet(tmp_path / "out" / "kernels")) == 0
    assert len(pd.read_parquet(tmp_path / "out" / "operators")) > 0


def test_an_fsspec_url_as_the_output(exported):
    with gpuscope.open(exported / "logs" / "slow") as prof:
        prof.to_parquet("memory://api_export_out")
    mem = fsspec.filesystem("memory")
    try:
        names = mem.ls("/api_export_out/kernels", detail=False)
        assert len(names) == 2
        with mem.open(names[0], "rb") as fh:
            assert pq.read_table(fh).column_names == KEYS + list(api.EXPORT_SCHEMA["kernels"])
    finally:
        mem.rm("/api_export_out", recursive=True)


def test_without_pyarrow_it_says_what_to_install(exported, monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with gpuscope.open(exported / "logs" / "base") as prof, pytest.raises(gpuscope.AnalysisError, match="pyarrow"):
        prof.to_parquet(tmp_path / "out")
    assert cli.main(["export", str(exported / "logs" / "base"), str(tmp_path / "out")]) == 2
    assert "gpuscope[parquet]" in capsys.readouterr().err
