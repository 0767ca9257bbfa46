"""Suite kernels tensorized for cuda and emitted once, and random inputs for them."""

from __future__ import annotations

import importlib.util
from functools import cache

import numpy as np

from intrinsics import default_registry
import ir
from targets import cuda
from tensorize.engine import auto_tensorize
from tests.tensorize.engine.suite import SUITE, suite

# Every suite kernel with a block that a WMMA intrinsic computes.
TENSORIZED = ("gemm_int8", "gemm_int8_odd", "gemm_fp16", "batch_matmul_int8", "dense_int8",
              "conv2d_nhwc_int8", "conv2d_nchw_int8", "conv2d_dilated_int8", "conv1d_int8",
              "conv1x1_int8", "matmul_relu_fp16", "matmul_requant_int8")


@cache
def sized(name: str, **sizes: int) -> ir.PrimFunc:
    """Suite kernel ``name`` built at other sizes than its defaults."""
    spec = importlib.util.spec_from_file_location("tensorize_suite_sized", SUITE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)(**sizes)


# The 8-bit suite kernels whose block the engine now takes through mma.sync (its cycles tie
# with WMMA's and one IMMA.16832 does the work of two IMMA.16816), with the WMMA intrinsic
# they took before: the tests of the WMMA kernels' structure, and the broken-kernel suite
# that edits their text, pin it. Their default kernels are proven exact in test_emulate.
WMMA_INT8 = "wmma_m16n16k16_s8_s32"
WMMA = {name: WMMA_INT8 for name in ("gemm_int8", "batch_matmul_int8", "dense_int8",
                                     "conv1x1_int8", "matmul_requant_int8")}


@cache
def tensorized(name: str, intrinsic: str | None = None) -> ir.PrimFunc:
    """Suite kernel ``name`` tensorized for cuda (through ``intrinsic`` when named)."""
    return auto_tensorize(suite()[name], "cuda", intrinsic=intrinsic,
                          registry=default_registry()).func


@cache
def emitted(name: str, pipeline: bool = True, intrinsic: str | None = None) -> cuda.CudaKernel:
    """Suite kernel ``name`` tensorized for cuda (through ``intrinsic`` when named) and
    emitted (double-buffered unless ``pipeline`` is False)."""
    return cuda.emit(tensorized(name, intrinsic), default_registry(), pipeline=pipeline)


def random_inputs(func: ir.PrimFunc, seed: int = 0) -> dict[str, np.ndarray]:
    """Random values for every parameter: int8 over its whole range, floats normal."""
    rng = np.random.default_rng(seed)
    inputs = {}
    for param in func.params:
        dtype = param.dtype
        if dtype.is_float:
            inputs[param.name] = rng.standard_normal(param.shape).astype(dtype.numpy)
        else:
            low, high = max(dtype.min, -128), min(dtype.max, 127)
            inputs[param.name] = rng.integers(low, high + 1, param.shape).astype(dtype.numpy)
    return inputs


def gemm_source(kernel: cuda.CudaKernel) -> str:
    """The text of the kernel's tensorized launch (its GEMM's ``__global__`` function), not
    of the launches around it (an int8 B transpose with a barrier of its own)."""
    (gemm,) = [launch for launch in kernel.launches if launch.tensorized]
    start = kernel.source.index(f" {gemm.kernel}(")
    end = kernel.source.find('extern "C"', start)
    return kernel.source[start:end if end >= 0 else len(kernel.source)]
