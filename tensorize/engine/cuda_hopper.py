"""The engine's schedule for a GEMM on Hopper (sm_90a): which wgmma intrinsic of the
registry (``intrinsics/cuda_wgmma.yaml``), and how the k loop is staged.

A block computes a 64 x n tile of C: a producer warp issues the TMA tensor copies of each k
stage into one of ``stages`` shared stages once the consumers have released it, and one
consumer warpgroup (128 threads) consumes each stage with ``steps`` wgmmas
(``targets/cuda/hopper.py``, full and empty mbarriers per stage).

Choices, in order:

- the tile's width n: of the widths the registry offers for the input type, the one that
  pads N least, ties to the wider (a 128-wide tile reads A once for twice the columns);
- ``steps``: 4 wgmma k steps a stage (128 bytes of k: 64 f16 or 128 8-bit values), fewer
  when K is shorter;
- ``stages``: 4, fewer when K has fewer stages (never under 2) or when the stages would not
  fit the architecture's ``max_shared_per_block`` (the ``gpu:`` section).
"""

from __future__ import annotations

from intrinsics import Intrinsic, Registry
from ir.dtypes import DType
from ir.errors import ScheduleError
from targets.cuda.emit import CudaKernel
from targets.cuda.hopper import STEP_BYTES, TILE_M, HopperTiling, emit_gemm

__all__ = ["HOPPER_ARCH", "hopper_gemm", "hopper_schedule"]

# The architecture the wgmma family needs (its intrinsics' feature) and whose limits apply.
HOPPER_ARCH = "sm_90a"
_LIMITS_ARCH = "sm_90"
STEPS = 4
STAGES = 4
MIN_STAGES = 2


def _candidates(registry: Registry, in_dtype: DType) -> list[Intrinsic]:
    return [i for i in registry.compute_intrinsics("cuda")
            if i.feature == HOPPER_ARCH and i.operands[0].buffer.dtype == in_dtype]


def hopper_schedule(m: int, n: int, k: int, in_dtype: DType,
                    registry: Registry) -> tuple[Intrinsic, HopperTiling]:
    """The wgmma intrinsic and tiling for an ``m x n x k`` GEMM of ``in_dtype`` inputs (the
    module docstring's choices). Raises ScheduleError naming the input type when the
    registry has no wgmma intrinsic for it, or the shared memory needed when even 2 stages
    do not fit."""
    candidates = _candidates(registry, in_dtype)
    if not candidates:
        raise ScheduleError("hopper_schedule", f"requires a wgmma intrinsic (feature "
                            f"{HOPPER_ARCH}) for {in_dtype} inputs, got none in the registry")
    intrinsic = min(candidates, key=lambda i: (-(-n // _width(i)) * _width(i), -_width(i)))
    k_step = intrinsic.operands[0].buffer.shape[1]
    k_steps = -(-k // k_step)
    steps = min(STEPS, k_steps)
    k_stages = -(-k_steps // steps)
    stage_bytes = (TILE_M + _width(intrinsic)) * steps * STEP_BYTES
    limit = registry.gpu("cuda").architectures[_LIMITS_ARCH].max_shared_per_block
    # Each stage also holds its two 8-byte mbarriers (full and empty).
    fitting = limit // (stage_bytes + 16)
    if fitting < MIN_STAGES:
        raise ScheduleError("hopper_schedule", f"requires {MIN_STAGES} stages of "
                            f"{stage_bytes} bytes within {limit} bytes of shared memory")
    stages = max(MIN_STAGES, min(STAGES, k_stages, fitting))
    return intrinsic, HopperTiling(steps=steps, stages=stages)


def _width(intrinsic: Intrinsic) -> int:
    return intrinsic.operands[2].buffer.shape[1]


def hopper_gemm(m: int, n: int, k: int, in_dtype: DType, registry: Registry,
                name: str = "gemm_hopper") -> CudaKernel:
    """The ``m x n x k`` GEMM (A row-major m x k, B row-major k x n, C m x n in the
    intrinsic's accumulator type) as CUDA C++ for sm_90a, scheduled by
    :func:`hopper_schedule`."""
    intrinsic, tiling = hopper_schedule(m, n, k, in_dtype, registry)
    return emit_gemm(intrinsic, registry, m, n, k, tiling, name)
