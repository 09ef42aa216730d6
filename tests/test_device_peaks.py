"""The device peaks table: what each shared real trace's GPU matches, unknown devices, and the roof a dtype takes."""

from __future__ import annotations

import gzip
import json

import pytest

from profiler_core.analysis import device_peaks
from profiler_core.analysis.device_peaks import PEAKS_COLUMNS, ROWS, peaks_for, roof

from .conftest import TRACES, missing

#: shared trace -> the product its first device must match (read from the file's deviceProperties with json)
EXPECTED = {
    "kineto_resnet50_v100/num_workers_0/worker0.1623143089861.pt.trace.json.gz": "V100 SXM2",
    "public/ds_train_h800/train.json": "H800 SXM",
    "public/tl_b200_eager/eager_trace.json.gz": "B200",
    "public/hta_diff_control/control.json.gz": "A100 40GB SXM",
    "public/hta_neg_queue/rank0.json.gz": "A100 80GB SXM",
    "public/hta_diff_test/test.json.gz": "V100 SXM2",
    "public/tl_mi300_resnet_ckpt/resnet_act_checkpoint.json.gz": "MI300X",
    "public/tl_vllm_graph_capture/graph_capture_rank_0.1773709742341309550.pt.trace.json.gz": "MI300X",
    "public/hta_amd_mi250/mi250_minitoy_train_ROCm6_2_kineto.json.gz": "MI250 (one GCD)",
    "public/moe_a100_2rank_alltoall/ip-172-31-15-66_28356.1764457406622309595.pt.trace.json": "A100 40GB SXM",
}


@pytest.mark.parametrize("relpath, product", sorted(EXPECTED.items()))
def test_shared_traces_devices_match_their_products(relpath, product):
    path = TRACES / relpath
    if not path.exists():
        missing(f"shared trace {path} is absent")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        props = json.load(f)["deviceProperties"]
    assert {peaks_for(p).product for p in props} == {product}


def test_every_row_cites_its_source_and_has_consistent_peaks():
    for _pattern, _sms, _mem, p in ROWS:
        assert p.source and p.known and p.bandwidth_gbps and p.fp32
        for column in PEAKS_COLUMNS:
            value = getattr(p, column)
            assert value is None or value > 0
        for tc in ("tf32_tc", "fp16_tc", "bf16_tc", "fp8_tc", "int8_tc"):  # tensor peaks above the FP32 one
            assert getattr(p, tc) is None or getattr(p, tc) >= p.fp32, (p.product, tc)


def test_sm_count_and_memory_tell_variants_apart():
    assert peaks_for({"name": "NVIDIA H100 PCIe", "numSms": 114}).product == "H100 PCIe"
    assert peaks_for({"name": "NVIDIA H100 80GB HBM3", "numSms": 132}).product == "H100 SXM"
    assert peaks_for({"name": "NVIDIA H100 NVL", "numSms": 132}).product == "H100 NVL"
    assert peaks_for({"name": "NVIDIA A100 80GB PCIe", "totalGlobalMem": 85 * 10**9}).product == "A100 80GB PCIe"
    assert peaks_for({"name": "NVIDIA GH200 480GB", "totalGlobalMem": 102 * 2**30}).product == "GH200 96GB HBM3"
    assert peaks_for({"name": "NVIDIA GB200"}).product == "GB200"
    assert peaks_for({"name": "NVIDIA B200"}).product == "B200"
    assert peaks_for({"name": "NVIDIA A10G"}).product == "A10G"
    assert peaks_for({"name": "NVIDIA A10"}).product == "A10"
    assert peaks_for({"name": "NVIDIA L4"}).product == "L4"
    assert peaks_for({"name": "NVIDIA L40S"}).product == "L40S"
    assert peaks_for({"name": "Tesla T4"}).product == "T4"
    assert peaks_for({"name": "NVIDIA GeForce RTX 4090"}).product == "GeForce RTX 4090"
    mi = {"name": "", "computeMajor": 9, "computeMinor": 4, "numSms": 304}
    assert peaks_for({**mi, "totalGlobalMem": 256 * 10**9}).product == "MI325X"
    assert peaks_for({"name": "AMD Instinct MI250X", "numSms": 110}).product == "MI250X (one GCD)"


def test_unknown_device_says_so_and_takes_the_settings(monkeypatch):
    props = {"name": "Mystery Accelerator 9000", "numSms": 7}
    monkeypatch.delenv("GPUSCOPE_PEAK_TFLOPS", raising=False)
    monkeypatch.delenv("GPUSCOPE_PEAK_GBPS", raising=False)
    assert peaks_for(props) is None
    assert "unknown device" in device_peaks.describe(props)
    monkeypatch.setenv("GPUSCOPE_PEAK_TFLOPS", "123.5")
    monkeypatch.setenv("GPUSCOPE_PEAK_GBPS", "2000")
    p = peaks_for(props)
    assert (p.known, p.bf16_tc, p.fp32, p.bandwidth_gbps) == (False, 123.5, 123.5, 2000.0)
    assert "peaks from the settings" in device_peaks.describe(props)


def test_roof_follows_dtype_and_tensor_core_use():
    a100 = peaks_for({"name": "NVIDIA A100-SXM4-40GB"})
    assert roof(a100, "fp32", False) == (19.5e12, "fp32")
    assert roof(a100, "fp32", True) == (156e12, "tf32_tc")
    assert roof(a100, "bf16", True) == (312e12, "bf16_tc")
    assert roof(a100, "fp64", True) == (19.5e12, "fp64_tc")
    assert roof(a100, "fp64", False) == (9.7e12, "fp64")
    v100 = peaks_for({"name": "Tesla V100-SXM2-16GB"})
    assert roof(v100, "bf16", False) == (15.7e12, "fp32")  # no BF16 unit: FP32 math
    mi300 = peaks_for({"name": "AMD Instinct MI300X"})
    assert roof(mi300, "fp32", True) == (653.7e12, "tf32_tc")


@pytest.mark.parametrize("raw", ["abc", "-3", "0", "nan", "inf"])
def test_a_peak_setting_that_is_not_a_positive_number_is_ignored(monkeypatch, raw):
    from profiler_core import settings

    monkeypatch.setenv("GPUSCOPE_PEAK_TFLOPS", raw)
    monkeypatch.delenv("GPUSCOPE_PEAK_GBPS", raising=False)
    assert settings.get("GPUSCOPE_PEAK_TFLOPS") is None  # the default (a warning was logged)
    assert peaks_for({"name": "Mystery"}) is None
