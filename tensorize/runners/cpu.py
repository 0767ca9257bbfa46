"""The runner's steps for a CPU target (any family with a ``cpu:`` section):
tensorize with the register tiles the tile cache holds (or, with --tune, measure the best few
candidates and cache the winners: ``tensorize.engine.cpu_tune``), emit LLVM IR for it,
compile it to assembly, and run it here with the first engine of the target's ``run`` list
that can: natively (timed: best and median of several runs), under the in-process AArch64
emulator (instructions counted) or under qemu-user (i8mm).

A run this host cannot make (a feature the host lacks, an instruction the emulator does not
execute) is refused, with every engine's reason, and fails the run: code that was not run is
never reported as checked.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Mapping

import numpy as np

from ir import PrimFunc
from targets import cpu
from tensorize.engine import Tensorized
from tensorize.engine.cpu_threads import MIN_MACS_PER_THREAD, plan_rows, slice_rows
from tensorize.engine.cpu_tune import TileCache, choose_tune_cpu, tune_cpu
from tensorize.runners.context import RunContext
from tensorize.runners.report import RunReport
from tensorize.validate import Expected

# Timed native runs; the first one's outputs are the ones checked.
RUNS = 10


def run_cpu(ctx: RunContext, func: PrimFunc, reference: Expected,
            inputs: dict[str, np.ndarray], report: RunReport, emitted: list[str],
            emit_code: bool, original: PrimFunc | None = None) -> dict[str, np.ndarray]:
    """Emit ``func`` (tensorized for the context's CPU target) for its features and run it
    where this host can; returns the outputs of that run, else ``reference``. Where the
    description lists several scheduling models (``tune_cpus``) and an emulator counts
    instructions, the kernel is the one tuned for the model that executes fewest. With
    ``ctx.threads`` above 1 and ``original`` (the untensorized kernel), a native run is
    followed by the kernel split over that many threads (:func:`run_threaded`), checked
    and timed the same way (step ``threads``)."""
    target, features, registry = ctx.target, ctx.features or "", ctx.registry
    kernel, counts = choose_tune_cpu(func, target, features, registry=registry)
    description = kernel.cpu
    measured = {name: n for name, n in counts.items() if n is not None}
    if measured:
        best = min(measured, key=lambda name: measured[name])
        report.step("tune-cpu", True, f"scheduled for {best}: " + ", ".join(
            f"{name} {n:,} instructions" for name, n in measured.items()))
    start = time.perf_counter()
    assembly = cpu.compile(kernel, "asm")
    instructions = [_mnemonic(line) for line in assembly.splitlines()
                    if line.startswith("\t") and not line.lstrip().startswith(".")]
    counted = Counter(op for op in instructions if op in description.macs)
    listed = ", ".join(f"{n} {op}" for op, n in sorted(counted.items())) or \
        f"none of {', '.join(description.macs) or 'its counted instructions'}"
    report.step("emit", True, f"{description.triple} ({features}) through LLVM -O3: "
                              f"{time.perf_counter() - start:.2f} s, {len(instructions)} "
                              f"instructions: {listed}")
    data = {"target": target, "triple": description.triple, "features": features,
            "static_instructions": len(instructions)}
    if measured:
        data["tune_cpu"] = {"chosen": best, "instructions": measured}
    report.data["cpu"] = data
    if emit_code:
        emitted.append(assembly)
    engine, reason = cpu.engine_for(kernel)
    if engine is None:
        report.skip("run", f"not run: {reason}", fails=True)
        return reference.outputs
    start = time.perf_counter()
    run = run_emitted(kernel, inputs, RUNS)
    seconds = time.perf_counter() - start
    data["engine"] = engine
    detail = f"{seconds:.1f} s"
    if run.seconds:
        detail = (f"best {run.best * 1e3:.3f} ms, median {run.median * 1e3:.3f} ms of "
                  f"{len(run.seconds)} runs")
        data.update({"runs": len(run.seconds), "best_ms": round(run.best * 1e3, 4),
                     "median_ms": round(run.median * 1e3, 4)})
    if run.instructions is not None:
        executed = dict(run.counted or {})
        macs = sum(description.macs[op] * n for op, n in executed.items())
        shown = ", ".join(f"{n} {op}" for op, n in sorted(executed.items())) or "none counted"
        # Executed MACs include the padding the schedule adds; useful ones are the kernel's
        # own (the tensorize step's figure), the rate a reader compares kernels by.
        useful = report.data.get("macs", {}).get("useful")
        rate = "" if useful is None else f"{useful / run.instructions:.2f} useful, "
        detail += (f", {run.instructions} instructions executed, {shown} "
                   f"(MACs per instruction: {rate}{macs / run.instructions:.2f} executed)")
        data.update({"instructions": run.instructions, "counted": executed})
    for name in reference:
        ok, text = reference.check(name, run.outputs[name])
        report.step("run", ok, f"{name} on {run.engine} ({detail}) {text}")
    threads = ctx.threads or os.cpu_count() or 1
    if threads > 1 and original is not None:
        _run_threads(ctx, threads, original, reference, inputs, report, engine)
    return run.outputs


def _run_threads(ctx: RunContext, threads: int, func: PrimFunc,
                 reference: Expected, inputs: dict[str, np.ndarray],
                 report: RunReport, engine: str) -> None:
    """The ``threads`` step: ``func`` split over ``threads`` cores, checked and timed, or
    skipped with the reason (a kernel too small to split; an emulated run, where the user
    asked for threads)."""
    if engine != "native":
        if ctx.threads is not None:
            report.skip("threads", f"{threads} threads asked; the run on {engine} "
                                   "(emulated) uses one")
        return
    run, how = run_threaded(ctx, func, inputs, threads, RUNS)
    if run is None:
        report.skip("threads", f"one thread: {how}")
        return
    at = run.seconds.index(run.best)
    detail = (f"{how}: best {run.best * 1e3:.3f} ms (CPU {run.cpu_seconds[at] * 1e3:.3f} ms), "
              f"median {run.median * 1e3:.3f} ms of {len(run.seconds)} runs")
    report.data["threads"] = {"threads": threads, "split": how,
                              "best_ms": round(run.best * 1e3, 4),
                              "best_cpu_ms": round(run.cpu_seconds[at] * 1e3, 4),
                              "median_ms": round(run.median * 1e3, 4)}
    for name in reference:
        ok, text = reference.check(name, run.outputs[name])
        report.step("threads", ok, f"{name} on {detail} {text}")


def run_threaded(ctx: RunContext, func: PrimFunc, inputs: Mapping[str, np.ndarray],
                 threads: int, runs: int, min_work: int = MIN_MACS_PER_THREAD
                 ) -> tuple[cpu.CpuRun | None, str]:
    """``func`` (untensorized) split over at most ``threads`` cores, each part ``min_work``
    iterations at least (``tensorize.engine.cpu_threads``): each part tensorized with the
    tile cache's (or the estimate's) tiles, emitted and run natively at once, ``runs``
    times. Returns the run and how it was split, or None and why it was not (too little
    work, rows that are not independent, a target this host does not run natively)."""
    split = plan_rows(func, threads, min_work)
    if isinstance(split, str):
        return None, split
    cache = TileCache(ctx.target, ctx.features or "", ctx.registry)
    kernels: dict[int, cpu.CpuKernel] = {}
    for rows in sorted({rows for _, rows in split.parts}):
        part = cache.tensorize(slice_rows(func, split, rows), None)
        kernels[rows] = cpu.emit(part.func, ctx.target, ctx.features or "",
                                 registry=ctx.registry)
    first = next(iter(kernels.values()))
    reason = cpu.native_refusal(first)
    if reason is not None:
        return None, f"threads run natively only: {reason}"
    parts = [cpu.Part(kernels[rows], start, rows) for start, rows in split.parts]
    run = cpu.run_parts(parts, func.params, frozenset(split.sliced), inputs, runs)
    shown = ", ".join(f"{rows}" for _, rows in split.parts)
    return run, f"{len(parts)} threads over the rows of {', '.join(split.sliced)} ({shown})"


def emit_cpu(ctx: RunContext, func: PrimFunc) -> cpu.CpuKernel:
    """``func`` (tensorized for the context's CPU target) as LLVM for its triple and
    features, with the description's default scheduling model: what a network's layers of
    one shape share."""
    return cpu.emit(func, ctx.target, ctx.features or "", registry=ctx.registry)


def run_emitted(kernel: cpu.CpuKernel, inputs: Mapping[str, np.ndarray], runs: int
                ) -> cpu.CpuRun:
    """``kernel`` run by the first engine of its target that can here: natively (timed,
    ``runs`` times, the first run's outputs kept) or emulated (instructions counted)."""
    return cpu.run(kernel, inputs, runs)


def tensorize_cpu(ctx: RunContext, func: PrimFunc, intrinsic: str | None, tune: bool,
                  report: RunReport) -> tuple[Tensorized, dict[str, str]]:
    """Tensorize ``func`` for the context's CPU target with the register tiles the tile cache
    holds for its blocks (else the estimate's), or, with ``tune``, with the intrinsics and
    tiles that measured best among those the engine tries for them (one ``tune`` line per
    candidate), which the cache then keeps. Returns the result and, per block whose tile
    came from the cache or the tuner, the words saying so."""
    target, features, registry = ctx.target, ctx.features or "", ctx.registry
    cache = TileCache(target, features, registry)
    if not tune:
        result = cache.tensorize(func, intrinsic)
        return result, {block: f"tile from cache: {name} {t.rows} x {t.vectors}"
                        for block, (name, t) in cache.hits.items()}
    result, trials, chosen = tune_cpu(func, target, features, registry, intrinsic,
                                      cache=cache)
    for trial in trials:
        report.step("tune", True, trial.describe())
    report.data["tune"] = [trial.to_dict() for trial in trials]
    return result, {block: f"{name} tile {t.rows} x {t.vectors} measured best, cached in "
                           f"{cache.path}" for block, (name, t) in chosen.items()}


def _mnemonic(line: str) -> str:
    """The instruction's name on an assembly line, past any encoding prefix (x86's
    ``{vex} vpdpbusd``)."""
    words = line.split()
    return next((w for w in words if not w.startswith("{")), words[0])
