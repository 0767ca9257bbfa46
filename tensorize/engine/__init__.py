"""The auto-tensorizer: find the blocks a target's intrinsics can compute, rewrite them, and
say what happened to every block.

:func:`auto_tensorize` matches every block against the target's GEMM-class compute
intrinsics (:mod:`tensorize.match`), takes the cheapest mapping (by the kind's estimate,
:data:`ESTIMATES`, else the matcher's cost), brings the block into the intrinsic's shape
(:mod:`.gemm_view`), and schedules it by the kind of target the descriptions make it
(:data:`SCHEDULES`): a CPU's register-blocked micro-kernel (:mod:`.cpu_schedule`), the NPU's
scratchpad tiles, DMA staging and resets (:mod:`.npu_schedule`), CUDA's block and warp tiles
(:mod:`.cuda_schedule`; on sm_90a a lone GEMM takes Hopper's warp-specialised wgmma GEMM,
:mod:`.cuda_hopper`), or, for a kind with no schedule of its own, the generic one (tile
and tensorize). Every step is a schedule primitive, so the result carries a replayable
trace. A block that matches nothing, or whose rewrite is refused, is left as it was and
reported with the reason; nothing is skipped silently.
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from intrinsics import Intrinsic, Registry, feature_names
from ir import BlockRealize, IterKind, PrimFunc, ScheduleError, TensorizeError
from simulator import MachineConfig
from tensorize.engine import (cpu_epilogue, cpu_schedule, cuda_grouped, cuda_hopper,
                              cuda_schedule, cuda_split, npu_schedule, npu_vector)
from tensorize.engine.count import count_calls
from tensorize.engine.gemm_view import pad_to_multiples, to_intrinsic_layout
from tensorize.engine.generic_schedule import schedule_generic
from tensorize.engine.npu_schedule import NpuTiling
from tensorize.match import Match, Mismatch, match_block
from tensorize.match.explain import format_result
from tensorize.schedule import Schedule, tree

# How many mappings of one block the engine tries before it reports the first refusal.
MAPPINGS_TRIED = 8

__all__ = ["ESTIMATES", "MACHINE_KINDS", "RESHAPES", "SCHEDULES", "BlockOutcome",
           "IntrinsicChoiceError", "Tensorized", "auto_tensorize", "candidate_intrinsics",
           "count_calls", "named_intrinsic", "target_features"]

# A target's schedule, by the kind of target its descriptions make it
# (``Registry.target_kind``): ``schedule(sch, match, extents, registry, options)``, where
# ``extents`` are the padded extents of the block in the intrinsic's shape and ``options``
# holds ``config``, ``tiling`` and ``arch`` (None unless the caller chose them); it may
# return a note on a choice it made (cuda: split-K), which the block's mapping then ends
# with. A kind not listed gets the generic schedule.
SCHEDULES: Mapping[str, Callable[..., str | None]] = {
    "cpu": cpu_schedule.schedule,
    "npu": npu_schedule.schedule,
    "cuda": cuda_split.schedule,
}

# A target's padding of a block in the intrinsic's layout, where it pads beyond the
# intrinsic's multiples: ``padding(sch, match, extents, registry, options) -> (multiples,
# options)``, given the extents of the intrinsic's iterators before padding; it returns a
# multiple for each and the options its schedule then takes (the NPU pads M to the row
# tile it chooses here, and hands the tiling on).
PADDINGS: Mapping[str, Callable[..., tuple[list[int], dict[str, Any]]]] = {
    "npu": npu_schedule.padding,
}

# The kinds whose schedule tiles for a machine (the NPU's array and memories): for a target
# of these, ``auto_tensorize`` requires ``config``. The machine comes from the edge (the run
# context's, or ``targets.npu.load_machine(path)``); nothing below it loads a default one.
MACHINE_KINDS = frozenset({"npu"})

# What a kind does to a block no intrinsic matches, to bring it into a form one does
# (``reshape(sch, block, candidates, options) -> bool``, True when it rewrote the block; the
# block keeps its name): the NPU writes a depthwise reduction as grouped GEMMs with diagonal
# weight tiles. The block is matched again; if it still fits nothing, or every rewrite is
# refused, the reshaping is undone and the block reported as it was. A reshape trades host
# work (packing) and wasted MACs for the intrinsic, which does not pay by default (the
# depthwise figures in docs/npu_backend.md), so it is tried only when the caller names the
# intrinsic.
RESHAPES: Mapping[str, Callable[..., bool]] = {
    "npu": npu_schedule.reshape,
    "cuda": cuda_grouped.reshape,
    "cpu": cpu_schedule.reshape,
}
# What a kind does with a kernel of elementwise blocks alone, which no compute intrinsic
# that reduces matches: ``(applies(sch), schedule(sch, registry, config))``; the schedule
# raises ScheduleError with the reason when it cannot (the NPU: a requantisation, residual
# add or ReLU run a tile at a time on the vector unit, ``npu_vector``).
ELEMENTWISE: Mapping[str, tuple[Callable[[Schedule], bool], Callable[..., None]]] = {
    "npu": (npu_vector.elementwise_only, npu_vector.schedule_vector),
}
# What a kind does, once its blocks are tensorized, with the elementwise blocks after them
# that stay loops of their own (``finish(sch)``): a CPU inlines each into the next, so the
# epilogue is one pass over the GEMM's result (``cpu_epilogue``).
EPILOGUES: Mapping[str, Callable[[Schedule], object]] = {
    "cpu": cpu_epilogue.inline_epilogues,
}
# Kinds whose reshape wastes nothing (cuda: a grouped convolution as a batched GEMM; cpu: an
# int8 operand shifted to VPDPBUSD's uint8, one pass over it and one sum of the other), so it
# is tried for every block no intrinsic matches, not only when the caller names one. A
# reshape may refuse a block it recognises with a ScheduleError: its message is the reason.
RESHAPED_BY_DEFAULT = frozenset({"cuda", "cpu"})

# What a mapping costs once a kind's schedule has run, where the intrinsic call count alone
# misleads (``estimate(func, match, registry)``, lower is better): a CPU's register blocking
# makes a 16-MAC dot product cheaper than a 32-MAC matrix multiply that gets none. Mappings
# are tried cheapest first; a kind not listed goes by the matcher's cost (calls first).
ESTIMATES: Mapping[str, Callable[[PrimFunc, Match, Registry], float]] = {
    "cpu": cpu_schedule.estimate,
    "cuda": cuda_schedule.mapping_cycles,
}


class IntrinsicChoiceError(TensorizeError):
    """An intrinsic named by the caller cannot be used for the target: no description
    declares it, it belongs to another target, or it is not a compute intrinsic."""


@dataclass(frozen=True, slots=True)
class BlockOutcome:
    """What became of one block: the intrinsic it now calls (None: untouched), the mapping
    as one line, the reason when it was not tensorized, and the padded extents of the
    intrinsic-shaped iteration space (one per intrinsic iterator)."""

    block: str
    intrinsic: str | None
    mapping: str
    reason: str = ""
    extents: tuple[int, ...] = ()
    # True when the block is no kernel of its own any more: a target schedule folded it into
    # a tensorized block (cuda: a padding into the GEMM's zero-filling copies).
    folded: bool = False


@dataclass(frozen=True, slots=True)
class Tensorized:
    """The result of :func:`auto_tensorize`: the rewritten function, its schedule (whose trace
    replays the rewrite), one outcome per block, the per-pair explanations and the time the
    rewrite took."""

    original: PrimFunc
    schedule: Schedule
    target: str
    blocks: tuple[BlockOutcome, ...]
    explain: tuple[str, ...]
    seconds: float
    # cuda on sm_90a: the Hopper GEMM the kernel became, or why the schedule refused it
    # (None for other architectures and kinds).
    hopper: cuda_hopper.HopperChoice | None = None

    @property
    def func(self) -> PrimFunc:
        """The tensorized function."""
        return self.schedule.func

    @property
    def tensorized(self) -> tuple[BlockOutcome, ...]:
        """The blocks that now call an intrinsic."""
        return tuple(b for b in self.blocks if b.intrinsic is not None)


def candidate_intrinsics(registry: Registry, target: str, name: str | None = None,
                         features: str | None = None) -> list[Intrinsic]:
    """The intrinsics the tensorizer tries for ``target``: its compute intrinsics that reduce
    and accumulate (resetting variants are used through ``fold_init``) and, when
    ``features`` is given (``"+neon,+dotprod,+i8mm"``), that those features provide; or only
    ``name``, a compute intrinsic of ``target`` (whatever features it needs)."""
    if name is not None:
        return [named_intrinsic(registry, target, name)]
    enabled = None if features is None else feature_names(features)
    return [i for i in registry.compute_intrinsics(target)
            if i.reduce_vars() and not i.resets and i.available(enabled)]


def named_intrinsic(registry: Registry, target: str, name: str,
                    who: str = "auto_tensorize(intrinsic=...)") -> Intrinsic:
    """The compute intrinsic ``name`` of ``target``; IntrinsicChoiceError (``who`` names the
    option or argument at fault) when no description declares it (with close names), or it
    belongs to another target, or it is not a compute intrinsic."""
    listing = f"run 'tensorize intrinsics list --target {target}' to see them"
    if name not in registry:
        own = [i.name for i in registry.for_target(target)]
        close = (difflib.get_close_matches(name, own, n=3)
                 or difflib.get_close_matches(name, [i.name for i in registry], n=3))
        hint = f"did you mean {', '.join(close)}?" if close else listing
        raise IntrinsicChoiceError(f"{who} requires an intrinsic of target {target}, got "
                                   f"{name!r}, which no description declares; {hint}")
    intrinsic = registry.get(name)
    if intrinsic.target != target:
        raise IntrinsicChoiceError(
            f"{who} requires an intrinsic of target {target}, got {name}, an intrinsic of "
            f"target {intrinsic.target}; tensorize for {intrinsic.target} instead, or name "
            f"one of {target}'s ({listing})")
    if intrinsic.kind != "compute":
        raise IntrinsicChoiceError(
            f"{who} requires a compute intrinsic of target {target}, got {name}, a "
            f"{intrinsic.kind} intrinsic (the tensorizer places those itself); {listing}")
    return intrinsic


def target_features(target: str, *, registry: Registry) -> str | None:
    """The target's default features (``+neon,+dotprod``: a CPU target's ``cpu.features``)
    in ``registry``, or None when its descriptions declare none (every intrinsic is then
    available)."""
    if registry.target_kind(target) != "cpu":
        return None
    return registry.cpu(target).default_features


def auto_tensorize(func: PrimFunc, target: str, *, registry: Registry,
                   intrinsic: str | None = None, config: MachineConfig | None = None,
                   tiling: NpuTiling | cpu_schedule.CpuTiling | cpu_schedule.TileChoice
                   | cuda_schedule.CudaTiling | cuda_split.SplitPlan | None = None,
                   features: str | None = None, arch: str | None = None,
                   cluster: int = 1) -> Tensorized:
    """Tensorize every block of ``func`` that an intrinsic of ``target`` can compute.

    ``registry`` holds the descriptions (the run context's, made at the edge:
    ``intrinsics.default_registry()`` there for the built-in ones); the result's schedule
    is made with it, so its trace replays with it. ``intrinsic`` restricts the search to
    one compute intrinsic of ``target`` (by name; IntrinsicChoiceError when ``target`` has
    no such intrinsic), and lets the target reshape a block no intrinsic matches
    (:data:`RESHAPES`: the NPU's depthwise reduction).
    ``features`` selects the target features (``"+neon,+dotprod,+i8mm"``; default: the
    target's own), and with them the intrinsics tried. For the NPU (a kind of
    :data:`MACHINE_KINDS`), ``config`` is the machine, made at the edge and required
    (TypeError without it), and ``tiling`` overrides the chosen tile; for a CPU target,
    ``tiling`` is a register tile or a choice of one per block (``cpu_schedule.TileChoice``);
    for cuda, the block, warp and k tiles (``cuda_schedule.CudaTiling``; its split then
    chosen for it alone), or a whole plan with its split (``cuda_split.SplitPlan``, run as
    it is). ``arch`` (cuda only) is the architecture to schedule for: on ``sm_90a`` a
    kernel that is one GEMM block, possibly batched and followed by elementwise blocks
    (fused into its store, each reported folded), takes the Hopper schedule
    (:func:`.cuda_hopper.hopper_view`: wgmma fed by TMA) unless ``tiling`` is given;
    otherwise, and for any other architecture, the families of the ``gpu:`` section's
    architectures as without it, the result's ``hopper`` holding the reason. ``cluster``
    (sm_90a only): the Hopper GEMM's thread-block clusters, that many blocks along N
    sharing A's tile by a multicast tensor copy (1: none).
    """
    start = time.perf_counter()
    kind = registry.target_kind(target)
    if arch is not None and kind != "cuda":
        raise TypeError(f"auto_tensorize(arch=...) applies to a target of kind cuda, got "
                        f"target {target} of kind {kind}")
    if cluster != 1 and arch != cuda_hopper.HOPPER_ARCH:
        raise TypeError(f"auto_tensorize(cluster=...) applies to arch "
                        f"{cuda_hopper.HOPPER_ARCH}, got arch {arch}")
    hopper = None
    if arch == cuda_hopper.HOPPER_ARCH and tiling is None:
        hopper = _hopper(func, registry, intrinsic, cluster)
        if hopper.gemm is not None:
            gemm = hopper.gemm
            sch = Schedule(func, registry)
            try:
                extents = cuda_hopper.schedule_hopper(sch, gemm)
            except ScheduleError as err:
                hopper = cuda_hopper.HopperChoice(None, f"rewrite refused: {err}")
            else:
                outcome = BlockOutcome(gemm.block, gemm.intrinsic.name,
                                       _mapping([gemm.match]), "", extents)
                fused = tuple(BlockOutcome(b, None, "", f"computed in block {gemm.block}'s "
                                           "store, on its wgmma accumulator registers",
                                           folded=True) for b in gemm.fused)
                return Tensorized(func, sch, target, (outcome, *fused),
                                  (format_result([gemm.match]),),
                                  time.perf_counter() - start, hopper)
    if kind in MACHINE_KINDS and not isinstance(config, MachineConfig):
        raise TypeError(f"auto_tensorize requires config, the machine (a MachineConfig: the "
                        f"run context's, or targets.npu.load_machine(path)), for target "
                        f"{target} of kind {kind}, got {config!r}")
    features = features if features is not None else target_features(target, registry=registry)
    candidates = candidate_intrinsics(registry, target, intrinsic, features)
    sch = Schedule(func, registry)
    estimate, reshape = ESTIMATES.get(kind), RESHAPES.get(kind)
    outcomes: list[BlockOutcome] = []
    explain: list[str] = []
    for block in tree.block_names(func):
        results, matches = _matches(sch, block, candidates, registry, estimate)
        explain.extend(format_result(r) for r in results.values() if r is not None)
        before = sch.snapshot()
        refused = None
        if not matches and reshape and (intrinsic is not None or kind in RESHAPED_BY_DEFAULT):
            try:
                if reshape(sch, block, candidates, {"config": config}):
                    matches = _matches(sch, block, candidates, registry, estimate)[1]
            except ScheduleError as err:
                refused = str(err)
        if not matches:
            sch.restore(before)
            reasons = [r.reason for r in results.values() if isinstance(r, Mismatch)]
            outcomes.append(BlockOutcome(block, None, "", refused or (
                reasons[0] if reasons else f"no {target} intrinsic to try")))
            continue
        # The cheapest mapping first; when its rewrite is refused, the next ones.
        refusals = []
        for match in matches[:MAPPINGS_TRIED]:
            outcome = _rewrite(sch, match, target, registry, config, tiling, arch)
            if outcome.intrinsic is not None:
                break
            refusals.append(outcome)
        else:
            outcome = refusals[0]
            sch.restore(before)
        outcomes.append(outcome)
    if kind in ELEMENTWISE and not any(o.intrinsic for o in outcomes) \
            and ELEMENTWISE[kind][0](sch):
        outcomes = _elementwise(sch, kind, registry, config, outcomes)
    if kind in EPILOGUES and any(o.intrinsic for o in outcomes):
        EPILOGUES[kind](sch)
    return Tensorized(func, sch, target, tuple(_fused(sch.func, outcomes)), tuple(explain),
                      time.perf_counter() - start, hopper)


def _hopper(func: PrimFunc, registry: Registry, intrinsic: str | None, cluster: int
            ) -> cuda_hopper.HopperChoice:
    """The Hopper schedule's view of ``func`` (in clusters of ``cluster`` blocks), or its
    refusal as the reason."""
    try:
        return cuda_hopper.HopperChoice(cuda_hopper.hopper_view(func, registry, intrinsic,
                                                                cluster))
    except ScheduleError as err:
        return cuda_hopper.HopperChoice(None, str(err))


def _mapping(matches: list[Match]) -> str:
    """The mapping of the first of ``matches`` as one line (the explanation's middle)."""
    return format_result(matches).split("  ", 1)[1].rsplit("  (", 1)[0]


def _elementwise(sch: Schedule, kind: str, registry: Registry, config: MachineConfig | None,
                 outcomes: list[BlockOutcome]) -> list[BlockOutcome]:
    """A kernel of elementwise blocks alone, by the kind's elementwise schedule
    (:data:`ELEMENTWISE`): each block reported with the intrinsic its tile calls, or, when
    the schedule refuses, every block with the refusal (``sch`` restored)."""
    before = sch.snapshot()
    try:
        ELEMENTWISE[kind][1](sch, registry, config)
    except ScheduleError as err:
        sch.restore(before)
        return [replace(o, reason=f"{o.reason}; as a vector kernel: {err.message}")
                for o in outcomes]
    called = {}
    for stmt, _ in tree.walk_stmts(sch.func):
        if isinstance(stmt, BlockRealize):
            called.update((stmt.block.name, value) for key, value in stmt.block.annotations
                          if key == "tensorized")
    return [BlockOutcome(o.block, called.get(f"{o.block}_o") or called.get(o.block),
                         "a tile at a time on the vector unit") for o in outcomes]


def _matches(sch: Schedule, block: str, candidates: list[Intrinsic], registry: Registry,
             estimate: Callable[[PrimFunc, Match, Registry], float] | None
             ) -> tuple[dict[str, list[Match] | Mismatch | None], list[Match]]:
    """Each candidate's result for ``block`` (None when the block is gone), and every
    mapping found, in the order they are tried."""
    present = block in tree.block_names(sch.func)
    results = {i.name: match_block(sch.func, block, i, registry) if present else None
               for i in candidates}
    matches = sorted((m for r in results.values() if isinstance(r, list) for m in r),
                     key=lambda m: (_outer_reduction(sch.func, m),
                                    estimate(sch.func, m, registry) if estimate else 0.0,
                                    m.cost))
    return results, matches


def _outer_reduction(func: PrimFunc, match: Match) -> bool:
    """True when the mapping leaves a reduce iterator as a loop around the calls: the
    accumulator tile is then finished only after the outer loop, which staging schedules
    cannot express, so such mappings are tried last."""
    block = tree.find_block(func, match.block).node.block
    kinds = {iv.var.name: iv.kind for iv in block.iter_vars}
    return any(kinds.get(name) is IterKind.REDUCE for name in match.outer)


def _fused(func: PrimFunc, outcomes: list[BlockOutcome]) -> list[BlockOutcome]:
    """Each block is reported with the intrinsic its tile really calls: one a target
    schedule tensorized while scheduling another (an epilogue folded onto the accumulator
    tile), or a tile that took the family's resetting variant instead of the matched one (a
    reduction one tile deep)."""
    called = {}
    for stmt, _ in tree.walk_stmts(func):
        if isinstance(stmt, BlockRealize):
            for key, value in stmt.block.annotations:
                if key == "tensorized":
                    called[stmt.block.name] = value
    present = set(tree.block_names(func))
    result = []
    for outcome in outcomes:
        name = called.get(f"{outcome.block}_o")
        if outcome.intrinsic is None and name is not None:
            outcome = BlockOutcome(outcome.block, name, "fused onto the accumulator tile")
        elif outcome.intrinsic is None and outcome.block not in present:
            outcome = replace(outcome, folded=True)
        elif name is not None and name != outcome.intrinsic:
            outcome = replace(outcome, intrinsic=name)
        result.append(outcome)
    return result


def _rewrite(sch: Schedule, match: Match, target: str, registry: Registry,
             config: MachineConfig | None,
             tiling: NpuTiling | cpu_schedule.CpuTiling | cpu_schedule.TileChoice | None,
             arch: str | None = None) -> BlockOutcome:
    """Apply one match; on a refusal, restore the schedule and report why."""
    before = sch.snapshot()
    mapping = _mapping([match])
    count = len(match.intrinsic.iter_vars)
    kind = registry.target_kind(target)
    options: dict[str, Any] = {"config": config, "tiling": tiling, "arch": arch}
    try:
        unpadded = to_intrinsic_layout(sch, match)
        multiples = [iv.extent for iv in match.intrinsic.iter_vars]
        target_padding = PADDINGS.get(kind)
        if target_padding is not None:
            multiples, options = target_padding(sch, match, unpadded, registry, options)
        pad_to_multiples(sch, match, multiples)
        ivs = sch.get(sch.get_block(match.block)).block.iter_vars
        extents = tuple(iv.extent for iv in ivs[-count:])
        target_schedule = SCHEDULES.get(kind)
        if target_schedule is not None:
            note = target_schedule(sch, match, extents, registry, options)
            mapping = f"{mapping}; {note}" if note else mapping
        else:
            schedule_generic(sch, match.block, match.intrinsic)
    except ScheduleError as err:
        sch.restore(before)
        return BlockOutcome(match.block, None, mapping, f"rewrite refused: {err}")
    return BlockOutcome(match.block, match.intrinsic.name, mapping, "", extents)
