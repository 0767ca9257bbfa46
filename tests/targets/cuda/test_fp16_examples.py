"""The fp16 example kernels (GEMM, batch matmul, dense, NHWC convolution) tensorized onto the
tensor cores' f16 x f16 -> f32 instructions, emulated, and compared bit for bit with float32
sums in k order (the emulation's order: every f16 product is exact in float32) and with
float64 within the recursive-sum bound (tests/targets/float_examples.py); and compiled by
nvcc for sm_80 and sm_90 with no register spills."""

from functools import cache

import shutil

import numpy as np
import pytest

from intrinsics import default_registry
from targets import cuda
from targets.cuda.compile import nvcc_path, resource_usage
from targets.cuda.emulate import COPY_MODES
from tensorize.engine import auto_tensorize, count_calls
from tests.targets import float_examples as fx

needs_compiler = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                    reason="no host C++ compiler to build the emulation")
needs_nvcc = pytest.mark.skipif(nvcc_path() is None, reason="nvcc not found")
KINDS = ("gemm", *fx.KINDS)


@cache
def _kernel(kind: str) -> cuda.CudaKernel:
    registry = default_registry()
    result = auto_tensorize(fx.load(kind, "fp16"), "cuda", registry=registry)
    (intrinsic,) = [b.intrinsic for b in result.tensorized]
    f16 = registry.get(intrinsic)
    assert [o.dtype.name for o in f16.operands] == ["float16", "float16", "float32"]
    assert count_calls(result.func)[intrinsic] > 0
    return cuda.emit(result.func, registry)


@pytest.mark.slow  # 3-5 s each under the emulation (the 256^3 GEMM 26 s)
@needs_compiler
@pytest.mark.parametrize("kind", KINDS)
def test_fp16_example_equals_float32_sums_in_k_order(kind) -> None:
    func = fx.load(kind, "fp16")
    arrays = fx.inputs(func)
    want = fx.hardware_reference(kind, arrays, 1, fx.ASCENDING)
    for copies in COPY_MODES:
        got = cuda.emulate(_kernel(kind), arrays, copies=copies)[func.params[-1].name]
        fx.assert_bits_equal(got, want)
    fx.assert_within_float64_bound(kind, arrays, got, fx.ASCENDING)
    # The exact check has teeth: the same products added in descending k differ somewhere.
    descending = type(fx.ASCENDING)("descending", "nearest_even", "keep")
    assert not np.array_equal(got, fx.hardware_reference(kind, arrays, 2, descending))


@pytest.mark.slow
@needs_nvcc
@pytest.mark.parametrize("kind", KINDS)
def test_fp16_example_compiles_without_spills(kind) -> None:
    kernel = _kernel(kind)
    for arch in ("sm_80", "sm_90"):
        ptx = cuda.compile(kernel, arch).decode()
        assert "mma.sync" in ptx
        for r in resource_usage(kernel, arch):
            assert (r.spill_stores, r.spill_loads, r.stack_frame) == (0, 0, 0), r
