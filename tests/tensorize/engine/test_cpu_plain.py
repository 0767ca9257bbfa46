"""A reduction no intrinsic matches, laid out for the vector units: its innermost spatial
loop inside its reduce loops and its epilogue at the reduction's output pixel, the compiled
kernel still the function it was."""

from __future__ import annotations

import numpy as np
import pytest

import targets.host
from ir.onnx import kernels
from ir.onnx.kernels import ConvShape
from targets import cpu
from tensorize.engine.cpu_plain import vectorise_reductions
from tensorize.schedule import Schedule, tree


def _inputs(func, rng):
    arrays = {}
    for param in func.params[:-1]:
        if param.dtype.name == "float32":
            arrays[param.name] = (rng.random(param.shape) * 0.003).astype(np.float32)
        elif param.dtype.name == "int32":
            arrays[param.name] = rng.integers(-500, 500, param.shape).astype(np.int32)
        else:
            arrays[param.name] = rng.integers(-128, 128, param.shape, dtype=np.int8)
    return arrays


@pytest.mark.parametrize("shape", [
    ConvShape(1, 16, 6, 7, 16, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 16),
    ConvShape(2, 5, 7, 5, 5, (3, 2), (2, 1), (0, 1, 1, 0), (1, 1), 5)],
    ids=["3x3-pad1", "3x2-stride2-asymmetric"])
def test_a_depthwise_layer_reordered_computes_what_it_did(shape, registry):
    func = kernels.depthwise_requantised(shape, kernels.Requantisation(-3))
    sch = Schedule(func, registry)
    assert vectorise_reductions(sch) == ["conv"]
    # The channel loop runs inside the window's, and the epilogue is one block.
    loops = [sch.get(loop).var.name for loop in sch.get_loops(sch.get_block("conv"))]
    assert loops == ["n", "h", "w", "rh", "rw", "c"]
    assert tree.block_names(sch.func) == ["conv", "narrowed"]
    inputs = _inputs(func, np.random.default_rng(1))
    want = targets.host.run(func, inputs)[func.params[-1].name]
    got = cpu.run(cpu.emit(sch.func, "x86", registry=registry), inputs, 1)
    np.testing.assert_array_equal(got.outputs[func.params[-1].name], want)


def test_a_kernel_without_a_reduction_is_left_as_it_is(registry):
    sch = Schedule(kernels.max_pool_nhwc(1, 5, 5, 8, (2, 2), (1, 1)), registry)
    before = sch.func
    assert vectorise_reductions(sch) == [] and sch.func is before
