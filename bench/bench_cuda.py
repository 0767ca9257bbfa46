"""GEMMs tensorized for CUDA: static figures here, and on a GPU next to cuBLAS.

``--static`` (no GPU needed): for the fp16 (float32 accumulation) and int8 (int32
accumulation) GEMMs of N^3, per kernel and architecture (sm_80, sm_90): registers (ptxas),
shared memory (static plus dynamic), cp.async stages, warps per block, occupancy, non-MMA
SASS instructions per MMA in the k loop (cuobjdump), and the modelled shared-memory bank
conflicts of its fragment loads and copies (``targets/cuda/banks.py``, on a one-block GEMM
with the same tiling and stages, run under the host emulation); then the static tiling
search's best candidates on sm_80 for each tensor-core family that multiplies the GEMM (WMMA
and mma.sync; ``tensorize/engine/cuda_schedule.py``: each of the best estimates compiled,
its non-MMA instructions and bank conflicts per m16n8k16 of work, the conflicts modelled the
same way) with their modelled cycles, and the family the search takes and why; then the same
GEMMs (and u8 x s8, which only it multiplies) through the mma.sync family
(``intrinsics/cuda_mma.yaml``) in the engine's default tiling, with the non-MMA instructions
also per m16n8k16's worth of work (an int8 m16n8k32 does two); then ResNet-50's first 3x3
convolution.

``--gpu-suite`` (the default), on a GPU through CuPy: the GEMMs of ``cuda_suite.py`` (fp16
with fp32 accumulation and int8 with int32, square, skinny (M = 1, 8, 64 rows of a 4096 x
4096 weight) and 1000^3), each through the engine's default kernel and the tiling search's
best of each tensor-core family (WMMA, mma.sync; ``search_tilings`` on the device's
architecture, its best estimates compiled and measured by ptxas and the SASS), all prepared
and compiled in parallel processes first; then each kernel and cuBLAS (``cublasGemmEx``:
fp16 in its NN layout, int8 in TN, its fast path) timed between CUDA events after a warm-up
(best and median of ``--repeat``), every element of every output checked against a float64
reference computed on the GPU (int8 exactly; fp16 within the rule of ``cuda_suite.py``),
with the device, its SM count, the driver, runtime and nvcc versions and its clocks before
and after. It prints a table (T(FL)OP/s, and the ratio to cuBLAS) and writes the JSON
(``--json``) and a plot (``--plot``, where matplotlib is importable). Without a device it
prepares and compiles every kernel (for ``--arch``), says so and exits 0; so does
``--compile-only`` anywhere. Figures, not assertions.

    .venv/bin/python bench/bench_cuda.py --static [--size N]
    PYTHONPATH=. python3 bench/bench_cuda.py --gpu-suite --json OUT.json [--plot OUT.png]
    .venv/bin/python bench/bench_cuda.py --compile-only [--arch sm_90] [--case 'fp16 1x4096x4096']
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import multiprocessing
import os
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np
import suite_kernels  # bench/ is on the path: the benchmarks run as scripts
from cuda_suite import (CUBLAS_LAYOUT, FAMILIES, KERNELS, GemmCase, GemmExCall, KernelPlan,
                        check_fp16, check_int8, gemm_ex_call, plan_suite, require_exact_int8,
                        suite_cases, summary, write_json)

from intrinsics import default_registry
from targets import cuda
from targets.cuda.banks import bank_conflicts
from targets.cuda.compile import cuobjdump_path, resource_usage, sass_drains, sass_mix
from targets.cuda.occupancy import architecture, architectures, occupancy
from targets.cuda.pipeline import STAGES
from targets.cuda.run import (device_summary, event_times, gpu_unavailable, launch, load,
                              sm_clocks)
from tensorize.engine import auto_tensorize
from tensorize.engine.cuda_schedule import (
    UNIT_MACS,
    CudaTiling,
    TilingFigures,
    TilingTrial,
    choose_family,
    choose_tiling,
    instruction_macs,
    issued_per_unit,
    narrow_inputs,
    search_tilings,
    tensor_pipe,
)

GEMMS = ("gemm_fp16", "gemm_int8")
# The mma.sync family's GEMMs: (suite kernel, intrinsic).
MMA_GEMMS = (("gemm_fp16", "mma_m16n8k16_f16f16_f32"), ("gemm_int8", "mma_m16n8k32_s8s8_s32"),
             ("gemm_u8s8", "mma_m16n8k32_u8s8_s32"))


@dataclass(frozen=True)
class Built:
    """One GEMM tensorized and emitted at size ``n``, with its tiling."""

    name: str
    n: int
    tiling: CudaTiling
    kernel: cuda.CudaKernel
    intrinsic: str
    shape: tuple[int, int, int]


def build(name: str, n: int, tiling: CudaTiling | None = None, stages: int = STAGES,
          intrinsic: str | None = None, double_fragments: bool = True) -> Built:
    """Tensorize and emit GEMM ``name`` at ``n``^3 through ``intrinsic`` (default: the
    engine's choice) with ``tiling`` (default: the engine's) and ``stages``, its fragments
    double-buffered across the k loop's barrier unless ``double_fragments`` is False."""
    func = suite_kernels.builders()[name](n, n, n)
    if intrinsic is None:
        first = auto_tensorize(func, "cuda", registry=default_registry())
        (intrinsic,) = [b.intrinsic for b in first.tensorized]
    chosen = default_registry().get(intrinsic)
    shape = tuple(chosen.extents)
    elem = max(chosen.operands[0].dtype.bits // 8, 1)
    tiling = tiling or choose_tiling((n, n, n), shape, elem, narrow_inputs(chosen))
    kernel = cuda.emit(auto_tensorize(func, "cuda", registry=default_registry(),
                                      intrinsic=intrinsic, tiling=tiling).func,
                       default_registry(), stages=stages, double_fragments=double_fragments)
    return Built(name, n, tiling, kernel, intrinsic, shape)


def conflict_counts(built: Built) -> dict:
    """The bank model's counts for one block of the same tiling and stages: a GEMM of one
    block tile and as many k steps as stages, emulated on random inputs."""
    bm, bn, bk = built.tiling.block_tile(*built.shape)
    (launch,) = [l for l in built.kernel.launches if l.tensorized]
    func = suite_kernels.builders()[built.name](bm, bn, launch.stages * bk)
    kernel = cuda.emit(auto_tensorize(func, "cuda", registry=default_registry(),
                                      intrinsic=built.intrinsic, tiling=built.tiling).func,
                       default_registry(), stages=launch.stages)
    rng = np.random.default_rng(0)
    inputs = {p.name: (rng.standard_normal(p.shape) if p.dtype.is_float
                       else rng.integers(-128, 128, p.shape)).astype(p.dtype.numpy)
              for p in func.params if p.name in ("A", "B")}
    (tiled,) = [l.kernel for l in kernel.launches if l.tensorized]
    return bank_conflicts(kernel, inputs)[tiled]


def modelled_conflicts(built: Built) -> str:
    """:func:`conflict_counts` as one line."""
    counts = conflict_counts(built)
    loads, copies = counts["fragment_load"], counts["copy"]
    return (f"{loads.conflicts} in {loads.phases} fragment-load phases, {copies.conflicts} in "
            f"{copies.phases} copy phases")


def searched(name: str, n: int, measured: int = 4) -> None:
    """Print the tiling search's best ``measured`` candidates on sm_80 for GEMM ``name`` per
    tensor-core family (:data:`FAMILIES`), and the family it takes and why."""
    registry = default_registry()
    sm_80 = architecture("sm_80", registry)
    searches: dict[str, list[TilingTrial]] = {}
    for intrinsic in (registry.get(i) for i in FAMILIES[name.removeprefix("gemm_")]):
        shape = tuple(intrinsic.extents)
        elem = max(intrinsic.operands[0].dtype.bits // 8, 1)
        searches[intrinsic.name] = search_tilings(
            (n, n, n), shape, elem, 1, sm_80, lambda r, s, t: occupancy(sm_80, r, s, t),
            tensor_pipe(intrinsic, "sm_80"), _measure(name, n, intrinsic.name), measured)
        trials = searches[intrinsic.name]
        print(f"  tiling search through {intrinsic.name} (sm_80, {len(trials)} candidates, "
              f"best {measured} estimates compiled):")
        for trial in trials[:measured]:
            print(f"    {trial.describe(shape)}")
    issued = {name: issued_per_unit(registry.get(name)) for name in searches}
    print(f"  family taken: {choose_family(searches, issued)[1]}")


def _measure(name: str, n: int, intrinsic: str):
    """The search's ``measure`` for GEMM ``name`` through ``intrinsic``: ptxas resources,
    the SASS mix and the modelled bank conflicts, both per m16n8k16 of work."""
    macs = instruction_macs(default_registry().get(intrinsic))

    def measure(tiling: CudaTiling, stages: int) -> TilingFigures | None:
        built = build(name, n, tiling, stages, intrinsic)
        (launch,) = [l for l in built.kernel.launches if l.tensorized]
        try:
            (r,) = [r for r in resource_usage(built.kernel, "sm_80")
                    if r.kernel == launch.kernel]
        except cuda.CompileError:
            return None
        other = None
        if cuobjdump_path() is not None:
            (mix,) = [m for m in sass_mix(built.kernel, "sm_80") if m.kernel == launch.kernel]
            other = mix.other_per_mma * UNIT_MACS / macs
        counts = conflict_counts(built)
        # Conflicts per unit: extra wavefronts of one block over the block's m16n8k16 units
        # of work in the emulated k steps.
        bm, bn, bk = tiling.block_tile(*built.shape)
        units = bm * bn * launch.stages * bk / UNIT_MACS
        conflicts = sum(c.conflicts for c in counts.values()) / units
        return TilingFigures(r.registers, r.shared_bytes + launch.dynamic_shared,
                             r.spill_stores + r.spill_loads, other, conflicts)

    return measure


def static(n: int) -> None:
    """Print the static figures of each GEMM (module docs)."""
    if cuda.nvcc_path() is None:
        print("bench_cuda --static needs nvcc (install the CUDA toolkit or set NVCC)")
        return
    disassemble = cuobjdump_path() is not None
    for name in GEMMS:
        start = time.perf_counter()
        built = build(name, n)
        prepared = time.perf_counter() - start
        (launch,) = [l for l in built.kernel.launches if l.tensorized]
        warps = launch.block[1] * launch.block[2]
        bm, bn, bk = built.tiling.block_tile(*built.shape)
        wm, wn = bm // built.tiling.warps[0], bn // built.tiling.warps[1]
        others = [l for l in built.kernel.launches if not l.tensorized]
        print(f"{name} {n}^3 through {built.intrinsic} (the engine's choice): block tile "
              f"{bm}x{bn}x{bk}, {warps} warps of {wm}x{wn}, "
              f"{launch.stages} stages, grid {launch.grid}; {len(built.kernel.launches)} "
              f"launch(es): {len(others)} data-parallel before or after it "
              f"{[l.kernel for l in others]}; tensorize+emit {prepared:.2f} s")
        for arch, limits in architectures(default_registry()).items():
            (r,) = [r for r in resource_usage(built.kernel, arch) if r.kernel == launch.kernel]
            shared = r.shared_bytes + launch.dynamic_shared
            o = occupancy(limits, r.registers, shared, 32 * warps)
            line = (f"  {arch}: {r.registers} registers, {shared} B shared "
                    f"({launch.dynamic_shared} dynamic), {r.spill_stores + r.spill_loads} "
                    f"spill bytes; occupancy {o.blocks} blocks, {o.warps}/{o.max_warps} warps "
                    f"({o.fraction:.0%}, {o.limited_by})")
            if disassemble:
                (mix,) = [m for m in sass_mix(built.kernel, arch) if m.kernel == launch.kernel]
                per_unit = UNIT_MACS / instruction_macs(default_registry().get(built.intrinsic))
                line += (f"; {mix.other} non-MMA per {mix.mma} MMA in the {mix.scope}: "
                         f"{mix.other_per_mma:.2f} per MMA, "
                         f"{mix.other_per_mma * per_unit:.2f} per m16n8k16 of work; "
                         f"{_drains(built.kernel, arch, launch.kernel)}")
            else:
                line += "; SASS mix skipped: cuobjdump not found"
            print(line)
        print(f"  bank conflicts (modelled): {modelled_conflicts(built)}")
        searched(name, n)
    mma_family(n)
    if disassemble:
        barrier_forms(n)
    resnet_conv()


def _drains(kernel: cuda.CudaKernel, arch: str, function: str) -> str:
    """Whether the tensor pipe drains at the barriers of ``function``'s k loop, as a
    phrase (:class:`targets.cuda.sass.BarrierDrains`)."""
    (drains,) = [d for d in sass_drains(kernel, arch) if d.kernel == function]
    return drains.describe()


# The GEMMs whose k loop the barrier comparison compiles in both forms: (kernel, intrinsic).
BARRIER_FORMS = (("gemm_fp16", "mma_m16n8k16_f16f16_f32"), ("gemm_fp16", "wmma_m16n16k16_f16_f32"),
                 ("gemm_int8", "mma_m16n8k32_s8s8_s32"), ("gemm_int8", "wmma_m16n16k16_s8_s32"))


def barrier_forms(n: int, stages: int = 4) -> None:
    """Print, per GEMM of :data:`BARRIER_FORMS` in the engine's tiling with ``stages``
    stages and per architecture, the k loop's figures in the simple form (each step's
    fragments loaded after its barrier) and with its fragments double-buffered across the
    barrier: registers, spill bytes, non-MMA SASS instructions per MMA, and whether the
    first MMA after each barrier waits for an LDSM issued after it."""
    for name, intrinsic in BARRIER_FORMS:
        for double in (False, True):
            built = build(name, n, stages=stages, intrinsic=intrinsic, double_fragments=double)
            (launch,) = [l for l in built.kernel.launches if l.tensorized]
            form = "double-buffered fragments" if double else "simple form"
            print(f"{name} {n}^3 through {intrinsic}, {stages} stages, {form}:")
            for arch in architectures(default_registry()):
                (r,) = [r for r in resource_usage(built.kernel, arch)
                        if r.kernel == launch.kernel]
                (mix,) = [m for m in sass_mix(built.kernel, arch) if m.kernel == launch.kernel]
                print(f"  {arch}: {r.registers} registers, {r.spill_stores + r.spill_loads} "
                      f"spill bytes; {mix.other} non-MMA per {mix.mma} MMA in the "
                      f"{mix.scope}: {mix.other_per_mma:.2f} per MMA; "
                      f"{_drains(built.kernel, arch, launch.kernel)}")


def mma_family(n: int) -> None:
    """Print registers and non-MMA instructions per MMA of the GEMMs through mma.sync."""
    for name, intrinsic in MMA_GEMMS:
        func = suite_kernels.builders()[name](n, n, n)
        result = auto_tensorize(func, "cuda", registry=default_registry(), intrinsic=intrinsic)
        kernel = cuda.emit(result.func, default_registry())
        (launch,) = [l for l in kernel.launches if l.tensorized]
        # MMA instructions per m16n8k16 of work: 0.5 where one IMMA.16832 does two.
        per_unit = UNIT_MACS / instruction_macs(default_registry().get(intrinsic))
        print(f"{name} {n}^3 through {intrinsic}: {len(kernel.launches)} launch(es), grid "
              f"{launch.grid}, {launch.stages} stages")
        for arch in architectures(default_registry()):
            (r,) = [r for r in resource_usage(kernel, arch) if r.kernel == launch.kernel]
            line = (f"  {arch}: {r.registers} registers, {r.spill_stores + r.spill_loads} "
                    "spill bytes")
            if cuobjdump_path() is not None:
                (mix,) = [m for m in sass_mix(kernel, arch) if m.kernel == launch.kernel]
                per_work = mix.other_per_mma * per_unit
                line += (f"; {mix.other} non-MMA per {mix.mma} MMA in the {mix.scope}: "
                         f"{mix.other_per_mma:.2f} per MMA, {per_work:.2f} per m16n8k16 of work; "
                         f"{_drains(kernel, arch, launch.kernel)}")
            print(line)


def resnet_conv() -> None:
    """Print launches, registers and non-MMA instructions per MMA of ResNet-50's first 3x3
    convolution (1 x 56 x 56 x 64 -> 64, NHWC int8), an implicit GEMM: the im2col is in the
    address of the tiles' copy of the activations."""
    func = suite_kernels.builders()["conv2d_nhwc_int8"](1, 56, 56, 64, 64)
    registry = default_registry()
    kernel = cuda.emit(auto_tensorize(func, "cuda", registry=registry).func, registry)
    (launch,) = [l for l in kernel.launches if l.tensorized]
    others = [l.kernel for l in kernel.launches if not l.tensorized]
    print(f"conv2d_nhwc_int8 ResNet-50 3x3 (1x56x56x64 -> 64): {len(kernel.launches)} launches "
          f"(data-parallel: {others}; the GEMM {launch.kernel} grid {launch.grid}, "
          f"{launch.stages} stages)")
    for arch in architectures(registry):
        (r,) = [r for r in resource_usage(kernel, arch) if r.kernel == launch.kernel]
        line = (f"  {arch}: {r.registers} registers, "
                f"{r.shared_bytes + launch.dynamic_shared} B shared")
        if cuobjdump_path() is not None:
            (mix,) = [m for m in sass_mix(kernel, arch) if m.kernel == launch.kernel]
            line += (f"; {mix.other} non-MMA per {mix.mma} MMA in the {mix.scope}: "
                     f"{mix.other_per_mma:.2f} per MMA")
        print(line)


# ---- the GPU suite ----------------------------------------------------------------------------

# Candidates of the tiling search compiled and measured per family (the rest estimated).
MEASURED = 4


@dataclass(frozen=True)
class Prepared:
    """One planned kernel built and compiled for ``arch``: the kernel and its cubin (None
    where it could not be made, ``note`` says why), the intrinsic, the tiling search's
    choice for a tuned kernel, and the seconds it took."""

    plan: KernelPlan
    arch: str
    kernel: cuda.CudaKernel | None
    cubin: bytes | None
    intrinsic: str | None
    note: str
    seconds: float

    def describe(self) -> str:
        """The kernel's launches (grid x block, stages) and the note, on one line."""
        if self.kernel is None:
            return self.note
        launches = ", ".join(f"{l.kernel.rsplit('_', 1)[-1]} {l.grid}x{l.block}"
                             + (f" {l.stages} stages" if l.tiled else "")
                             for l in self.kernel.launches)
        return f"{self.intrinsic}: {launches}" + (f"; {self.note}" if self.note else "")


def _figures(kernel: cuda.CudaKernel, arch: str, macs: int) -> TilingFigures | None:
    """ptxas's registers, shared memory and spills of ``kernel``'s tiled launch on ``arch``
    and, where cuobjdump is found, its non-MMA instructions per m16n8k16 of work; None when
    it does not compile. No bank-conflict model: the GPU measures what they cost."""
    (launch,) = [l for l in kernel.launches if l.tensorized]
    try:
        (r,) = [r for r in resource_usage(kernel, arch) if r.kernel == launch.kernel]
    except cuda.CompileError:
        return None
    other = None
    if cuobjdump_path() is not None:
        (mix,) = [m for m in sass_mix(kernel, arch) if m.kernel == launch.kernel]
        other = mix.other_per_mma * UNIT_MACS / macs
    return TilingFigures(r.registers, r.shared_bytes + launch.dynamic_shared,
                         r.spill_stores + r.spill_loads, other)


def _split_note(mapping: str) -> str:
    """The engine's split-K note at the end of a block's mapping, or ''."""
    return next((part for part in mapping.split("; ") if part.startswith("split-K")), "")


def prepare(plan: KernelPlan, arch: str) -> Prepared:
    """Tensorize, emit and compile (a cubin for ``arch``) the kernel ``plan`` names: the
    engine's default, or the best of the tiling search (:func:`search_tilings`, the best
    :data:`MEASURED` estimates compiled) through ``plan.intrinsic``. Runs in a worker
    process; any failure is returned in the note, never raised."""
    start = time.perf_counter()
    registry = default_registry()
    case = plan.case
    func = suite_kernels.builders()[KERNELS[case.dtype]](case.m, case.n, case.k)

    def done(kernel, intrinsic, note: str) -> Prepared:
        cubin = None
        if kernel is not None:
            try:
                cubin = cuda.compile(kernel, arch, "cubin")
            except cuda.CompileError as err:
                kernel, note = None, f"nvcc failed: {str(err).splitlines()[0]}"
        return Prepared(plan, arch, kernel, cubin, intrinsic, note,
                        time.perf_counter() - start)

    try:
        first = auto_tensorize(func, "cuda", registry=registry, intrinsic=plan.intrinsic)
        if not first.tensorized:
            return done(None, plan.intrinsic, "not tensorized: " + first.blocks[0].reason)
        (outcome,) = first.tensorized
        if plan.intrinsic is None:
            return done(cuda.emit(first.func, registry), outcome.intrinsic,
                        _split_note(outcome.mapping))
        intrinsic = registry.get(plan.intrinsic)
        shape = tuple(intrinsic.extents)
        elem = max(intrinsic.operands[0].dtype.bits // 8, 1)
        limits = architecture(arch, registry)
        macs = instruction_macs(intrinsic)

        def measure(tiling: CudaTiling, stages: int) -> TilingFigures | None:
            tiled = auto_tensorize(func, "cuda", registry=registry, intrinsic=intrinsic.name,
                                   tiling=tiling)
            return _figures(cuda.emit(tiled.func, registry, stages=stages), arch, macs)

        trials = search_tilings(tuple(outcome.extents[-3:]), shape, elem, 1, limits,
                                lambda r, s, t: occupancy(limits, r, s, t),
                                tensor_pipe(intrinsic, arch), measure, MEASURED)
        if not trials or not trials[0].blocks_per_sm:
            return done(None, intrinsic.name, "the tiling search found no candidate that "
                        f"fits (padded extents {outcome.extents[-3:]})")
        best = trials[0]
        tuned = auto_tensorize(func, "cuda", registry=registry, intrinsic=intrinsic.name,
                               tiling=best.tiling)
        (chosen,) = tuned.tensorized
        split = _split_note(chosen.mapping)
        return done(cuda.emit(tuned.func, registry, stages=best.stages), intrinsic.name,
                    f"search's best of {len(trials)}: {best.describe(shape)}"
                    + (f"; {split}" if split else ""))
    except Exception as err:  # noqa: BLE001  one kernel's failure must not stop the suite
        return done(None, plan.intrinsic, f"{type(err).__name__}: {err}")


def prepare_all(plans: list[KernelPlan], arch: str, workers: int) -> list[Prepared]:
    """:func:`prepare` every plan in ``workers`` processes (spawned: the parent may hold a
    CUDA context, which a forked child must not inherit), printing each as it finishes;
    the result in plan order."""
    print(f"preparing {len(plans)} kernels for {arch} in {workers} processes", flush=True)
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
        futures = {pool.submit(prepare, plan, arch): n for n, plan in enumerate(plans)}
        found: dict[int, Prepared] = {}
        for future in concurrent.futures.as_completed(futures):
            item = future.result()
            found[futures[future]] = item
            print(f"  [{len(found)}/{len(plans)}] {item.plan.case.label} {item.plan.label} "
                  f"({item.seconds:.1f} s): {item.describe()}", flush=True)
    return [found[n] for n in range(len(plans))]


def _inputs(case: GemmCase, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random A and B: fp16 standard normal, or int8 over its whole range."""
    rng = np.random.default_rng(seed)
    if case.dtype == "fp16":
        return (rng.standard_normal((case.m, case.k), np.float32).astype(np.float16),
                rng.standard_normal((case.k, case.n), np.float32).astype(np.float16))
    return (rng.integers(-128, 128, (case.m, case.k), dtype=np.int8),
            rng.integers(-128, 128, (case.k, case.n), dtype=np.int8))


# cudaDataType_t values (CUDA's library_types.h): CuPy 14's runtime module no longer
# exports CUDA_R_32I, so the enum is spelled out here.
CUDA_R_32F, CUDA_R_16F, CUDA_R_8I, CUDA_R_32I = 0, 2, 3, 10


def _cublas(call: GemmExCall, buffers: dict, out, dtype: str) -> None:
    """``out = A @ B`` through cublasGemmEx with ``call``'s arguments (fp16 -> fp32 or
    int8 -> int32, computed in fp32 and int32, as ours); ``buffers`` by the names ``call``
    uses."""
    import cupy
    from cupy.cuda import cublas, device

    if dtype == "fp16":
        types = (CUDA_R_16F, CUDA_R_32F, cublas.CUBLAS_COMPUTE_32F)
        one, zero = np.array(1, np.float32), np.array(0, np.float32)
    else:
        types = (CUDA_R_8I, CUDA_R_32I, cublas.CUBLAS_COMPUTE_32I)
        one, zero = np.array(1, np.int32), np.array(0, np.int32)
    operation = {"N": cublas.CUBLAS_OP_N, "T": cublas.CUBLAS_OP_T}
    handle = device.get_cublas_handle()
    cublas.setPointerMode(handle, cublas.CUBLAS_POINTER_MODE_HOST)
    cublas.gemmEx(handle, operation[call.transa], operation[call.transb], call.rows,
                  call.cols, call.depth, one.ctypes.data, buffers[call.x].data.ptr, types[0],
                  call.lda, buffers[call.y].data.ptr, types[0], call.ldb, zero.ctypes.data,
                  out.data.ptr, types[1], call.ldc, types[2], cublas.CUBLAS_GEMM_DEFAULT)


def _measured(case: GemmCase, name: str, call, out, reference, repeat: int) -> dict:
    """Run ``call`` once on an output filled with a value no kernel computes (NaN, or
    int32's least), check the whole output against ``reference`` (a (values, magnitude)
    pair), then time it: one row of the record."""
    import cupy

    row = _row(case, name)
    out.fill(np.nan if case.dtype == "fp16" else np.iinfo(np.int32).min)
    try:
        call()
        cupy.cuda.get_current_stream().synchronize()
    except Exception as err:  # noqa: BLE001  a refused launch or cuBLAS call is a result
        row.update(error=f"{type(err).__name__}: {err}", ok=False)
        return row
    values, magnitude = reference
    check = (check_fp16(out, values, magnitude, case.k) if case.dtype == "fp16"
             else check_int8(out, values))
    times = summary(event_times(call, repeat))
    row.update(times, ok=check.ok, wrong=check.wrong, worst=check.worst,
               check=check.describe(),
               tera_ops_per_s=case.operations / (times["best_ms"] * 1e-3) / 1e12)
    return row


def _row(case: GemmCase, kernel: str) -> dict:
    """The start of a row of the record: the case and the kernel's name."""
    return {"case": case.label, "dtype": case.dtype, "m": case.m, "n": case.n, "k": case.k,
            "kernel": kernel}


def run_case(case: GemmCase, kernels: list[Prepared], repeat: int, seed: int) -> list[dict]:
    """Time and check each of ``kernels`` (the case's) and cuBLAS on the device: one row
    each, the ratio to cuBLAS's best time added (above 1: faster than cuBLAS)."""
    import cupy

    a, b = _inputs(case, seed)
    x, y = cupy.asarray(a), cupy.asarray(b)
    wide_a, wide_b = x.astype(cupy.float64), y.astype(cupy.float64)
    if case.dtype == "int8":
        require_exact_int8(case.k)
        reference = (wide_a @ wide_b, None)
    else:
        reference = (wide_a @ wide_b, cupy.abs(wide_a) @ cupy.abs(wide_b))
    del wide_a, wide_b
    out_type = cupy.float32 if case.dtype == "fp16" else cupy.int32
    rows = []
    for item in kernels:
        if item.kernel is None:
            rows.append(_row(case, item.plan.label) | {"error": item.note, "ok": False})
            print(f"  {case.label} {item.plan.label}: skipped ({item.note})", flush=True)
            continue
        kernel = item.kernel
        functions = load(kernel, cubin=item.cubin)
        out = cupy.empty((case.m, case.n), out_type)
        args = {"A": x, "B": y, "C": out}
        for buffer in kernel.buffers:  # intermediates: padded copies, a transposed B
            args.setdefault(buffer.name, cupy.zeros(buffer.shape, buffer.dtype.numpy))
        ordered = tuple(args[p] for p in kernel.params)
        row = _measured(case, item.plan.label, functools.partial(launch, functions, ordered),
                        out, reference, repeat)
        row.update(intrinsic=item.intrinsic, launches=item.describe())
        rows.append(row)
        print(f"  {_line(row)}", flush=True)
    layout = CUBLAS_LAYOUT[case.dtype]
    call = gemm_ex_call(case.m, case.n, case.k, layout)
    buffers = {"A": x, "B": y, "B^T": cupy.ascontiguousarray(y.T) if call.x == "B^T" else y}
    out = cupy.empty((case.m, case.n), out_type)
    theirs = _measured(case, f"cuBLAS {layout}",
                       functools.partial(_cublas, call, buffers, out, case.dtype), out,
                       reference, repeat)
    print(f"  {_line(theirs)}", flush=True)
    for row in rows:
        if "best_ms" in row and "best_ms" in theirs:
            row["vs_cublas"] = theirs["best_ms"] / row["best_ms"]
    return [*rows, theirs]


def _line(row: dict) -> str:
    """One row of the table: case, kernel, best and median ms, T(FL)OP/s, ratio, check."""
    if "best_ms" not in row:
        return f"{row['case']:<22} {row['kernel']:<32} {row.get('error', '')}"
    ratio = f"{row['vs_cublas']:.2f}" if "vs_cublas" in row else "-"
    return (f"{row['case']:<22} {row['kernel']:<32} {row['best_ms']:9.4f} "
            f"{row['median_ms']:9.4f} {row['tera_ops_per_s']:8.1f} {ratio:>6}  "
            f"{row['check']}")


def _plot(rows: list[dict], path: str) -> None:
    """Bars of T(FL)OP/s per case and kernel, where matplotlib is importable."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"--plot {path}: matplotlib is not importable here; the JSON has the figures")
        return
    timed = [r for r in rows if "tera_ops_per_s" in r]
    cases = list(dict.fromkeys(r["case"] for r in timed))
    kernels = list(dict.fromkeys(r["kernel"] for r in timed))
    width = 0.8 / max(len(kernels), 1)
    figure, axes = plt.subplots(figsize=(max(8, len(cases) * 1.2), 5))
    for n, name in enumerate(kernels):
        values = {r["case"]: r["tera_ops_per_s"] for r in timed if r["kernel"] == name}
        axes.bar([c + n * width for c in range(len(cases))],
                 [values.get(c, 0) for c in cases], width, label=name)
    axes.set_xticks([c + 0.4 - width / 2 for c in range(len(cases))], cases, rotation=45,
                    ha="right")
    axes.set_ylabel("TFLOP/s (fp16) or TOP/s (int8), best of the runs")
    axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path)
    print(f"plot written to {path}")


def gpu_suite(args: argparse.Namespace) -> None:
    """Prepare every planned kernel (module docs), then, on a device, time and check them
    beside cuBLAS, print the table and write the JSON (and the plot)."""
    if cuda.nvcc_path() is None:
        print("bench_cuda --gpu-suite needs nvcc (install the CUDA toolkit or set NVCC)")
        return
    cases = [c for c in suite_cases() if not args.case or c.label in args.case]
    reason = gpu_unavailable()
    arch = args.arch
    if reason is None:
        import cupy

        arch = f"sm_{cupy.cuda.Device().compute_capability}"
    start = time.perf_counter()
    prepared = prepare_all(plan_suite(cases), arch, args.workers)
    failed = [p for p in prepared if p.kernel is None]
    print(f"prepared {len(prepared) - len(failed)} of {len(prepared)} kernels for {arch} in "
          f"{time.perf_counter() - start:.0f} s", flush=True)
    if args.compile_only:
        return
    if reason is not None:
        print(f"no GPU to time them on ({reason}): the kernels compile; nothing to measure "
              "here", flush=True)
        return
    record: dict = {"command": " ".join(["python3", *sys.argv]), "arch": arch,
                    "device": device_summary(), "clocks_before": sm_clocks(),
                    "nvcc": _nvcc_version(), "repeat": args.repeat,
                    "fp16_tolerance": "|C - R| <= 4 K 2^-24 (|A| @ |B|) per element",
                    "vs_cublas": "cuBLAS's best time over the kernel's: above 1 is faster"}
    print(f"{record['device']['name']}: {record['device']['sm_count']} SMs, clocks "
          f"{record['clocks_before']}", flush=True)
    print(f"{'case':<22} {'kernel':<32} {'best ms':>9} {'median':>9} {'T(FL)OP/s':>8} "
          f"{'vs cuBLAS':>6}  check", flush=True)
    rows = []
    for case in cases:
        rows += run_case(case, [p for p in prepared if p.plan.case == case], args.repeat,
                         args.seed)
        # The case's inputs, reference and outputs are gone: give their memory back.
        cupy.get_default_memory_pool().free_all_blocks()
    record.update(clocks_after=sm_clocks(), rows=rows,
                  seconds=time.perf_counter() - start)
    print(f"\nclocks after: {record['clocks_after']}; {record['seconds']:.0f} s in all")
    print("\n".join(_line(row) for row in rows))
    if args.json:
        write_json(args.json, record)
        print(f"JSON written to {args.json}")
    if args.plot:
        _plot(rows, args.plot)


def _nvcc_version() -> str:
    """nvcc's release line (``Cuda compilation tools, release 13.0, V13.0.48``)."""
    done = subprocess.run([cuda.nvcc_path(), "--version"], capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if "release" in line]
    return lines[0].strip() if lines else done.stdout.strip()


def main() -> None:
    """Static figures with ``--static``, else the GPU suite."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--static", action="store_true",
                        help="registers, shared memory, occupancy, SASS mix, bank conflicts")
    parser.add_argument("--size", type=int, default=4096, help="--static's N")
    parser.add_argument("--gpu-suite", action="store_true",
                        help="the GPU suite (the default without --static)")
    parser.add_argument("--compile-only", action="store_true",
                        help="prepare and compile the suite's kernels, time nothing")
    parser.add_argument("--arch", default="sm_90",
                        help="the architecture to compile for where no GPU says (sm_90)")
    parser.add_argument("--case", action="append",
                        help="only this case, as the table names it ('fp16 1x4096x4096'); "
                             "repeatable")
    parser.add_argument("--repeat", type=int, default=20, help="timed runs per kernel")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="processes that prepare the kernels")
    parser.add_argument("--json", help="write the record here")
    parser.add_argument("--plot", help="draw T(FL)OP/s here (needs matplotlib)")
    args = parser.parse_args()
    print("command:", " ".join(["python3", *sys.argv]), flush=True)
    if args.static:
        static(args.size)
    else:
        gpu_suite(args)


if __name__ == "__main__":
    main()
