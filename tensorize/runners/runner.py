"""One runner per target kind, the same typed steps for each, and the one route a kernel
takes through them (:func:`run_kernel`):

1. tensorize every block an intrinsic of the target computes (one ``tensorize`` step per
   block: the intrinsic and mapping, or why not), and stop when the options say the result
   is not enough (``RunOutcome.refusal``);
2. validate: the tensorized IR on the host, each intrinsic run as its semantics, against the
   untouched kernel on the same inputs (exact for integers);
3. build and run the target's code (simulate, emulate, execute natively or on a GPU) and
   check its outputs against the reference executor, or, for a float output computed by an
   intrinsic that states its ``accumulation``, bit for bit against the hardware-order
   reference and within its bound of float64 (:mod:`tensorize.hardware_order`); measure
   what the target measures;
4. count the intrinsic calls executed per block.

The runner of a target is chosen by the target's kind, from its YAML (:data:`RUNNERS`),
never by its name. ``tensorize run``, sweeps and benches call :func:`run_kernel` or a
runner's steps; none of them re-assembles the steps.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TextIO

import numpy as np

from intrinsics import Registry, lowerer
from ir import BlockRealize, IterKind, PrimFunc
from ir.printer import print_node
from tensorize.engine import BlockOutcome, Tensorized, auto_tensorize, count_calls
from tensorize.engine.count import count_calls_by_block
from tensorize.hardware_order import expected_outputs
from tensorize.runners.context import ContextError, RunContext
from tensorize.runners.macs import mac_figures
from tensorize.runners.report import RunReport
from tensorize.schedule import tree
from tensorize.validate import Expected, HostRuns, compare

Arrays = dict[str, np.ndarray]
Timeline = Callable[[TextIO], None]


@dataclass(frozen=True)
class RunOptions:
    """What a run does beyond the default steps: ``intrinsic`` (use only this one, and
    refuse the run when it does not fire), ``require_tensorized`` (refuse unless every
    reduction is tensorized), ``allow_fallback`` (run an untensorized kernel on the target
    instead of refusing), ``tune`` (measure tiles), ``emit`` (what to hand back as text:
    ``ir``, ``code``, ``trace``)."""

    intrinsic: str | None = None
    require_tensorized: bool = False
    allow_fallback: bool = False
    tune: bool = False
    emit: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Tensorization:
    """What a runner's tensorize step gave: the engine's result, per block the words on
    where its tile came from (a cache, the tuner), and cuda's cp.async stages when tuned."""

    result: Tensorized
    tiles: dict[str, str] = field(default_factory=dict)
    stages: int | None = None


@dataclass
class RunOutcome:
    """A finished run: its report, the outputs of its most faithful run (None when it
    stopped after tensorizing), why it stopped (``refusal``), the text ``emit`` asked for,
    the NPU timeline's writer, and the engine's result."""

    report: RunReport
    outputs: Arrays | None = None
    refusal: list[str] = field(default_factory=list)
    emitted: list[str] = field(default_factory=list)
    timeline: Timeline | None = None
    result: Tensorized | None = None


class Runner(Protocol):
    """The steps of one target kind."""

    def tensorize(self, ctx: RunContext, func: PrimFunc, opts: RunOptions,
                  report: RunReport) -> Tensorization:
        """Tensorize ``func`` for the context's target."""
        ...

    def prepare(self, ctx: RunContext, done: Tensorization, inputs: Arrays) -> object:
        """The long work of the run that needs no reference, done while the validate
        step's host runs go on (None: none); :meth:`execute` is given what it returns."""
        ...

    def execute(self, ctx: RunContext, done: Tensorization, inputs: Arrays,
                reference: Expected, report: RunReport, emitted: list[str], opts: RunOptions,
                prepared: object = None) -> tuple[Arrays, Timeline | None]:
        """Build and run the tensorized function (with what :meth:`prepare` gave), check it
        against ``reference``; its outputs (``reference`` where it could not run) and the
        timeline's writer."""
        ...


