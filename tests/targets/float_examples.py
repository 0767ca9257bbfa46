"""The bf16 and fp16 example kernels (``examples/script/{kind}_{bf16,fp16}.py``, kind
``gemm``, ``batch_matmul``, ``dense`` or ``conv2d_nhwc``) as the target tests use them: each
loaded from its file, random inputs with denormals and signed zeros, and two independent
references computed in numpy. Each kernel is a set of GEMMs (the GEMM itself; one per batch
entry; the dense layer's ``X @ W^T``; the convolution's im2col matrix, K ordered
(rh, rw, rc), times its HWIO weights), as :func:`tensorize.hardware_order.split_gemms`
finds them in the kernel's IR (what ``tensorize run`` checks against), so the hardware-order
reference is :func:`intrinsics.oracle.hardware_gemm` of each, and the float64 one is the
exact product with the recursive-sum bound of docs/intrinsics.md, "Float accumulation"
(:func:`intrinsics.oracle.gemm_bound`)."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np

import ir
from intrinsics.model import Accumulation
from intrinsics.oracle import gemm_bound, hardware_gemm
from ir import script as T
from tensorize.hardware_order import GemmSplit, buffer_values, split_gemms
from tensorize.runners.runner import reduction_blocks

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


def split(kind: str, arrays: dict[str, np.ndarray]) -> GemmSplit:
    """Kernel ``kind`` (its bf16 or fp16 file, by the inputs' dtype) as the GEMMs the
    library's hardware-order reference splits it into, on ``arrays``."""
    suffix = "bf16" if next(iter(arrays.values())).dtype == ml_dtypes.bfloat16 else "fp16"
    func = load(kind, suffix)
    [block] = reduction_blocks(func)
    return split_gemms(func, block, buffer_values(func, arrays))


def hardware_reference(kind: str, arrays: dict[str, np.ndarray], group: int,
                       rule: Accumulation) -> np.ndarray:
    """The output as a kernel adding ``group`` k values a call by ``rule`` computes it, k
    groups ascending from a zero accumulator (:func:`intrinsics.oracle.hardware_gemm`)."""
    gemms = split(kind, arrays)
    return gemms.assemble([hardware_gemm(a, b, group, rule) for a, b in zip(gemms.a, gemms.b)])


def assert_within_float64_bound(kind: str, arrays: dict[str, np.ndarray], got: np.ndarray,
                                rule: Accumulation) -> None:
    """``got`` lies within :func:`intrinsics.oracle.gemm_bound` of the exact float64
    result, element by element."""
    gemms = split(kind, arrays)
    exact, bound = zip(*(gemm_bound(a, b, rule) for a, b in zip(gemms.a, gemms.b)))
    wide = np.dtype(np.float64)
    error = np.abs(got.astype(np.float64) - gemms.assemble(exact, wide))
    assert np.all(error <= gemms.assemble(bound, wide))


def assert_bits_equal(got: np.ndarray, want: np.ndarray) -> None:
    """``got`` equals ``want`` bit for bit (a signed zero or a NaN's payload included)."""
    assert got.shape == want.shape and got.dtype == want.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
