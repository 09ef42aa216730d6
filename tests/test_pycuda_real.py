"""The PyCUDA hooks on the real PyCUDA (../shared/wheels, installed by .ci/run into .venvs/pycuda), imported
without a GPU through a stub libcuda.so.1 built here from ../shared/tools/gpu_oracles/libcuda_symbols.txt.

Under the stub nothing may be launched (every cu* call fails), so these tests check what is real: the
Boost.Python classes and module functions are patched where the hooks mean to, every copy and memset
PyCUDA offers is hooked, and uninstalling restores every attribute by identity. Behaviour that needs a
device stays with the fake (test_pycuda_hooks.py) and samples/gpu_check.py.
"""

import pytest

from .conftest import missing
from .gpu_oracles import PYCUDA_TARGET, build_libcuda_stub, run_with

SCRIPT = r"""
import json, types
import pycuda.driver as drv, pycuda.gpuarray, pycuda.elementwise, pycuda.reduction, pycuda.tools
from profiler_core.integrations import pycuda_hooks as hooks
from profiler_core import recording

MODS = {m: __import__(m, fromlist=["x"]) for m in
        ("pycuda.driver", "pycuda.gpuarray", "pycuda.elementwise", "pycuda.reduction", "pycuda.tools")}

def snapshot():
    snap = {}
    for mname, mod in MODS.items():
        for k, v in list(vars(mod).items()):
            snap[(mname, k)] = id(v)
            if isinstance(v, type) and v.__module__.startswith("pycuda"):
                for ck, cv in list(vars(v).items()):
                    snap[(mname, k, ck)] = id(cv)
                    if getattr(cv, "__defaults__", None) is not None:
                        snap[(mname, k, ck, "d")] = tuple(id(x) for x in cv.__defaults__)
            elif isinstance(v, types.FunctionType) and v.__defaults__ is not None:
                snap[(mname, k, "d")] = tuple(id(x) for x in v.__defaults__)
    return snap

before = snapshot()
orig_launch = drv.Function._launch_kernel
hooks.install()
patched = sorted({(g, getattr(o, "__name__", type(o).__name__), a) for g, ps in hooks._saved.items()
                  for o, a, _, _ in ps})
n = sum(len(v) for v in hooks._saved.values())
during = snapshot()
changed = sorted(str(k) for k in before if during.get(k) != before[k])
launch_kind = type(vars(drv.Function)["_launch_kernel"]).__name__
copies_and_sets = sorted(k for k in vars(drv) if k.startswith(("memcpy_", "memset_")) and callable(getattr(drv, k)))
hooked_names = sorted(a for g, o, a in patched if o == "pycuda.driver")
default_swaps = sum(1 for _, _, a in patched if a.endswith("defaults__"))
hooks.uninstall()
after = snapshot()
restored = [str(k) for k in before if after.get(k) != before[k]] + [str(k) for k in after if k not in before]
print(json.dumps({"patches": n, "changed": len(changed), "restored_diff": restored,
                  "launch_patched": launch_kind, "launch_back": drv.Function._launch_kernel is orig_launch,
                  "copies_and_sets": copies_and_sets, "hooked": hooked_names, "default_swaps": default_swaps,
                  "installed_after": hooks.is_installed(), "version": __import__("pycuda").VERSION_TEXT}))
"""


@pytest.fixture(scope="module")
def real_pycuda(tmp_path_factory):
    """The result of installing and uninstalling the hooks on the real PyCUDA, under the stub libcuda."""
    if not (PYCUDA_TARGET / "pycuda" / "driver.py").is_file():
        missing(f"the real PyCUDA is not installed at {PYCUDA_TARGET} (.ci/run installs it from ../shared/wheels)")
    stub = build_libcuda_stub(tmp_path_factory.mktemp("libcuda-stub"))
    if stub is None:
        missing("no C compiler or no ../shared/tools/gpu_oracles/libcuda_symbols.txt for the libcuda stub")
    return run_with(PYCUDA_TARGET, SCRIPT, env={"LD_PRELOAD": str(stub)})


def test_hooks_patch_the_real_classes_and_restore_every_attribute(real_pycuda):
    r = real_pycuda
    assert r["patches"] >= 80, r  # launches, copies, memsets, allocs, gpuarray, kernels, pools
    assert r["changed"] >= r["patches"] - r["default_swaps"]  # each patch is visible on the real object
    assert r["launch_patched"] == "function"  # Function._launch_kernel is our wrapper while installed
    assert r["restored_diff"] == [] and r["launch_back"] and not r["installed_after"]


def test_every_copy_and_memset_of_pycuda_is_hooked(real_pycuda):
    assert real_pycuda["copies_and_sets"], real_pycuda
    assert set(real_pycuda["copies_and_sets"]) <= set(real_pycuda["hooked"]), sorted(
        set(real_pycuda["copies_and_sets"]) - set(real_pycuda["hooked"])
    )
