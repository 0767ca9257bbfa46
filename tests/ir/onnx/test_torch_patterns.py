"""Patterns PyTorch's TorchScript exporter writes, reproduced with onnx.helper: equal
constants kept once and handed to each user through an Identity node. The importer takes an
Identity of a constant as that constant; a bias it cannot take as a constant is refused,
never dropped."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ir.onnx import OnnxImportError, import_model
from tensorize.model import run_model
from tests.ir.onnx import models

F = TensorProto.FLOAT


def _shared_through_identity(graph_output: str = "y"):
    """Two convolutions whose weights and biases are one initializer each, every use through
    an Identity of its own, as the TorchScript exporter writes equal constants."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Identity", ["w"], [f"w{i}"], name=f"Identity_{i}")
             for i in (1, 2)]
    nodes += [helper.make_node("Identity", ["b"], [f"b{i}"], name=f"Identity_{i + 2}")
              for i in (1, 2)]
    nodes += [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1],
                               name="/conv1/Conv"),
              helper.make_node("Conv", ["c1", "w2", "b2"], ["y"], pads=[1, 1, 1, 1],
                               name="/conv2/Conv")]
    inits = [models.weights(rng, "w", [4, 4, 3, 3]), models.weights(rng, "b", [4], 1.0)]
    outputs = [("y", F, [1, 4, 6, 6])]
    if graph_output != "y":
        outputs.append((graph_output, F, [4]))
    return models.model(nodes, [("x", F, [1, 4, 6, 6])], outputs, inits)


def test_an_identity_of_a_constant_is_that_constant(tmp_path, context):
    graph = import_model(models.save(_shared_through_identity(), tmp_path, "shared.onnx"))
    assert [layer.op for layer in graph.layers] == ["Conv", "Conv"]
    assert np.array_equal(graph.constants["b2"], graph.constants["b"])
    run = run_model(graph, context("host"))
    assert run.ok, [r["check"] for r in run.records]


def test_an_identity_the_graph_returns_stays_a_layer(tmp_path, context):
    graph = import_model(models.save(_shared_through_identity("b2"), tmp_path, "out.onnx"))
    ops = [layer.op for layer in graph.layers]
    assert ops.count("Identity") == 1 and ops.count("Conv") == 2
    run = run_model(graph, context("host"))
    assert run.ok, [r["check"] for r in run.records]


@pytest.mark.parametrize("op", ["Conv", "Gemm"])
def test_a_computed_bias_is_refused_naming_the_node(tmp_path, op):
    if op == "Conv":
        x_shape, w_shape, attrs = [1, 4, 6, 6], [4, 4, 3, 3], {"pads": [1, 1, 1, 1]}
        y_shape = [1, 4, 6, 6]
    else:
        x_shape, w_shape, attrs, y_shape = [2, 4], [4, 4], {}, [2, 4]
    nodes = [helper.make_node("Relu", ["bias_in"], ["bias"], name="relu"),
             helper.make_node(op, ["x", "w", "bias"], ["y"], name="layer", **attrs)]
    inits = [numpy_helper.from_array(np.ones(w_shape, np.float32), "w")]
    built = models.model(nodes, [("x", F, x_shape), ("bias_in", F, [4])],
                         [("y", F, y_shape)], inits)
    path = models.save(built, tmp_path, "bias.onnx")
    with pytest.raises(OnnxImportError) as err:
        import_model(path)
    message = str(err.value)
    assert message == (f"{path}: node 'layer' ({op}) requires a constant bias, got computed "
                       "'bias'")


def _onnxruntime(built, feeds):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(built.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def _edges_and_random(shape) -> np.ndarray:
    """Random float32 values with the hard sigmoid's corners and float edges first."""
    rng = np.random.default_rng(1)
    values = (rng.standard_normal(int(np.prod(shape))) * 4).astype(np.float32)
    edges = np.array([-3, 3, -2.5, 2.5, 0.0, -0.0, np.inf, -np.inf, 1e-38, -1e-38,
                      np.nextafter(np.float32(3), np.float32(4)),
                      np.nextafter(np.float32(-3), np.float32(-4)), 3.4e38, -3.4e38],
                     np.float32)
    values[:edges.size] = edges
    return values.reshape(shape)


@pytest.mark.parametrize("alpha, beta", [(1 / 6, 0.5), (0.2, 0.5), (0.35, -0.1)])
def test_hard_sigmoid_equals_onnxruntime_bit_for_bit(tmp_path, alpha, beta):
    shape = [4, 64, 64]
    built = models.model([helper.make_node("HardSigmoid", ["x"], ["y"], name="hs",
                                           alpha=alpha, beta=beta)],
                         [("x", F, shape)], [("y", F, shape)])
    layer, = import_model(models.save(built, tmp_path, "hs.onnx")).layers
    assert not layer.fallback
    x = _edges_and_random(shape)
    ours = layer.host([x])
    assert ours.dtype == np.float32
    assert np.array_equal(ours, _onnxruntime(built, {"x": x}))


@pytest.mark.parametrize("constant_first", [False, True])
def test_mul_equals_onnxruntime_broadcast_and_with_a_constant(tmp_path, constant_first):
    rng = np.random.default_rng(2)
    gate = numpy_helper.from_array(rng.standard_normal([1, 8, 1, 1]).astype(np.float32), "k")
    scaled = ["k", "p"] if constant_first else ["p", "k"]
    nodes = [helper.make_node("Mul", ["x", "g"], ["p"], name="mul"),
             helper.make_node("Mul", scaled, ["y"], name="scale")]
    built = models.model(nodes, [("x", F, [1, 8, 5, 5]), ("g", F, [1, 8, 1, 1])],
                         [("y", F, [1, 8, 5, 5])], [gate])
    graph = import_model(models.save(built, tmp_path, "mul.onnx"))
    assert [(layer.op, layer.fallback) for layer in graph.layers] == [("Mul", False)] * 2
    x = _edges_and_random([1, 8, 5, 5])
    g = rng.standard_normal([1, 8, 1, 1]).astype(np.float32)
    product = graph.layers[0].host([x, g])
    ours = graph.layers[1].host([product])
    assert np.array_equal(ours, _onnxruntime(built, {"x": x, "g": g}), equal_nan=True)


@pytest.mark.parametrize("op", ["Add", "Mul"])
def test_arithmetic_on_constants_alone_runs_through_onnxruntime(tmp_path, context, op):
    ones = np.full((2, 3), 1.5, np.float32)
    nodes = [helper.make_node(op, ["c1", "c2"], ["s"], name="constants"),
             helper.make_node("Add", ["x", "s"], ["y"], name="add")]
    built = models.model(nodes, [("x", F, [2, 3])], [("y", F, [2, 3])],
                         [numpy_helper.from_array(ones, "c1"),
                          numpy_helper.from_array(ones, "c2")])
    graph = import_model(models.save(built, tmp_path, "constants.onnx"))
    assert [(layer.op, layer.fallback) for layer in graph.layers] == [(op, True),
                                                                      ("Add", False)]
    run = run_model(graph, context("host"))
    assert run.ok, [r["check"] for r in run.records]
