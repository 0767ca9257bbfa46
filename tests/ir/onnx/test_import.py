"""The importer: each operator's layer, run on the host, against onnxruntime on random
inputs (integers exactly), and the QDQ pattern found as one integer layer."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ir.onnx import import_model
from tensorize.model.check import compare
from tensorize.model.reference import run_reference
from tests.ir.onnx import models
from tensorize.model.executors import run_on_host

F, I8, U8, I32 = TensorProto.FLOAT, TensorProto.INT8, TensorProto.UINT8, TensorProto.INT32


def _run_all(path, seed: int = 0):
    """Import ``path``, run every layer on the host on our own earlier outputs, compare each
    with onnxruntime; returns the graph and the check texts by layer name."""
    graph = import_model(path)
    rng = np.random.default_rng(seed)
    inputs = {}
    for info in graph.inputs:
        dtype = np.dtype(info.dtype)
        if dtype.kind in "iu":
            inputs[info.name] = rng.integers(np.iinfo(dtype).min, int(np.iinfo(dtype).max) + 1,
                                             info.shape).astype(dtype)
        else:
            inputs[info.name] = rng.standard_normal(info.shape).astype(dtype)
    expected = run_reference(graph, inputs)
    values = dict(inputs)
    checks = {}
    for layer in graph.layers:
        values[layer.output] = run_on_host(layer, [values[n] for n in layer.inputs])
        ok, text = compare(values[layer.output], expected[layer.output])
        assert ok, f"{layer.name} ({layer.op}): {text}"
        checks[layer.name] = text
    return graph, checks


@pytest.mark.parametrize("attrs, channels, out, weight_channels", [
    ({"pads": [1, 1, 1, 1], "strides": [2, 2]}, 4, 8, 4),
    ({"pads": [0, 1, 2, 1], "dilations": [2, 2]}, 3, 5, 3),
    ({"auto_pad": "SAME_UPPER", "strides": [2, 2]}, 4, 4, 4),
    ({"pads": [1, 1, 1, 1], "group": 2}, 4, 6, 2),
    ({"pads": [1, 1, 1, 1], "group": 8}, 8, 8, 1),
])
def test_float_conv_matches_onnxruntime(tmp_path, attrs, channels, out, weight_channels):
    rng = np.random.default_rng(1)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", kernel_shape=[3, 3],
                            **attrs)
    built = models.model([node], [("x", F, [1, channels, 9, 10])], [("y", F, None)],
                         [models.weights(rng, "w", [out, weight_channels, 3, 3]),
                          models.weights(rng, "b", [out])])
    graph, checks = _run_all(models.save(built, tmp_path, "conv.onnx"))
    layer, = graph.layers
    assert layer.func is not None and layer.op == "Conv"
    assert checks["conv"].startswith("max error")
    assert layer.macs == int(np.prod(layer.output_shape)) * 9 * weight_channels


def test_matmul_gemm_and_host_operators_match_onnxruntime(tmp_path):
    graph, _ = _run_all(models.save(models.small_attention(), tmp_path, "att.onnx"))
    ops = [layer.op for layer in graph.layers]
    assert ops == ["MatMul", "MatMul", "Transpose", "MatMul", "Softmax", "Reshape"]
    scores = graph.layers[3]
    assert scores.inputs == ("q", "kt") and scores.macs == 8 * 8 * 16
    graph, _ = _run_all(models.save(models.small_cnn(), tmp_path, "cnn.onnx"))
    assert [layer.op for layer in graph.layers][-1] == "Gemm"


def test_qdq_network_is_integer_layers_exact_against_onnxruntime(tmp_path):
    qdq = models.quantize(models.small_cnn(), tmp_path)
    graph, checks = _run_all(models.save(qdq, tmp_path, "cnn_int8.onnx"))
    ops = [layer.op for layer in graph.layers]
    assert ops == ["QuantizeLinear", "QDQ Conv", "QDQ MaxPool", "QDQ Conv", "QDQ Add",
                   "QDQ GlobalAveragePool", "QDQ Flatten", "QDQ Gemm", "DequantizeLinear"]
    conv = graph.layers[1]
    assert conv.output_dtype == "int8" and conv.func is not None
    assert "requantisation" in conv.epilogue
    assert all(checks[layer.name] == "exact" for layer in graph.layers[:-1])


def test_qdq_per_channel_weights_exact(tmp_path):
    qdq = models.quantize(models.small_cnn(seed=1), tmp_path, per_channel=True)
    graph, checks = _run_all(models.save(qdq, tmp_path, "cnn_pc.onnx"), seed=2)
    conv = next(layer for layer in graph.layers if layer.op == "QDQ Conv")
    assert conv.func is not None
    assert all(checks[layer.name] == "exact" for layer in graph.layers[:-1])


def test_qdq_attention_with_softmax_exact(tmp_path):
    qdq = models.quantize(models.small_attention(), tmp_path)
    graph, checks = _run_all(models.save(qdq, tmp_path, "att_int8.onnx"))
    ops = {layer.name: layer.op for layer in graph.layers}
    assert ops["scores"] == "QDQ MatMul" and ops["softmax"] == "QDQ Softmax"
    assert checks["scores"] == "exact" and checks["softmax"] == "exact"


def _qlinear_conv_model(x_type, x_zp: int) -> object:
    rng = np.random.default_rng(2)
    w = rng.integers(-127, 128, (6, 4, 3, 3)).astype(np.int8)
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "xs"),
             numpy_helper.from_array(np.array(x_zp, np.uint8 if x_type == U8 else np.int8), "xz"),
             numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.array([0.01, 0.02, 0.03, 0.01, 0.02, 0.03], np.float32),
                                     "ws"),
             numpy_helper.from_array(np.zeros(6, np.int8), "wz"),
             numpy_helper.from_array(np.array(0.7, np.float32), "ys"),
             numpy_helper.from_array(np.array(x_zp, np.uint8 if x_type == U8 else np.int8), "yz"),
             numpy_helper.from_array(rng.integers(-500, 500, 6).astype(np.int32), "b")]
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
                            ["y"], name="qconv", pads=[1, 1, 1, 1], strides=[1, 2])
    return models.model([node], [("x", x_type, [1, 4, 7, 8])], [("y", x_type, None)], inits)


@pytest.mark.parametrize("x_type, zp", [(I8, -3), (U8, 131)])
def test_qlinear_conv_exact(tmp_path, x_type, zp):
    graph, checks = _run_all(models.save(_qlinear_conv_model(x_type, zp), tmp_path, "q.onnx"))
    assert graph.layers[0].op == "QLinearConv" and checks["qconv"] == "exact"


def test_integer_matmul_and_conv_forms_exact(tmp_path):
    rng = np.random.default_rng(3)
    b = rng.integers(-128, 128, (12, 5)).astype(np.int8)
    w = rng.integers(-128, 128, (3, 2, 3, 3)).astype(np.int8)
    nodes = [
        helper.make_node("MatMulInteger", ["a", "b", "az"], ["m"], name="mmi"),
        helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["q"],
                         name="qmm"),
        helper.make_node("ConvInteger", ["x", "w", "xz"], ["c"], name="convi"),
    ]
    inits = [numpy_helper.from_array(b, "b"), numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.array(7, np.uint8), "az"),
             numpy_helper.from_array(np.array(0.02, np.float32), "as"),
             numpy_helper.from_array(np.array(0.03, np.float32), "bs"),
             numpy_helper.from_array(np.array(0, np.int8), "bz"),
             numpy_helper.from_array(np.array(0.4, np.float32), "ys"),
             numpy_helper.from_array(np.array(120, np.uint8), "yz"),
             numpy_helper.from_array(np.array(200, np.uint8), "xz")]
    built = models.model(nodes, [("a", U8, [3, 4, 12]), ("x", U8, [1, 2, 6, 6])],
                         [("m", I32, None), ("q", U8, None), ("c", I32, None)], inits,
                         opset=13)
    graph, checks = _run_all(models.save(built, tmp_path, "int.onnx"))
    assert [layer.op for layer in graph.layers] == ["MatMulInteger", "QLinearMatMul",
                                                    "ConvInteger"]
    assert set(checks.values()) == {"exact"}


def test_qdq_average_pool_and_clip_exact(tmp_path):
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["c"], ["p"], name="avg", kernel_shape=[3, 3],
                              strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["p", "lo", "hi"], ["y"], name="clip")]
    inits = [models.weights(rng, "w", [16, 8, 3, 3]),
             numpy_helper.from_array(np.array(-0.2, np.float32), "lo"),
             numpy_helper.from_array(np.array(0.5, np.float32), "hi")]
    built = models.model(nodes, [("x", F, [1, 8, 12, 12])], [("y", F, [1, 16, 6, 6])], inits)
    _, checks = _run_all(models.save(built, tmp_path, "avg.onnx"))
    assert all(text.startswith("max error") for text in checks.values())
    qdq = models.quantize(built, tmp_path)
    graph, checks = _run_all(models.save(qdq, tmp_path, "avg_int8.onnx"))
    assert {layer.name: layer.op for layer in graph.layers}["avg"] == "QDQ AveragePool"
    assert checks["avg"] == "exact"
