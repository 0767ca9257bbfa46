"""The Hopper GEMM (wgmma fed by TMA tensor copies against mbarriers, sm_90a) at 4096^3 for
every input type, and in thread-block clusters of 2 for two of them, static figures (no GPU
needed): the engine's intrinsic and tiling, the launches (a packing launch before the GEMM
where B, stored K x N, is not read in place), the GEMM launch's registers, dynamic shared
memory and spills (ptxas), its wgmma, tensor-copy and mbarrier instructions in the SASS
(cuobjdump), and the instructions of its k loop. Then the same GEMM with an epilogue fused
into its store (an int8 requantisation, and a float16 layer's bias, ReLU and narrowing):
its launch's figures and the global stores it issues (the narrow output's alone, by kind).
Last, one consumer warpgroup a block (64 x n tiles) against two (128 x n, the producer
warpgroup giving registers to the consumers by setmaxnreg), each 16-bit type and int8: the
blocks, the blocks an SM holds (the occupancy calculator, from ptxas's registers and the
shared memory), the registers, USETMAXREG and the k loop's wgmma count and other
instructions.

    .venv/bin/python bench/bench_cuda_hopper.py
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable

import ir
from intrinsics import default_registry
from ir import dtypes, te
from ir.onnx.kernels import Requantisation, matmul_requantised
from targets.cuda.compile import cuobjdump_path, nvcc_path, resource_usage, sass_mix, sass_opcodes
from targets.cuda.hopper import emit_gemm
from targets.cuda.occupancy import architecture, occupancy
from tensorize.engine import auto_tensorize
from tensorize.engine.cuda_hopper import (HOPPER_ARCH, LIMITS_ARCH, hopper_gemm, hopper_kernel,
                                          hopper_schedule)

SIZE = 4096
INPUTS = ("float16", "bfloat16", "int8", "float8_e4m3", "float8_e5m2")
# (inputs, blocks per cluster) of the table's rows.
ROWS = (*((name, 1) for name in INPUTS), ("float16", 2), ("int8", 2))
# The SASS opcodes a Hopper GEMM should show: its wgmma, the tensor copy (UTMALDG; UBLKCP
# would be a plain bulk copy), the mbarrier ops, the cluster barrier's arrival, setmaxnreg.
COUNTED = ("HGMMA", "IGMMA", "QGMMA", "UBLKCP", "UTMALDG", "SYNCS", "UCGABAR_ARV",
           "USETMAXREG")
# The consumer table's rows: (inputs, consumer warpgroups a block).
CONSUMER_ROWS = tuple((name, consumers) for name in ("float16", "bfloat16", "int8")
                      for consumers in (1, 2))


def row(name: str, cluster: int = 1) -> str:
    """One table row for the SIZE^3 GEMM of ``name`` inputs in clusters of ``cluster``
    blocks."""
    registry = default_registry()  # a bench is an edge: the built-in descriptions
    dtype = dtypes.dtype(name)
    intrinsic, tiling = hopper_schedule(SIZE, SIZE, SIZE, dtype, registry, cluster)
    kernel = hopper_gemm(SIZE, SIZE, SIZE, dtype, registry, cluster=cluster)
    (launch,) = [l for l in kernel.launches if l.tensorized]
    (usage,) = [r for r in resource_usage(kernel, HOPPER_ARCH) if launch.kernel in r.kernel]
    (counts,) = [c for f, c in sass_opcodes(kernel, HOPPER_ARCH).items() if launch.kernel in f]
    (mix,) = [m for m in sass_mix(kernel, HOPPER_ARCH) if launch.kernel in m.kernel]
    sass = ", ".join(f"{counts[o]} {o}" for o in COUNTED if counts.get(o))
    launches = ", ".join(l.kernel.removeprefix(f"{kernel.name}_") for l in kernel.launches)
    return (f"| {name} | {intrinsic.name} | {tiling.steps} x {tiling.stages} | {cluster} | "
            f"{tiling.consumers} | {launches} | {usage.registers} | {launch.dynamic_shared} | "
            f"{usage.spill_stores + usage.spill_loads} | {sass} | "
            f"{mix.mma} / {mix.other} ({mix.scope}) |")


def _float16_layer(size: int) -> ir.PrimFunc:
    """A float16 dense layer: float32 sums, plus a float32 bias per column, ReLU, rounded to
    float16."""
    A = te.placeholder((size, size), "float16", "A")
    B = te.placeholder((size, size), "float16", "B")
    bias = te.placeholder((size,), "float32", "Bias")
    r = te.reduce_axis(size, "k")
    acc = te.compute((size, size), lambda i, j: te.sum(
        ir.cast("float32", A[i, r]) * ir.cast("float32", B[r, j]), axis=r), "acc")
    relu = te.compute((size, size), lambda i, j: ir.max_(acc[i, j] + bias[j], 0.0), "relu")
    out = te.compute((size, size), lambda i, j: ir.cast("float16", relu[i, j]), "out")
    return te.create_prim_func([A, B, bias, out], "float16_layer")


# The epilogue table's rows: a name and the SIZE^3 kernel.
EPILOGUES: dict[str, Callable[[], ir.PrimFunc]] = {
    "int8, requantised to int8": lambda: matmul_requantised(SIZE, SIZE, SIZE,
                                                            Requantisation(zero_point=3)),
    "float16, bias + ReLU to float16": lambda: _float16_layer(SIZE),
}


def epilogue_row(name: str) -> str:
    """One row of the epilogue table for the kernel ``EPILOGUES[name]``."""
    registry = default_registry()  # a bench is an edge: the built-in descriptions
    func = EPILOGUES[name]()
    gemm = auto_tensorize(func, "cuda", registry=registry, arch=HOPPER_ARCH).hopper.gemm
    if gemm is None:
        raise SystemExit(f"{name}: the Hopper schedule refused the kernel")
    kernel = hopper_kernel(gemm, registry, func.name)
    (launch,) = [l for l in kernel.launches if l.tensorized]
    (usage,) = [r for r in resource_usage(kernel, HOPPER_ARCH) if launch.kernel in r.kernel]
    (counts,) = [c for f, c in sass_opcodes(kernel, HOPPER_ARCH, modifiers=True).items()
                 if launch.kernel in f]
    sass = ", ".join(f"{sum(n for o, n in counts.items() if o.split('.')[0] == base)} {base}"
                     for base in COUNTED
                     if any(o.split(".")[0] == base for o in counts))
    stores = ", ".join(f"{n} {o}" for o, n in sorted(counts.items()) if o.startswith("STG"))
    return (f"| {name} | {gemm.intrinsic.name} | {', '.join(gemm.operands.epilogue.blocks)} "
            f"| {usage.registers} | {launch.dynamic_shared} | "
            f"{usage.spill_stores + usage.spill_loads} | {sass} | {stores} |")


def consumers_row(name: str, consumers: int) -> str:
    """One row of the consumer table: the SIZE^3 GEMM of ``name`` inputs with the engine's
    tiling but ``consumers`` consumer warpgroups a block."""
    registry = default_registry()  # a bench is an edge: the built-in descriptions
    intrinsic, tiling = hopper_schedule(SIZE, SIZE, SIZE, dtypes.dtype(name), registry)
    tiling = dataclasses.replace(tiling, consumers=consumers)
    kernel = emit_gemm(intrinsic, registry, SIZE, SIZE, SIZE, tiling)
    (launch,) = [l for l in kernel.launches if l.tensorized]
    (usage,) = [r for r in resource_usage(kernel, HOPPER_ARCH) if launch.kernel in r.kernel]
    (counts,) = [c for f, c in sass_opcodes(kernel, HOPPER_ARCH).items() if launch.kernel in f]
    (mix,) = [m for m in sass_mix(kernel, HOPPER_ARCH) if launch.kernel in m.kernel]
    fit = occupancy(architecture(LIMITS_ARCH, registry), usage.registers,
                    launch.dynamic_shared, launch.block[0])
    grid_x, grid_y, grid_z = launch.grid
    return (f"| {name} | {consumers} | {tiling.block_m} x {intrinsic.operands[2].buffer.shape[1]}"
            f" | {launch.block[0]} | {grid_x * grid_y * grid_z} | {fit.blocks} "
            f"({fit.limited_by}) | {usage.registers} | {launch.dynamic_shared} | "
            f"{usage.spill_stores + usage.spill_loads} | {counts.get('USETMAXREG', 0)} | "
            f"{mix.mma} / {mix.other} ({mix.scope}) |")


def main() -> int:
    """Print the table; exit 0 with a note where nvcc or cuobjdump is missing."""
    if nvcc_path() is None or cuobjdump_path() is None:
        print("nvcc or cuobjdump not found: nothing to measure (pip install -e '.[sass]')")
        return 0
    print(f"{SIZE}^3 GEMM for {HOPPER_ARCH}, the engine's tiling")
    print("| inputs | intrinsic | steps x stages | cluster | consumer warpgroups | launches | "
          "registers | dynamic shared | spill bytes | SASS (GEMM launch) | "
          "MMA / other (k loop) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, cluster in ROWS:
        print(row(name, cluster), flush=True)
    print(f"\n{SIZE}^3 GEMM for {HOPPER_ARCH} with its epilogue fused into the consumers' store")
    print("| kernel | intrinsic | blocks fused | registers | dynamic shared | spill bytes | "
          "SASS (GEMM launch) | global stores (GEMM launch) |")
    print("|---|---|---|---|---|---|---|---|")
    for name in EPILOGUES:
        print(epilogue_row(name), flush=True)
    print(f"\n{SIZE}^3 GEMM for {HOPPER_ARCH}: one consumer warpgroup a block, or two")
    print("| inputs | consumer warpgroups | block tile | threads | blocks | blocks an SM "
          "(limited by) | registers | dynamic shared | spill bytes | USETMAXREG | "
          "MMA / other (k loop) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, consumers in CONSUMER_ROWS:
        print(consumers_row(name, consumers), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