class NpuRunner:
    """The simulated NPU of the context's machine."""

    def tensorize(self, ctx: RunContext, func: PrimFunc, opts: RunOptions,
                  report: RunReport) -> Tensorization:
        """The engine's NPU schedule (``tune``: the tile height that simulates fastest)."""
        from tensorize.runners.npu import tensorize_npu

        return Tensorization(tensorize_npu(ctx, func, opts.intrinsic, opts.tune, report))

    def prepare(self, ctx: RunContext, done: Tensorization, inputs: Arrays) -> object:
        """Emit the programs and simulate them (an ``NpuMeasure``)."""
        from tensorize.runners.npu import measure_npu

        return measure_npu(ctx, done.result, inputs)

    def execute(self, ctx: RunContext, done: Tensorization, inputs: Arrays,
                reference: Expected, report: RunReport, emitted: list[str], opts: RunOptions,
                prepared: object = None) -> tuple[Arrays, Timeline | None]:
        """Report the simulation (:meth:`prepare`'s, else one run here), check and
        measure."""
        from tensorize.runners.npu import run_npu

        return run_npu(ctx, done.result, inputs, reference, report, emitted,
                       "code" in opts.emit, prepared)


class CpuRunner:
    """A CPU target described by a ``cpu:`` section: LLVM for its triple and features."""

    def tensorize(self, ctx: RunContext, func: PrimFunc, opts: RunOptions,
                  report: RunReport) -> Tensorization:
        """Register tiles from the tile cache or the estimate (``tune``: measured)."""
        from tensorize.runners.cpu import tensorize_cpu

        result, tiles = tensorize_cpu(ctx, func, opts.intrinsic, opts.tune, report)
        return Tensorization(result, tiles)

    def prepare(self, ctx: RunContext, done: Tensorization, inputs: Arrays) -> object:
        """Nothing: the CPU runner does all its work in :meth:`execute`."""
        return None

    def execute(self, ctx: RunContext, done: Tensorization, inputs: Arrays,
                reference: Expected, report: RunReport, emitted: list[str], opts: RunOptions,
                prepared: object = None) -> tuple[Arrays, Timeline | None]:
        """Compile with LLVM, run natively or emulated where this host can, check."""
        from tensorize.runners.cpu import run_cpu

        return run_cpu(ctx, done.result.func, reference, inputs, report, emitted,
                       "code" in opts.emit, done.result.original), None


class CudaRunner:
    """CUDA tensor cores (the WMMA and mma.sync families, and a vendor's own)."""

    def tensorize(self, ctx: RunContext, func: PrimFunc, opts: RunOptions,
                  report: RunReport) -> Tensorization:
        """The engine's CUDA schedule for the context's architecture (``tune``: the static
        tiling search)."""
        if not opts.tune:
            from tensorize.runners.cuda_hopper import report_choice

            result = auto_tensorize(func, ctx.target, registry=ctx.registry,
                                    intrinsic=opts.intrinsic, arch=ctx.arch)
            report_choice(result.hopper, report)
            return Tensorization(result)
        from tensorize.runners.cuda import tensorize_tuned

        result, stages = tensorize_tuned(func, ctx.registry, report)
        return Tensorization(result, stages=stages)

    def prepare(self, ctx: RunContext, done: Tensorization, inputs: Arrays) -> object:
        """Nothing: the CUDA runner does all its work in :meth:`execute`."""
        return None

    def execute(self, ctx: RunContext, done: Tensorization, inputs: Arrays,
                reference: Expected, report: RunReport, emitted: list[str], opts: RunOptions,
                prepared: object = None) -> tuple[Arrays, Timeline | None]:
        """Emit CUDA C++, compile it per architecture, emulate it, run it on a GPU (Hopper's
        GEMM where the engine made one)."""
        from tensorize.runners.cuda import run_cuda

        hopper = done.result.hopper
        if hopper is not None and hopper.gemm is not None:
            from tensorize.runners.cuda_hopper import run_hopper

            return run_hopper(ctx, hopper.gemm, done.result.original.name, reference, inputs,
                              report, emitted, "code" in opts.emit), None
        stages = {} if done.stages is None else {"stages": done.stages}
        return run_cuda(ctx, done.result.func, reference, inputs, report, emitted,
                        "code" in opts.emit, **stages), None


# The runner of each target kind with intrinsics (a target's kind comes from its YAML). The
# host has none: run_kernel runs the untouched kernel on the reference executor.
RUNNERS: dict[str, Runner] = {"npu": NpuRunner(), "cpu": CpuRunner(), "cuda": CudaRunner()}


def runner_for(ctx: RunContext) -> Runner:
    """The runner of the context's target kind."""
    runner = RUNNERS.get(ctx.kind)
    if runner is None:
        raise ContextError(f"--target {ctx.target} is of kind {ctx.kind}, which no runner "
                           f"serves (kinds: host, {', '.join(RUNNERS)})")
    return runner


