"""Theoretical occupancy of a kernel on an architecture: how many of an SM's warp slots its
blocks can hold at once, given the registers and shared memory ptxas reports and the threads
per block, and which resource stops it.

The method is NVIDIA's occupancy calculator (``CUDA_Occupancy_Calculator.xls``, and
``cudaOccupancyMaxActiveBlocksPerMultiprocessor``): blocks per SM are the fewest that any of
the warp slots, the block slots, the register file (allocated per warp in units) and shared
memory (per block, plus what the system reserves, in units) allows. Each architecture's
limits are data: the ``gpu:`` section of ``intrinsics/cuda.yaml``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from intrinsics import Registry
from intrinsics.gpu_target import GpuArchitecture

__all__ = ["Occupancy", "architecture", "architectures", "occupancy"]


def architectures(registry: Registry) -> Mapping[str, GpuArchitecture]:
    """The architectures kernels compile for and their SM limits, by nvcc name: the
    ``gpu:`` section of the cuda family in ``registry`` (the run context's, made at the
    edge; ``intrinsics.default_registry()`` there for the built-in and user families)."""
    return registry.gpu("cuda").architectures


def architecture(name: str, registry: Registry) -> GpuArchitecture:
    """The SM limits of the architecture ``name`` (``sm_80``) from the same section;
    ValueError naming the architectures there are when it has no entry."""
    return registry.gpu("cuda").architecture(name)


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


def occupancy(limits: GpuArchitecture, registers: int, shared_bytes: int,
              threads: int) -> Occupancy:
    """The occupancy of blocks of ``threads`` threads, each thread using ``registers``
    registers and each block ``shared_bytes`` bytes of shared memory (static plus dynamic),
    on the architecture ``limits`` describes (an entry of :func:`architectures`). A block
    that cannot fit at all (more registers than a thread or an SM may have, more shared
    memory than an SM has) gets 0 blocks."""
    if threads <= 0 or registers < 0 or shared_bytes < 0:
        raise ValueError(f"occupancy requires positive threads and non-negative registers and "
                         f"shared memory, got {threads}, {registers}, {shared_bytes}")
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
