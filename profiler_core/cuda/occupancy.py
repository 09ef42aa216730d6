"""Pure occupancy calculator: Kineto's `blocks per SM`, `warps per SM` and `est. achieved occupancy %`.

Reimplements the arithmetic of CUDA's occupancy calculator (the `cudaOccMaxActiveBlocksPerMultiprocessor`
algorithm: warp, block, register and shared-memory limits) with the inputs Kineto gives it (default
shared-memory carveout, default per-function shared-memory limit, partitioned global caching off), and
Kineto's float32 arithmetic for the derived values, so the numbers match those in real Kineto traces.
The tables cover every compute capability NVIDIA's `cuda_occupancy.h` (CUDA 12.9 and 13.x) knows:
3.x, 5.x, 6.x, 7.x, 8.x, 9.x, 10.0/10.1/10.3/10.7, 11.0/11.1/11.3/11.7, 12.0/12.1
(`SUPPORTED_CAPABILITIES`); tests/test_occupancy_oracle.py compiles that header and compares.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from functools import lru_cache

INT_MAX = 2**31 - 1

# Per compute capability tables, as NVIDIA's cuda_occupancy.h (CUDA 12.9 and 13.x) has them. Carveouts are
# the per-SM shared memory sizes (KiB) a kernel's default carveout rounds up to; `None` minor = any minor.
_KB = 1024
_VOLTA_KB = (0, 8, 16, 32, 64, 96)
_AMPERE_KB = (0, 8, 16, 32, 64, 100)  # 8.x except 8.0/8.7; 12.x
_A100_KB = _AMPERE_KB + (132, 164)  # 8.0, 8.7
_HOPPER_KB = _A100_KB + (196, 228)  # 9.x, 10.0/10.1/10.3, 11.0/11.1/11.3
_SMEM_CONFIGS_KB = {
    (7, 5): (32, 64),
    (7, None): _VOLTA_KB,
    (8, 0): _A100_KB,
    (8, 7): _A100_KB,
    (8, None): _AMPERE_KB,
    (9, None): _HOPPER_KB,
    (10, 0): _HOPPER_KB,
    (10, 1): _HOPPER_KB,
    (10, 3): _HOPPER_KB,
    (10, 7): _HOPPER_KB + (328,),
    (11, 0): _HOPPER_KB,
    (11, 1): _HOPPER_KB,
    (11, 3): _HOPPER_KB,
    (11, 7): _HOPPER_KB + (328,),
    (12, 0): _AMPERE_KB,
    (12, 1): _AMPERE_KB,
}
# Resident blocks per SM: {(major, minor or None): blocks}.
_MAX_BLOCKS = {
    (3, None): 16,
    (5, None): 32,
    (6, None): 32,
    (7, 5): 16,
    (7, None): 32,
    (8, 0): 32,
    (8, 9): 24,
    (8, None): 16,
    (9, None): 32,
    (10, 1): 24,
    (10, 7): 16,
    (10, None): 32,
    (11, 0): 24,
    (11, None): 32,
    (12, None): 24,
}
_KNOWN_MAJORS = (3, 5, 6, 7, 8, 9, 10, 11, 12)
# The most shared memory one block may opt in to (cudaDevAttrMaxSharedMemoryPerBlockOptin), by compute
# capability, as NVIDIA's programming guide lists it: 96 KiB on 7.0/7.2, 64 KiB on 7.5, 163 KiB on 8.0/8.7,
# 99 KiB on 8.6/8.9 and 12.x, 227 KiB on 9.0 and 10.x/11.0. Used when deviceProperties lack
# `sharedMemPerBlockOptin` (Kineto writes it since 2023: 98304 on V100, 166912 on A100, 232448 on H100/B200).
OPTIN_SHARED_MEMORY_PER_BLOCK = {
    (7, 0): 96 * _KB,
    (7, 2): 96 * _KB,
    (7, 5): 64 * _KB,
    (8, 0): 163 * _KB,
    (8, 6): 99 * _KB,
    (8, 7): 163 * _KB,
    (8, 9): 99 * _KB,
    (9, 0): 227 * _KB,
    (10, 0): 227 * _KB,
    (10, 1): 227 * _KB,
    (10, 3): 227 * _KB,
    (11, 0): 227 * _KB,
    (12, 0): 99 * _KB,
    (12, 1): 99 * _KB,
}
# The compute capabilities whose occupancy is computed (every one NVIDIA's header knows: majors 3, 5 and 6
# take any minor; from Volta on, a minor needs its shared memory carveouts).
SUPPORTED_CAPABILITIES = tuple(f"{m}.x" for m in (3, 5, 6, 7, 8, 9)) + tuple(
    f"{m}.{n}" for m, n in sorted(k for k in _SMEM_CONFIGS_KB if k[0] >= 10)
)


def _lookup(table: dict, major: int, minor: int):
    if (major, minor) in table:
        return table[(major, minor)]
    return table.get((major, None))


class UnknownDevice(ValueError):
    """The compute capability is outside the tables this calculator knows (so no estimate is made)."""


@dataclass(frozen=True)
class OccupancyResult:
    """What the calculator found for one launch configuration."""

    active_blocks: int  # resident blocks per SM allowed by all limits
    limit_warps: int
    limit_blocks: int
    limit_registers: int
    limit_shared_memory: int

    @property
    def limiting_factors(self) -> list[str]:
        """Names of the limits equal to the result (as the CUDA calculator reports them)."""
        names = []
        for name, value in (
            ("warps", self.limit_warps),
            ("registers", self.limit_registers),
            ("shared memory", self.limit_shared_memory),
            ("blocks", self.limit_blocks),
        ):
            if value == self.active_blocks:
                names.append(name)
        return names


_POSITIVE_PROPS = (
    "maxThreadsPerBlock",
    "maxThreadsPerMultiprocessor",
    "regsPerBlock",
    "regsPerMultiprocessor",
    "warpSize",
    "sharedMemPerBlock",
    "sharedMemPerMultiprocessor",
    "numSms",
)


def _unknown(major: int, minor: int) -> UnknownDevice:
    return UnknownDevice(
        f"compute capability {major}.{minor} is not in the occupancy tables "
        "(those of NVIDIA's cuda_occupancy.h, CUDA 12.9/13.x)"
    )


def _max_blocks_per_sm(major: int, minor: int) -> int:
    value = _lookup(_MAX_BLOCKS, major, minor)
    if value is None:
        raise _unknown(major, minor)
    return value


def _smem_granularity(major: int, minor: int = 0) -> int:
    if major in (3, 5, 6, 7):
        return 256
    if major in _KNOWN_MAJORS:
        return 128
    raise _unknown(major, minor)


def _max_regs_per_thread(major: int, minor: int = 0) -> int:
    if major in (3, 5, 6):
        return 255
    if major in _KNOWN_MAJORS:
        return 256
    raise _unknown(major, minor)


def _sub_partitions(major: int, minor: int) -> int:
    if major == 6:
        return 4 if minor else 2
    return 4


def _align_up_smem_config(size: int, major: int, minor: int) -> int:
    """Round a per-SM shared memory size up to the next carveout the hardware offers (Volta and later)."""
    configs = _lookup(_SMEM_CONFIGS_KB, major, minor)
    if configs is None:
        raise _unknown(major, minor)
    for kb in configs:
        if size <= kb * _KB:
            return kb * _KB
    raise ValueError(f"shared memory {size} B exceeds the largest carveout of cc {major}.{minor}")


def optin_shared_memory_per_block(props: dict) -> int | None:
    """The device's opt-in per-block shared memory limit: `sharedMemPerBlockOptin` from its properties when
    positive, else NVIDIA's figure for its compute capability; None when neither is known."""
    value = props.get("sharedMemPerBlockOptin")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return int(value)
    try:
        return OPTIN_SHARED_MEMORY_PER_BLOCK.get((int(props["computeMajor"]), int(props["computeMinor"])))
    except (KeyError, TypeError, ValueError):
        return None


