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

Without ``--static``, on a GPU through CuPy: our kernel (the cubin loaded with
``cupy.RawModule``) and cuBLAS (``cublasGemmEx`` through CuPy's bindings: fp16 x fp16 ->
fp32 and int8 x int8 -> int32, computed in fp32 and int32, as ours), both timed with CUDA
events (best of ``--repeat``), both results checked against a numpy reference on a sample
of rows, and TFLOP/s (TOP/s for int8) with the ratio side by side. Without CuPy or a device
it says so and exits 0. Figures, not assertions.

    .venv/bin/python bench/bench_cuda.py --static [--size N]
    .venv/bin/python bench/bench_cuda.py [--size N] [--repeat R]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

import numpy as np
import suite_kernels  # bench/ is on the path: the benchmarks run as scripts

from intrinsics import default_registry
from targets import cuda
from targets.cuda.banks import bank_conflicts
from targets.cuda.compile import cuobjdump_path, resource_usage, sass_mix
from targets.cuda.occupancy import architecture, architectures, occupancy
from targets.cuda.pipeline import STAGES
from targets.cuda.run import gpu_unavailable, load
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
    search_tilings,
    tensor_pipe,
)

GEMMS = ("gemm_fp16", "gemm_int8")
# The intrinsic of each tensor-core family that the tiling search tries per GEMM.
FAMILIES = {"gemm_fp16": ("wmma_m16n16k16_f16_f32", "mma_m16n8k16_f16f16_f32"),
            "gemm_int8": ("wmma_m16n16k16_s8_s32", "mma_m16n8k32_s8s8_s32")}
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
          intrinsic: str | None = None) -> Built:
    """Tensorize and emit GEMM ``name`` at ``n``^3 through ``intrinsic`` (default: the
    engine's choice) with ``tiling`` (default: the engine's) and ``stages``."""
    func = suite_kernels.builders()[name](n, n, n)
    if intrinsic is None:
        first = auto_tensorize(func, "cuda", registry=default_registry())
        (intrinsic,) = [b.intrinsic for b in first.tensorized]
    chosen = default_registry().get(intrinsic)
    shape = tuple(chosen.extents)
    elem = max(chosen.operands[0].dtype.bits // 8, 1)
    tiling = tiling or choose_tiling((n, n, n), shape, elem)
    kernel = cuda.emit(auto_tensorize(func, "cuda", registry=default_registry(),
                                      intrinsic=intrinsic, tiling=tiling).func,
                       default_registry(), stages=stages)
    return Built(name, n, tiling, kernel, intrinsic, shape)


def conflict_counts(built: Built) -> dict:
    """The bank model's counts for one block of the same tiling and stages: a GEMM of one
    block tile and as many k steps as stages, emulated on random inputs."""
    bm, bn, bk = built.tiling.block_tile(*built.shape)
    (launch,) = [l for l in built.kernel.launches if l.tiled]
    func = suite_kernels.builders()[built.name](bm, bn, launch.stages * bk)
    kernel = cuda.emit(auto_tensorize(func, "cuda", registry=default_registry(),
                                      intrinsic=built.intrinsic, tiling=built.tiling).func,
                       default_registry(), stages=launch.stages)
    rng = np.random.default_rng(0)
    inputs = {p.name: (rng.standard_normal(p.shape) if p.dtype.is_float
                       else rng.integers(-128, 128, p.shape)).astype(p.dtype.numpy)
              for p in func.params if p.name in ("A", "B")}
    (tiled,) = [l.kernel for l in kernel.launches if l.tiled]
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
    for intrinsic in (registry.get(i) for i in FAMILIES[name]):
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
        (launch,) = [l for l in built.kernel.launches if l.tiled]
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
        (launch,) = [l for l in built.kernel.launches if l.tiled]
        warps = launch.block[1] * launch.block[2]
        bm, bn, bk = built.tiling.block_tile(*built.shape)
        wm, wn = bm // built.tiling.warps[0], bn // built.tiling.warps[1]
        others = [l for l in built.kernel.launches if not l.tiled]
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
                         f"{mix.other_per_mma * per_unit:.2f} per m16n8k16 of work")
            else:
                line += "; SASS mix skipped: cuobjdump not found"
            print(line)
        print(f"  bank conflicts (modelled): {modelled_conflicts(built)}")
        searched(name, n)
    mma_family(n)
    resnet_conv()


def mma_family(n: int) -> None:
    """Print registers and non-MMA instructions per MMA of the GEMMs through mma.sync."""
    for name, intrinsic in MMA_GEMMS:
        func = suite_kernels.builders()[name](n, n, n)
        result = auto_tensorize(func, "cuda", registry=default_registry(), intrinsic=intrinsic)
        kernel = cuda.emit(result.func, default_registry())
        (launch,) = [l for l in kernel.launches if l.tiled]
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
                         f"{mix.other_per_mma:.2f} per MMA, {per_work:.2f} per m16n8k16 of work")
            print(line)


def resnet_conv() -> None:
    """Print launches, registers and non-MMA instructions per MMA of ResNet-50's first 3x3
    convolution (1 x 56 x 56 x 64 -> 64, NHWC int8), an implicit GEMM: the im2col is in the
    address of the tiles' copy of the activations."""
    func = suite_kernels.builders()["conv2d_nhwc_int8"](1, 56, 56, 64, 64)
    registry = default_registry()
    kernel = cuda.emit(auto_tensorize(func, "cuda", registry=registry).func, registry)
    (launch,) = [l for l in kernel.launches if l.tiled]
    others = [l.kernel for l in kernel.launches if not l.tiled]
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


