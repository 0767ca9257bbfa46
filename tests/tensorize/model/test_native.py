"""The network compiled for x86 and called as one function: every tensorized layer a native
kernel compiled once, the outputs equal onnxruntime's, and the timing taking turns."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from ir.onnx import import_model
from targets import cpu
from targets.cpu.loaded import LoadedKernel
from tensorize.engine import auto_tensorize
from tensorize.model import networks, random_inputs
from tensorize.model.native import ChannelsLast, compile_network, time_interleaved
from tensorize.model.reference import reference_session, run_reference
from tests.default_run import first_by_default
from tests.ir.onnx import models
from tests.tensorize.schedule.kernels import gemm_int8


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    folder = tmp_path_factory.mktemp("native")
    return import_model(models.save(models.quantize(models.small_cnn(size=16), folder),
                                    folder, "cnn_int8.onnx"))


def test_the_compiled_network_gives_onnxruntimes_outputs(cnn, context):
    ctx = context("x86")
    network = compile_network(cnn, ctx)
    # Every convolution and matrix product of this network tensorizes on x86, and its max
    # pool compiles as a kernel of its own.
    assert network.native == sum(layer.func is not None or layer.channels_last is not None
                                 for layer in cnn.layers) == 4
    names = [info.name for info in cnn.outputs]
    session = reference_session(cnn)
    for seed in (0, 1):  # a second call on other inputs: nothing left over from the first
        inputs = random_inputs(cnn, seed)
        ours = network(inputs)
        theirs = dict(zip(names, session.run(names, inputs)))
        for name in names:
            np.testing.assert_array_equal(ours[name], theirs[name])


def test_a_loaded_kernel_runs_again_on_new_inputs(registry, context):
    ctx = context("x86")
    func = auto_tensorize(gemm_int8(32, 48, 64), "x86", registry=registry).func
    loaded = LoadedKernel(cpu.emit(func, "x86", ctx.features, registry=registry))
    rng = np.random.default_rng(0)
    for _ in range(2):
        a = rng.integers(0, 256, (32, 64)).astype(np.int8)
        b = rng.integers(-128, 128, (64, 48), dtype=np.int8)
        # Whatever the arrays hold from before (here: random bytes), the kernel writes
        # every element it reads first.
        for array in loaded._arrays.values():
            array.view(np.uint8)[...] = rng.integers(0, 256, array.nbytes, dtype=np.uint8
                                                     ).reshape(array.view(np.uint8).shape)
        out = loaded({"A": a, "B": b})["C"]
        np.testing.assert_array_equal(out, a.astype(np.int32) @ b.astype(np.int32))


def test_timings_take_turns():
    order = []
    timings = time_interleaved({"a": lambda: order.append("a"),
                                "b": lambda: order.append("b")}, 3)
    assert order == ["a", "b"] * 3
    assert all(len(t.seconds) == len(t.cpu_seconds) == 3 for t in timings.values())
    assert timings["a"].best == min(timings["a"].seconds) <= timings["a"].median


def test_a_loaded_kernel_copies_again_what_may_have_changed(registry, context):
    ctx = context("x86")
    func = auto_tensorize(gemm_int8(16, 32, 64), "x86", registry=registry).func
    loaded = LoadedKernel(cpu.emit(func, "x86", ctx.features, registry=registry))
    rng = np.random.default_rng(1)
    a = rng.integers(-128, 128, (16, 64), dtype=np.int8)
    writable = rng.integers(-128, 128, (64, 32), dtype=np.int8)
    frozen = writable.copy()
    frozen.setflags(write=False)
    for b in (writable, frozen):
        first = loaded({"A": a, "B": b})["C"].copy()
        np.testing.assert_array_equal(first, a.astype(np.int32) @ b.astype(np.int32))
    # A writable array changed in place is copied again; a read-only one cannot change.
    writable += 1
    np.testing.assert_array_equal(loaded({"A": a, "B": writable})["C"],
                                  a.astype(np.int32) @ writable.astype(np.int32))
    np.testing.assert_array_equal(loaded({"A": a, "B": frozen})["C"],
                                  a.astype(np.int32) @ frozen.astype(np.int32))


def _bottleneck(seed: int = 0, size: int = 8, c: int = 16):
    """1x1 -> Relu -> 3x3 (pad 1) -> Relu -> 1x1 -> Add (the first layer's output) -> Relu:
    a ResNet bottleneck of ``c`` channels, tiny."""
    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], name="conv3"),
        helper.make_node("Add", ["c3", "r1"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["y"], name="relu3"),
    ]
    inits = [models.weights(rng, "w1", [c, 8, 1, 1]), models.weights(rng, "b1", [c]),
             models.weights(rng, "w2", [c, c, 3, 3]), models.weights(rng, "b2", [c]),
             models.weights(rng, "w3", [c, c, 1, 1]), models.weights(rng, "b3", [c])]
    return models.model(nodes, [("x", TensorProto.FLOAT, [1, 8, size, size])],
                        [("y", TensorProto.FLOAT, [1, c, size, size])], inits)


@pytest.mark.parametrize("network_model", [
    _bottleneck,
    pytest.param(lambda: networks.resnet50(**networks.SMALL["resnet50"]),
                 marks=pytest.mark.slow)], ids=["bottleneck", "small resnet50"])
def test_convolutions_hand_each_other_their_outputs_channels_last(tmp_path, context,
                                                                   network_model):
    graph = import_model(models.save(models.quantize(network_model(), tmp_path), tmp_path,
                                     "net.onnx"))
    network = compile_network(graph, context("x86"))
    # Every residual add is joined onto the convolution producing its first operand.
    assert any(" + " in layer.name for layer in network.graph.layers)
    assert not any(layer.op == "QDQ Add" for layer in network.graph.layers)
    inputs = random_inputs(graph, 2)
    values = dict(inputs)
    kept = 0
    for layer, step in zip(network.graph.layers, network.steps):
        values[layer.output] = step([values[name] for name in layer.inputs])
        kept += isinstance(values[layer.output], ChannelsLast)
    # Every convolution's output, and the max pool's between them, stays channels last.
    assert kept == sum(layer.op.startswith("QDQ Conv") or layer.channels_last is not None
                       for layer in network.graph.layers)
    names = [info.name for info in graph.outputs]
    theirs = reference_session(graph).run(names, inputs)
    ours = network(inputs)
    for name, want in zip(names, theirs):
        np.testing.assert_array_equal(ours[name], want)


@pytest.mark.slow
def test_a_layers_rows_split_over_threads_give_the_same_outputs(tmp_path, context):
    # The 3x3 layer: 1024 rows x 576 x 64, 37.7M MACs, enough for two threads; the 1x1
    # layers are one part each.
    graph = import_model(models.save(models.quantize(_bottleneck(size=32, c=64), tmp_path),
                                     tmp_path, "wide.onnx"))
    network = compile_network(graph, context("x86", threads=2))
    assert network.threads == 2 and network.split == {"conv2": 2}
    # Each convolution's weights (each part's) were packed once, when compiled.
    assert network.prepacked == {"conv1", "conv2", "conv3 + add"}
    inputs = random_inputs(graph, 5)
    names = [info.name for info in graph.outputs]
    theirs = reference_session(graph).run(names, inputs)
    for name, want in zip(names, theirs):
        np.testing.assert_array_equal(network(inputs)[name], want)


@pytest.mark.slow
def test_a_matrix_products_rows_split_over_threads_give_the_same_outputs(tmp_path, context):
    # Each projection: 512 rows x 256 x 256, 33.6M MACs, two parts' worth; its weights are
    # packed once, as a convolution's are.
    graph = import_model(models.save(models.quantize(models.small_attention(seq=512,
                                                                            hidden=256),
                                                     tmp_path), tmp_path, "attention.onnx"))
    network = compile_network(graph, context("x86", threads=2))
    assert network.split == {"query": 2, "key": 2}
    assert {"query", "key"} <= network.prepacked
    inputs = random_inputs(graph, 6)
    names = [info.name for info in graph.outputs]
    theirs = reference_session(graph).run(names, inputs)
    for name, want in zip(names, theirs):
        np.testing.assert_array_equal(network(inputs)[name], want)


@pytest.mark.slow
def test_a_max_pool_between_convolutions_keeps_them_channels_last(cnn, context):
    network = compile_network(cnn, context("x86"))
    inputs = random_inputs(cnn, 4)
    values = dict(inputs)
    layouts = {}
    for layer, step in zip(network.graph.layers, network.steps):
        values[layer.output] = step([values[name] for name in layer.inputs])
        layouts[layer.op] = type(values[layer.output]).__name__
    assert layouts["QDQ MaxPool"] == "ChannelsLast"
    pooled = next(layer for layer in network.graph.layers if layer.op == "QDQ MaxPool")
    want = run_reference(cnn, inputs)[pooled.output]
    np.testing.assert_array_equal(values[pooled.output].array(), want)


def test_a_channels_last_uint8_tensor_converts_to_onnxs_values():
    from tensorize.model.native import _onnx_layout

    nhwc = np.random.default_rng(6).integers(-128, 128, (1, 3, 4, 5), dtype=np.int8)
    # The kernels hold a uint8 tensor's values less 128, as int8.
    want = (nhwc.astype(np.int16) + 128).astype(np.uint8).transpose(0, 3, 1, 2)
    got = _onnx_layout(nhwc, "uint8")
    assert got.dtype == np.uint8 and np.array_equal(got, want)
    assert np.array_equal(_onnx_layout(nhwc, "int8"), nhwc.transpose(0, 3, 1, 2))


@pytest.mark.parametrize("quantisation", first_by_default([{}, {"per_channel": True},
                                                            {"unsigned": True}], 1),
                         ids=["int8", "per-channel", "uint8"])
def test_depthwise_layers_run_as_compiled_kernels_channels_last(quantisation, tmp_path,
                                                                context):
    from tests.ir.onnx.test_depthwise import depthwise_net

    graph = import_model(models.save(models.quantize(depthwise_net(), tmp_path,
                                                     **quantisation), tmp_path, "dw.onnx"))
    network = compile_network(graph, context("x86"))
    inputs = random_inputs(graph, 5)
    values = dict(inputs)
    for layer, step in zip(network.graph.layers, network.steps):
        values[layer.output] = step([values[name] for name in layer.inputs])
    expected = run_reference(graph, inputs)
    for name in ("dw1", "dw2"):
        layer = next(layer for layer in network.graph.layers if layer.name == name)
        assert isinstance(values[layer.output], ChannelsLast)
        np.testing.assert_array_equal(values[layer.output].array(), expected[layer.output])
