"""Summary format 4: the per-worker ledger and GPU idle projection are stored and validated, and a summary of
an earlier format (2, or 3 without them) is recomputed, never read as if it had them."""

from __future__ import annotations

import os

import msgspec
import pytest

from profiler_core.analysis.worker.buckets import BUCKETS, COMPUTE
from profiler_core.trace.read.reader import read_trace
from tb_plugin.runs import Scanner
from tb_plugin.summaries import store
from tb_plugin.summaries import summary as S
from tb_plugin.summaries.engine import Summaries

from .test_diagnosis_ledger import every_bucket_trace
from .test_summaries import _job


def test_summary_holds_ledger_and_gpu_idle():
    s = S.decode(S.encode(S.summarize(every_bucket_trace())))
    assert S.VERSION >= 5 and s.version == S.VERSION  # the ledger came with format 5
    assert s.ledger is not None and s.gpu_idle is not None and s.gpu_idle.devices is not None
    # the hand-derived ledger of test_diagnosis_ledger: 30 µs compute of the 100 µs step
    assert s.ledger.wall_ns == [100_000] and s.ledger.buckets[COMPUTE].ns == [30_000]
    assert sorted(s.ledger.buckets) == sorted(BUCKETS)
    # gpu_idle: device 0's idle by cause per step (idle gaps [55, 80) host wait 25 µs, [85, 90) kernel wait 5 µs)
    dev = s.gpu_idle.devices["0"]
    assert dev["host_wait"] == [25_000] and dev["kernel_wait"] == [5_000] and dev["other"] == [0]


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda s: s.pop("ledger"), "ledger is not an object"),
        (lambda s: s["ledger"]["buckets"].pop(COMPUTE), "ledger.buckets are not"),
        (lambda s: s["ledger"]["buckets"][COMPUTE].update(ns=[1, 2]), "ledger.buckets.compute"),
        (lambda s: s["ledger"]["buckets"][COMPUTE].update(recoverable_ns=None), "ns without recoverable"),
        (lambda s: s["ledger"].update(wall_ns=["x"]), "ledger.wall_ns"),
        (lambda s: s.pop("gpu_idle"), "gpu_idle is not an object"),
        (lambda s: s["gpu_idle"]["devices"]["0"].update(other=[1, 2]), "gpu_idle.devices.other"),
        (lambda s: s["gpu_idle"].update(queue_max={"0:7": "many"}), "gpu_idle.queue_max"),
    ],
)
def test_damaged_ledger_is_refused(damage, message):
    s = msgspec.to_builtins(S.summarize(every_bucket_trace()))
    damage(s)
    with pytest.raises(S.SummaryError, match=message):
        S.decode(S.encode(s))


@pytest.mark.parametrize("old_version", [2, 3, 4, 8])
def test_earlier_format_summary_is_recomputed(tmp_path, monkeypatch, old_version):
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    logdir = tmp_path / "logs"
    run = _job(logdir, ranks=1, events=2000, steps=2)
    f = [f for r in Scanner(str(logdir)).scan().values() for f in r.files()][0]
    trace = next(run.glob("*.pt.trace.json*"))
    # a summary as formats 2 and 3 wrote it (no ledger, gpu_idle, collective calls, phases) or format 4 (no
    # collective calls, phases) or format 8 (no call readiness), their version, of this very file
    old = msgspec.to_builtins(S.summarize(read_trace(str(trace), processes=0), S.fs.stat(str(trace))))
    later = (
        ("collective_calls", "phases") + (("ledger", "gpu_idle") if old_version < 4 else ()) if old_version < 8 else ()
    )
    old = {k: v for k, v in old.items() if k not in later} | {"version": old_version}
    if old_version == 8:
        old["collective_calls"] = {k: v for k, v in old["collective_calls"].items() if k not in ("lead", "tail")}
    where = store.out_path(store.default_out(str(logdir)), f.relpath)
    store.write(where, old)
    assert os.path.exists(where) and store.read(where, S.fs.stat(str(trace))) is None
    sums = Summaries(str(logdir))
    assert sums.find(f) is None  # not read as the current format
    s = sums.get(f)
    assert sums.computed == 1 and s.version == S.VERSION and s.ledger is not None and s.gpu_idle is not None
    assert s.collective_calls is not None and s.phases is not None
    assert sum(s.ledger.wall_ns) > 0
