"""key_averages() on the shared torch 2.13 CPU traces agrees with torch-tb-profiler 0.4.3's operator view."""

import gzip
import json

import pytest

from profiler_core.analysis import DeviceType, events_from_trace

from .conftest import missing

CASES = [("single", "vm_7929"), ("ddp_gloo", "worker0"), ("ddp_gloo", "worker1")]


@pytest.mark.parametrize("run, worker", CASES)
def test_cpu_operator_table_matches_reference(shared_traces, run, worker):
    ref_path = shared_traces / "reference" / "torch_cpu_cnn.torch-tb-profiler-0.4.3.json"
    files = sorted((shared_traces / "torch_cpu_cnn" / run).glob(f"{worker}.*"))
    if not ref_path.exists() or len(files) != 1:
        missing("torch_cpu_cnn trace or reference absent")
    rows = json.loads(ref_path.read_text())[run]["workers"][worker]["1"]["operation_table_Operation"]["data"]
    with gzip.open(files[0], "rt") as f:
        events = events_from_trace(json.load(f))
    ours = {a.key: a for a in events.key_averages() if a.device_type == DeviceType.CPU}
    assert len(rows) > 50
    for row in rows:
        a = ours[row["name"]]
        assert a.count == row["calls"], row["name"]
        # torch-tb-profiler rounds per event; allow 1 us on the sums
        assert a.self_cpu_time_total == pytest.approx(row["host_self_duration"], abs=1.0), row["name"]
        assert a.cpu_time_total == pytest.approx(row["host_total_duration"], abs=1.0), row["name"]
    if run == "ddp_gloo":
        # the gloo collective runs on its own thread and appears as its own op row
        assert any(k.startswith(("gloo:", "c10d::")) for k in ours)
