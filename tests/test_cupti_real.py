"""cupti_backend.py, records.py and the test fake against the real cupti-python, 12.x and 13.x.

cupti-python imports without a driver (every call then fails), so its names can be checked: each `cupti`
attribute the backend uses, each activity kind it enables, the record properties it copies, CUPTI's enum
values it hard-codes, the callback ids the tests use, and that the fake offers nothing the real module
lacks. .ci/run installs both majors with `pip install --target` into .venvs/cupti12 and .venvs/cupti13
(they cannot share one environment); a major that is not installed is skipped.
"""

import ast
import json

import pytest

from profiler_core.cuda import records

from .conftest import DATA, ROOT, missing
from .gpu_oracles import CUPTI_TARGETS, run_with
from .test_cuda_cupti_backend import ActivityKind as FakeActivityKind
from .test_cuda_cupti_backend import FakeCupti

BACKEND = ROOT / "profiler_core" / "cuda" / "cupti_backend.py"
FAKE_HELPERS = {"launch", "thread_id"}  # the fake device's own controls, not part of cupti's API


def used_attribute_chains() -> set[tuple[str, ...]]:
    """Every attribute chain the backend reads off the cupti module (`c.X.Y`, `self.cupti.X`, ...)."""
    tree = ast.parse(BACKEND.read_text())
    roots = {"c", "cupti"}
    chains = set()

    def chain(node):
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in roots:
            return tuple(reversed(parts))
        if isinstance(node, ast.Name) and node.id == "self" and parts and parts[-1] == "cupti":
            return tuple(reversed(parts[:-1]))
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and not isinstance(getattr(node, "_parent", None), ast.Attribute):
            c = chain(node)
            if c:
                chains.add(c)
    # keep only the longest chains (c.A.B implies c.A)
    return {c for c in chains if not any(o != c and o[: len(c)] == c for o in chains)}


PROBE = r"""
import json, sys, importlib.metadata as md, ctypes, glob, os
from cupti import cupti
req = json.loads(sys.argv[1]) if len(sys.argv) > 1 else json.load(sys.stdin)
def has(chain):
    obj = cupti
    for a in chain:
        if not hasattr(obj, a):
            return False
        obj = getattr(obj, a)
    return True
enum = lambda *names: next(getattr(cupti, n) for n in names if hasattr(cupti, n))
drv, rt = enum("DriverApiTraceCbid", "driver_api_trace_cbid"), enum("RuntimeApiTraceCbid", "runtime_api_trace_cbid")
classes = [getattr(cupti, n) for n in dir(cupti) if n.startswith("Activity") and isinstance(getattr(cupti, n), type)]
fields_ok = {k: any(all(hasattr(cls, f) for f in fs) for cls in classes) for k, fs in req["fields"].items()}
nvidia_root = os.path.dirname(os.path.dirname(cupti.__file__))
lib = sorted(glob.glob(os.path.join(nvidia_root, "nvidia", "**", "libcupti.so.*"), recursive=True))
if lib:
    ctypes.CDLL(lib[0])          # what cupti-python loads when it starts; loaded here without a driver
from profiler_core.cuda import cupti_backend
print(json.dumps({
    "version": md.version("cupti-python"),
    "missing_chains": [c for c in req["chains"] if not has(c)],
    "missing_kinds": [k for k in req["kinds"] if not hasattr(cupti.ActivityKind, k)],
    "kind_values": {k: int(getattr(cupti.ActivityKind, k)) for k in req["kinds"] if hasattr(cupti.ActivityKind, k)},
    "fields_ok": fields_ok,
    "external": {m.name: int(m) for m in cupti.ExternalCorrelationKind},
    "driver": {n: int(drv[n]) for n in req["driver"] if n in drv.__members__},
    "runtime": {n: int(rt[n]) for n in req["runtime"] if n in rt.__members__},
    "callback_domain": {"DRIVER_API": int(cupti.CallbackDomain.DRIVER_API),
                        "RUNTIME_API": int(cupti.CallbackDomain.RUNTIME_API)},
    "thread_id_system": int(cupti.ActivityThreadIdType.SYSTEM),
    "libcupti": bool(lib),
    "versions": cupti_backend.CuptiBackend(cupti).versions(),
}))
"""


