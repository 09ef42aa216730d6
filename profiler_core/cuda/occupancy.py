"""Pure occupancy calculator: Kineto's `blocks per SM`, `warps per SM` and `est. achieved occupancy %`.

Reimplements the arithmetic of CUDA's occupancy calculator (the `cudaOccMaxActiveBlocksPerMultiprocessor`
algorithm: warp, block, register and shared-memory limits) with the inputs Kineto gives it (default
shared-memory carveout, default per-function shared-memory limit, partitioned global caching off), and
Kineto's float32 arithmetic for the derived values, so the numbers match those in real Kineto traces.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from functools import lru_cache

INT_MAX = 2**31 - 1

# Per compute capability (major, minor) tables from the CUDA occupancy calculator. `None` minor = any.
_KB = 1024
_SMEM_CONFIGS_KB = {
    (7, 0): (0, 8, 16, 32, 64, 96),
    (7, 5): (32, 64),
    (8, 0): (0, 8, 16, 32, 64, 100, 132, 164),
    (8, 7): (0, 8, 16, 32, 64, 100, 132, 164),
    (8, None): (0, 8, 16, 32, 64, 100),
    (9, 0): (0, 8, 16, 32, 64, 100, 132, 164, 196, 228),
}


def _lookup(table: dict, major: int, minor: int):
    if (major, minor) in table:
        return table[(major, minor)]
    return table.get((major, None))


class UnknownDevice(ValueError):
    """The compute capability is outside the tables this calculator knows (so no estimate is made)."""


@dataclass(frozen=True)
class OccupancyResult:
    """What the calculator found for one launch configuration."""

    active_blocks: int          # resident blocks per SM allowed by all limits
    limit_warps: int
    limit_blocks: int
    limit_registers: int
    limit_shared_memory: int

    @property
    def limiting_factors(self) -> list[str]:
        """Names of the limits equal to the result (as the CUDA calculator reports them)."""
        names = []
        for name, value in (("warps", self.limit_warps), ("registers", self.limit_registers),
                            ("shared memory", self.limit_shared_memory), ("blocks", self.limit_blocks)):
            if value == self.active_blocks:
                names.append(name)
        return names


def _max_blocks_per_sm(major: int, minor: int) -> int:
    if major == 7:
        return 16 if minor == 5 else 32
    if major == 8:
        if minor == 0:
            return 32
        if minor == 9:
            return 24
        return 16
    if major == 9:
        return 32
    if major in (5, 6):
        return 32
    if major == 3:
        return 16
    raise UnknownDevice(f"compute capability {major}.{minor} is not in the occupancy tables")


def _smem_granularity(major: int) -> int:
    if major in (3, 5, 6, 7):
        return 256
    if major in (8, 9):
        return 128
    raise UnknownDevice(f"compute capability {major}.x is not in the occupancy tables")


def _max_regs_per_thread(major: int) -> int:
    if major in (3, 5, 6):
        return 255
    if major in (7, 8, 9):
        return 256
    raise UnknownDevice(f"compute capability {major}.x is not in the occupancy tables")


def _sub_partitions(major: int, minor: int) -> int:
    if major == 6:
        return 4 if minor else 2
    return 4


def _align_up_smem_config(size: int, major: int, minor: int) -> int:
    """Round a per-SM shared memory size up to the next carveout the hardware offers (Volta and later)."""
    configs = _lookup(_SMEM_CONFIGS_KB, major, minor)
    if configs is None:
        raise UnknownDevice(f"compute capability {major}.{minor} has no known shared memory carveouts")
    for kb in configs:
        if size <= kb * _KB:
            return kb * _KB
    raise ValueError(f"shared memory {size} B exceeds the largest carveout of cc {major}.{minor}")


def _round_up(x: int, y: int) -> int:
    return -(-x // y) * y


def active_blocks_per_sm(props: dict, block_size: int, registers_per_thread: int,
                         static_shared_memory: int, dynamic_shared_memory: int = 0) -> OccupancyResult:
    """Blocks per SM that can be resident at once, as CUDA's occupancy calculator computes it.

    `props` uses Kineto's deviceProperties keys (computeMajor, maxThreadsPerMultiprocessor, ...), plus the
    optional `reservedSharedMemPerBlock` (1 KiB on cc >= 8; Kineto's traces lack it, so it defaults to 1024
    there and to 0 on older devices).
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
    gran = 256
    regs_per_warp = _round_up(registers_per_thread * warp, gran)
    regs_per_cta = regs_per_warp * warps_per_block
    subparts = _sub_partitions(major, minor)
    regs_assumed = regs_per_warp * _round_up(warps_per_block, subparts)
    if regs_block < regs_assumed or regs_block < regs_per_cta \
            or registers_per_thread > _max_regs_per_thread(major):
        limit_regs = 0
    elif regs_per_warp > 0:
        warps_per_sub = (regs_sm // subparts) // regs_per_warp
        limit_regs = (warps_per_sub * subparts) // warps_per_block
    else:
        limit_regs = INT_MAX
    # Shared memory limit (default carveout: the whole per-SM shared memory, aligned to a carveout).
    smem_gran = _smem_granularity(major)
    per_cta = _round_up(static_shared_memory + reserved + dynamic_shared_memory, smem_gran)
    limit_per_cta = smem_block + (reserved if major >= 8 else 0)
    if major >= 7:
        preference = _align_up_smem_config(smem_sm, major, minor)
    else:
        preference = smem_sm
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


def kernel_occupancy(props: dict | None, grid: tuple[int, int, int], block: tuple[int, int, int],
                     registers_per_thread: int, static_shared_memory: int,
                     dynamic_shared_memory: int = 0) -> dict:
    """Kineto's kernel args `blocks per SM`, `warps per SM`, `est. achieved occupancy %` for one launch.

    `props` is the device's deviceProperties entry (or None when unknown: then `blocks per SM` and
    `warps per SM` are inf, as Kineto writes them, and the occupancy key is left out). The occupancy key is
    also left out when the device's compute capability is outside the calculator's tables.
    """
    n_blocks = int(grid[0]) * int(grid[1]) * int(grid[2])
    block_size = int(block[0]) * int(block[1]) * int(block[2])
    num_sms = int(props.get("numSms", 0)) if props else 0
    if num_sms > 0:
        bps = _f32(_f32(float(n_blocks)) / _f32(float(num_sms)))
    else:
        bps = math.inf
    # Kineto divides by a hard-coded 32 threads per warp, in float32 at each step.
    wps = _f32(_f32(bps * block_size) / 32.0) if not math.isinf(bps) else math.inf
    out: dict = {"blocks per SM": shortest_f32(bps), "warps per SM": shortest_f32(wps)}
    if not props or block_size <= 0:
        return out
    try:
        res = active_blocks_per_sm(props, block_size, registers_per_thread, static_shared_memory,
                                   dynamic_shared_memory)
    except (UnknownDevice, ValueError, KeyError):
        return out
    resident = min(float(res.active_blocks), bps)
    occ = _f32(_f32(resident * block_size) / _f32(float(props["maxThreadsPerMultiprocessor"])))
    out["est. achieved occupancy %"] = int(math.floor(occ * 100 + 0.5))
    return out
