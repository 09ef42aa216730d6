"""Device peaks: the dense (no 2:4 sparsity) peak FLOP/s per dtype and the memory bandwidth of the GPUs users
profile, matched from a trace's `deviceProperties` (name, SM/CU count, compute capability, memory size).

One table, `PEAKS`, one row per product, each citing the vendor document its numbers come from (`source`). Peaks
are in TFLOP/s (TOP/s for INT8), bandwidth in GB/s; None where the product has no such unit or the document gives
none. `*_tc` columns are Tensor Core (NVIDIA) / Matrix Core (AMD MFMA) peaks; `fp32` and `fp64` the CUDA-core /
vector peaks. AMD's MI250/MI250X appear as one device per graphics compute die (GCD) in a trace, so their rows
hold half of the OAM module's numbers. A device the table does not know is `unknown` with its name: its roofs
come from the settings `GPUSCOPE_PEAK_TFLOPS` (every dtype) and `GPUSCOPE_PEAK_GBPS` where given, else it has
none (`peaks_for` answers None, and the roofline says why).

`roof(peaks, dtype, tensor_cores)` picks the compute roof of one op: its dtype's Tensor Core peak when its kernels
ran on Tensor Cores (an FP32 op then runs as TF32, where the device has TF32), else the CUDA-core peak of FP32 /
FP64; 16-bit and 8-bit work off the Tensor Cores is held to its dtype's Tensor Core peak (the only bound the data
sheets give; such an op is far below it, which is the finding).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from .. import settings

GIB = 1 << 30


@dataclass(frozen=True)
class Peaks:
    """One product's peaks (TFLOP/s; INT8 in TOP/s) and memory bandwidth (GB/s); None: no such unit / not given."""

    product: str
    fp64: float | None
    fp64_tc: float | None
    fp32: float | None
    fp32_tc: float | None  # AMD's FP32 matrix (MFMA) peak; NVIDIA runs FP32 GEMMs on Tensor Cores as TF32
    tf32_tc: float | None
    fp16_tc: float | None
    bf16_tc: float | None
    fp8_tc: float | None
    int8_tc: float | None
    bandwidth_gbps: float | None
    source: str
    known: bool = True


#: the peak columns of `Peaks`, in order
PEAKS_COLUMNS = ("fp64", "fp64_tc", "fp32", "fp32_tc", "tf32_tc", "fp16_tc", "bf16_tc", "fp8_tc", "int8_tc")


def _p(product, fp64, fp64_tc, fp32, fp32_tc, tf32, fp16, bf16, fp8, int8, bw, source) -> Peaks:  # noqa: ANN001
    return Peaks(product, fp64, fp64_tc, fp32, fp32_tc, tf32, fp16, bf16, fp8, int8, bw, source)


