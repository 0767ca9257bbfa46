"""The transpose of an 8-bit B that is a kernel parameter (the tensor cores read B
column-major): a tile of 64 x 64 bytes per block through shared memory, read along n and
written along k (both coalesced), exact under the emulation; with its barrier removed, the
emulation names the race. Extents that the tile does not divide keep the element-wise copy."""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

from targets import cuda, host
from tensorize.engine import auto_tensorize
from tests.targets.cuda.helpers import random_inputs, sized
from tests.targets.cuda.test_emulate import READ_AFTER_WRITE, THREAD, WRITE_AFTER_READ

pytestmark = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                reason="no host C++ compiler to build the emulation")


def _kernel(registry, m: int, n: int, k: int):
    func = sized("gemm_int8", m=m, n=n, k=k)
    return func, cuda.emit(auto_tensorize(func, "cuda", registry=registry).func, registry)


def test_b_is_transposed_a_tile_at_a_time_before_the_gemm(registry):
    _, kernel = _kernel(registry, 64, 192, 128)
    transpose, gemm = kernel.launches
    assert (transpose.grid, transpose.block) == ((2, 3, 1), (32, 8, 1))
    assert transpose.tiled and not transpose.tensorized and gemm.tensorized
    # Each thread reads 16 bytes of a row of B; each warp writes rows of the transposed tile.
    assert "tz_copy16(&B_shared[" in kernel.source


# The suite's int8 GEMMs run this transpose under the emulation in the default run
# (test_emulate); these two build a kernel each, in CI's slow pass.
@pytest.mark.slow
def test_a_transpose_of_several_tiles_is_exact(registry):
    func, kernel = _kernel(registry, 64, 192, 128)
    inputs = random_inputs(func, seed=3)
    got = cuda.emulate(kernel, inputs)["C"]
    np.testing.assert_array_equal(got, host.run(func, inputs)["C"])


@pytest.mark.slow
def test_the_transpose_without_its_barrier_is_a_race(registry):
    func, kernel = _kernel(registry, 64, 64, 64)
    transpose = kernel.source.split("extern \"C\"")[1]
    assert transpose.count("__syncthreads();") == 1
    broken = dataclasses.replace(kernel, source=kernel.source.replace(
        transpose, transpose.replace("__syncthreads();", "")))
    # Which of the two accesses the emulation meets second depends on its thread order.
    race = "|".join(f"(?:{pattern.format(buffer='B_shared', reader=THREAD, writer=THREAD)})"
                    for pattern in (READ_AFTER_WRITE, WRITE_AFTER_READ))
    with pytest.raises(cuda.EmulationError, match=race):
        cuda.emulate(broken, random_inputs(func, seed=4))


def test_extents_the_tile_does_not_divide_keep_the_element_wise_copy(registry):
    _, kernel = _kernel(registry, 32, 48, 64)
    transpose, _ = kernel.launches
    assert not transpose.tiled and not transpose.tensorized