def _cublas(a, b, c, name: str) -> None:
    """``c = a @ b`` (row-major) through cublasGemmEx: computed as the column-major
    ``c^T = b^T a^T``, fp16 -> fp32 or int8 -> int32."""
    import cupy
    from cupy.cuda import cublas, device

    n_rows, k = a.shape
    n_cols = b.shape[1]
    if name == "gemm_fp16":
        types = (cupy.cuda.runtime.CUDA_R_16F, cupy.cuda.runtime.CUDA_R_32F,
                 cublas.CUBLAS_COMPUTE_32F)
        one, zero = np.array(1, np.float32), np.array(0, np.float32)
    else:
        types = (cupy.cuda.runtime.CUDA_R_8I, cupy.cuda.runtime.CUDA_R_32I,
                 cublas.CUBLAS_COMPUTE_32I)
        one, zero = np.array(1, np.int32), np.array(0, np.int32)
    handle = device.get_cublas_handle()
    cublas.setPointerMode(handle, cublas.CUBLAS_POINTER_MODE_HOST)
    cublas.gemmEx(handle, cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_N, n_cols, n_rows, k,
                  one.ctypes.data, b.data.ptr, types[0], n_cols, a.data.ptr, types[0], k,
                  zero.ctypes.data, c.data.ptr, types[1], n_cols, types[2],
                  cublas.CUBLAS_GEMM_DEFAULT)


def _launch(functions: list, args: tuple) -> None:
    """Every launch of the kernel, in order, with its dynamic shared memory."""
    for function, launch in functions:
        function(launch.grid, launch.block, args, shared_mem=launch.dynamic_shared)


def _timed(launch, repeat: int) -> float:
    """The best time of ``launch()`` over ``repeat`` runs, in ms, between CUDA events."""
    import cupy

    launch()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    best = float("inf")
    for _ in range(repeat):
        start.record()
        launch()
        end.record()
        end.synchronize()
        best = min(best, cupy.cuda.get_elapsed_time(start, end))
    return best


def _checked(result, a: np.ndarray, b: np.ndarray) -> str:
    """How ``result`` (on the device) agrees with numpy on 64 sampled rows."""
    import cupy

    rows = np.random.default_rng(1).choice(a.shape[0], 64, replace=False)
    got = cupy.asnumpy(result[cupy.asarray(rows)])
    if a.dtype == np.int8:
        want = a[rows].astype(np.int64) @ b.astype(np.int64)
        return "exact" if np.array_equal(got, want) else "WRONG (not exact)"
    want = a[rows].astype(np.float32) @ b.astype(np.float32)
    error = float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))
    return f"max rel. error {error:.1e}" + ("" if error < 1e-2 else " WRONG")


def on_gpu(n: int, repeat: int) -> None:
    """Time each GEMM and cuBLAS on the device and print them side by side."""
    reason = gpu_unavailable()
    if reason is not None:
        print(f"bench_cuda needs a CUDA device through CuPy ({reason}); nothing to measure "
              "here. `--static` prints the figures this machine can give.")
        return
    import cupy

    rng = np.random.default_rng(0)
    for name in GEMMS:
        built = build(name, n)
        if name == "gemm_fp16":
            a = rng.standard_normal((n, n)).astype(np.float16)
            b = rng.standard_normal((n, n)).astype(np.float16)
        else:
            a = rng.integers(-128, 128, (n, n)).astype(np.int8)
            b = rng.integers(-128, 128, (n, n)).astype(np.int8)
        out = np.float32 if name == "gemm_fp16" else np.int32
        x, y = cupy.asarray(a), cupy.asarray(b)
        ours, theirs = cupy.zeros((n, n), out), cupy.zeros((n, n), out)
        functions = load(built.kernel)
        args = {"A": x, "B": y, "C": ours}
        for buffer in built.kernel.buffers:  # intermediates: the int8 B transposed
            args.setdefault(buffer.name, cupy.zeros(buffer.shape, buffer.dtype.numpy))

        ordered = tuple(args[p] for p in built.kernel.params)
        ours_ms = _timed(lambda: _launch(functions, ordered), repeat)  # noqa: B023
        cublas_ms = _timed(lambda: _cublas(x, y, theirs, name), repeat)  # noqa: B023
        ops = 2 * n ** 3 / 1e12
        print(f"{name} {n}^3 on {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}: "
              f"ours {ours_ms:.3f} ms {ops / ours_ms * 1e3:.1f} T(FL)OP/s "
              f"[{_checked(ours, a, b)}]; cuBLAS {cublas_ms:.3f} ms "
              f"{ops / cublas_ms * 1e3:.1f} T(FL)OP/s [{_checked(theirs, a, b)}]; "
              f"ours/cuBLAS {cublas_ms / ours_ms:.2f}")


def main() -> None:
    """Static figures with ``--static``, else timings on the GPU."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--static", action="store_true",
                        help="registers, shared memory, occupancy, SASS mix, bank conflicts")
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    print("command:", " ".join([".venv/bin/python", *sys.argv]))
    if args.static:
        static(args.size)
    else:
        on_gpu(args.size, args.repeat)


if __name__ == "__main__":
    main()
