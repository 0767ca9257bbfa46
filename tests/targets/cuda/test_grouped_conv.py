"""Grouped convolutions (NHWC, the group folded into the channel axes as the ONNX importer
writes them) tensorized for cuda as batched GEMMs, the group on blockIdx.z; depthwise ones
refused with their figures. Exact under the emulation in both copy modes against numpy."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from intrinsics import default_registry
from ir import ScheduleError
from ir.onnx.kernels import ConvShape, conv2d
from targets import cuda
from targets.cuda.banks import bank_conflicts
from targets.cuda.emulate import COPY_MODES
from tensorize.engine import auto_tensorize, candidate_intrinsics
from tensorize.engine.cuda_grouped import grouping, reshape
from tensorize.schedule import Schedule
from tests.targets.cuda.helpers import random_inputs, sized

needs_compiler = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                    reason="no host C++ compiler to build the emulation")


def _shape(batch: int, channels: int, out_channels: int, groups: int, size: int = 8) -> ConvShape:
    return ConvShape(batch, channels, size, size, out_channels, (3, 3), (1, 1), (1, 1, 1, 1),
                     (1, 1), groups)


def _grouped(shape: ConvShape):
    """The layer's function, and it reshaped, tensorized for cuda and emitted."""
    func = conv2d(shape, "int8")
    sch = Schedule(func)
    assert reshape(sch, "conv", candidate_intrinsics(default_registry(), "cuda"), {})
    result = auto_tensorize(sch.func, "cuda", registry=default_registry())
    return func, result, cuda.emit(result.func, default_registry())


def _numpy_grouped_conv(x: np.ndarray, w: np.ndarray, groups: int) -> np.ndarray:
    """conv[n, h, w, o] = sum over rh, rw, rc of x[n, h + rh, w + rw, g * cg + rc] *
    w[rh, rw, rc, o], g = o // (out channels / groups); x is given padded."""
    kh, kw, cg, out = w.shape
    og = out // groups
    oh, ow = x.shape[1] - kh + 1, x.shape[2] - kw + 1
    y = np.zeros((x.shape[0], oh, ow, out), np.int64)
    for rh in range(kh):
        for rw in range(kw):
            window = x[:, rh:rh + oh, rw:rw + ow, :].astype(np.int64)
            for g in range(groups):
                y[..., g * og:(g + 1) * og] += (window[..., g * cg:(g + 1) * cg]
                                                @ w[rh, rw, :, g * og:(g + 1) * og])
    return y.astype(np.int32)


def test_the_group_becomes_a_batch_of_gemms_on_blockidx_z():
    _, result, kernel = _grouped(_shape(1, 64, 64, 4))
    outcome, = result.blocks
    assert outcome.intrinsic is not None and "outer (vn_vo)" in outcome.mapping
    gemm, = [launch for launch in kernel.launches if launch.tensorized]
    assert gemm.grid[2] == 4
    # 16 input channels a group are one 16-byte piece: the im2col is gathered in the copy;
    # the output's transpose is the epilogue (lanes along the group's channels). One launch
    # packs the weights.
    assert {"X_reindex", "conv_reindex"}.isdisjoint(b.name for b in kernel.buffers)
    assert len(kernel.launches) == 2 and "scalar copy" not in kernel.source


@pytest.mark.slow
@needs_compiler
@pytest.mark.parametrize("copies", COPY_MODES)
def test_a_grouped_conv_is_exact(copies):
    func, _, kernel = _grouped(_shape(1, 64, 64, 4))
    inputs = random_inputs(func, seed=7)
    np.testing.assert_array_equal(cuda.emulate(kernel, inputs, copies=copies)["conv"],
                                  _numpy_grouped_conv(inputs["X"], inputs["W"], 4))


@needs_compiler
@pytest.mark.slow
@pytest.mark.parametrize("shape", [_shape(2, 32, 64, 2), _shape(1, 16, 16, 4)],
                         ids=["batch 2 x 2 groups", "4 channels a group (padded)"])
def test_batches_and_narrow_groups_are_exact(shape):
    # A batch of 2 joins the group on blockIdx.z; 4 channels a group pad k and n to the
    # fragment and keep an im2col kernel (4 bytes are no 16-byte piece).
    func, _, kernel = _grouped(shape)
    gemm, = [launch for launch in kernel.launches if launch.tensorized]
    assert gemm.grid[2] == shape.n * shape.groups
    inputs = random_inputs(func, seed=8)
    expected = _numpy_grouped_conv(inputs["X"], inputs["W"], shape.groups)
    for copies in COPY_MODES:
        np.testing.assert_array_equal(cuda.emulate(kernel, inputs, copies=copies)["conv"],
                                      expected)
    counts = bank_conflicts(kernel, inputs)[gemm.kernel]
    assert counts["copy"].phases and counts["fragment_load"].phases
    assert counts["copy"].conflicts == counts["fragment_load"].conflicts == 0


def test_an_ungrouped_conv_is_left_alone():
    sch = Schedule(conv2d(_shape(1, 16, 16, 1), "int8"))
    before = sch.func
    assert grouping(sch.get(sch.get_block("conv")).block) is None
    assert not reshape(sch, "conv", candidate_intrinsics(default_registry(), "cuda"), {})
    assert sch.func is before


def test_depthwise_is_refused_with_its_figures():
    sch = Schedule(sized("depthwise_conv2d_int8", height=56, width=56, channels=64))
    before = sch.func
    with pytest.raises(ScheduleError) as err:
        reshape(sch, "conv", candidate_intrinsics(default_registry(), "cuda"), {})
    message = str(err.value)
    # 9 of 16 k and 1 of 8 columns of a 32x8x16 fragment; 8 channels a diagonal tile: 72 of 80.
    assert "a 3136 x 1 x 9 GEMM" in message and "32x8x16 fragment" in message
    assert "7.0% of the MACs" in message and "11.2% with 8 channels" in message
    assert "CUDA-core kernel" in message and "cuda_grouped" not in message
    assert sch.func is before
