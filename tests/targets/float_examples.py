"""The bf16 and fp16 example kernels (``examples/script/{kind}_{bf16,fp16}.py``, kind
``gemm``, ``batch_matmul``, ``dense`` or ``conv2d_nhwc``) as the target tests use them: each
loaded from its file, random inputs with denormals and signed zeros, and two independent
references computed in numpy. Each kernel is a set of GEMMs (the GEMM itself; one per batch
entry; the dense layer's ``X @ W^T``; the convolution's im2col matrix, K ordered
(rh, rw, rc), times its HWIO weights), so the hardware-order reference is
:func:`intrinsics.oracle.hardware_gemm` of each, and the float64 one is the exact product
with the recursive-sum bound of docs/intrinsics.md, "Float accumulation"."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np

import ir
from intrinsics.model import Accumulation
from intrinsics.oracle import hardware_gemm
from ir import script as T

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "script"
KINDS = ("batch_matmul", "dense", "conv2d_nhwc")
# The order a pair of 16-bit inputs' products reaches a plain float32 accumulator: one at a
# time, k ascending, each sum rounded to nearest even, denormals kept (the CUDA
# emulation's, and WMMA/mma.sync's model there: every product of two 11-bit significands
# is exact in float32).
ASCENDING = Accumulation("ascending", "nearest_even", "keep")


def load(kind: str, suffix: str) -> ir.PrimFunc:
    """The kernel of ``examples/script/{kind}_{suffix}.py``."""
    name = f"{kind}_{suffix}"
    return T.load_file(EXAMPLES / f"{name}.py")[name]


def inputs(func: ir.PrimFunc, seed: int = 0) -> dict[str, np.ndarray]:
    """A value per input parameter of ``func`` (all but its last): standard normal values
    scaled by powers of two in [2^-4, 2^4], the first four a denormal of each sign and a
    zero of each sign."""
    rng = np.random.default_rng(seed)
    out = {}
    for param in func.params[:-1]:
        dtype = param.dtype.numpy
        values = rng.standard_normal(param.shape) * np.exp2(rng.integers(-4, 5, param.shape))
        tiny = float(ml_dtypes.finfo(dtype).smallest_subnormal) * 3
        values.flat[:4] = (tiny, -tiny, 0.0, -0.0)
        out[param.name] = values.astype(dtype)
    return out


def gemms(kind: str, arrays: dict[str, np.ndarray]) -> tuple[list[np.ndarray],
                                                              list[np.ndarray]]:
    """The (A, B) matrix pairs whose products make up the output of kernel ``kind``, in the
    order :func:`assemble` expects."""
    if kind == "gemm":
        return [arrays["A"]], [arrays["B"]]
    if kind == "batch_matmul":
        return list(arrays["A"]), list(arrays["B"])
    if kind == "dense":
        return [arrays["X"]], [arrays["W"].T]
    image, weights = arrays["I"], arrays["W"]
    height, width = image.shape[1:3]
    padded = np.pad(image, ((0, 0), (1, 1), (1, 1), (0, 0)))
    # Column (rh * 3 + rw) * C + c of row y * W + x is P[y + rh, x + rw, c].
    columns = np.concatenate([padded[0, rh:rh + height, rw:rw + width, :]
                              for rh in range(3) for rw in range(3)], axis=-1)
    return [columns.reshape(height * width, -1)], [weights.reshape(-1, weights.shape[-1])]


def assemble(kind: str, arrays: dict[str, np.ndarray], products: list[np.ndarray]
             ) -> np.ndarray:
    """The kernel's output from the products of :func:`gemms`' pairs."""
    if kind == "batch_matmul":
        return np.stack(products)
    if kind in ("gemm", "dense"):
        return products[0]
    height, width = arrays["I"].shape[1:3]
    return products[0].reshape(1, height, width, -1)


def hardware_reference(kind: str, arrays: dict[str, np.ndarray], group: int,
                       rule: Accumulation) -> np.ndarray:
    """The output as a kernel adding ``group`` k values a call by ``rule`` computes it, k
    groups ascending from a zero accumulator (:func:`intrinsics.oracle.hardware_gemm`)."""
    a, b = gemms(kind, arrays)
    return assemble(kind, arrays, [hardware_gemm(x, y, group, rule) for x, y in zip(a, b)])


def assert_within_float64_bound(kind: str, arrays: dict[str, np.ndarray], got: np.ndarray,
                                rule: Accumulation) -> None:
    """``got`` lies within the recursive-sum bound of the exact float64 result:
    ``gamma_K * sum |x * y| + flushes * tiny`` per element, u the float32 unit roundoff (a
    whole epsilon under round-to-odd), a smallest normal for each result a ``flush`` rule
    may flush (two a k pair under ``pairwise``), and, under ``flush``, the products of the
    operands' denormals, which the hardware reads as zero."""
    a, b = gemms(kind, arrays)
    wide = [(np.abs(x.astype(np.float64)), np.abs(y.astype(np.float64))) for x, y in zip(a, b)]
    exact = assemble(kind, arrays, [x.astype(np.float64) @ y.astype(np.float64)
                                    for x, y in zip(a, b)])
    magnitude = assemble(kind, arrays, [x @ y for x, y in wide])
    k = a[0].shape[1]
    info = np.finfo(np.float32)
    unit = float(info.eps) / (1 if rule.rounding == "odd" else 2)
    bound = k * unit / (1 - k * unit) * magnitude
    if rule.denormals == "flush":
        dropped = assemble(kind, arrays, [_denormal(x) @ y + x @ _denormal(y)
                                          for x, y in wide])
        bound = bound + dropped + (2 * k + 1) * float(info.smallest_normal)
    assert np.all(np.abs(got.astype(np.float64) - exact) <= bound)


def _denormal(magnitudes: np.ndarray) -> np.ndarray:
    """``magnitudes`` (float64 values of 16-bit inputs) with all but the denormals zeroed."""
    tiny = float(np.finfo(np.float32).smallest_normal)
    return np.where(magnitudes < tiny, magnitudes, 0.0)


def assert_bits_equal(got: np.ndarray, want: np.ndarray) -> None:
    """``got`` equals ``want`` bit for bit (a signed zero or a NaN's payload included)."""
    assert got.shape == want.shape and got.dtype == want.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
