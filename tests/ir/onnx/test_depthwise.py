"""A depthwise layer as grouped GEMMs of diagonal tiles with its epilogue in the kernel
(ir.onnx.depthwise): run on the host backend, fused and unfused, its output equals
onnxruntime's bit for bit, for channel counts the group width does not divide."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from ir.onnx import import_model
from ir.onnx.depthwise import DepthwiseGemm
from tensorize.model.executors import run_on_host
from tensorize.model.reference import run_reference
from tensorize.model.runner import random_inputs
from tests.ir.onnx import models

CHANNELS = 20  # not a multiple of a 16- or 8-channel group: the last group is padded


def depthwise_net(seed: int = 0, size: int = 9, channels: int = CHANNELS):
    """Depthwise 3x3 (pad 1) -> Relu -> depthwise 3x3 stride 2: MobileNet's middle layer."""
    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="dw1", group=channels,
                         pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["y"], name="dw2", group=channels,
                         strides=[2, 2]),
    ]
    inits = [models.weights(rng, name, shape) for name, shape in (
        ("w1", [channels, 1, 3, 3]), ("b1", [channels]),
        ("w2", [channels, 1, 3, 3]), ("b2", [channels]))]
    out = (size - 3) // 2 + 1
    return models.model(nodes, [("x", TensorProto.FLOAT, [1, channels, size, size])],
                        [("y", TensorProto.FLOAT, [1, channels, out, out])], inits)


@pytest.fixture(scope="module", params=[{}, {"per_channel": True}, {"unsigned": True}],
                ids=["int8", "per-channel", "uint8"])
def net(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp("depthwise")
    built = models.quantize(depthwise_net(), folder, **request.param)
    graph = import_model(models.save(built, folder, "dw.onnx"))
    inputs = random_inputs(graph, 4)
    return graph, inputs, run_reference(graph, inputs)


def _depthwise(graph):
    layers = [layer for layer in graph.layers if isinstance(layer.fused, DepthwiseGemm)]
    assert [layer.name for layer in layers] == ["dw1", "dw2"]
    return layers


@pytest.mark.parametrize("tile", [(16, 16, 16), pytest.param((4, 8, 8), marks=pytest.mark.slow)],
                         ids=["16x16x16", "4x8x8"])
def test_the_grouped_form_equals_onnxruntime(net, tile):
    graph, inputs, expected = net
    for layer in _depthwise(graph):
        arrays = [expected.get(name, inputs.get(name)) for name in layer.inputs]
        got = run_on_host(layer.fused.layer(layer, tile), arrays)
        np.testing.assert_array_equal(got, expected[layer.output], err_msg=layer.name)
        assert got.dtype == expected[layer.output].dtype


def test_the_form_gathering_its_own_windows_equals_onnxruntime(tmp_path):
    # 32 channels: two whole groups of 16, the form's condition; both layers (pad 1, and
    # stride 2) gather their windows from the padded input in the kernel.
    built = models.quantize(depthwise_net(channels=32), tmp_path)
    graph = import_model(models.save(built, tmp_path, "dw32.onnx"))
    inputs = random_inputs(graph, 4)
    expected = run_reference(graph, inputs)
    for layer in _depthwise(graph):
        form = layer.fused.implicit_layer(layer, (16, 16, 16))
        assert form.func.params[0].name == "X" and form.func.params[0].shape[1] in (11, 9)
        arrays = [expected.get(name, inputs.get(name)) for name in layer.inputs]
        np.testing.assert_array_equal(run_on_host(form, arrays), expected[layer.output],
                                      err_msg=layer.name)


def test_no_form_gathers_windows_of_a_partial_group(net):
    graph, _, _ = net
    assert all(layer.fused.implicit_layer(layer, (16, 16, 16)) is None
               for layer in _depthwise(graph))


def test_the_unfused_programs_equal_onnxruntime(net):
    graph, inputs, expected = net
    for layer in _depthwise(graph):
        arrays = [expected.get(name, inputs.get(name)) for name in layer.inputs]
        sums, epilogue = layer.fused.unfused(layer, (16, 16, 16))
        got = run_on_host(epilogue, [run_on_host(sums, arrays)])
        np.testing.assert_array_equal(got, expected[layer.output], err_msg=layer.name)


def test_the_weight_tiles_are_diagonal_and_padded(net):
    graph, _, _ = net
    layer = _depthwise(graph)[0]
    form = layer.fused.layer(layer, (16, 16, 16))
    weights = form.pack([np.zeros(layer.input_shapes[0], np.int8)])["B"]
    # 20 channels: two groups of 16, 9 taps of 16 lanes deep (144, a multiple of 16).
    assert weights.shape == (2, 144, 16)
    taps = weights.reshape(2, 9, 16, 16)
    off_diagonal = ~np.eye(16, dtype=bool)
    assert not taps[:, :, off_diagonal].any()
    filters = layer.fused.weights  # (taps, channels)
    for group in range(2):
        lanes = min(16, CHANNELS - 16 * group)
        diagonal = taps[group, :, np.arange(16), np.arange(16)].T  # (taps, lanes)
        np.testing.assert_array_equal(diagonal[:, :lanes],
                                      filters[:, 16 * group:16 * group + lanes])
        assert not diagonal[:, lanes:].any()


def test_no_residual_add_joins_a_depthwise_layer(net):
    graph, _, _ = net
    layer = _depthwise(graph)[0]
    with pytest.raises(ValueError, match="depthwise"):
        layer.fused.joined(layer, layer, (16, 16, 16))


def test_one_group_of_channels_is_the_plain_gemm(tmp_path):
    # 16 channels are one group of a 16-wide tile: the kernel is the 2-D GEMM with its
    # epilogue (a batch of one would be no loop for the engine to map).
    built = models.quantize(depthwise_net(channels=16), tmp_path)
    graph = import_model(models.save(built, tmp_path, "dw16.onnx"))
    inputs = random_inputs(graph, 1)
    expected = run_reference(graph, inputs)
    for layer in _depthwise(graph):
        form = layer.fused.layer(layer, (16, 16, 16))
        assert form.func.name == "matmul_requantised"
        assert [len(p.shape) for p in form.func.params] == [2, 2, 1, 1, 2]
        arrays = [expected.get(name, inputs.get(name)) for name in layer.inputs]
        np.testing.assert_array_equal(run_on_host(form, arrays), expected[layer.output])
        sums, epilogue = layer.fused.unfused(layer, (16, 16, 16))
        np.testing.assert_array_equal(run_on_host(epilogue, [run_on_host(sums, arrays)]),
                                      expected[layer.output])


def test_windows_gathered_in_the_kernel_require_whole_groups_of_a_depthwise_layer():
    from ir.onnx import kernels

    q = kernels.Requantisation(0)
    partial = kernels.ConvShape(1, 20, 5, 5, 20, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 20)
    with pytest.raises(ValueError, match="requires a depthwise convolution of whole groups "
                                         "of 16 channels, got 20 groups of 20 channels"):
        kernels.grouped_conv_rows_requantised(partial, 32, 144, 16, q)
    dense = kernels.ConvShape(1, 32, 5, 5, 32, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1)
    with pytest.raises(ValueError, match="got 1 groups of 32 channels"):
        kernels.grouped_conv_rows_requantised(dense, 32, 144, 16, q)
