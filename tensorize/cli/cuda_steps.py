"""The ``--target cuda`` steps of ``tensorize run``: emit the CUDA C++, compile it with nvcc
for each architecture (with what ptxas says of each kernel's registers, shared memory and
spills, and the occupancy they allow), run it under the host emulation of the warp matrix API
(asynchronous copies landing at their wait, and again at their issue), and run it on a GPU
where CuPy finds one.

Each step reports through the run's report; a step whose tool is missing here (nvcc, a host
C++ compiler, CuPy and a driver) is reported as skipped with the reason, never as passed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from intrinsics import Registry
from intrinsics.gpu_target import GpuArchitecture
from ir import PrimFunc, ScheduleError
from targets import cuda
from targets.cuda.compile import KernelResources, SassMix, cuobjdump_path, resource_usage, sass_mix
from targets.cuda.emulate import COPY_MODES
from targets.cuda.occupancy import architecture, architectures, occupancy
from targets.cuda.pipeline import STAGES
from targets.cuda.run import gpu_unavailable
from tensorize.engine import Tensorized, auto_tensorize
from tensorize.engine.cuda_schedule import CudaTiling, TilingFigures, TilingTrial, search_tilings


def tune_cuda(func: PrimFunc, registry: Registry, arch: str = "sm_80", measured: int = 6
              ) -> tuple[Tensorized, int, list[TilingTrial]]:
    """The tensorization of ``func`` for cuda with the tiling and stages the static search
    ranks best on ``arch`` (``tensorize.engine.cuda_schedule``: each of the best
    ``measured`` estimates compiled, its registers and shared memory from ptxas and its
    non-MMA instructions per MMA from the SASS where cuobjdump exists), the stages, and the
    trials. Without a tensorized block, without nvcc, or where no candidate tiling fits the
    GEMM (too small for any block tile), the engine's own tiling stands."""
    first = auto_tensorize(func, "cuda", registry=registry)
    done = [b for b in first.blocks if b.intrinsic is not None]
    if not done or cuda.nvcc_path() is None:
        return first, STAGES, []
    intrinsic = registry.get(done[0].intrinsic)
    shape = tuple(iv.extent for iv in intrinsic.iter_vars)
    extents = tuple(done[0].extents[-3:])
    batch = int(np.prod(done[0].extents[:-3], dtype=np.int64))
    elem = max(intrinsic.operands[0].dtype.bits // 8, 1)

    def measure(tiling: CudaTiling, stages: int) -> TilingFigures | None:
        try:
            tensorized = auto_tensorize(func, "cuda", registry=registry, tiling=tiling)
            return _figures(cuda.emit(tensorized.func, stages=stages), arch)
        except (ScheduleError, cuda.EmitError, cuda.CompileError):
            return None

    limits = architecture(arch, registry)
    trials = search_tilings(extents, shape, elem, batch, limits,
                            lambda r, s, t: occupancy(limits, r, s, t), measure, measured)
    if not trials:
        return first, STAGES, []
    best = trials[0]
    if not best.measured:
        return first, STAGES, trials
    return (auto_tensorize(func, "cuda", registry=registry, tiling=best.tiling), best.stages,
            trials)


def tensorize_tuned(func: PrimFunc, registry: Registry, report: Any) -> tuple[Tensorized, int]:
    """``--tune`` on ``--target cuda``: :func:`tune_cuda`, one ``tune`` line per measured
    trial (its tiles, figures and modelled cycles) and the trials in the JSON under
    ``tune``; returns the tensorization and the stages to emit with."""
    result, stages, trials = tune_cuda(func, registry)
    if not trials:
        report.skip("tune", "nothing to tune: no tensorized block, no nvcc to measure with, "
                            "or no candidate block tile fits the GEMM; the engine's tiling "
                            "stands")
        return result, stages
    done = next(b for b in result.blocks if b.intrinsic is not None)
    shape = tuple(iv.extent for iv in registry.get(done.intrinsic).iter_vars)
    for trial in (t for t in trials if t.measured):
        report.step("tune", True, trial.describe(shape))
    report.data["tune"] = [{"warps": list(t.tiling.warps), "fragments": list(t.tiling.fragments),
                            "k_steps": t.tiling.k_steps, "stages": t.stages,
                            "measured": t.measured,
                            "cycles": t.cycles if t.blocks_per_sm else None} for t in trials]
    return result, stages


def _figures(kernel: cuda.CudaKernel, arch: str) -> TilingFigures | None:
    """The tensorized launch's figures on ``arch``: ptxas resources (dynamic shared memory
    added) and, where cuobjdump exists, non-MMA instructions per MMA in its k loop; None
    when no launch is tiled (the engine refused the tiling)."""
    launch = next((l for l in kernel.launches if l.tiled), None)
    if launch is None:
        return None
    (r,) = [r for r in resource_usage(kernel, arch) if r.kernel == launch.kernel]
    other = None
    if cuobjdump_path() is not None:
        (mix,) = [m for m in sass_mix(kernel, arch) if m.kernel == launch.kernel]
        other = mix.other_per_mma if mix.mma else None
    return TilingFigures(r.registers, r.shared_bytes + launch.dynamic_shared,
                         r.spill_stores + r.spill_loads, other)


def run_cuda(func: PrimFunc, reference: dict[str, np.ndarray], inputs: dict[str, np.ndarray],
             report: Any, compare: Any, emitted: list[str], emit_code: bool,
             stages: int = STAGES, registry: Registry | None = None
             ) -> dict[str, np.ndarray]:
    """Emit ``func`` (tensorized for cuda) as CUDA C++ with ``stages`` cp.async stages and
    check it every way this machine allows: compiled for each architecture of the cuda
    family's ``gpu:`` section in ``registry`` (default: the built-in and user families);
    returns the outputs of the most faithful run (GPU, else emulation, else ``reference``)."""
    kernel = cuda.emit(func, stages=stages)
    launches = "; ".join(f"{l.kernel} grid {l.grid} block {l.block}" for l in kernel.launches)
    report.step("emit", True, f"CUDA C++, {len(kernel.source.splitlines())} lines, "
                              f"{len(kernel.launches)} kernel(s): {launches}")
    report.data["cuda"] = {"launches": [{"kernel": l.kernel, "grid": list(l.grid),
                                         "block": list(l.block), "stages": l.stages,
                                         "dynamic_shared": l.dynamic_shared}
                                        for l in kernel.launches],
                           "params": list(kernel.params)}
    if emit_code:
        emitted.append(_with_launches(kernel))
    _compile(kernel, report, architectures(registry))
    outputs = _emulate(kernel, inputs, reference, report, compare) or reference
    return _on_gpu(kernel, inputs, reference, report, compare) or outputs


def _with_launches(kernel: cuda.CudaKernel) -> str:
    """The source, preceded by how to launch it (one comment line per kernel, in order)."""
    lines = [f"// launch in order, arguments ({', '.join(kernel.params)}):"]
    lines += [f"//   {l.kernel}<<<dim3{l.grid}, dim3{l.block}"
              + (f", {l.dynamic_shared}>>> after cudaFuncSetAttribute({l.kernel}, "
                 f"cudaFuncAttributeMaxDynamicSharedMemorySize, {l.dynamic_shared})"
                 if l.dynamic_shared else ">>>") for l in kernel.launches]
    return "\n".join(lines) + "\n" + kernel.source


def _compile(kernel: cuda.CudaKernel, report: Any,
             limits: Mapping[str, GpuArchitecture]) -> None:
    if cuda.nvcc_path() is None:
        report.skip("compile", "nvcc not found (install the CUDA toolkit or set NVCC)")
        return
    disassemble = cuobjdump_path() is not None
    for arch in limits:
        start = time.perf_counter()
        try:
            ptx = cuda.compile(kernel, arch).decode()
        except cuda.CompileError as err:
            report.step("compile", False, str(err).splitlines()[0])
            continue
        mma = ptx.count("mma.sync") + ptx.count("wmma.mma")
        report.step("compile", True, f"nvcc -arch={arch}: {time.perf_counter() - start:.1f} s, "
                                     f"{mma} tensor-core instruction(s) in the PTX")
        _ptxas(kernel, limits[arch], report, disassemble)
    if not disassemble:
        report.skip("sass", "cuobjdump not found (the CUDA toolkit's, or the "
                            "nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels)")


def _ptxas(kernel: cuda.CudaKernel, limits: GpuArchitecture, report: Any,
           disassemble: bool) -> None:
    """One line per kernel: what ptxas says of its resources, and the occupancy they allow
    on the architecture ``limits`` describes; then, when ``disassemble``, one with its SASS
    instruction mix."""
    arch = limits.name
    try:
        resources = resource_usage(kernel, arch)
        mixes = {m.kernel: m for m in sass_mix(kernel, arch)} if disassemble else {}
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
            data["sass"] = _sass(mixes[r.kernel], arch, report)
        report.data["cuda"].setdefault("ptxas", []).append(data)


def _sass(mix: SassMix, arch: str, report: Any) -> dict[str, Any]:
    """The report line and the JSON record of one kernel's SASS mix (kernels without an MMA
    get no line)."""
    if mix.mma:
        where = "its k loop" if mix.scope == "k loop" else "the kernel (no loop holds an MMA)"
        report.step("sass", True, f"{mix.kernel} {arch}: {mix.mma} MMA and {mix.other} other "
                                  f"instructions in {where}: {mix.other_per_mma:.1f} per MMA")
    return {"mma": mix.mma, "other": mix.other, "scope": mix.scope}


def _resources(r: KernelResources, limits: GpuArchitecture, threads: int,
               dynamic: int) -> tuple[str, dict[str, Any]]:
    """The report line and the JSON record of one kernel on the architecture ``limits``
    describes; ``dynamic`` bytes of dynamic shared memory add to the static ones ptxas
    reports."""
    shared = r.shared_bytes + dynamic
    o = occupancy(limits, r.registers, shared, threads)
    spills = r.spill_stores + r.spill_loads
    kind = f" ({dynamic} dynamic)" if dynamic else ""
    line = (f"{r.kernel} {r.arch}: {r.registers} registers, {shared} B shared{kind}, "
            f"{spills} spill bytes, {r.stack_frame} B stack; {threads} threads per block, "
            f"occupancy {o.warps} warps of {o.max_warps} ({o.fraction:.0%}) limited by "
            f"{o.limited_by}")
    data = {"kernel": r.kernel, "arch": r.arch, "registers": r.registers,
            "shared_bytes": shared, "dynamic_shared_bytes": dynamic,
            "spill_stores": r.spill_stores,
            "spill_loads": r.spill_loads, "stack_frame": r.stack_frame,
            "threads_per_block": threads, "blocks_per_sm": o.blocks, "warps_per_sm": o.warps,
            "occupancy": o.fraction, "limited_by": o.limited_by}
    return line, data


def _emulate(kernel: cuda.CudaKernel, inputs: dict[str, np.ndarray],
             reference: dict[str, np.ndarray], report: Any, compare: Any
             ) -> dict[str, np.ndarray] | None:
    """Runs the emulation with asynchronous copies landing at their wait and, when the
    kernel issues any, again landing at their issue; returns the first run's outputs."""
    modes = COPY_MODES if "tz_cp_async16(&" in kernel.source else COPY_MODES[:1]
    try:
        results = [_emulate_once(kernel, inputs, reference, report, compare, mode)
                   for mode in modes]
    except cuda.EmulationError as err:  # no host compiler: nothing can run
        report.skip("emulate", str(err))
        return None
    return results[0]


def _emulate_once(kernel: cuda.CudaKernel, inputs: dict[str, np.ndarray],
                  reference: dict[str, np.ndarray], report: Any, compare: Any, copies: str
                  ) -> dict[str, np.ndarray] | None:
    start = time.perf_counter()
    try:
        outputs = cuda.emulate(kernel, inputs, copies=copies)
    except cuda.EmulationError as err:
        if "no host C++ compiler" in str(err):
            raise
        report.step("emulate", False, f"copies landing {copies.replace('_', ' ')}: "
                                      f"{str(err).splitlines()[0]}")
        return None
    seconds = time.perf_counter() - start
    for name, expected in reference.items():
        ok, detail = compare(outputs[name], expected)
        report.step("emulate", ok, f"{name}: the CUDA source on the host's emulation of WMMA "
                                   f"and the thread model, asynchronous copies landing "
                                   f"{copies.replace('_', ' ')} ({seconds:.1f} s), against "
                                   f"the reference executor: {detail}")
    return outputs


def _on_gpu(kernel: cuda.CudaKernel, inputs: dict[str, np.ndarray],
            reference: dict[str, np.ndarray], report: Any, compare: Any
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
