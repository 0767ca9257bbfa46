"""Implicit GEMM: the im2col of an NHWC convolution (and the engine's transpose of dense's
input) folded into the address computation of the tiles' copy into shared memory, so no
kernel writes it; exact under the emulation in both copy modes."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from targets import cuda, host
from targets.cuda.emulate import COPY_MODES
from tensorize.engine import auto_tensorize
from tests.targets.cuda.helpers import random_inputs, sized

needs_compiler = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                    reason="no host C++ compiler to build the emulation")


def _conv(**sizes: int) -> tuple:
    func = sized("conv2d_nhwc_int8", **sizes)
    return func, cuda.emit(auto_tensorize(func, "cuda").func)


def test_a_batch_of_one_is_gathered_too():
    # The im2col block's batch iterator has extent 1 and indexes nothing: it is dropped
    # (transform_block_layout) so the block can be inlined.
    _, kernel = _conv(batch=1, height=8, width=8, in_channels=16, out_channels=16)
    assert "pad_reindex" not in [b.name for b in kernel.buffers]
    assert [l.tiled for l in kernel.launches] == [False, False, True, False]
    assert "scalar copy" not in kernel.source


def test_a_padded_im2col_stays_a_kernel_of_its_own():
    # 14 x 14 = 196 pixels pad to the tile: the padded im2col buffer is larger than its
    # iterators cover, so it is not inlined.
    _, kernel = _conv(batch=1, height=14, width=14, in_channels=16, out_channels=16)
    assert "pad_reindex" in [b.name for b in kernel.buffers]


@needs_compiler
@pytest.mark.parametrize("copies", COPY_MODES)
def test_the_gathered_conv_is_exact(copies):
    func, kernel = _conv(batch=1, height=8, width=8, in_channels=32, out_channels=16)
    inputs = random_inputs(func, seed=4)
    np.testing.assert_array_equal(cuda.emulate(kernel, inputs, copies=copies)["conv"],
                                  host.run(func, inputs)["conv"])


@needs_compiler
@pytest.mark.slow
def test_resnet50s_first_3x3_conv_is_one_gemm_launch_and_exact():
    # 1 x 56 x 56 x 64 -> 64: padding, the weights' packing, the GEMM (im2col in its copy's
    # addresses) and the output's transpose back.
    func, kernel = _conv(batch=1, height=56, width=56, in_channels=64, out_channels=64)
    assert [l.tiled for l in kernel.launches] == [False, False, True, False]
    inputs = random_inputs(func, seed=5)
    expected = host.run(func, inputs)["conv"]
    for copies in COPY_MODES:
        np.testing.assert_array_equal(cuda.emulate(kernel, inputs, copies=copies)["conv"],
                                      expected)
