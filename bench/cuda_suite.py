"""The GPU suite of ``bench_cuda.py --gpu-suite``: which GEMMs and kernels it times, how it
checks their results, how it calls cuBLAS, and the JSON it writes. Nothing here needs a GPU
(the checks take numpy or CuPy arrays alike), so all of it is tested on any machine.

The fp16 tolerance rule (:func:`fp16_bound`). The inputs are fp16 values and the reference
(float64) multiplies the same values, so input rounding does not enter. A product of two
fp16 values is exact in fp32 (11-bit significands: at most 22 bits). Only the fp32
accumulation of K products rounds, and its error is at most ``gamma_K * sum_k |a_ik b_kj|``
with ``gamma_K ~ K * u`` for u = 2^-24, fp32's unit roundoff, whatever the order of the
additions (Higham, *Accuracy and Stability of Numerical Algorithms*, 3.1). The bound taken
is ``4 * K * u * (|A| @ |B|)_ij``: the factor 4 leaves room for tensor-core adders, which
truncate rather than round (2u per addition) and align several products to the largest
before adding. fp16's own unit roundoff (2^-11) would give a bound above ``|C|`` itself once
K reaches a few thousand: a check that could not fail. An element outside the bound (or
NaN, as a value a kernel never wrote is) fails the kernel.

int8 (int32 accumulation) is checked exactly: the reference is a float64 product, exact
while ``K * 128 * 128 < 2^53`` (every partial sum an integer below 2^53), and compared with
the kernel's int32 values as integers (:func:`require_exact_int8`).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

# fp32's unit roundoff: the accumulator's (module docs).
ACCUMULATOR_UNIT_ROUNDOFF = 2.0 ** -24
# Room for truncating, group-aligning tensor-core adders (module docs).
ADDER_FACTOR = 4
# The tensor-core family intrinsics tuned per GEMM: WMMA and mma.sync.
FAMILIES = {"fp16": ("wmma_m16n16k16_f16_f32", "mma_m16n8k16_f16f16_f32"),
            "int8": ("wmma_m16n16k16_s8_s32", "mma_m16n8k32_s8s8_s32")}
# The suite kernel (examples/te/suite.py) of each input type.
KERNELS = {"fp16": "gemm_fp16", "int8": "gemm_int8"}
SQUARE = {"fp16": (1024, 2048, 4096, 8192), "int8": (1024, 2048, 4096)}
# Skinny GEMMs: M rows against a 4096 x 4096 weight (a batch of tokens through a layer).
SKINNY_ROWS = (1, 8, 64)
SKINNY_WIDTH = 4096
# A size no tile divides.
ODD = 1000


@dataclass(frozen=True, slots=True)
class GemmCase:
    """One GEMM: ``C (m x n) = A (m x k) @ B (k x n)``, ``dtype`` "fp16" (fp32 accumulation
    and result) or "int8" (int32)."""

    dtype: str
    m: int
    n: int
    k: int

    @property
    def label(self) -> str:
        """``fp16 1x4096x4096`` (M x N x K)."""
        return f"{self.dtype} {self.m}x{self.n}x{self.k}"

    @property
    def operations(self) -> int:
        """Multiplies and adds: 2 M N K."""
        return 2 * self.m * self.n * self.k


@dataclass(frozen=True, slots=True)
class KernelPlan:
    """One kernel to build and time for ``case``: the engine's default (``intrinsic`` None)
    or the tiling search's best through ``intrinsic``."""

    case: GemmCase
    intrinsic: str | None

    @property
    def label(self) -> str:
        """``default`` or ``tuned <intrinsic>``."""
        return "default" if self.intrinsic is None else f"tuned {self.intrinsic}"


def suite_cases() -> list[GemmCase]:
    """The suite's GEMMs: square ones (:data:`SQUARE`), the skinny ones (:data:`SKINNY_ROWS`
    rows of a 4096 x 4096 weight) and the odd size (:data:`ODD` cubed), fp16 then int8."""
    cases = []
    for dtype in ("fp16", "int8"):
        cases += [GemmCase(dtype, n, n, n) for n in SQUARE[dtype]]
        cases += [GemmCase(dtype, m, SKINNY_WIDTH, SKINNY_WIDTH) for m in SKINNY_ROWS]
        cases.append(GemmCase(dtype, ODD, ODD, ODD))
    return cases


def plan_suite(cases: list[GemmCase]) -> list[KernelPlan]:
    """For each case, in order: the engine's default kernel, then the tuned kernel of each
    tensor-core family (:data:`FAMILIES`)."""
    return [KernelPlan(case, intrinsic) for case in cases
            for intrinsic in (None, *FAMILIES[case.dtype])]


