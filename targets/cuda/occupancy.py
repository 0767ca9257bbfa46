"""Theoretical occupancy of a kernel on an architecture: how many of an SM's warp slots its
blocks can hold at once, given the registers and shared memory ptxas reports and the threads
per block, and which resource stops it.

The method is NVIDIA's occupancy calculator (``CUDA_Occupancy_Calculator.xls``, and
``cudaOccupancyMaxActiveBlocksPerMultiprocessor``): blocks per SM are the fewest that any of
the warp slots, the block slots, the register file (allocated per warp, in units of 256
registers) and shared memory (per block, plus 1 KB the system reserves, in units of 128
bytes) allows.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ARCHITECTURES", "Architecture", "Occupancy", "occupancy"]


@dataclass(frozen=True, slots=True)
class Architecture:
    """An SM's limits, as the CUDA C++ Programming Guide's "Compute Capabilities" table
    ("Technical Specifications per Compute Capability") and the occupancy calculator give
    them."""

    registers_per_sm: int
    max_registers_per_thread: int
    register_granularity: int  # registers allocated per warp in units of this many
    shared_per_sm: int  # bytes available to blocks (the configurable L1/shared maximum)
    shared_reserved_per_block: int  # bytes the system reserves for each resident block
    shared_granularity: int  # bytes; a block's shared memory is allocated in these units
    max_blocks_per_sm: int
    max_warps_per_sm: int
    max_shared_per_block: int  # bytes a block may opt in to (dynamic shared memory)
    sm_count: int  # SMs of the reference part (A100 SXM, H100 SXM), for waves


# Compute capability 8.0 (A100) and 9.0 (H100): CUDA C++ Programming Guide, "Compute
# Capabilities", table "Technical Specifications per Compute Capability"; allocation
# granularities from the occupancy calculator's "GPU Data" sheet; SM counts of the A100 SXM4
# (108) and H100 SXM5 (132) from NVIDIA's architecture whitepapers.
ARCHITECTURES = {
    "sm_80": Architecture(registers_per_sm=65536, max_registers_per_thread=255,
                          register_granularity=256, shared_per_sm=164 * 1024,
                          shared_reserved_per_block=1024, shared_granularity=128,
                          max_blocks_per_sm=32, max_warps_per_sm=64,
                          max_shared_per_block=163 * 1024, sm_count=108),
    "sm_90": Architecture(registers_per_sm=65536, max_registers_per_thread=255,
                          register_granularity=256, shared_per_sm=228 * 1024,
                          shared_reserved_per_block=1024, shared_granularity=128,
                          max_blocks_per_sm=32, max_warps_per_sm=64,
                          max_shared_per_block=227 * 1024, sm_count=132),
}


@dataclass(frozen=True, slots=True)
class Occupancy:
    """``blocks`` resident per SM, ``warps`` of ``max_warps`` warp slots, and the resource
    that stops one more block: ``registers``, ``shared memory``, ``warps`` (the SM's warp
    slots) or ``blocks`` (its block slots); the first of them in that order on a tie."""

    blocks: int
    warps: int
    max_warps: int
    limited_by: str

    @property
    def fraction(self) -> float:
        """Resident warps over the SM's warp slots."""
        return self.warps / self.max_warps


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def occupancy(arch: str, registers: int, shared_bytes: int, threads: int) -> Occupancy:
    """The occupancy of blocks of ``threads`` threads, each thread using ``registers``
    registers and each block ``shared_bytes`` bytes of shared memory (static plus dynamic),
    on ``arch`` (a key of ARCHITECTURES). A block that cannot fit at all (more registers
    than a thread or an SM may have, more shared memory than an SM has) gets 0 blocks."""
    if arch not in ARCHITECTURES:
        raise ValueError(f"occupancy: argument 'arch': expected one of "
                         f"{', '.join(ARCHITECTURES)}, got {arch!r}")
    if threads <= 0 or registers < 0 or shared_bytes < 0:
        raise ValueError(f"occupancy requires positive threads and non-negative registers and "
                         f"shared memory, got {threads}, {registers}, {shared_bytes}")
    limits = ARCHITECTURES[arch]
    warps = -(-threads // 32)
    registers_per_warp = _round_up(registers * 32, limits.register_granularity)
    shared = _round_up(shared_bytes + limits.shared_reserved_per_block, limits.shared_granularity)
    by_registers = (0 if registers > limits.max_registers_per_thread else
                    limits.registers_per_sm // registers_per_warp // warps
                    if registers_per_warp else limits.max_blocks_per_sm)
    candidates = {
        "registers": by_registers,
        "shared memory": limits.shared_per_sm // shared,
        "warps": limits.max_warps_per_sm // warps,
        "blocks": limits.max_blocks_per_sm,
    }
    limited_by = min(candidates, key=candidates.__getitem__)
    blocks = candidates[limited_by]
    return Occupancy(blocks, blocks * warps, limits.max_warps_per_sm, limited_by)