_V100 = "NVIDIA Tesla V100 GPU data sheet (images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf)"  # noqa: E501
_T4 = "NVIDIA T4 Tensor Core GPU data sheet (nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf)"  # noqa: E501
_A10 = "NVIDIA A10 Tensor Core GPU data sheet (nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/a10-datasheet.pdf)"  # noqa: E501
_A10G = "no NVIDIA data sheet: AWS G5 / Baseten 'NVIDIA A10 vs A10G for ML model inference' (baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference)"  # noqa: E501
_A100 = "NVIDIA A100 Tensor Core GPU data sheet (nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf)"  # noqa: E501
_L4 = "NVIDIA L4 Tensor Core GPU data sheet (nvidia.com/en-us/data-center/l4/)"
_L40S = "NVIDIA L40S GPU data sheet (nvidia.com/en-us/data-center/l40s/)"
_H100 = "NVIDIA H100 Tensor Core GPU data sheet (nvidia.com/en-us/data-center/h100/)"
_H800 = "NVIDIA H800 Tensor Core GPU data sheet (nvidia.cn/data-center/h800/)"
_H200 = "NVIDIA H200 Tensor Core GPU data sheet (nvidia.com/en-us/data-center/h200/)"
_GH200 = "NVIDIA GH200 Grace Hopper Superchip data sheet (nvidia.com/en-us/data-center/grace-hopper-superchip/)"
_B200 = "NVIDIA Blackwell / HGX B200 data sheet, per GPU at 1,000 W (nvidia.com/en-us/data-center/hgx/)"
_GB200 = "NVIDIA GB200 NVL72 data sheet, per GPU (nvidia.com/en-us/data-center/gb200-nvl72/)"
_GA102 = "NVIDIA Ampere GA102 GPU Architecture whitepaper, GeForce RTX 3090 (FP32 accumulate)"
_AD102 = "NVIDIA Ada GPU Architecture whitepaper, GeForce RTX 4090 (FP32 accumulate)"
_MI250X = "AMD Instinct MI250X data sheet (amd.com/en/products/accelerators/instinct/mi200/mi250x.html), per GCD"
_MI250 = "AMD Instinct MI250 data sheet (amd.com/en/products/accelerators/instinct/mi200/mi250.html), per GCD"
_MI300X = "AMD Instinct MI300X data sheet (amd.com/en/products/accelerators/instinct/mi300/mi300x.html)"
_MI325X = "AMD Instinct MI325X data sheet (amd.com/en/products/accelerators/instinct/mi300/mi325x.html)"