def _round_up(x: int, y: int) -> int:
    return -(-x // y) * y


def _register_limit(
    major: int, minor: int, warp: int, warps_per_block: int, regs_per_thread: int, regs_block: int, regs_sm: int
) -> int:
    """Blocks per SM the register file allows (allocated per warp, per sub-partition)."""
    gran = 256
    regs_per_warp = _round_up(regs_per_thread * warp, gran)
    regs_per_cta = regs_per_warp * warps_per_block
    subparts = _sub_partitions(major, minor)
    regs_assumed = regs_per_warp * _round_up(warps_per_block, subparts)
    if regs_block < regs_assumed or regs_block < regs_per_cta or regs_per_thread > _max_regs_per_thread(major, minor):
        return 0
    if regs_per_warp > 0:
        return (((regs_sm // subparts) // regs_per_warp) * subparts) // warps_per_block
    return INT_MAX


def active_blocks_per_sm(
    props: dict,
    block_size: int,
    registers_per_thread: int,
    static_shared_memory: int,
    dynamic_shared_memory: int = 0,
    opt_in: bool = False,
) -> OccupancyResult:
    """Blocks per SM that can be resident at once, as CUDA's occupancy calculator computes it.

    `props` uses Kineto's deviceProperties keys (computeMajor, maxThreadsPerMultiprocessor, ...), plus the
    optional `reservedSharedMemPerBlock` (1 KiB on cc >= 8; Kineto's traces lack it, so it defaults to 1024
    there and to 0 on older devices). With `opt_in` the kernel is taken to have opted in to its dynamic shared
    memory (the calculator's FUNC_SHMEM_LIMIT_OPTIN with maxDynamicSharedSizeBytes = the launch's dynamic
    size): on cc >= 7 a block may then use up to `optin_shared_memory_per_block` (UnknownDevice when that
    limit is needed and unknown). Without it, the default 48 KiB per-block limit applies, as in Kineto.
    """
    major, minor = int(props["computeMajor"]), int(props["computeMinor"])
    warp = int(props.get("warpSize", 32))
    max_threads_sm = int(props["maxThreadsPerMultiprocessor"])
    max_threads_block = int(props["maxThreadsPerBlock"])
    regs_block = int(props["regsPerBlock"])
    regs_sm = int(props["regsPerMultiprocessor"])
    smem_block = int(props["sharedMemPerBlock"])
    smem_sm = int(props["sharedMemPerMultiprocessor"])
    reserved = int(props.get("reservedSharedMemPerBlock", 1024 if major >= 8 else 0))
    for key in _POSITIVE_PROPS:
        if int(props.get(key, 1)) <= 0:
            raise ValueError(f"device property {key} must be positive, got {props.get(key)!r}")
    if block_size <= 0:
        raise ValueError(f"block size must be positive, got {block_size}")
    if registers_per_thread < 0 or static_shared_memory < 0 or dynamic_shared_memory < 0:
        raise ValueError("registers and shared memory must not be negative")

    warps_per_block = -(-block_size // warp)
    # Warp limit.
    limit_warps = 0 if block_size > max_threads_block else (max_threads_sm // warp) // warps_per_block
    # Block limit.
    limit_blocks = _max_blocks_per_sm(major, minor)
    # Register limit (registers are allocated per warp, per sub-partition).
    limit_regs = _register_limit(major, minor, warp, warps_per_block, registers_per_thread, regs_block, regs_sm)
    if (
        major == 6
        and minor == 0
        and limit_regs
        and not _register_limit(6, 1, warp, warps_per_block, registers_per_thread, regs_block, regs_sm)
    ):
        limit_regs = 0  # GP100: what cannot run on the 4-partition GP10x runs on no Pascal (as NVIDIA's)
    # Shared memory limit (default carveout: the whole per-SM shared memory, aligned to a carveout).
    smem_gran = _smem_granularity(major, minor)
    per_cta = _round_up(static_shared_memory + reserved + dynamic_shared_memory, smem_gran)
    limit_per_cta = smem_block
    if opt_in and major >= 7 and static_shared_memory + reserved + dynamic_shared_memory > smem_block:
        optin = optin_shared_memory_per_block(props)
        if optin is None:
            raise UnknownDevice(
                f"the opt-in shared memory limit of compute capability {major}.{minor} is unknown "
                "(no sharedMemPerBlockOptin in the device properties)"
            )
        limit_per_cta = optin
    limit_per_cta += reserved if major >= 8 else 0
    preference = _align_up_smem_config(smem_sm, major, minor) if major >= 7 else smem_sm
    if per_cta > limit_per_cta:
        limit_smem = 0
    else:
        if preference >= per_cta:
            sm_total = preference
        elif major >= 7:
            sm_total = _align_up_smem_config(per_cta, major, minor)
        else:
            sm_total = smem_sm
        limit_smem = sm_total // per_cta if per_cta > 0 else INT_MAX
    active = min(limit_regs, limit_smem, limit_warps, limit_blocks)
    return OccupancyResult(active, limit_warps, limit_blocks, limit_regs, limit_smem)


def _f32(x: float) -> float:
    """Round to float32 (Kineto computes these values in single precision)."""
    if math.isinf(x) or math.isnan(x):
        return x
    return struct.unpack("f", struct.pack("f", x))[0]


@lru_cache(maxsize=4096)
def shortest_f32(x: float) -> float:
    """The shortest decimal that reads back as the same float32 (how Kineto prints its floats)."""
    x32 = _f32(x)
    if math.isinf(x32) or math.isnan(x32) or x32 == 0:
        return x32
    for digits in range(1, 10):
        candidate = float(f"{x32:.{digits}g}")
        if _f32(candidate) == x32:
            return candidate
    return x32


def optin_achieved_occupancy(
    props: dict, blocks_per_sm: float, block_size: int, registers_per_thread: int, shared_memory: int
) -> float:
    """Kineto's `est. achieved occupancy %` (min(resident blocks, blocks per SM) x threads / the SM's threads,
    in float32, rounded to a whole percent) with the kernel's shared memory opted in: what Kineto would write
    for a kernel above the 48 KiB default had it known of the opt-in (it writes 0). NaN when unknown."""
    try:
        res = active_blocks_per_sm(props, block_size, registers_per_thread, 0, shared_memory, opt_in=True)
        max_threads = float(props["maxThreadsPerMultiprocessor"])
    except (UnknownDevice, ValueError, KeyError, TypeError):
        return math.nan
    if not (blocks_per_sm >= 0) or max_threads <= 0:
        return math.nan
    resident = min(float(res.active_blocks), _f32(blocks_per_sm))
    return float(math.floor(_f32(_f32(resident * block_size) / _f32(max_threads)) * 100 + 0.5))


def kernel_occupancy(
    props: dict | None,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    registers_per_thread: int,
    static_shared_memory: int,
    dynamic_shared_memory: int = 0,
) -> dict:
    """Kineto's kernel args `blocks per SM`, `warps per SM`, `est. achieved occupancy %` for one launch.

    `props` is the device's deviceProperties entry (or None when unknown: then `blocks per SM` and
    `warps per SM` are inf, as Kineto writes them, and the occupancy key is left out). The occupancy key is
    also left out when the device's compute capability is outside the calculator's tables.
    """
    n_blocks = int(grid[0]) * int(grid[1]) * int(grid[2])
    block_size = int(block[0]) * int(block[1]) * int(block[2])
    num_sms = int(props.get("numSms", 0)) if props else 0
    bps = _f32(_f32(float(n_blocks)) / _f32(float(num_sms))) if num_sms > 0 else math.inf
    # Kineto divides by a hard-coded 32 threads per warp, in float32 at each step.
    wps = _f32(_f32(bps * block_size) / 32.0) if not math.isinf(bps) else math.inf
    out: dict = {"blocks per SM": shortest_f32(bps), "warps per SM": shortest_f32(wps)}
    if not props or block_size <= 0:
        return out
    try:
        res = active_blocks_per_sm(props, block_size, registers_per_thread, static_shared_memory, dynamic_shared_memory)
    except (UnknownDevice, ValueError, KeyError):
        return out
    resident = min(float(res.active_blocks), bps)
    occ = _f32(_f32(resident * block_size) / _f32(float(props["maxThreadsPerMultiprocessor"])))
    out["est. achieved occupancy %"] = int(math.floor(occ * 100 + 0.5))
    return out