def run_kernel(ctx: RunContext, func: PrimFunc, inputs: Arrays,
               opts: RunOptions = RunOptions(), report: RunReport | None = None) -> RunOutcome:
    """Take ``func`` through its target's steps on ``inputs`` (every parameter's array; the
    outputs' starting values too). The report (a new one unless given) holds every step.
    The outcome's ``outputs`` are those of the most faithful run, to check against a
    reference of the caller's own."""
    report = report if report is not None else RunReport()
    outcome = RunOutcome(report)
    if ctx.kind == "host":
        outcome.outputs = execute_on_host(func, inputs, report)
        return outcome
    runner = runner_for(ctx)
    reductions = reduction_blocks(func)
    done = runner.tensorize(ctx, func, opts, report)
    outcome.result = result = done.result
    _report_blocks(done, opts, reductions, report, ctx.registry)
    outcome.refusal = refusal(result, opts, reductions, ctx.target)
    if outcome.refusal:
        return outcome
    runs = HostRuns(func, result.func, inputs, lowerer(ctx.registry.get))
    try:
        # What needs no reference (the NPU's simulation) runs beside the validate step's
        # host runs; the validate lines still come first, as the check needs their outputs.
        prepared = runner.prepare(ctx, done, inputs)
    finally:
        want = validate(func, runs, report)
    reference = expected_outputs(func, result, inputs, want, ctx.registry)
    outcome.outputs, outcome.timeline = runner.execute(ctx, done, inputs, reference, report,
                                                       outcome.emitted, opts, prepared)
    _count_calls(result, report)
    if not result.tensorized:
        reasons = "; ".join(f"{b.block}: {b.reason}" for b in result.blocks)
        report.skip("tensorize", f"not tensorized: {reasons}; it ran untensorized "
                                 "(--allow-fallback)")
    if "ir" in opts.emit:
        outcome.emitted.insert(0, print_node(result.func))
    if "trace" in opts.emit:
        outcome.emitted.append(result.schedule.replay_trace())
    return outcome


def execute_on_host(func: PrimFunc, inputs: Arrays, report: RunReport) -> Arrays:
    """``func`` on the host's LLVM JIT (one ``execute`` step, timed); the arrays it writes."""
    from targets import host

    start = time.perf_counter()
    compiled = host.compile(func)
    compile_s = time.perf_counter() - start
    arrays = {name: a.copy() for name, a in inputs.items()}
    start = time.perf_counter()
    compiled(*arrays.values())
    run_s = time.perf_counter() - start
    outputs = [p.name for p in compiled.written]
    report.step("execute", True, f"host LLVM JIT: compile {compile_s * 1e3:.0f} ms, "
                                 f"run {run_s * 1e3:.1f} ms, outputs {', '.join(outputs)}")
    report.data["timing_ms"] = {"compile": round(compile_s * 1e3, 2),
                                "run": round(run_s * 1e3, 3)}
    return {name: arrays[name] for name in outputs}


def validate(func: PrimFunc, runs: HostRuns, report: RunReport) -> Arrays:
    """The tensorized IR (intrinsics run as their semantics) against the untouched kernel
    ``func``, both run by ``runs``, one ``validate`` step per output; returns the untouched
    kernel's outputs (the reference executor's, which the target's run is checked
    against)."""
    want, got = runs.outputs()
    for name, expected in want.items():
        ok, detail = compare(got[name], expected)
        report.step("validate", ok, f"{name}: tensorized IR (intrinsics run as their "
                                    f"semantics) against the untouched kernel: {detail}")
    return want


def refusal(result: Tensorized, opts: RunOptions, reductions: set[str], target: str
            ) -> list[str]:
    """Why the run must stop right after tensorizing (empty: it goes on): a reduction (of
    ``reductions``) not tensorized under ``intrinsic`` / ``require_tensorized``, or no block
    tensorized at all without ``allow_fallback``."""
    untouched = [b for b in result.blocks if b.intrinsic is None]
    if opts.intrinsic or opts.require_tensorized:
        missing = [f"block {b.block!r} is not tensorized: {b.reason}" for b in untouched
                   if b.block in reductions]
        if missing:
            return missing
    if result.tensorized or opts.allow_fallback:
        return []
    blocks = [b for b in untouched if b.block in reductions] or untouched
    reasons = "; ".join(f"{b.block}: {b.reason}" for b in blocks) or "the kernel has no block"
    return [f"not tensorized: {reasons}; pass --allow-fallback to run it on {target} "
            "untensorized"]


def reduction_blocks(func: PrimFunc) -> set[str]:
    """The names of the blocks of ``func`` with a reduce iterator."""
    return {s.block.name for s, _ in tree.walk_stmts(func) if isinstance(s, BlockRealize)
            and any(iv.kind is IterKind.REDUCE for iv in s.block.iter_vars)}