#: product rows: (name pattern on the lower-cased name, SM/CU counts or None, memory GiB range or None, peaks);
#: the first row that matches wins. Columns of `_p`: fp64, fp64_tc, fp32, fp32_tc, tf32, fp16, bf16, fp8, int8, GB/s
ROWS: tuple[tuple[str, frozenset | None, tuple[float, float] | None, Peaks], ...] = (
    (r"v100s", None, None, _p("V100S PCIe", 8.2, None, 16.4, None, None, 130, None, None, None, 1134, _V100)),
    (r"v100.*pcie", None, None, _p("V100 PCIe", 7, None, 14, None, None, 112, None, None, None, 900, _V100)),
    (r"v100", None, None, _p("V100 SXM2", 7.8, None, 15.7, None, None, 125, None, None, None, 900, _V100)),
    (r"\bt4\b", None, None, _p("T4", None, None, 8.1, None, None, 65, None, None, 130, 320, _T4)),
    (r"a10g", None, None, _p("A10G", None, None, 35, None, 35, 70, 70, None, 140, 600, _A10G)),
    (r"\ba10\b", None, None, _p("A10", None, None, 31.2, None, 62.5, 125, 125, None, 250, 600, _A10)),
    (r"a100.*pcie", None, (60, 100), _p("A100 80GB PCIe", 9.7, 19.5, 19.5, None, 156, 312, 312, None, 624, 1935, _A100)),  # noqa: E501
    (r"a100.*pcie", None, None, _p("A100 40GB PCIe", 9.7, 19.5, 19.5, None, 156, 312, 312, None, 624, 1555, _A100)),
    (r"a100", None, (60, 100), _p("A100 80GB SXM", 9.7, 19.5, 19.5, None, 156, 312, 312, None, 624, 2039, _A100)),
    (r"a100", None, None, _p("A100 40GB SXM", 9.7, 19.5, 19.5, None, 156, 312, 312, None, 624, 1555, _A100)),
    (r"\bl40s\b", None, None, _p("L40S", None, None, 91.6, None, 183, 362.05, 362.05, 733, 733, 864, _L40S)),
    (r"\bl4\b", None, None, _p("L4", None, None, 30.3, None, 60, 121, 121, 242.5, 242.5, 300, _L4)),
    (r"h100.*nvl", None, None, _p("H100 NVL", 30, 60, 60, None, 417.5, 835.5, 835.5, 1670.5, 1670.5, 3900, _H100)),
    (r"h100.*pcie", None, None, _p("H100 PCIe", 26, 51, 51, None, 378, 756, 756, 1513, 1513, 2000, _H100)),
    (r"h100", frozenset({114}), None, _p("H100 PCIe", 26, 51, 51, None, 378, 756, 756, 1513, 1513, 2000, _H100)),
    (r"h100", None, None, _p("H100 SXM", 34, 67, 67, None, 494.7, 989.4, 989.4, 1978.9, 1978.9, 3350, _H100)),
    (r"h800.*pcie", None, None, _p("H800 PCIe", 0.8, 0.8, 51, None, 378, 756, 756, 1513, 1513, 2000, _H800)),
    (r"h800", frozenset({114}), None, _p("H800 PCIe", 0.8, 0.8, 51, None, 378, 756, 756, 1513, 1513, 2000, _H800)),
    (r"h800", None, None, _p("H800 SXM", 1, 1, 67, None, 494.7, 989.4, 989.4, 1978.9, 1978.9, 3350, _H800)),
    (r"\bh200.*nvl", None, None, _p("H200 NVL", 30, 60, 60, None, 417.5, 835.5, 835.5, 1670.5, 1670.5, 4800, _H200)),
    (r"\bh200", None, None, _p("H200 SXM", 34, 67, 67, None, 494.7, 989.4, 989.4, 1978.9, 1978.9, 4800, _H200)),
    (r"gh200", None, (120, 200), _p("GH200 144GB HBM3e", 34, 67, 67, None, 494, 990, 990, 1979, 1979, 4900, _GH200)),
    (r"gh200", None, None, _p("GH200 96GB HBM3", 34, 67, 67, None, 494, 990, 990, 1979, 1979, 4000, _GH200)),
    (r"gb200", None, None, _p("GB200", 45, 45, 90, None, 1250, 2500, 2500, 5000, 5000, 8000, _GB200)),
    (r"\bb200", None, None, _p("B200", 40, 40, 80, None, 1100, 2250, 2250, 4500, 4500, 8000, _B200)),
    (r"rtx 3090", None, None, _p("GeForce RTX 3090", None, None, 35.6, None, 35.6, 71, 71, None, 284, 936, _GA102)),
    (r"rtx 4090", None, None, _p("GeForce RTX 4090", None, None, 82.6, None, 82.6, 165.2, 165.2, 330.3, 660.6, 1008, _AD102)),  # noqa: E501
    (r"mi250x", None, None, _p("MI250X (one GCD)", 23.95, 47.85, 23.95, 47.85, None, 191.5, 191.5, None, 191.5, 1638.4, _MI250X)),  # noqa: E501
    (r"mi250", None, None, _p("MI250 (one GCD)", 22.65, 45.25, 22.65, 45.25, None, 181.05, 181.05, None, 181.05, 1638.4, _MI250)),  # noqa: E501
    (r"mi325x", None, None, _p("MI325X", 81.7, 163.4, 163.4, 163.4, 653.7, 1307.4, 1307.4, 2614.9, 2614.9, 6000, _MI325X)),  # noqa: E501
    (r"mi300x", None, None, _p("MI300X", 81.7, 163.4, 163.4, 163.4, 653.7, 1307.4, 1307.4, 2614.9, 2614.9, 5300, _MI300X)),  # noqa: E501
)  # fmt: skip

#: AMD devices ROCm names generically ("AMD Radeon Graphics", or no name): (gfx major, minor, CUs, GiB range) ->
#: the product whose row they take; the CU count and memory size tell the products of one architecture apart
_BY_ARCH: tuple[tuple[int, int, int, tuple[float, float], str], ...] = (
    (9, 0, 110, (0, 80), "mi250x"),  # gfx90a, 110 CUs per GCD, 64 GiB per GCD
    (9, 0, 104, (0, 80), "mi250"),
    (9, 4, 304, (230, 300), "mi325x"),  # gfx942, 256 GB
    (9, 4, 304, (0, 230), "mi300x"),  # 192 GB
)


