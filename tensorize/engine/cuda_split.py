"""Split-K for CUDA GEMMs whose grid of output tiles leaves multiprocessors idle.

A GEMM of few output tiles (a skinny one, M <= 8 rows of a 4096 x 4096 weight: 16 blocks of
8 x 256; ResNet-50's late convolutions: a few dozen) keeps most of a GPU's 108 or 132 SMs
idle, each busy block walking the whole of K. Split into ``p`` parts along K
(``split_reduction``), the GEMM runs ``p`` times the blocks, each a ``1 / p`` slice of K,
writing partial sums that one more launch adds up in order of the part. The cost model of
the tiling search (``cuda_schedule.model_cycles``: waves, occupancy, the tensor pipe and
the global traffic) prices each ``p``, plus what the split adds::

    split cost      launches x LAUNCH_CYCLES + 2 x p x M x N x accumulator bytes
                                               / (GLOBAL_BYTES_PER_CYCLE x SM count)

(the partial sums written once and read once, over every SM's share of the bandwidth, and
the launches the split adds: the sum's, and the epilogue's where the GEMM had one, since
the epilogue can no longer finish each output tile in the GEMM's launch; its elementwise
blocks are then one pass after the sum). ``p`` runs over powers of two up to MAX_PARTS
that leave every part at least as many k steps as the pipeline has stages; the split is
taken only where the model gains at least MIN_GAIN over the unsplit GEMM, since the model
is an estimate. Kernels are
compiled for every architecture of the family's ``gpu:`` section, so the choice is made on
the oldest one (as ``mapping_cycles`` is), the one with the fewest SMs, unless the caller
compiles for one architecture (``tensorize run --arch``), whose figures are then used.

Integer sums are exact in any order. A float GEMM's parts are summed in float32, as its
accumulator is, so the result is the same terms rounded at other places.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from intrinsics import Intrinsic, Registry
from ir import ScheduleError
from targets.cuda.occupancy import occupancy
from targets.cuda.pipeline import STAGES
from tensorize.engine.cuda_schedule import (GLOBAL_BYTES_PER_CYCLE, CudaTiling, choose_tiling,
                                            estimate, fuse_epilogue_chain, model_cycles,
                                            narrow_inputs, schedule_cuda, sm_number,
                                            tensor_pipe)
from tensorize.match.result import Match
from tensorize.schedule import Schedule, tree

__all__ = ["LAUNCH_CYCLES", "MAX_PARTS", "MIN_GAIN", "SplitChoice", "choose_split", "schedule",
           "split_k"]

MAX_PARTS = 16
# About 3 us between dependent launches on the same stream at 1.4 GHz: an estimate.
LAUNCH_CYCLES = 4000
MIN_GAIN = 0.1


@dataclass(frozen=True, slots=True)
class SplitChoice:
    """How many parts the model takes (1: no split), on which architecture, and the
    modelled cycles of each number of parts it priced."""

    parts: int
    arch: str
    cycles: dict[int, float]

    def describe(self) -> str:
        """One line: the parts and the modelled cycles that chose them."""
        unsplit = self.cycles[1]
        if self.parts == 1:
            return f"no split-K (modelled on {self.arch}: {unsplit:,.0f} cycles unsplit)"
        return (f"split-K in {self.parts} parts (modelled on {self.arch}: "
                f"{self.cycles[self.parts]:,.0f} cycles against {unsplit:,.0f} unsplit)")


def choose_split(extents: tuple[int, int, int], batch: int, intrinsic: Intrinsic,
                 tiling: CudaTiling, registry: Registry, stages: int = STAGES,
                 launches: int = 1, arch: str | None = None) -> SplitChoice:
    """The number of parts the model prices lowest (module docs) for a GEMM of padded
    ``extents`` (m, n, k), ``batch`` GEMMs in the grid, through ``intrinsic`` with
    ``tiling`` and ``stages``, a split adding ``launches`` launches, on ``arch`` (the one
    architecture compiled for; an architecture-specific one, ``sm_90a``, is its base's)
    or, by default, the oldest of the family's ``gpu:`` section."""
    shape = tuple(intrinsic.extents)
    elem = max(intrinsic.operands[0].dtype.bits // 8, 1)
    acc = intrinsic.operands[2].dtype.bits // 8
    arch = (min(registry.gpu(intrinsic.target).architectures, key=sm_number) if arch is None
            else arch.removesuffix("a"))
    limits = registry.gpu(intrinsic.target).architecture(arch)
    pipe = tensor_pipe(intrinsic, arch)
    figures = estimate(tiling, stages, shape, elem)
    fits = functools.partial(occupancy, limits)
    m, n, k = extents
    k_steps = k // tiling.block_tile(*shape)[2]
    cycles = {}
    parts = 1
    while parts <= MAX_PARTS and k_steps % parts == 0 and k_steps // parts >= stages:
        gemm = model_cycles(tiling, figures, (m, n, k // parts), shape, elem, batch * parts,
                            limits, fits, pipe)[2]
        extra = 0.0 if parts == 1 else (
            launches * LAUNCH_CYCLES + 2 * parts * m * n * batch * acc
            / (GLOBAL_BYTES_PER_CYCLE * limits.sm_count))
        cycles[parts] = gemm + extra
        parts *= 2
    if 1 not in cycles:
        cycles[1] = model_cycles(tiling, figures, extents, shape, elem, batch, limits, fits,
                                 pipe)[2]
    best = min(cycles, key=lambda p: (cycles[p], p))
    if cycles[best] > (1 - MIN_GAIN) * cycles[1]:
        best = 1
    return SplitChoice(best, arch, cycles)


def split_k(sch: Schedule, block_name: str, parts: int) -> str:
    """Split the reduction of GEMM-shaped ``block_name`` (iterators ``(outer..., m, n,
    k)``) into ``parts`` along k; the block keeps its name, the part its first iterator.
    Returns the name of the block adding the parts up."""
    block = sch.get_block(block_name)
    loops = sch.get_loops(block)
    if len(loops) < 3:
        raise ScheduleError("cuda split-K", f"block {block_name} has no (m, n, k) loops")
    return sch.split_reduction(block, loops[-1], parts).name


def schedule(sch: Schedule, match: Match, extents: tuple[int, ...], registry: Registry,
             options: Mapping[str, Any]) -> str | None:
    """The engine's cuda entry (see ``tensorize.engine``): tile by ``options["tiling"]``
    when it is a :class:`CudaTiling`, else by ``choose_tiling``; split K where
    :func:`choose_split` gains; then ``schedule_cuda``. Returns the split's description
    where K was split."""
    intrinsic = match.intrinsic
    shape = tuple(iv.extent for iv in intrinsic.iter_vars)
    gemm = tuple(extents[-3:])
    tiling = options.get("tiling")
    if not isinstance(tiling, CudaTiling):
        elem = intrinsic.operands[0].dtype.bits // 8
        tiling = choose_tiling(gemm, shape, elem, narrow_inputs(intrinsic))
    note = None
    if "warpgroup" not in intrinsic.params:
        block = sch.get(sch.get_block(match.block)).block
        output = block.writes[0].buffer.name
        read_after = any(output in {r.buffer.name for r in sch.get(sch.get_block(b)).block.reads}
                         for b in tree.block_names(sch.func) if b != match.block)
        epilogue = read_after and output in {b.name for b in sch.func.allocs}
        choice = choose_split(gemm, math.prod(iv.extent for iv in block.iter_vars[:-3]),
                              intrinsic, tiling, registry, launches=1 + epilogue,
                              arch=options.get("arch"))
        if choice.parts > 1:
            split_k(sch, match.block, choice.parts)
            fuse_epilogue_chain(sch, output)
            note = choice.describe()
    schedule_cuda(sch, match.block, intrinsic, registry, tiling)
    return note
