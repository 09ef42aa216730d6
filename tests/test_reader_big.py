"""read_trace at scale: a 2M-event trace is read in one go with bounded memory (timing: benchmarks/)."""

import resource
import time

import numpy as np
import pytest

from profiler_core import settings
from profiler_core.trace.read.lookup import trace_event_args
from profiler_core.trace.read.reader import read_trace

N_BLOCK = 1000
REPEAT = settings.get("GPUSCOPE_BIG_TRACE_EVENTS") // N_BLOCK


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """A 2M-event trace read once: (trace, peak RSS growth in MB or None where it cannot be measured)."""
    block = b",\n".join(
        b'{"ph": "X", "cat": "cpu_op", "name": "aten::op%d", "pid": 7, "tid": %d, '
        b'"ts": %d.%03d, "dur": 1.250, "args": {"External id": %d, "Input Dims": [[%d, 3]]}}'
        % (i % 37, 7 + i % 2, 1000 + i, i % 1000, i, i % 5)
        for i in range(N_BLOCK)
    )
    path = tmp_path_factory.mktemp("big") / "big.1796207156519141535.pt.trace.json"
    with open(path, "wb") as f:
        f.write(b'{"schemaVersion": 1, "baseTimeNanoseconds": 1790857026000000000, "traceEvents": [')
        for r in range(REPEAT):
            f.write(block)
            f.write(b",\n" if r + 1 < REPEAT else b"\n")
        f.write(b'], "traceName": "big"}')
    measured = _reset_peak_rss()  # this process's earlier peak (other tests) must not hide ours
    before = _peak_rss_kb()
    t0 = time.perf_counter()
    t = read_trace(path)
    print(f"\n{REPEAT * N_BLOCK} events read in {time.perf_counter() - t0:.1f} s")
    grown_mb = (_peak_rss_kb() - before) / 1024 if measured else None
    return t, grown_mb


def test_two_million_events(big):
    t, _ = big
    ev = t.events
    n = REPEAT * N_BLOCK
    assert len(ev) == n and not t.warnings
    assert t.metadata == {"schemaVersion": 1, "baseTimeNanoseconds": 1790857026000000000, "traceName": "big"}
    assert ev["ts"].is_monotonic_increasing
    assert set(ev["dur"].unique()) == {1250}
    counts = ev["name"].value_counts()
    assert len(counts) == 37 and counts.sum() == n
    assert set(ev["tid"].unique()) == {7, 8}
    by_idx = ev.sort_values("idx")
    assert np.array_equal(by_idx["external_id"].to_numpy(), np.tile(np.arange(N_BLOCK), REPEAT))
    assert set(ev["input_dims"].cat.categories) == {f"[[{k},3]]" for k in range(5)}
    assert len(t.event_index) > 1  # read piece by piece
    assert trace_event_args(t, n - 1) == {"External id": N_BLOCK - 1, "Input Dims": [[4, 3]]}


def test_two_million_events_peak_memory(big):
    """Far below a dict per event (2M dicts alone would take > 1 GB)."""
    _, grown_mb = big
    if grown_mb is None:
        pytest.skip("the peak RSS cannot be reset here (no /proc/self/clear_refs): not measured")
    print(f"peak RSS grew by {grown_mb:.0f} MB")
    assert grown_mb < 1500


def _reset_peak_rss() -> bool:
    """Reset this process's peak RSS to its current RSS (Linux >= 4.0); False where impossible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_rss_kb() -> int:
    """This process's peak RSS since the last reset (VmHWM), else since it started."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def test_benchmark_generator_writes_a_readable_training_trace(tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from gen_trace import generate

    path = tmp_path / "w.1796207156519141535.pt.trace.json.gz"
    n = generate(str(path), 20_000, seed=1, layers=24)
    t = read_trace(path)
    assert not t.warnings
    total = len(t.events) + len(t.memory) + len(t.flows) + len(t.names) + 1  # + window end
    assert total == n >= 20_000
    names = t.events["name"].astype(str)
    steps = names[names.str.startswith("ProfilerStep#")]
    assert len(steps) >= 2
    assert (t.events.loc[steps.index, "cat"] == "user_annotation").all()
    ops = t.events[t.events["cat"] == "cpu_op"]
    assert (ops["input_dims"] != "").mean() > 0.3
    assert (ops["external_id"] > 0).all() and ops["external_id"].is_unique
    assert set(t.flows["ph"]) == {"s", "f"} and len(t.memory) > 0
    assert (t.memory["bytes"] > 0).sum() >= (t.memory["bytes"] < 0).sum() > 0
