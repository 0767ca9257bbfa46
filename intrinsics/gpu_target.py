"""A family's ``gpu:`` section: the GPU architectures its kernels are compiled for, and each
one's SM limits, checked against one another.

The schema (:data:`intrinsics.schema.GPU`) checks each field's type and runs
:func:`check_gpu_section` at load, so a file whose limits contradict one another is refused
with every finding at its YAML line; the loader keeps the section as the family's
:class:`GpuTarget` (``Family.gpu``), which the occupancy calculator and the tiling search read through
``Registry.gpu`` (``targets.cuda.occupancy``, ``tensorize.engine.cuda_schedule``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from intrinsics.model import frozen_mapping
from intrinsics.source import Findings, YNode

__all__ = ["GpuArchitecture", "GpuTarget", "build_gpu_target", "check_gpu_section"]

# nvcc's name of a real architecture: sm_ and the compute capability's digits.
_ARCH_NAME = re.compile(r"sm_\d+[a-z]?\Z")
# A warp is 32 threads on every NVIDIA architecture; registers are counted per thread.
WARP = 32


@dataclass(frozen=True, slots=True)
class GpuArchitecture:
    """One architecture's SM limits, as the CUDA C++ Programming Guide's "Technical
    Specifications per Compute Capability" table and the occupancy calculator give them.

    ``register_granularity`` is the per-warp register allocation unit;
    ``shared_per_sm`` the bytes of the configurable L1/shared maximum blocks may share;
    ``shared_reserved_per_block`` the bytes the system takes per resident block;
    ``shared_granularity`` the unit a block's shared memory is allocated in;
    ``max_shared_per_block`` the bytes one block may opt in to; ``sm_count`` the SMs of the
    reference part (for waves)."""

    name: str
    part: str
    sm_count: int
    registers_per_sm: int
    max_registers_per_thread: int
    register_granularity: int
    shared_per_sm: int
    max_shared_per_block: int
    shared_reserved_per_block: int
    shared_granularity: int
    max_warps_per_sm: int
    max_blocks_per_sm: int


@dataclass(frozen=True, slots=True)
class GpuTarget:
    """A family's ``gpu:`` section: its architectures by nvcc name, in file order."""

    target: str
    architectures: Mapping[str, GpuArchitecture]

    def architecture(self, name: str) -> GpuArchitecture:
        """The architecture called ``name``; ValueError naming those there are if none."""
        found = self.architectures.get(name)
        if found is None:
            raise ValueError(f"target {self.target}: architecture {name!r} requires an entry "
                             f"under gpu.architectures, got none; the entries are "
                             f"{', '.join(self.architectures)}")
        return found


def check_gpu_section(node: YNode, findings: Findings, where: str) -> None:
    """Record every way a schema-valid ``gpu:`` section's limits contradict one another,
    each at the line of the field at fault: an architecture name nvcc does not take,
    allocation units that are not powers of two, a block that may opt in to more shared
    memory than its SM holds, a thread allowed more registers than its SM has."""
    architectures = node.value["architectures"]
    if not architectures.value:
        findings.add(architectures.loc, f"{where}.architectures requires at least one "
                     f"architecture to compile for, got none")
    for name, arch in architectures.value.items():
        at = f"{where}.architectures.{name}"
        if not _ARCH_NAME.match(name):
            findings.add(arch.key_loc or arch.loc, f"{at}: the name requires nvcc's form "
                         f"sm_<compute capability> (sm_80, sm_90a), got {name!r}")
        values = arch.plain()
        for key in ("register_granularity", "shared_granularity"):
            if values[key] & (values[key] - 1):
                findings.add(arch.value[key].loc, f"{at}: {key} requires a power of two (an "
                             f"allocation unit), got {values[key]}")
        if values["registers_per_sm"] % values["register_granularity"]:
            findings.add(arch.value["registers_per_sm"].loc, f"{at}: registers_per_sm "
                         f"requires a multiple of register_granularity "
                         f"({values['register_granularity']}), got "
                         f"{values['registers_per_sm']}")
        block = values["max_shared_per_block"] + values["shared_reserved_per_block"]
        if block > values["shared_per_sm"]:
            findings.add(arch.value["max_shared_per_block"].loc, f"{at}: max_shared_per_block "
                         f"plus shared_reserved_per_block requires at most shared_per_sm "
                         f"({values['shared_per_sm']} B), got {block} B")
        if values["max_registers_per_thread"] * WARP > values["registers_per_sm"]:
            findings.add(arch.value["max_registers_per_thread"].loc, f"{at}: one warp at "
                         f"max_registers_per_thread requires at most registers_per_sm "
                         f"({values['registers_per_sm']}), got "
                         f"{values['max_registers_per_thread'] * WARP}")


def build_gpu_target(node: YNode, target: str) -> GpuTarget:
    """The GpuTarget of a ``gpu:`` section that passed the schema and its checks."""
    architectures = {}
    for name, arch in node.value["architectures"].value.items():
        values = arch.plain()
        architectures[name] = GpuArchitecture(name=name, **values)
    return GpuTarget(target, frozen_mapping(architectures))
