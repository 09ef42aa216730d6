"""occupancy.py against NVIDIA's own calculator: cuda_occupancy.h from the nvidia-cuda-runtime wheels,
compiled with g++ at test time (tests/oracles/occupancy_oracle.cpp), on random launch configurations for
every compute capability the header knows. Skips when the header (installed by .ci/run) or g++ is absent.
"""

import random
import shutil
import subprocess

import pytest

from profiler_core.cuda.occupancy import UnknownDevice, active_blocks_per_sm

from .conftest import ROOT, missing
from .gpu_oracles import occupancy_headers

CASES_PER_CAPABILITY = 600
MAJORS, MINORS = range(16), range(10)
FIELDS = (
    "computeMajor",
    "computeMinor",
    "maxThreadsPerBlock",
    "maxThreadsPerMultiprocessor",
    "regsPerBlock",
    "regsPerMultiprocessor",
    "warpSize",
    "sharedMemPerBlock",
    "sharedMemPerMultiprocessor",
    "sharedMemPerBlockOptin",
    "reservedSharedMemPerBlock",
    "numSms",
)
HEADERS = occupancy_headers()


_BUILT: dict = {}


def _compile(tag: str, tmp_path_factory):
    """The compiled oracle for one header: a function from case tuples to NVIDIA's answers."""
    if tag in _BUILT:
        return _BUILT[tag]
    gxx = shutil.which("g++")
    if gxx is None:
        missing("g++ is not installed")
    exe = tmp_path_factory.mktemp(f"occ-{tag}") / "occupancy_oracle"
    subprocess.run(
        [
            gxx,
            "-O1",
            "-I",
            str(HEADERS[tag].parent),
            str(ROOT / "tests" / "oracles" / "occupancy_oracle.cpp"),
            "-o",
            str(exe),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )

    def run(cases: list[tuple], opt_in: bool = False) -> list[tuple]:
        text = "".join(" ".join(str(int(v)) for v in props_and_kernel) + "\n" for props_and_kernel in cases)
        out = subprocess.run(
            [str(exe)] + (["optin"] if opt_in else []),
            input=text,
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        )
        return [tuple(line.split()) for line in out.stdout.splitlines()]

    run.tag = tag
    _BUILT[tag] = run
    return run


@pytest.fixture(scope="module", params=sorted(HEADERS) or ["none"])
def oracle(request, tmp_path_factory):
    """NVIDIA's calculator from one installed header (cu12, cu13)."""
    if request.param == "none":
        missing("NVIDIA's cuda_occupancy.h is not installed (.ci/run puts it in .venvs/cuda-headers)")
    return _compile(request.param, tmp_path_factory)


def _props(major: int, minor: int, **over) -> dict:
    p = {
        "computeMajor": major,
        "computeMinor": minor,
        "maxThreadsPerBlock": 1024,
        "maxThreadsPerMultiprocessor": 2048,
        "regsPerBlock": 65536,
        "regsPerMultiprocessor": 65536,
        "warpSize": 32,
        "sharedMemPerBlock": 49152,
        "sharedMemPerMultiprocessor": 65536,
        "sharedMemPerBlockOptin": 49152,
        "reservedSharedMemPerBlock": 1024 if major >= 8 else 0,
        "numSms": 80,
    }
    p.update(over)
    return p


def _case(props: dict, block: int, regs: int, static: int, dynamic: int) -> tuple:
    return tuple(props[f] for f in FIELDS) + (block, regs, static, dynamic)


def _ours(props: dict, block: int, regs: int, static: int, dynamic: int, opt_in: bool = False) -> tuple:
    try:
        r = active_blocks_per_sm(props, block, regs, static, dynamic, opt_in=opt_in)
    except UnknownDevice:
        return ("ERR", "2")
    except ValueError:
        return ("ERR", "1")
    return tuple(
        str(v) for v in (r.active_blocks, r.limit_warps, r.limit_blocks, r.limit_registers, r.limit_shared_memory)
    )


def _known_to(oracle) -> set:
    """The (major, minor) pairs the header computes for (anything but CUDA_OCC_ERROR_UNKNOWN_DEVICE)."""
    grid = [(ma, mi) for ma in MAJORS for mi in MINORS]
    answers = oracle([_case(_props(ma, mi), 128, 32, 0, 0) for ma, mi in grid])
    return {cc for cc, ans in zip(grid, answers) if ans != ("ERR", "2")}


def _random_case(rng: random.Random, major: int, minor: int) -> tuple[dict, tuple]:
    smem_sm = rng.choice([0, 8, 16, 32, 48, 64, 96, 100, 132, 164, 196, 228, 256, 328, 400]) * 1024
    if rng.random() < 0.3:
        smem_sm = rng.randint(1, 240 * 1024)
    props = _props(
        major,
        minor,
        maxThreadsPerMultiprocessor=rng.choice([1024, 1536, 2048]),
        maxThreadsPerBlock=rng.choice([1024, 1024, 512]),
        regsPerBlock=rng.choice([32768, 65536, 65536]),
        regsPerMultiprocessor=rng.choice([65536, 65536, 131072]),
        sharedMemPerBlock=rng.choice([49152, 49152, 16384]),
        sharedMemPerMultiprocessor=max(1, smem_sm),
        reservedSharedMemPerBlock=rng.choice([0, 1024]) if major >= 8 else 0,
        numSms=rng.randint(1, 200),
    )
    block = rng.choice([rng.randint(1, 1100), rng.choice([32, 64, 128, 256, 512, 1024])])
    regs = rng.choice([0, rng.randint(1, 64), rng.randint(1, 260)])
    static = rng.choice([0, rng.randint(0, 4096), rng.randint(0, 50000)])
    dynamic = rng.choice([0, 0, rng.randint(0, 20000), rng.randint(0, 60000)])
    return props, (block, regs, static, dynamic)


def test_every_capability_the_header_knows_is_computed(oracle):
    for major, minor in sorted(_known_to(oracle)):
        assert _ours(_props(major, minor), 128, 32, 0, 0)[0] != "ERR", (
            f"{oracle.tag}'s cuda_occupancy.h knows compute capability {major}.{minor}; occupancy.py does not"
        )


def test_no_capability_is_claimed_that_no_header_knows(tmp_path_factory):
    if set(HEADERS) != {"cu12", "cu13"}:
        missing("needs both the CUDA 12 and 13 headers (.ci/run installs them)")
    known = set()
    for tag in HEADERS:
        known |= _known_to(_compile(tag, tmp_path_factory))
    ours = {(ma, mi) for ma in MAJORS for mi in MINORS if _ours(_props(ma, mi), 128, 32, 0, 0)[0] != "ERR"}
    assert ours == known


def test_random_configurations_match_nvidia(oracle):
    rng = random.Random(f"gpuscope-occupancy-{oracle.tag}")
    cases, inputs = [], []
    for major, minor in sorted(_known_to(oracle)):
        for _ in range(CASES_PER_CAPABILITY):
            props, kernel = _random_case(rng, major, minor)
            cases.append(_case(props, *kernel))
            inputs.append((props, kernel))
    theirs = oracle(cases)
    assert len(theirs) == len(cases)
    diffs = [
        (p["computeMajor"], p["computeMinor"], k, t, _ours(p, *k))
        for (p, k), t in zip(inputs, theirs)
        if _ours(p, *k) != t
    ]
    assert not diffs, f"{len(diffs)} of {len(cases)} differ, e.g. (major, minor, kernel, nvidia, ours): {diffs[:5]}"


def _random_optin_case(rng: random.Random, major: int, minor: int) -> tuple[dict, tuple]:
    """A device with an opt-in limit above 48 KiB (as real ones: per-SM shared memory = opt-in + 1 KiB) and a
    kernel whose dynamic shared memory is anywhere up to it (and a bit beyond)."""
    optin = rng.choice([64, 96, 99, 163, 227]) * 1024
    props = _props(
        major,
        minor,
        maxThreadsPerMultiprocessor=rng.choice([1024, 1536, 2048]),
        regsPerMultiprocessor=rng.choice([65536, 65536, 131072]),
        sharedMemPerBlockOptin=optin,
        sharedMemPerMultiprocessor=optin + rng.choice([0, 1024, 1024, 2048]),
        reservedSharedMemPerBlock=rng.choice([0, 1024]) if major >= 8 else 0,
        numSms=rng.randint(1, 200),
    )
    block = rng.choice([rng.randint(1, 1024), rng.choice([128, 256, 384, 512])])
    regs = rng.choice([0, rng.randint(1, 64), rng.randint(1, 255)])
    static = rng.choice([0, 0, rng.randint(0, 4096)])
    dynamic = rng.choice([rng.randint(0, 49152), rng.randint(49152, optin), rng.randint(optin - 4096, optin + 4096)])
    return props, (block, regs, static, max(dynamic, 0))


def test_opted_in_shared_memory_matches_nvidia(oracle):
    rng = random.Random(f"gpuscope-occupancy-optin-{oracle.tag}")
    cases, inputs = [], []
    for major, minor in sorted(_known_to(oracle)):
        for _ in range(CASES_PER_CAPABILITY // 2):
            props, kernel = _random_optin_case(rng, major, minor)
            cases.append(_case(props, *kernel))
            inputs.append((props, kernel))
    theirs = oracle(cases, opt_in=True)
    assert len(theirs) == len(cases)
    diffs = [
        (p["computeMajor"], p["computeMinor"], p["sharedMemPerBlockOptin"], k, t, _ours(p, *k, opt_in=True))
        for (p, k), t in zip(inputs, theirs)
        if _ours(p, *k, opt_in=True) != t
    ]
    assert not diffs, (
        f"{len(diffs)} of {len(cases)} differ, e.g. (major, minor, optin, kernel, nvidia, ours): {diffs[:5]}"
    )
    big = [
        t
        for (p, k), t in zip(inputs, theirs)
        if p["computeMajor"] >= 8 and k[2] + k[3] > 64 * 1024 and t[0] != "ERR" and int(t[0]) > 0
    ]
    assert big, "some kernels above 64 KiB fit once opted in"


def test_hopper_gemm_with_226_kib_fits_one_block_when_opted_in(oracle):
    """The issue's sm90_xmma_gemm_bf16 launch: block 384, 168 registers, 226 KiB on an H100 (9.0, 227 KiB opt-in)."""
    h100 = _props(9, 0, sharedMemPerMultiprocessor=233472, sharedMemPerBlockOptin=232448, numSms=132)
    kernel = (384, 168, 0, 226 * 1024)
    default, opted = oracle([_case(h100, *kernel)]), oracle([_case(h100, *kernel)], opt_in=True)
    assert default[0][0] == "0" and opted[0][0] == "1"  # NVIDIA: 0 blocks with the 48 KiB default, 1 opted in
    assert _ours(h100, *kernel, opt_in=True) == opted[0]