@pytest.fixture(scope="module", params=sorted(CUPTI_TARGETS))
def real(request):
    """What the installed cupti-python of one major says about the names gpuscope relies on."""
    target = CUPTI_TARGETS[request.param]
    if not (target / "cupti").is_dir():
        missing(f"cupti-python {request.param}.x is not installed at {target} (.ci/run installs it)")
    table = json.loads((DATA / "cupti" / "callback_ids.json").read_text())
    fake_api = [(n,) for n in vars(FakeCupti) if not n.startswith("_") and n not in FAKE_HELPERS]
    fake_api += [("ActivityKind", k.name) for k in FakeActivityKind]
    fake_api += [
        ("CallbackDomain", "DRIVER_API"),
        ("CallbackDomain", "RUNTIME_API"),
        ("ActivityThreadIdType", "SYSTEM"),
    ]
    req = {
        "chains": sorted(used_attribute_chains() | set(fake_api)),
        "kinds": list(records.ALL_KINDS) + ["KERNEL"] + [k.name for k in FakeActivityKind],
        "fields": {k: list(v) for k, v in records.FIELDS.items()},
        "driver": list(table["DRIVER"]),
        "runtime": list(table["RUNTIME"]),
    }
    code = "import sys; sys.argv.append(" + repr(json.dumps(req)) + ")\n" + PROBE
    out = run_with(target, code)
    assert out["version"].startswith(request.param + "."), out["version"]
    return out, table, request.param


def test_the_backend_reads_only_names_cupti_python_has(real):
    out, _, major = real
    chains = used_attribute_chains()
    assert ("activity_register_callbacks",) in chains and ("ActivityThreadIdType", "SYSTEM") in chains
    assert out["missing_chains"] == [], f"cupti-python {out['version']} lacks {out['missing_chains']}"
    assert out["missing_kinds"] == []


def test_every_copied_record_field_is_a_record_property(real):
    out, _, _ = real
    assert all(out["fields_ok"].values()), {k: v for k, v in out["fields_ok"].items() if not v}


def test_hard_coded_enum_values_are_cuptis(real):
    out, _, _ = real
    ext = out["external"]
    assert (ext["UNKNOWN"], ext["OPENACC"], ext["CUSTOM0"], ext["CUSTOM1"], ext["CUSTOM2"]) == (
        records.EXTERNAL_KIND_UNKNOWN,
        records.EXTERNAL_KIND_OPENACC,
        records.EXTERNAL_KIND_CUSTOM0,
        records.EXTERNAL_KIND_CUSTOM1,
        records.EXTERNAL_KIND_CUSTOM2,
    )
    assert {k.name: int(k) for k in FakeActivityKind} == {
        k: out["kind_values"][k] for k in FakeActivityKind.__members__
    }
    assert out["callback_domain"] == {"DRIVER_API": 1, "RUNTIME_API": 2} and out["thread_id_system"] == 1


def test_callback_ids_the_tests_use_are_cupti_pythons(real):
    out, table, _ = real
    assert out["driver"] == table["DRIVER"] and out["runtime"] == table["RUNTIME"]
    synthetic = json.loads((DATA / "cupti" / "synthetic_session.json").read_text())
    for r in synthetic["records"]:
        if r["kind"] in ("DRIVER", "RUNTIME"):
            assert table[r["kind"]][r["name"] if r["kind"] == "DRIVER" else r["name"]] == r["cbid"], r


def test_versions_come_from_the_package_and_the_loaded_libcupti(real):
    out, _, major = real
    assert out["versions"]["cupti_python_version"] == out["version"]
    if major == "12" and out["libcupti"]:
        # CUPTI 12.x answers cuptiGetVersion without a driver (13.x wants one): its API version number
        assert isinstance(out["versions"].get("cupti_version"), int) and out["versions"]["cupti_version"] >= 18
