"""Measured tile choice for the NPU: schedule the kernel with each candidate tile height,
simulate its programs for time only, keep the fastest."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from intrinsics import Registry
from ir import PrimFunc
from simulator import MachineConfig, simulate
from targets import npu
from tensorize.engine import Tensorized, auto_tensorize
from tensorize.engine.npu_schedule import NpuTiling, tile_candidates


@dataclass(frozen=True, slots=True)
class Trial:
    """One candidate tile and the simulated cycles of the NPU stages it gives."""

    tiling: NpuTiling
    cycles: int


def tune_npu(func: PrimFunc, config: MachineConfig, registry: Registry,
             intrinsic: str | None = None) -> tuple[Tensorized, list[Trial]]:
    """The fastest tensorization of ``func`` on the NPU ``config`` among the tile heights
    that fit the first tensorized block, and every trial (ties go to the shorter tile)."""
    first = auto_tensorize(func, "npu", registry=registry, intrinsic=intrinsic, config=config)
    done = first.tensorized
    if not done:
        return first, []
    t = registry.get(done[0].intrinsic).iter_vars[0].extent
    trials: list[Trial] = []
    best: tuple[int, Tensorized] | None = None
    for rows in tile_candidates(done[0].extents[0], t, config):
        tiling = NpuTiling(rows)
        candidate = auto_tensorize(func, "npu", registry=registry, intrinsic=intrinsic,
                                   config=config, tiling=tiling)
        cycles = simulated_cycles(candidate.func, config, registry)
        trials.append(Trial(tiling, cycles))
        if best is None or cycles < best[0]:
            best = (cycles, candidate)
    return (best[1] if best else first), trials


def simulated_cycles(func: PrimFunc, config: MachineConfig, registry: Registry) -> int:
    """Cycles of every NPU stage of ``func``, simulated for time only."""
    total = 0
    for stage in npu.split_stages(func, registry.get):
        if stage.on_npu:
            compiled = npu.compile_stage(stage, config, registry.get)
            image = np.zeros(compiled.dram_bytes, np.uint8)
            total += simulate(compiled.program, config, image, functional=False).cycles
    return total
