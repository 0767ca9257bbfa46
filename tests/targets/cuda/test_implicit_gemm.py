"""Implicit GEMM: the im2col of an NHWC convolution (and the engine's transpose of dense's
input) folded into the address computation of the tiles' copy into shared memory, and its
zero padding into that copy's predicate (a zero-filling cp.async), so no kernel writes
either, and the output's transpose back into the GEMM's epilogue; exact under the emulation
in both copy modes, pipelined or not."""

from __future__ import annotations

import re
import shutil
from dataclasses import replace

import numpy as np
import pytest

from intrinsics import default_registry
from targets import cuda, host
from targets.cuda.emulate import COPY_MODES
from tensorize.engine import auto_tensorize
from tests.targets.cuda.helpers import random_inputs, sized

needs_compiler = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                    reason="no host C++ compiler to build the emulation")


def _conv(**sizes: int) -> tuple:
    func = sized("conv2d_nhwc_int8", **sizes)
    registry = default_registry()
    return func, cuda.emit(auto_tensorize(func, "cuda", registry=registry).func, registry)


def test_a_batch_of_one_is_gathered_too():
    # The im2col block's batch iterator has extent 1 and indexes nothing: it is dropped
    # (transform_block_layout) so the block can be inlined.
    _, kernel = _conv(batch=1, height=8, width=8, in_channels=16, out_channels=16)
    assert {"pad", "pad_reindex"}.isdisjoint(b.name for b in kernel.buffers)
    assert [l.tensorized for l in kernel.launches] == [False, True]
    assert "scalar copy" not in kernel.source and "_zfill(&pad_reindex_shared" in kernel.source


def test_the_output_transpose_is_the_gemms_epilogue():
    # conv[n, h, w, co] = conv_reindex[co, n * 64 + h * 8 + w] iterates over (co, pixel): it
    # maps the accumulator element by element, so it runs on each warp's staging tile, its
    # lanes along co (the output's contiguous channels) storing 16 bytes at once.
    _, kernel = _conv(batch=1, height=8, width=8, in_channels=16, out_channels=16)
    assert "conv_reindex" not in [b.name for b in kernel.buffers]
    assert re.search(r"tz_store16\(&conv\[[^;]*\(ax0_0_\d+ \* 4\)\], tz_v", kernel.source)


def test_a_padded_im2col_stays_a_kernel_of_its_own():
    # 14 x 14 = 196 pixels pad to the tile: the padded im2col buffer is larger than its
    # iterators cover, so it is not inlined.
    _, kernel = _conv(batch=1, height=14, width=14, in_channels=16, out_channels=16)
    assert "pad_reindex" in [b.name for b in kernel.buffers]


@pytest.mark.slow
@needs_compiler
@pytest.mark.parametrize("copies", COPY_MODES)
def test_the_gathered_conv_is_exact(copies):
    func, kernel = _conv(batch=1, height=8, width=8, in_channels=32, out_channels=16)
    inputs = random_inputs(func, seed=4)
    np.testing.assert_array_equal(cuda.emulate(kernel, inputs, copies=copies)["conv"],
                                  _numpy_conv(inputs["I"], inputs["W"]))


@needs_compiler
@pytest.mark.slow
def test_without_the_pipeline_the_halo_is_a_zero_filling_plain_copy(registry):
    func = sized("conv2d_nhwc_int8", batch=1, height=8, width=8, in_channels=32,
                 out_channels=16)
    kernel = cuda.emit(auto_tensorize(func, "cuda", registry=registry).func, registry,
                       pipeline=False)
    assert "tz_copy16_zfill(&pad_reindex_shared" in kernel.source
    assert "tz_cp_async" not in kernel.source.split("__global__", 1)[1]
    inputs = random_inputs(func, seed=6)
    np.testing.assert_array_equal(cuda.emulate(kernel, inputs)["conv"],
                                  _numpy_conv(inputs["I"], inputs["W"]))


@pytest.mark.slow
@needs_compiler
def test_the_halo_reads_nothing():
    # The halo's addresses lie outside I (the padding's clamps are dropped under the
    # predicate): forced to read, the copies are reported out of bounds, so the exact runs
    # above rest on the zero fill reading nothing.
    func, kernel = _conv(batch=1, height=8, width=8, in_channels=32, out_channels=16)
    forced = re.sub(r"(_zfill\(&pad_reindex_shared[^;]*), tz_inside\w*\);", r"\1, true);",
                    kernel.source)
    assert forced != kernel.source
    # Where the address falls (before every buffer, or past the end of another) varies.
    with pytest.raises(cuda.EmulationError, match=r"16 bytes read at \S+: below every|"
                                                  r"out of bounds: read outside"):
        cuda.emulate(replace(kernel, source=forced), random_inputs(func, seed=6))


@pytest.mark.skipif(cuda.nvcc_path() is None, reason="nvcc not installed")
@pytest.mark.parametrize("arch", ["sm_80", pytest.param("sm_90", marks=pytest.mark.slow)])
def test_the_halo_is_cp_async_with_a_source_size(arch):
    # cp.async.cg.shared.global [dst], [src], 16, src_size: src_size 0 in the halo.
    _, kernel = _conv(batch=1, height=8, width=8, in_channels=32, out_channels=16)
    ptx = cuda.compile(kernel, arch).decode()
    assert re.search(r"cp\.async\.cg\.shared\.global \[%r\d+\], \[%rd\d+\], 16, %r\d+;", ptx)


def _numpy_conv(image: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The suite's 3x3 NHWC convolution, padding 1, in numpy (int64 sums, then int32)."""
    padded = np.pad(image.astype(np.int64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    n, h, w, _ = image.shape
    out = np.zeros((n, h, w, weights.shape[-1]), np.int64)
    for rh in range(3):
        for rw in range(3):
            out += padded[:, rh:rh + h, rw:rw + w, :] @ weights[rh, rw].astype(np.int64)
    return out.astype(np.int32)


@needs_compiler
@pytest.mark.slow
def test_resnet50s_first_3x3_conv_is_one_gemm_launch_and_exact():
    # 1 x 56 x 56 x 64 -> 64: the weights' packing and the GEMM (im2col in its copy's
    # addresses, the padding in its predicate, the output's transpose in its epilogue).
    func, kernel = _conv(batch=1, height=56, width=56, in_channels=64, out_channels=64)
    assert [l.tensorized for l in kernel.launches] == [False, True]
    inputs = random_inputs(func, seed=5)
    expected = host.run(func, inputs)["conv"]
    for copies in COPY_MODES:
        np.testing.assert_array_equal(cuda.emulate(kernel, inputs, copies=copies)["conv"],
                                      expected)
