"""The runner's steps for the cuda target kind: emit the CUDA C++, compile it with nvcc
for each architecture (with what ptxas says of each kernel's registers, shared memory and
spills, and the occupancy they allow; a step that fails when any kernel spills), run it
under the host emulation of the warp matrix API (asynchronous copies landing at their wait,
and again at their issue), and run it on a GPU where CuPy finds one.

Every step uses the context's registry (a vendor's own tensor-core family included) and
reports through the run's report; a step whose tool is missing here (nvcc, a host
C++ compiler, CuPy and a driver) is reported as skipped with the reason, never as passed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from intrinsics import Intrinsic, Registry
from intrinsics.gpu_target import GpuArchitecture
from ir import PrimFunc, ScheduleError
from targets import cuda
from targets.cuda.compile import (BarrierDrains, KernelResources, SassMix, cuobjdump_path,
                                  resource_usage, sass_drains, sass_mix)
from targets.cuda.emulate import COPY_MODES
from targets.cuda.occupancy import architecture, architectures, occupancy
from targets.cuda.pipeline import STAGES
from targets.cuda.run import gpu_unavailable
from tensorize.engine import Tensorized, auto_tensorize
from tensorize.engine.cuda_schedule import (
    UNIT_MACS,
    CudaTiling,
    TilingFigures,
    TilingTrial,
    choose_family,
    instruction_macs,
    issued_per_unit,
    mapping_cycles,
    search_tilings,
    sm_number,
    tensor_pipe,
)
from tensorize.engine.count import count_calls
from tensorize.match import match_block
from tensorize.runners.context import RunContext
from tensorize.runners.report import RunReport
from tensorize.schedule import tree
from tensorize.validate import compare


@dataclass(frozen=True, slots=True)
class CudaTuning:
    """What ``--tune`` on ``--target cuda`` chose: the tensorization (``result``) and the
    stages to emit it with; each searched intrinsic's trials, best first (one intrinsic
    per family that matches the block: WMMA, mma.sync); the one taken (None: the engine's
    own tiling stands) and why, one line."""

    result: Tensorized
    stages: int
    searches: dict[str, list[TilingTrial]] = field(default_factory=dict)
    chosen: str | None = None
    reason: str = ""


def tune_cuda(func: PrimFunc, registry: Registry, arch: str = "sm_80", measured: int = 6
              ) -> CudaTuning:
    """The tensorization of ``func`` for cuda by the static search on ``arch``
    (``tensorize.engine.cuda_schedule``): for each family's cheapest intrinsic that matches
    the engine's tensorized block, its tilings ranked, the best ``measured`` estimates
    compiled (registers and shared memory from ptxas, non-MMA instructions per unit of work
    from the SASS where cuobjdump exists); then the family whose best trial ranks first
    (:func:`choose_family`). Without a tensorized block, without nvcc, or where no
    candidate tiling fits the GEMM (too small for any block tile), the engine's own tiling
    stands."""
    first = auto_tensorize(func, "cuda", registry=registry)
    done = [b for b in first.blocks if b.intrinsic is not None]
    if not done or cuda.nvcc_path() is None:
        return CudaTuning(first, STAGES)
    limits = architecture(arch, registry)
    searches = {}
    for intrinsic in _family_candidates(func, done[0], registry):
        trials = _search(func, intrinsic, limits, registry, measured)
        if trials:
            searches[intrinsic.name] = trials
    if not searches:
        return CudaTuning(first, STAGES)
    chosen, reason = choose_family(searches, {name: issued_per_unit(registry.get(name))
                                              for name in searches})
    best = searches[chosen][0]
    if not best.measured:
        return CudaTuning(first, STAGES, searches, None, reason)
    result = auto_tensorize(func, "cuda", registry=registry, intrinsic=chosen,
                            tiling=best.tiling)
    return CudaTuning(result, best.stages, searches, chosen, reason)


def _family_candidates(func: PrimFunc, done: Any, registry: Registry) -> list[Intrinsic]:
    """Per cuda family, the intrinsic the engine's estimate ranks cheapest among those that
    match the tensorized block in ``func`` (the engine's own when the block was reshaped
    first, a grouped convolution, and so is not in ``func`` as it stands)."""
    own = registry.get(done.intrinsic)
    if done.block not in tree.block_names(func):
        return [own]
    cheapest: dict[str, tuple[float, Intrinsic]] = {}
    for intrinsic in registry.compute_intrinsics("cuda"):
        found = match_block(func, done.block, intrinsic, registry)
        if not isinstance(found, list) or not found:
            continue
        cost = min(mapping_cycles(func, m, registry) for m in found)
        if cost < cheapest.get(intrinsic.family, (math.inf, own))[0]:
            cheapest[intrinsic.family] = (cost, intrinsic)
    return [i for _, i in cheapest.values()] or [own]


def _search(func: PrimFunc, intrinsic: Intrinsic, limits: GpuArchitecture, registry: Registry,
            measured: int) -> list[TilingTrial]:
    """The tiling search's trials for ``func`` through ``intrinsic`` on ``limits``, over the
    extents the block pads to for that intrinsic's shape (none when the engine cannot
    tensorize it so)."""
    try:
        tiled = auto_tensorize(func, "cuda", registry=registry, intrinsic=intrinsic.name)
    except ScheduleError:
        return []
    done = [b for b in tiled.blocks if b.intrinsic is not None]
    if not done:
        return []
    extents = tuple(done[0].extents[-3:])
    batch = int(np.prod(done[0].extents[:-3], dtype=np.int64))
    shape = tuple(iv.extent for iv in intrinsic.iter_vars)
    elem = max(intrinsic.operands[0].dtype.bits // 8, 1)

    def measure(tiling: CudaTiling, stages: int) -> TilingFigures | None:
        try:
            tensorized = auto_tensorize(func, "cuda", registry=registry,
                                        intrinsic=intrinsic.name, tiling=tiling)
            return _figures(cuda.emit(tensorized.func, registry, stages=stages), intrinsic,
                            limits.name)
        except (ScheduleError, cuda.EmitError, cuda.CompileError):
            return None

    return search_tilings(extents, shape, elem, batch, limits,
                          lambda r, s, t: occupancy(limits, r, s, t),
                          tensor_pipe(intrinsic, limits.name), measure, measured)


def tensorize_tuned(func: PrimFunc, registry: Registry, report: RunReport
                    ) -> tuple[Tensorized, int]:
    """``--tune`` on ``--target cuda``: :func:`tune_cuda`, one ``tune`` line per measured
    trial of each family searched (its intrinsic, tiles, figures and modelled cycles) and
    one for the family taken and why; in the JSON the trials under ``tune`` (the chosen
    family's first, best first) and the choice under ``tune_family``. Returns the
    tensorization and the stages to emit with."""
    tuning = tune_cuda(func, registry)
    if not tuning.searches:
        report.skip("tune", "nothing to tune: no tensorized block, no nvcc to measure with, "
                            "or no candidate block tile fits the GEMM; the engine's tiling "
                            "stands")
        return tuning.result, tuning.stages
    order = sorted(tuning.searches, key=lambda name: name != tuning.chosen)
    records = []
    for name in order:
        shape = tuple(iv.extent for iv in registry.get(name).iter_vars)
        for trial in (t for t in tuning.searches[name] if t.measured):
            report.step("tune", True, f"{name}: {trial.describe(shape)}")
        records += [{"intrinsic": name, "warps": list(t.tiling.warps),
                     "fragments": list(t.tiling.fragments), "k_steps": t.tiling.k_steps,
                     "stages": t.stages, "measured": t.measured,
                     "cycles": t.cycles if t.blocks_per_sm else None,
                     "other_per_unit": t.figures.other_per_unit}
                    for t in tuning.searches[name]]
    if tuning.chosen is None:
        report.skip("tune", f"no trial could be measured, the engine's tiling stands; "
                            f"{tuning.reason}")
    else:
        report.step("tune", True, f"family: {tuning.reason}")
    report.data["tune"] = records
    report.data["tune_family"] = {"intrinsic": tuning.chosen,
                                  "family": (registry.get(tuning.chosen).family
                                             if tuning.chosen else None),
                                  "reason": tuning.reason}
    return tuning.result, tuning.stages


def _figures(kernel: cuda.CudaKernel, intrinsic: Intrinsic, arch: str) -> TilingFigures | None:
    """The tensorized launch's figures on ``arch``: ptxas resources (dynamic shared memory
    added) and, where cuobjdump exists, non-MMA instructions in its k loop per unit of work
    (per SASS MMA instruction, times the units one instruction of ``intrinsic`` does:
    :func:`instruction_macs`); None when no launch is tiled (the engine refused the
    tiling)."""
    launch = next((l for l in kernel.launches if l.tensorized), None)
    if launch is None:
        return None
    (r,) = [r for r in resource_usage(kernel, arch) if r.kernel == launch.kernel]
    other = None
    if cuobjdump_path() is not None:
        (mix,) = [m for m in sass_mix(kernel, arch) if m.kernel == launch.kernel]
        other = mix.other_per_mma * UNIT_MACS / instruction_macs(intrinsic) if mix.mma else None
    return TilingFigures(r.registers, r.shared_bytes + launch.dynamic_shared,
                         r.spill_stores + r.spill_loads, other)


def run_cuda(ctx: RunContext, func: PrimFunc, reference: dict[str, np.ndarray],
             inputs: dict[str, np.ndarray], report: RunReport, emitted: list[str],
             emit_code: bool, stages: int = STAGES) -> dict[str, np.ndarray]:
    """Emit ``func`` (tensorized for cuda) as CUDA C++ with ``stages`` cp.async stages and
    check it every way this machine allows: compiled for each architecture of the cuda
    family's ``gpu:`` section in the context's registry; returns the outputs of the most
    faithful run (GPU, else emulation, else ``reference``)."""
    registry = ctx.registry
    kernel = cuda.emit(func, registry, stages=stages)
    launches = "; ".join(f"{l.kernel} grid {l.grid} block {l.block}" for l in kernel.launches)
    report.step("emit", True, f"CUDA C++, {len(kernel.source.splitlines())} lines, "
                              f"{len(kernel.launches)} kernel(s): {launches}")
    report.data["cuda"] = {"launches": [{"kernel": l.kernel, "grid": list(l.grid),
                                         "block": list(l.block), "stages": l.stages,
                                         "dynamic_shared": l.dynamic_shared}
                                        for l in kernel.launches],
                           "params": list(kernel.params)}
    if emit_code:
        emitted.append(source_with_launches(kernel))
    # An architecture the run names is compiled for alone; nvcc says if it lacks an
    # instruction the kernel calls.
    needed = _needed(func, registry) if ctx.arch is None else None
    compile_steps(kernel, report, compiled_architectures(ctx), needed)
    outputs = emulate_steps(kernel, inputs, reference, report) or reference
    return _on_gpu(kernel, inputs, reference, report) or outputs


def compiled_architectures(ctx: RunContext) -> Mapping[str, GpuArchitecture]:
    """The architectures a run compiles for, with their limits: the context's ``arch``
    alone (an architecture-specific one, ``sm_90a``, with its base's limits), else every
    architecture of the ``gpu:`` section."""
    limits = architectures(ctx.registry)
    if ctx.arch is None:
        return limits
    return {ctx.arch: limits[ctx.arch.removesuffix("a")]}


def source_with_launches(kernel: cuda.CudaKernel) -> str:
    """The source, preceded by how to launch it (one comment line per kernel, in order)."""
    lines = [f"// launch in order, arguments ({', '.join(kernel.params)}):"]
    lines += [f"//   {l.kernel}<<<dim3{l.grid}, dim3{l.block}"
              + (f", {l.dynamic_shared}>>> after cudaFuncSetAttribute({l.kernel}, "
                 f"cudaFuncAttributeMaxDynamicSharedMemorySize, {l.dynamic_shared})"
                 if l.dynamic_shared else ">>>") for l in kernel.launches]
    return "\n".join(lines) + "\n" + kernel.source


def _needed(func: PrimFunc, registry: Registry) -> tuple[str, str] | None:
    """The newest architecture an intrinsic the kernel calls needs, with that intrinsic
    (``("sm_89", "mma_m16n8k32_e4m3e4m3_f32")``); None when none needs one."""
    features = {name: registry.get(name).feature for name in count_calls(func)}
    needs = [(feature, name) for name, feature in features.items() if feature is not None]
    return max(needs, key=lambda need: sm_number(need[0]), default=None)


def compile_steps(kernel: cuda.CudaKernel, report: RunReport,
                  limits: Mapping[str, GpuArchitecture], needed: tuple[str, str] | None
                  ) -> None:
    """Compile for each architecture of ``limits`` and for the one an intrinsic the kernel
    calls needs (``needed``: sm_89 for fp8) where ``limits`` lacks it, so a kernel is
    always built for an architecture that has its instructions; skip those older than
    ``needed``; one ``ptxas`` line per kernel and architecture, then the ``spills`` step."""
    if cuda.nvcc_path() is None:
        report.skip("compile", "nvcc not found (install the CUDA toolkit or set NVCC)")
        return
    disassemble = cuobjdump_path() is not None
    archs = list(limits)
    if needed is not None and needed[0] not in limits:
        archs = sorted([*archs, needed[0]], key=sm_number)
    for arch in archs:
        if needed is not None and sm_number(arch) < sm_number(needed[0]):
            report.skip("compile", f"nvcc -arch={arch}: {needed[1]} needs {needed[0]} or "
                                   "newer")
            continue
        start = time.perf_counter()
        try:
            ptx = cuda.compile(kernel, arch).decode()
        except cuda.CompileError as err:
            report.step("compile", False, str(err).splitlines()[0])
            continue
        mma = ptx.count("mma.sync") + ptx.count("wmma.mma") + ptx.count("wgmma.mma_async")
        report.step("compile", True, f"nvcc -arch={arch}: {time.perf_counter() - start:.1f} s, "
                                     f"{mma} tensor-core instruction(s) in the PTX")
        _ptxas(kernel, arch, limits.get(arch), report, disassemble)
    if not disassemble:
        report.skip("sass", "cuobjdump not found (the CUDA toolkit's, or the "
                            "nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels)")
    _spills(report)


def _spills(report: RunReport) -> None:
    """The ``spills`` step over every kernel ptxas assembled, on every architecture: ok when
    none spills a register to local memory, a failure naming each that does (a tiling too
    big for the register file); in the JSON under ``cuda.spills``."""
    records = report.data["cuda"].get("ptxas", [])
    if not records:
        return
    spilled = [r for r in records if r["spill_stores"] or r["spill_loads"]]
    report.data["cuda"]["spills"] = {
        "spill_stores": sum(r["spill_stores"] for r in records),
        "spill_loads": sum(r["spill_loads"] for r in records),
        "spilled": [{"kernel": r["kernel"], "arch": r["arch"]} for r in spilled]}
    if spilled:
        report.step("spills", False, "; ".join(
            f"{r['kernel']} {r['arch']}: {r['spill_stores']} bytes spill stores, "
            f"{r['spill_loads']} bytes spill loads" for r in spilled))
        return
    archs = ", ".join(dict.fromkeys(r["arch"] for r in records))
    report.step("spills", True, f"none: 0 bytes spill stores, 0 bytes spill loads in "
                                f"{len(records)} kernel(s) compiled for {archs}")


def _ptxas(kernel: cuda.CudaKernel, arch: str, limits: GpuArchitecture | None,
           report: RunReport, disassemble: bool) -> None:
    """One line per kernel: what ptxas says of its resources on ``arch``, and the occupancy
    they allow on the architecture ``limits`` describes (None: the ``gpu:`` section has no
    entry for ``arch``, and the line says so); then, when ``disassemble``, one with its SASS
    instruction mix."""
    try:
        resources = resource_usage(kernel, arch)
        mixes = {m.kernel: m for m in sass_mix(kernel, arch)} if disassemble else {}
        drains = {d.kernel: d for d in sass_drains(kernel, arch)} if disassemble else {}
    except cuda.CompileError as err:
        report.step("ptxas", False, str(err).splitlines()[0])
        return
    threads = {l.kernel: l.block[0] * l.block[1] * l.block[2] for l in kernel.launches}
    dynamic = {l.kernel: l.dynamic_shared for l in kernel.launches}
    order = list(threads)
    for r in sorted(resources, key=lambda r: order.index(r.kernel)):
        line, data = _resources(r, limits, threads[r.kernel], dynamic[r.kernel])
        report.step("ptxas", True, line)
        if r.kernel in mixes:
            data["sass"] = _sass(mixes[r.kernel], drains[r.kernel], arch, report)
        report.data["cuda"].setdefault("ptxas", []).append(data)


def _sass(mix: SassMix, drains: BarrierDrains, arch: str, report: RunReport
          ) -> dict[str, Any]:
    """The report line and the JSON record of one kernel's SASS mix and whether the tensor
    pipe drains at its barriers (kernels without an MMA get no line)."""
    if mix.mma:
        where = "its k loop" if mix.scope == "k loop" else "the kernel (no loop holds an MMA)"
        report.step("sass", True, f"{mix.kernel} {arch}: {mix.mma} SASS MMA and {mix.other} "
                                  f"other SASS instructions in {where}: "
                                  f"{mix.other_per_mma:.1f} other per SASS MMA instruction; "
                                  f"{drains.describe()}")
    return {"mma": mix.mma, "other": mix.other, "scope": mix.scope,
            "barriers": drains.barriers, "drained_barriers": len(drains.drained)}


def _resources(r: KernelResources, limits: GpuArchitecture | None, threads: int,
               dynamic: int) -> tuple[str, dict[str, Any]]:
    """The report line and the JSON record of one kernel on the architecture ``limits``
    describes (None: no occupancy, for want of the architecture's limits); ``dynamic``
    bytes of dynamic shared memory add to the static ones ptxas reports."""
    shared = r.shared_bytes + dynamic
    spills = r.spill_stores + r.spill_loads
    kind = f" ({dynamic} dynamic)" if dynamic else ""
    line = (f"{r.kernel} {r.arch}: {r.registers} registers, {shared} B shared{kind}, "
            f"{spills} spill bytes, {r.stack_frame} B stack; {threads} threads per block, ")
    data = {"kernel": r.kernel, "arch": r.arch, "registers": r.registers,
            "shared_bytes": shared, "dynamic_shared_bytes": dynamic,
            "spill_stores": r.spill_stores,
            "spill_loads": r.spill_loads, "stack_frame": r.stack_frame,
            "threads_per_block": threads}
    if limits is None:
        data.update(blocks_per_sm=None, warps_per_sm=None, occupancy=None, limited_by=None)
        return line + f"no occupancy ({r.arch} has no entry under gpu.architectures)", data
    o = occupancy(limits, r.registers, shared, threads)
    data.update(blocks_per_sm=o.blocks, warps_per_sm=o.warps, occupancy=o.fraction,
                limited_by=o.limited_by)
    return line + (f"occupancy {o.warps} warps of {o.max_warps} ({o.fraction:.0%}) limited "
                   f"by {o.limited_by}"), data


def emulate_steps(kernel: cuda.CudaKernel, inputs: dict[str, np.ndarray],
                  reference: dict[str, np.ndarray], report: RunReport
                  ) -> dict[str, np.ndarray] | None:
    """Runs the emulation with asynchronous copies landing at their wait and, when the
    kernel issues any (cp.async, or TMA tensor copies), again landing at their issue;
    returns the first run's outputs."""
    tensor_copies = any(launch.tensor_maps for launch in kernel.launches)
    modes = COPY_MODES if "tz_cp_async16(&" in kernel.source or tensor_copies \
        else COPY_MODES[:1]
    try:
        results = [_emulate_once(kernel, inputs, reference, report, mode)
                   for mode in modes]
    except cuda.EmulationError as err:  # no host compiler: nothing can run
        report.skip("emulate", str(err))
        return None
    return results[0]


def _emulate_once(kernel: cuda.CudaKernel, inputs: dict[str, np.ndarray],
                  reference: dict[str, np.ndarray], report: RunReport, copies: str
                  ) -> dict[str, np.ndarray] | None:
    start = time.perf_counter()
    try:
        outputs = cuda.emulate(kernel, inputs, copies=copies, phase=report.phase)
    except cuda.EmulationError as err:
        if "no host C++ compiler" in str(err):
            raise
        report.step("emulate", False, f"copies landing {copies.replace('_', ' ')}: "
                                      f"{str(err).splitlines()[0]}")
        return None
    seconds = time.perf_counter() - start
    for name, expected in reference.items():
        ok, detail = compare(outputs[name], expected)
        report.step("emulate", ok, f"{name}: the CUDA source on the host's emulation of the "
                                   f"warp matrix instructions and the thread model, "
                                   f"asynchronous copies landing "
                                   f"{copies.replace('_', ' ')} ({seconds:.1f} s), against "
                                   f"the reference executor: {detail}")
    return outputs


def _on_gpu(kernel: cuda.CudaKernel, inputs: dict[str, np.ndarray],
            reference: dict[str, np.ndarray], report: RunReport
            ) -> dict[str, np.ndarray] | None:
    reason = gpu_unavailable()
    if reason is not None:
        report.skip("gpu", f"no CUDA device to run on ({reason})")
        return None
    run = cuda.run(kernel, inputs, repeat=10)
    for name, expected in reference.items():
        ok, detail = compare(run.outputs[name], expected)
        report.step("gpu", ok, f"{name} on the GPU, best of 10: {run.milliseconds:.3f} ms; "
                               f"against the reference executor: {detail}")
    report.data["cuda"]["gpu_ms"] = run.milliseconds
    return run.outputs