# ---- checks -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Check:
    """How one result compares with the reference: ``ok``; ``wrong``, the elements outside
    the bound (int8: not equal); ``worst``, the largest error over its bound (fp16) or the
    largest absolute difference (int8)."""

    ok: bool
    wrong: int
    worst: float

    def describe(self) -> str:
        """``exact``, ``ok (worst 0.01 of bound)`` or ``WRONG: 3 elements ...``."""
        if self.ok:
            return "exact" if self.worst == 0 and self.wrong == 0 else \
                f"ok (worst {self.worst:.2g} of bound)"
        return f"WRONG: {self.wrong} elements (worst {self.worst:.3g})"


def fp16_bound(magnitude: Any, k: int) -> Any:
    """The error each fp16 GEMM element may carry (module docs): ``magnitude`` is
    ``|A| @ |B|`` in float64 (numpy or CuPy), K the reduction's depth."""
    return ADDER_FACTOR * k * ACCUMULATOR_UNIT_ROUNDOFF * magnitude


def check_fp16(got: Any, reference: Any, magnitude: Any, k: int) -> Check:
    """``got`` (float32) against ``reference`` (float64) within :func:`fp16_bound` of
    ``magnitude``, for every element; arrays of numpy or CuPy alike (their methods only)."""
    error = abs(got.astype(reference.dtype) - reference)
    bound = fp16_bound(magnitude, k)
    # A NaN compares false: a never-written (NaN-filled) element is wrong.
    inside = error <= bound
    wrong = int(inside.size - inside.sum())
    scaled = error / (bound + np.finfo(np.float64).tiny)
    unwritten = bool((error != error).any())
    return Check(wrong == 0, wrong, float("nan") if unwritten else float(scaled.max()))


def require_exact_int8(k: int) -> None:
    """Raise ValueError unless every partial sum of an int8 GEMM of depth ``k`` fits int32
    (the kernel's accumulator, so no wrap) and, below 2^53 then too, is exact in float64
    (the reference's type): ``K * 128 * 128 < 2^31``."""
    if k * 128 * 128 >= 2 ** 31:
        raise ValueError(f"the int8 check requires K * 2^14 < 2^31, got K = {k}")


def check_int8(got: Any, reference: Any) -> Check:
    """``got`` (int32) against ``reference`` (float64 holding integers) exactly."""
    difference = abs(got.astype(np.int64) - reference.astype(np.int64))
    wrong = int((difference != 0).sum())
    return Check(wrong == 0, wrong, float(difference.max()))


# ---- cuBLAS -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class GemmExCall:
    """The arguments of ``cublasGemmEx`` for the row-major ``C (m x n) = A (m x k) @ B``.

    cuBLAS is column-major: a row-major C is its column-major transpose, so it computes
    ``C^T (n x m) = op(X) @ op(Y)`` with X, Y the buffers ``x`` and ``y`` name (``"B"``: B
    as given, k rows of n; ``"B^T"``: B stored transposed, n rows of k; ``"A"``) and
    ``transa``/``transb`` the ops, ``rows``/``cols``/``depth`` cuBLAS's m, n, k, and
    ``lda``/``ldb``/``ldc`` the leading dimensions."""

    transa: str
    transb: str
    rows: int
    cols: int
    depth: int
    x: str
    lda: int
    y: str
    ldb: int
    ldc: int


def gemm_ex_call(m: int, n: int, k: int, layout: str) -> GemmExCall:
    """:class:`GemmExCall` for ``layout`` "NN" (B as given: fp16's, as a framework calls
    it) or "TN" (B transposed, the layout int8's fast path needs: ``op(X)`` transposed, Y
    not, both with K contiguous)."""
    if layout == "NN":
        # B (k rows of n) read column-major is B^T (n x k), ld n; A likewise is A^T (k x m).
        return GemmExCall("N", "N", n, m, k, "B", n, "A", k, n)
    if layout == "TN":
        # B^T (n rows of k) read column-major is B (k x n), ld k: op T gives B^T.
        return GemmExCall("T", "N", n, m, k, "B^T", k, "A", k, n)
    raise ValueError(f"gemm_ex_call: layout must be 'NN' or 'TN', got {layout!r}")


CUBLAS_LAYOUT = {"fp16": "NN", "int8": "TN"}


# ---- the record -------------------------------------------------------------------------------

def write_json(path: str | Path, record: dict[str, Any]) -> None:
    """Write ``record`` as JSON to ``path``: dataclasses as objects, numpy scalars as
    numbers, and non-finite floats (an untimed or failed figure) as null, so that any JSON
    reader takes the file."""
    Path(path).write_text(json.dumps(_plain(record), indent=1, allow_nan=False) + "\n")


def _plain(value: Any) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        return _plain(asdict(value))
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return _plain(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def summary(times: list[float]) -> dict[str, float]:
    """Best and median of ``times`` (ms), and how many."""
    ordered = sorted(times)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return {"best_ms": ordered[0], "median_ms": median, "runs": len(ordered)}