def _memory_gib(props: dict) -> float:
    mem = props.get("totalGlobalMem")
    return mem / GIB if isinstance(mem, (int, float)) and mem > 0 else math.nan


def _row_for(name: str, sms: Any, gib: float) -> Peaks | None:
    for pattern, sm_set, mem, peaks in ROWS:
        if not re.search(pattern, name):
            continue
        if sm_set is not None and sms not in sm_set:
            continue
        if mem is not None and not (mem[0] <= gib < mem[1]):
            continue
        return peaks
    return None


def peaks_for(props: dict) -> Peaks | None:
    """The peaks of the device `props` (one `deviceProperties` entry) describes: its table row; for a device the
    table does not know, the settings' roofs (`known` False) where set, else None."""
    name = str(props.get("name") or "").lower()
    sms = props.get("numSms")
    gib = _memory_gib(props)
    found = _row_for(name, sms, gib) if name else None
    if found is None and (not name or "radeon" in name or name.startswith("amd")):
        for major, minor, cus, mem, key in _BY_ARCH:
            if (props.get("computeMajor"), props.get("computeMinor"), sms) == (major, minor, cus) and (
                mem[0] <= gib < mem[1]
            ):
                found = _row_for(key, sms, gib)
                break
    if found is not None:
        return found
    return from_settings(str(props.get("name") or "") or "unnamed device")


def from_settings(name: str) -> Peaks | None:
    """Peaks of an unknown device from `GPUSCOPE_PEAK_TFLOPS` / `GPUSCOPE_PEAK_GBPS` (None when neither is set)."""
    tflops = settings.get("GPUSCOPE_PEAK_TFLOPS")
    gbps = settings.get("GPUSCOPE_PEAK_GBPS")
    if tflops is None and gbps is None:
        return None
    return Peaks(
        name, tflops, tflops, tflops, tflops, tflops, tflops, tflops, tflops, tflops, gbps,
        "GPUSCOPE_PEAK_TFLOPS / GPUSCOPE_PEAK_GBPS", known=False,
    )  # fmt: skip


def describe(props: dict) -> str:
    """A line naming what the table matched for `props`, or saying that the device is unknown."""
    p = peaks_for(props)
    name = str(props.get("name") or "") or f"unnamed device ({props.get('numSms')} SMs)"
    if p is None:
        return f"{name}: unknown device, no peaks (set GPUSCOPE_PEAK_TFLOPS / --peak-tflops and GPUSCOPE_PEAK_GBPS)"
    if not p.known:
        return f"{name}: unknown device, peaks from the settings"
    return f"{name}: {p.product} ({p.source})"


#: dtype -> the Tensor Core column that holds its peak
_TC_COLUMN = {"fp64": "fp64_tc", "fp16": "fp16_tc", "bf16": "bf16_tc", "fp8": "fp8_tc", "int8": "int8_tc", "uint8": "int8_tc"}  # noqa: E501 # fmt: skip


def roof(peaks: Peaks, dtype: str, tensor_cores: bool) -> tuple[float | None, str]:
    """The compute roof (FLOP/s) of work in `dtype` whose kernels did (not) use Tensor Cores, and its name."""
    if dtype == "fp32" or dtype not in _TC_COLUMN:
        if tensor_cores:
            for column in ("tf32_tc", "fp32_tc"):
                value = getattr(peaks, column)
                if value is not None:
                    return value * 1e12, column
        return (peaks.fp32 * 1e12 if peaks.fp32 is not None else None), "fp32"
    column = _TC_COLUMN[dtype]
    if dtype == "fp64" and not tensor_cores:
        column = "fp64"
    value = getattr(peaks, column)
    if value is None and dtype == "fp64":
        value, column = peaks.fp64, "fp64"
    if value is None:  # no unit for this dtype on the device (BF16 on a V100): it runs as FP32 math
        return (peaks.fp32 * 1e12 if peaks.fp32 is not None else None), "fp32"
    return value * 1e12, column