def _report_blocks(done: Tensorization, opts: RunOptions, reductions: set[str],
                   report: RunReport, registry: Registry) -> None:
    """One ``tensorize`` step per block, the explanations, and the engine's figures."""
    result, tiles = done.result, done.tiles
    strict = bool(opts.intrinsic or opts.require_tensorized)
    fails = not result.tensorized and not opts.allow_fallback
    for outcome in result.blocks:
        if outcome.intrinsic is not None:
            tile = f"  ({tiles[outcome.block]})" if outcome.block in tiles else ""
            # MAC figures belong to products; an epilogue's vector or store instruction has
            # none to show.
            figures = f"  {_executed(result, outcome, registry)}" \
                if registry.get(outcome.intrinsic).reduce_vars() else ""
            report.step("tensorize", True, f"{outcome.block}: {outcome.intrinsic}  "
                                           f"{_without_estimate(outcome.mapping)}"
                                           f"{figures}{tile}")
        elif outcome.folded:
            report.step("tensorize", True, f"{outcome.block}: not tensorized "
                                           f"({outcome.reason}); folded into another "
                                           "block (a tensorized block's copies, or the "
                                           "epilogue block reading it), no kernel of its own")
        else:
            ok = not fails and not (strict and outcome.block in reductions)
            stops = not ok
            report.step("tensorize", ok,
                        f"{outcome.block}: not tensorized ({outcome.reason}); "
                        + ("the run stops here" if stops else "runs as is"))
    for line in result.explain:
        report.note("explain", line)
    report.data["tensorize_seconds"] = round(result.seconds, 4)
    report.data["blocks"] = [{"block": b.block, "intrinsic": b.intrinsic, "mapping": b.mapping,
                              "reason": b.reason} for b in result.blocks]
    report.data["explain"] = list(result.explain)
    if result.tensorized:
        report.data["macs"] = mac_figures(result, registry).to_dict()
    report.data["not_tensorized"] = [(b.block, b.reason) for b in result.blocks
                                     if b.intrinsic is None and b.block in reductions]
    report.data["trace"] = result.schedule.replay_trace()


# The matcher's mapping line ends its iterator map with its estimate, "calls N pad P%":
# the calls and padding of the intrinsic's shape alone, before the target's schedule tiles
# and pads further. The tensorize line shows the executed figures in its place.
_ESTIMATE = re.compile(r"  calls \d+ pad (?:<1|\d+)%")


def _without_estimate(mapping: str) -> str:
    """The mapping line less the matcher's call and padding estimate."""
    return _ESTIMATE.sub("", mapping)


def _executed(result: Tensorized, outcome: BlockOutcome, registry: Registry) -> str:
    """The executed calls of the block's intrinsic, its useful and executed MACs and the
    padding's share of the executed work (with any other block of the same intrinsic, whose
    calls cannot be told apart)."""
    sharing = [b.block for b in result.blocks if b.intrinsic == outcome.intrinsic]
    figures = mac_figures(result, registry, sharing)
    together = f" (with {', '.join(b for b in sharing if b != outcome.block)})" \
        if len(sharing) > 1 else ""
    return (f"executed{together}: {figures.calls:,} calls, {figures.executed:,} MACs for "
            f"{figures.useful:,} useful, pad {_pad_percent(figures.pad)} of executed MACs")


def _pad_percent(fraction: float) -> str:
    """A padding share as a percentage: one decimal, "<0.1%" rather than a rounded 0."""
    if 0 < fraction < 0.0005:
        return "<0.1%"
    return f"{100 * fraction:.1f}%"


def _count_calls(result: Tensorized, report: RunReport) -> None:
    """The intrinsic calls executed, per block (the ``calls`` table) and in all."""
    by_block = count_calls_by_block(result.func)
    report.data["calls"] = [{"block": b, "intrinsic": i, "executed": n}
                            for (b, i), n in by_block.items()]
    report.data["calls_total"] = count_calls(result.func)
    if not by_block:
        return
    width = max(len(b) for b, _ in by_block) + 2
    iwidth = max(len(i) for _, i in by_block) + 2
    lines = [f"\n{'block':<{width}}{'intrinsic':<{iwidth}}{'calls executed':>14}"]
    lines += [f"{block:<{width}}{name:<{iwidth}}{count:>14}"
              for (block, name), count in by_block.items()]
    report.note("table", "\n".join(lines))
