"""The Hopper GEMM (wgmma fed by TMA tensor copies against mbarriers, sm_90a) at 4096^3 for
every input type, and in thread-block clusters of 2 for two of them, static figures (no GPU
needed): the engine's intrinsic and tiling, the GEMM launch's registers, dynamic shared
memory and spills (ptxas), its wgmma, tensor-copy and mbarrier instructions in the SASS
(cuobjdump), and the instructions of its k loop.

    .venv/bin/python bench/bench_cuda_hopper.py
"""

from __future__ import annotations

import sys

from intrinsics import default_registry
from ir import dtypes
from targets.cuda.compile import cuobjdump_path, nvcc_path, resource_usage, sass_mix, sass_opcodes
from tensorize.engine.cuda_hopper import HOPPER_ARCH, hopper_gemm, hopper_schedule

SIZE = 4096
INPUTS = ("float16", "bfloat16", "int8", "float8_e4m3", "float8_e5m2")
# (inputs, blocks per cluster) of the table's rows.
ROWS = (*((name, 1) for name in INPUTS), ("float16", 2), ("int8", 2))
# The SASS opcodes a Hopper GEMM should show: its wgmma, the tensor copy (UTMALDG; UBLKCP
# would be a plain bulk copy), the mbarrier ops, the cluster barrier's arrival.
COUNTED = ("HGMMA", "IGMMA", "QGMMA", "UBLKCP", "UTMALDG", "SYNCS", "UCGABAR_ARV")


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
    return (f"| {name} | {intrinsic.name} | {tiling.steps} x {tiling.stages} | {cluster} | "
            f"{usage.registers} | {launch.dynamic_shared} | "
            f"{usage.spill_stores + usage.spill_loads} | {sass} | "
            f"{mix.mma} / {mix.other} ({mix.scope}) |")


def main() -> int:
    """Print the table; exit 0 with a note where nvcc or cuobjdump is missing."""
    if nvcc_path() is None or cuobjdump_path() is None:
        print("nvcc or cuobjdump not found: nothing to measure (pip install -e '.[sass]')")
        return 0
    print(f"{SIZE}^3 GEMM for {HOPPER_ARCH}, one warpgroup per 64 x n tile")
    print("| inputs | intrinsic | steps x stages | cluster | registers | dynamic shared | "
          "spill bytes | SASS (GEMM launch) | MMA / other (k loop) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, cluster in ROWS:
        print(row(name, cluster), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
