"""Split-K, the stream-K hybrid, and the tiling chosen together with them, for CUDA GEMMs
whose grid of output tiles leaves multiprocessors idle.

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
that leave every part at least as many k steps as the pipeline has stages.

The stream-K hybrid (:mod:`.cuda_stream_k`) runs the tile rows of the whole waves
unsplit and splits only the rest's K: the data-parallel GEMM's cycles, plus the rest's as a
split, plus one more launch (the second GEMM's; and the second transpose of an 8-bit B).

The tiling is chosen with the split (:func:`choose_grid`): every tiling the search
considers (``tiling_candidates``, each estimated; a narrow input's kept to the warp tile
that does not spill, and any trial whose figures spill refused) is priced unsplit, split
in each ``p`` and as the hybrid, so a tiling that is worse unsplit (a smaller tile, more
blocks) can win split. Since the model is an estimate, the engine's default tiling
(``choose_tiling``) stands unsplit unless a split models at least MIN_GAIN fewer cycles.
The split may come with another tiling where it also models fewer cycles than every tiling
unsplit (the split is then what gains); otherwise it is a split of the default tiling, as
when the split was chosen after the tiling. Another tiling unsplit is never taken here:
retiling is the tiling search's (``tensorize run --tune``), which measures what it ranks;
where the model prices an unsplit tiling below the choice, the note names it.
Kernels are compiled for every architecture of the family's ``gpu:`` section, so the
choice is made on the oldest one (as ``mapping_cycles`` is), the one with the fewest SMs,
unless the caller compiles for one architecture (``tensorize run --arch``), whose figures
are then used.

Integer sums are exact in any order. A float GEMM's parts are summed in float32, as its
accumulator is, so the result is the same terms rounded at other places.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from intrinsics import Intrinsic, Registry
from intrinsics.gpu_target import GpuArchitecture
from ir import ScheduleError
from targets.cuda.occupancy import occupancy
from targets.cuda.pipeline import STAGES
from tensorize.engine.cuda_schedule import (GLOBAL_BYTES_PER_CYCLE, CudaTiling, TensorPipe,
                                            TilingFigures, choose_tiling, estimate,
                                            fuse_epilogue_chain, model_cycles, narrow_inputs,
                                            schedule_cuda, sm_number, tensor_pipe,
                                            tiling_candidates)
from tensorize.engine.cuda_stream_k import data_parallel_rows, stream_k, stream_k_refusal
from tensorize.match.result import Match
from tensorize.schedule import Schedule, tree

__all__ = ["LAUNCH_CYCLES", "MAX_PARTS", "MIN_GAIN", "GridChoice", "GridTrial", "SplitChoice",
           "SplitModel", "SplitPlan", "choose_grid", "choose_split", "schedule", "split_k",
           "split_tilings"]

MAX_PARTS = 16
# About 3 us between dependent launches on the same stream at 1.4 GHz: an estimate.
LAUNCH_CYCLES = 4000
MIN_GAIN = 0.1
# The widest warp tile (m, n) of a narrow input's instruction that compiles without
# spilling (``narrow_inputs``; choose_tiling's narrow block): estimates cannot see the
# spills of a wider one.
NARROW_WARP_TILE = (64, 32)


@dataclass(frozen=True, slots=True)
class SplitModel:
    """The tiling search's cost model for one intrinsic on one architecture (``arch``,
    described by ``limits``), with what a split adds (module docs); ``stages`` of the
    pipeline."""

    shape: tuple[int, int, int]
    elem: int
    acc: int
    arch: str
    limits: GpuArchitecture
    pipe: TensorPipe
    stages: int

    @staticmethod
    def of(intrinsic: Intrinsic, registry: Registry, stages: int = STAGES,
           arch: str | None = None) -> SplitModel:
        """The model of ``intrinsic`` on ``arch`` (the one architecture compiled for; an
        architecture-specific one, ``sm_90a``, is its base's) or, by default, the oldest of
        the family's ``gpu:`` section."""
        gpu = registry.gpu(intrinsic.target)
        name = (min(gpu.architectures, key=sm_number) if arch is None
                else arch.removesuffix("a"))
        return SplitModel(tuple(intrinsic.extents), max(intrinsic.operands[0].dtype.bits // 8, 1),
                          intrinsic.operands[2].dtype.bits // 8, name, gpu.architecture(name),
                          tensor_pipe(intrinsic, name), stages)

    def gemm(self, tiling: CudaTiling, figures: TilingFigures,
             extents: tuple[int, int, int], batch: int) -> float:
        """Modelled cycles of one GEMM launch of padded ``extents``, ``batch`` GEMMs in its
        grid (infinite where the tiling does not fit or spills)."""
        return model_cycles(tiling, figures, extents, self.shape, self.elem, batch,
                            self.limits, functools.partial(occupancy, self.limits),
                            self.pipe)[2]

    def parts(self, tiling: CudaTiling, k: int) -> list[int]:
        """The numbers of parts to price: 1, then the powers of two up to MAX_PARTS that
        divide the k steps leaving each part at least ``stages`` of them."""
        steps = k // tiling.block_tile(*self.shape)[2]
        found = [1]
        parts = 2
        while parts <= MAX_PARTS and steps % parts == 0 and steps // parts >= self.stages:
            found.append(parts)
            parts *= 2
        return found

    def split(self, tiling: CudaTiling, figures: TilingFigures, extents: tuple[int, int, int],
              batch: int, parts: int, launches: int) -> float:
        """Modelled cycles of the GEMM split in ``parts`` (the GEMM alone for 1), the split
        adding ``launches`` launches (module docs)."""
        m, n, k = extents
        gemm = self.gemm(tiling, figures, (m, n, k // parts), batch * parts)
        if parts == 1:
            return gemm
        return gemm + (launches * LAUNCH_CYCLES + 2 * parts * m * n * batch * self.acc
                       / (GLOBAL_BYTES_PER_CYCLE * self.limits.sm_count))

    def wave(self, tiling: CudaTiling, figures: TilingFigures) -> int:
        """Blocks that run at once on the GPU: blocks per SM times the SMs (0: no fit)."""
        warps = tiling.warps[0] * tiling.warps[1]
        fit = occupancy(self.limits, figures.registers, figures.shared_bytes, 32 * warps)
        return fit.blocks * self.limits.sm_count


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
    ``extents`` (m, n, k), ``batch`` GEMMs in the grid, through ``intrinsic`` with the
    given ``tiling`` and ``stages``, a split adding ``launches`` launches, on ``arch``
    (:meth:`SplitModel.of`): a split is taken where it gains at least MIN_GAIN."""
    model = SplitModel.of(intrinsic, registry, stages, arch)
    figures = estimate(tiling, stages, model.shape, model.elem)
    cycles = {p: model.split(tiling, figures, extents, batch, p, launches)
              for p in model.parts(tiling, extents[2])}
    best = min(cycles, key=lambda p: (cycles[p], p))
    if cycles[best] > (1 - MIN_GAIN) * cycles[1]:
        best = 1
    return SplitChoice(best, model.arch, cycles)


@dataclass(frozen=True, slots=True)
class SplitPlan:
    """How a GEMM runs: ``tiling``, K in ``parts`` (1: unsplit) and, for the stream-K
    hybrid, the ``rows`` of output tiles (block tiles along M) run unsplit first (0: every
    tile alike). Given as ``auto_tensorize``'s ``tiling``, the engine runs it as it is."""

    tiling: CudaTiling
    parts: int = 1
    rows: int = 0

    def describe(self, shape: tuple[int, int, int]) -> str:
        """What runs, in a few words: the mode and the block tile."""
        bm, bn, _ = self.tiling.block_tile(*shape)
        if self.rows:
            return (f"stream-K hybrid, block {bm}x{bn}: rows below {self.rows * bm} "
                    f"data-parallel, the rest split-K in {self.parts} parts")
        if self.parts > 1:
            return f"split-K in {self.parts} parts, block {bm}x{bn}"
        return f"unsplit, block {bm}x{bn}"


@dataclass(frozen=True, slots=True)
class GridTrial:
    """One priced :class:`SplitPlan` and its modelled ``cycles``."""

    plan: SplitPlan
    cycles: float

    @property
    def mode(self) -> str:
        """"unsplit", "split-K" or "stream-K"."""
        if self.plan.rows:
            return "stream-K"
        return "split-K" if self.plan.parts > 1 else "unsplit"


@dataclass(frozen=True, slots=True)
class GridChoice:
    """What :func:`choose_grid` takes (``chosen``) against the engine's default tiling
    unsplit (``default``), on ``arch`` for the intrinsic's ``shape``, and the best trial of
    each mode it priced (``best``: "unsplit", "split-K", "stream-K")."""

    chosen: GridTrial
    default: GridTrial
    arch: str
    shape: tuple[int, int, int]
    best: dict[str, GridTrial]

    def describe(self) -> str:
        """One line: the choice, and the modelled cycles that chose it against the default
        unsplit and, where another tiling models fewer cycles unsplit, that one."""
        unsplit = self.best.get("unsplit", self.default)
        other = ("" if unsplit.plan == self.default.plan else
                 f"; best unsplit {unsplit.cycles:,.0f}, {unsplit.plan.describe(self.shape)}")
        return (f"{self.chosen.plan.describe(self.shape)} (modelled on {self.arch}: "
                f"{self.chosen.cycles:,.0f} cycles against {self.default.cycles:,.0f} "
                f"{self.default.plan.describe(self.shape)}{other})")


def choose_grid(extents: tuple[int, int, int], batch: int, intrinsic: Intrinsic,
                registry: Registry, default: CudaTiling, launches: int = 1,
                hybrid_launches: int = 1, tilings: list[CudaTiling] | None = None,
                figures: Callable[[CudaTiling], TilingFigures] | None = None,
                arch: str | None = None, stages: int = STAGES) -> GridChoice:
    """The tiling and split the model prices lowest (module docs) for a GEMM of padded
    ``extents`` (m, n, k), ``batch`` GEMMs in the grid, through ``intrinsic``, against the
    engine's ``default`` tiling unsplit. ``tilings`` are priced (by default the search's
    candidates, :func:`split_tilings`), each by ``figures`` (by default the estimate; a
    trial whose figures spill is refused); a split adds ``launches`` launches, the stream-K
    hybrid ``hybrid_launches`` more (0 rules it out: its GEMM cannot run so)."""
    model = SplitModel.of(intrinsic, registry, stages, arch)
    figures_of = figures or (lambda t: estimate(t, stages, model.shape, model.elem))
    candidates = split_tilings(extents, intrinsic, default) if tilings is None else tilings
    trials = []
    for tiling in candidates:
        trials += _trials(model, tiling, figures_of(tiling), extents, batch, launches,
                          hybrid_launches)
    baseline = _trials(model, default, figures_of(default), extents, batch, launches, 0)[0]
    best: dict[str, GridTrial] = {}
    for trial in trials:
        if trial.mode not in best or trial.cycles < best[trial.mode].cycles:
            best[trial.mode] = trial
    split = min((best[mode] for mode in ("split-K", "stream-K") if mode in best),
                key=lambda t: t.cycles, default=baseline)
    own = min((t for t in trials if t.plan.tiling == default), key=lambda t: t.cycles,
              default=baseline)
    gains = (lambda trial: trial.cycles <= (1 - MIN_GAIN) * baseline.cycles)
    # Another tiling comes with a split only where the split is what gains: where that
    # tiling (or another) would do better unsplit, retiling is the tiling search's, and the
    # default tiling is split alone, as without the joint search.
    if gains(split) and split.cycles < best.get("unsplit", baseline).cycles:
        chosen = split
    else:
        chosen = own if gains(own) else baseline
    return GridChoice(chosen, baseline, model.arch, model.shape, best)


def _trials(model: SplitModel, tiling: CudaTiling, figures: TilingFigures,
            extents: tuple[int, int, int], batch: int, launches: int,
            hybrid_launches: int) -> list[GridTrial]:
    """``tiling`` priced unsplit, split in each number of parts and, where
    ``hybrid_launches``, as the hybrid at each count of data-parallel tile rows."""
    m, n, k = extents
    bm, bn, _ = tiling.block_tile(*model.shape)
    parts = model.parts(tiling, k)
    found = [GridTrial(SplitPlan(tiling, p),
                       model.split(tiling, figures, extents, batch, p, launches))
             for p in parts]
    wave = model.wave(tiling, figures)
    if not hybrid_launches or not wave or len(parts) == 1:
        return found
    for rows in data_parallel_rows(m // bm, n // bn * batch, wave):
        unsplit = model.gemm(tiling, figures, (rows * bm, n, k), batch)
        rest = (m - rows * bm, n, k)
        for p in parts[1:]:
            cycles = unsplit + model.split(tiling, figures, rest, batch, p,
                                           launches + hybrid_launches)
            found.append(GridTrial(SplitPlan(tiling, p, rows), cycles))
    return found


def split_tilings(extents: tuple[int, int, int], intrinsic: Intrinsic,
                  default: CudaTiling) -> list[CudaTiling]:
    """The tilings priced with the split: the engine's ``default`` and every tiling of the
    search's candidates (``tiling_candidates``), those of a narrow input's instruction
    (``narrow_inputs``) no wider a warp than NARROW_WARP_TILE."""
    shape = tuple(intrinsic.extents)
    elem = max(intrinsic.operands[0].dtype.bits // 8, 1)
    found = [default]
    for tiling, _ in tiling_candidates(extents, shape, elem):
        if tiling in found:
            continue
        warp = (tiling.fragments[0] * shape[0], tiling.fragments[1] * shape[1])
        if narrow_inputs(intrinsic) and (warp[0] > NARROW_WARP_TILE[0]
                                         or warp[1] > NARROW_WARP_TILE[1]):
            continue
        found.append(tiling)
    return found


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
    """The engine's cuda entry (see ``tensorize.engine``): ``options["tiling"]`` run as it
    is when it is a :class:`SplitPlan`; with a :class:`CudaTiling` that tiling, split
    where :func:`choose_split` gains; else the tiling and split :func:`choose_grid` takes.
    Then ``schedule_cuda`` for each GEMM launch. Returns the choice's description where it
    is not the default tiling unsplit."""
    intrinsic = match.intrinsic
    shape = tuple(iv.extent for iv in intrinsic.iter_vars)
    gemm = tuple(extents[-3:])
    given = options.get("tiling")
    elem = intrinsic.operands[0].dtype.bits // 8
    default = (given if isinstance(given, CudaTiling)
               else choose_tiling(gemm, shape, elem, narrow_inputs(intrinsic)))
    if "warpgroup" in intrinsic.params:
        schedule_cuda(sch, match.block, intrinsic, registry, default)
        return None
    if isinstance(given, SplitPlan):
        _check_plan(sch, match.block, given, gemm, shape)
        _run(sch, match.block, intrinsic, registry, given)
        return None if given.parts == 1 else f"{given.describe(shape)} (as given)"
    block = sch.get(sch.get_block(match.block)).block
    output = block.writes[0].buffer.name
    read_after = any(output in {r.buffer.name for r in sch.get(sch.get_block(b)).block.reads}
                     for b in tree.block_names(sch.func) if b != match.block)
    launches = 1 + (read_after and output in {b.name for b in sch.func.allocs})
    batch = math.prod(iv.extent for iv in block.iter_vars[:-3])
    arch = options.get("arch")
    if isinstance(given, CudaTiling):
        choice = choose_split(gemm, batch, intrinsic, given, registry, launches=launches,
                              arch=arch)
        _run(sch, match.block, intrinsic, registry, SplitPlan(given, choice.parts))
        return None if choice.parts == 1 else choice.describe()
    grid = choose_grid(gemm, batch, intrinsic, registry, default, launches,
                       _hybrid_launches(sch, match.block, intrinsic), arch=arch)
    _run(sch, match.block, intrinsic, registry, grid.chosen.plan)
    return None if grid.chosen.plan == SplitPlan(default) else grid.describe()


def _run(sch: Schedule, block: str, intrinsic: Intrinsic, registry: Registry,
         plan: SplitPlan) -> None:
    """Schedule GEMM ``block`` by ``plan``: a split, or the hybrid's partition and split,
    first (the epilogue after the GEMM's output then one pass after its sums), then
    ``schedule_cuda`` for each GEMM launch."""
    gemms = [block]
    if plan.parts > 1:
        output = sch.get(sch.get_block(block)).block.writes[0].buffer.name
        if plan.rows:
            # Fused while the output has one writer; it runs after both launches.
            fuse_epilogue_chain(sch, output)
            rows = plan.rows * plan.tiling.block_tile(*intrinsic.extents)[0]
            gemms.append(stream_k(sch, block, rows, plan.parts))
        else:
            split_k(sch, block, plan.parts)
            fuse_epilogue_chain(sch, output)
    for gemm in gemms:
        schedule_cuda(sch, gemm, intrinsic, registry, plan.tiling)


def _check_plan(sch: Schedule, block: str, plan: SplitPlan, extents: tuple[int, int, int],
                shape: tuple[int, int, int]) -> None:
    """Refuse a given ``plan`` the GEMM ``block`` of padded ``extents`` cannot run: parts
    that do not divide its k steps, data-parallel rows not short of its tile rows, or a
    hybrid its operands rule out (:func:`stream_k_refusal`)."""
    bm, _, bk = plan.tiling.block_tile(*shape)
    steps, tile_rows = extents[2] // bk, extents[0] // bm
    if plan.parts < 1 or steps % plan.parts:
        raise ScheduleError("cuda split-K", f"block {block} requires parts dividing its "
                            f"{steps} k steps of {bk}, got {plan.parts}")
    if plan.rows and (plan.parts == 1 or not 0 < plan.rows < tile_rows):
        raise ScheduleError("cuda stream-K", f"block {block} requires a split and data-parallel "
                            f"rows between 1 and {tile_rows - 1} tiles of {bm}, got "
                            f"{plan.rows} rows in {plan.parts} parts")
    refusal = stream_k_refusal(sch, block) if plan.rows else None
    if refusal is not None:
        raise ScheduleError("cuda stream-K", f"block {block} cannot run as the hybrid: {refusal}")


def _hybrid_launches(sch: Schedule, block: str, intrinsic: Intrinsic) -> int:
    """The launches the stream-K hybrid adds to a split (the second GEMM's; an 8-bit B's
    second transpose), or 0 where the GEMM cannot run so (:func:`stream_k_refusal`)."""
    if stream_k_refusal(sch, block) is not None:
        return 0
    return 1 + (intrinsic.operands[1].dtype.bits == 8)
