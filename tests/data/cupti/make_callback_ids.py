"""Regenerate callback_ids.json from cupti-python's own enums (run with cupti-python importable).

    PYTHONPATH=.venvs/cupti13 python3 tests/data/cupti/make_callback_ids.py

The table holds only the callbacks the tests use; tests/test_cupti_real.py checks it against every
cupti-python that .ci/run installs.
"""

import json
from pathlib import Path

from cupti import cupti

WANTED = {
    "DRIVER": [
        "cuCtxSynchronize",
        "cuLaunchKernel",
        "cuMemAlloc_v2",
        "cuMemFree_v2",
        "cuMemcpyDtoH_v2",
        "cuMemsetD32_v2",
        "cuMemsetD2D8_v2",
        "cuMemsetD2D8Async",
    ],
    "RUNTIME": ["cudaGetLastError_v3020", "cudaLaunchKernel_v7000", "cudaStreamSynchronize_v3020"],
}


def main() -> None:
    """Write the table next to this script."""
    enums = {
        "DRIVER": getattr(cupti, "DriverApiTraceCbid", None) or cupti.driver_api_trace_cbid,
        "RUNTIME": getattr(cupti, "RuntimeApiTraceCbid", None) or cupti.runtime_api_trace_cbid,
    }
    table = {kind: {name: int(enums[kind][name]) for name in names} for kind, names in WANTED.items()}
    import importlib.metadata as md

    table["_source"] = f"cupti-python {md.version('cupti-python')} (DriverApiTraceCbid, RuntimeApiTraceCbid)"
    out = Path(__file__).with_name("callback_ids.json")
    out.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
