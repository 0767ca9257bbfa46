"""Nodes run through the onnxruntime fallback whose shapes onnx's inference of the whole model
does not give: onnxruntime's contrib operators of the QOperator format (QLinearConcat,
QLinearAdd, QLinearGlobalAveragePool) get their shape by the importer's rule, ONNX operators
after them by onnx's inference of the node alone; a node with several outputs in use gets a
layer per output. Each runs exact against onnxruntime; what cannot be known or run is
refused naming the file and the node."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ir.onnx import OnnxImportError, import_model
from tensorize.model import run_model
from tests.ir.onnx import corpus_models, models
from tensorize.model.executors import run_on_host

F, I8 = TensorProto.FLOAT, TensorProto.INT8
MS = "com.microsoft"


def _no_internals(message: str) -> None:
    assert "Traceback" not in message
    assert "ir/onnx" not in message and "ir.onnx" not in message and ".py" not in message


def _exact(run) -> None:
    assert run.ok
    for record in run.records:
        assert record["check"] == "exact" or record["check"].startswith("max error 0.00e+00"), \
            record


def test_qoperator_model_with_qlinear_concat_runs_exact(tmp_path, context):
    path = models.save(corpus_models.qlinear_concat(), tmp_path, "qop.onnx")
    graph = import_model(path)
    shapes = {layer.name: layer.output_shape for layer in graph.layers}
    assert shapes["concat"] == (1, 9, 6, 6) and shapes["add"] == (1, 6, 6, 6)
    assert shapes["pool"] == (1, 6, 1, 1) and shapes["sigmoid"] == (1, 6, 1, 1)
    _exact(run_model(graph, context("host")))


def test_a_model_quantised_by_onnxruntime_in_qoperator_format_runs_exact(tmp_path, context):
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1",
                              pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "w2", "b2"], ["c2"], name="conv2"),
             helper.make_node("Concat", ["c1", "c2"], ["cat"], name="concat", axis=1),
             helper.make_node("Conv", ["cat", "w3", "b3"], ["y"], name="conv3")]
    inits = [models.weights(rng, "w1", [4, 3, 3, 3]), models.weights(rng, "b1", [4]),
             models.weights(rng, "w2", [2, 3, 1, 1]), models.weights(rng, "b2", [2]),
             models.weights(rng, "w3", [5, 6, 1, 1]), models.weights(rng, "b3", [5])]
    source = models.save(models.model(nodes, [("x", F, [1, 3, 5, 5])],
                                      [("y", F, [1, 5, 5, 5])], inits), tmp_path, "f.onnx")

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter([{"x": rng.standard_normal((1, 3, 5, 5)).astype(np.float32)}
                               for _ in range(4)])

        def get_next(self):
            return next(self.items, None)

    target = tmp_path / "qop.onnx"
    quantize_static(str(source), str(target), Reader(), quant_format=QuantFormat.QOperator,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    graph = import_model(target)
    assert "QLinearConcat" in [layer.op for layer in graph.layers]
    _exact(run_model(graph, context("host")))


def _qlinear_concat(tmp_path, shapes, axis):
    c = numpy_helper.from_array
    inits = [c(np.float32(0.1), "s"), c(np.int8(0), "z")]
    inputs = [(f"x{i}", I8, list(s)) for i, s in enumerate(shapes)]
    names = ["s", "z"]
    for name, _, _ in inputs:
        names += [name, "s", "z"]
    nodes = [helper.make_node("QLinearConcat", names, ["y"], name="cat", domain=MS,
                              axis=axis)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(*i)
                                           for i in inputs],
                              [helper.make_tensor_value_info("y", I8, None)], inits)
    built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(MS, 1)])
    built.ir_version = 9
    return models.save(built, tmp_path, "cat.onnx")


def test_qlinear_concat_on_a_negative_axis_gets_its_shape(tmp_path, context):
    path = _qlinear_concat(tmp_path, [(2, 3), (2, 4)], -1)
    graph = import_model(path)
    assert graph.layers[0].output_shape == (2, 7) and graph.layers[0].output_dtype == "int8"
    _exact(run_model(graph, context("host")))


def test_qlinear_concat_of_inputs_that_disagree_is_refused(tmp_path):
    path = _qlinear_concat(tmp_path, [(2, 3), (3, 4)], 1)
    with pytest.raises(OnnxImportError) as err:
        import_model(path)
    message = str(err.value)
    assert message.startswith(f"{path}: node 'cat' (QLinearConcat) requires inputs of one "
                              "shape but for axis 1, got (2, 3), (3, 4)"), message
    _no_internals(message)


def test_a_contrib_operator_without_a_shape_rule_is_refused_naming_the_output(tmp_path):
    nodes = [helper.make_node("FastGelu", ["x"], ["y"], name="gelu", domain=MS)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2, 3])],
                              [helper.make_tensor_value_info("y", F, None)])
    built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(MS, 1)])
    built.ir_version = 9
    path = models.save(built, tmp_path, "gelu.onnx")
    with pytest.raises(OnnxImportError) as err:
        import_model(path)
    message = str(err.value)
    assert message.startswith(f"{path}: node 'gelu' (FastGelu) requires a static shape for "
                              "its output 'y' to run on the host, got none"), message
    _no_internals(message)


def test_a_node_with_several_outputs_in_use_is_a_layer_per_output(tmp_path, context):
    k = numpy_helper.from_array(np.array([2], np.int64), "k")
    nodes = [helper.make_node("TopK", ["x", "k"], ["values", "indices"], name="topk", axis=1),
             helper.make_node("Relu", ["values"], ["y"], name="relu")]
    built = models.model(nodes, [("x", F, [3, 6])],
                         [("y", F, [3, 2]), ("indices", TensorProto.INT64, [3, 2])], [k])
    graph = import_model(models.save(built, tmp_path, "topk.onnx"))
    assert [(layer.name, layer.output, layer.fallback) for layer in graph.layers] == [
        ("topk:0", "values", True), ("topk:1", "indices", True), ("relu", "y", False)]
    _exact(run_model(graph, context("host")))


def test_onnxruntime_refusing_a_fallback_node_names_file_and_node(tmp_path, context):
    nodes = [helper.make_node("QLinearNoSuchOp", ["x"], ["y"], name="mystery", domain=MS)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2, 3])],
                              [helper.make_tensor_value_info("y", F, [2, 3])])
    built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(MS, 1)])
    built.ir_version = 9
    onnx.save(built, tmp_path / "mystery.onnx")
    layer, = import_model(tmp_path / "mystery.onnx").layers
    with pytest.raises(OnnxImportError) as err:
        run_on_host(layer, [np.zeros((2, 3), np.float32)])
    message = str(err.value)
    assert message.startswith(f"{tmp_path / 'mystery.onnx'}: node 'mystery' (QLinearNoSuchOp) "
                              "cannot run in onnxruntime: "), message
    assert "not a registered function/op" in message
    _no_internals(message)
    with pytest.raises(OnnxImportError, match="onnxruntime, the reference, cannot run the "
                                              "model: .*QLinearNoSuchOp") as err:
        run_model(import_model(tmp_path / "mystery.onnx"), context("host"))
    assert str(err.value).startswith(f"{tmp_path / 'mystery.onnx'}: ")
