"""GEMMs of one or two rows on the tensor cores: the unit row padded to the fragment's M,
emitted, run under the host emulation and compared with the reference executor (exactly;
fp16 products summed in fp32 over K = 33 agree exactly here too)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from intrinsics import default_registry
from targets import cuda, host
from tensorize.engine import auto_tensorize
from tensorize.engine.cuda_schedule import CudaTiling
from tests.targets.cuda.helpers import random_inputs, sized

pytestmark = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                reason="no host C++ compiler to build the emulation")


# One shape in the default run (about 2 s of g++ each); the others in CI's slow pass.
@pytest.mark.parametrize(("name", "m", "n", "k"), [
    ("gemm_int8", 1, 64, 64),
    pytest.param("gemm_fp16", 1, 17, 33, marks=pytest.mark.slow),
    pytest.param("gemm_int8", 2, 17, 33, marks=pytest.mark.slow)])
def test_one_or_two_rows_run_exactly_on_the_emulated_tensor_cores(name, m, n, k, registry):
    func = sized(name, m=m, n=n, k=k)
    result = auto_tensorize(func, "cuda", registry=registry)
    (outcome,) = result.tensorized
    assert default_registry().get(outcome.intrinsic).target == "cuda"
    inputs = random_inputs(func, seed=2)
    want = host.run(func, inputs)["C"]
    got = cuda.emulate(cuda.emit(result.func, registry), inputs)["C"]
    np.testing.assert_array_equal(got, want)


# In CI's slow pass: the default run's one-row GEMM above runs the engine's own tiling.
@pytest.mark.slow
@pytest.mark.parametrize("intrinsic", ["mma_m16n8k16_f16f16_f32", "wmma_m16n16k16_f16_f32"])
def test_a_narrow_tiling_of_the_search_runs_exactly(intrinsic, registry):
    # One warp along M of one fragment, two along N of one (8 wide for mma.sync's n8), one
    # fragment step per stage: what the search offers a one-row GEMM.
    func = sized("gemm_fp16", m=1, n=64, k=48)
    tiling = CudaTiling((1, 2), (1, 1), 1)
    result = auto_tensorize(func, "cuda", registry=registry, intrinsic=intrinsic,
                            tiling=tiling)
    assert [o.intrinsic for o in result.tensorized] == [intrinsic]
    inputs = random_inputs(func, seed=4)
    got = cuda.emulate(cuda.emit(result.func, registry, stages=2), inputs)["C"]
    np.testing.assert_array_equal(got, host.run(func, inputs)["C"])
