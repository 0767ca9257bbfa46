"""Quantisation parameters are checked as ONNX states them (and onnxruntime enforces them):
a wrong scale or zero point is refused at import, naming the file and the node, instead of
failing inside onnxruntime or numpy later. Parameters of the right shape still run exact."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ir.onnx import OnnxImportError, import_model
from tensorize.model.check import compare
from tensorize.model.reference import run_reference
from tests.ir.onnx import models
from tensorize.model.executors import run_on_host

F = TensorProto.FLOAT


def _no_internals(message: str) -> None:
    assert "Traceback" not in message
    assert "ir/onnx" not in message and "ir.onnx" not in message and ".py" not in message


def _qdq(tmp_path, scale, zero_point, opset=17, **attrs):
    inits = [numpy_helper.from_array(np.asarray(scale, np.float32), "s")]
    names = ["x", "s"]
    if zero_point is not None:
        inits.append(numpy_helper.from_array(np.asarray(zero_point), "z"))
        names.append("z")
    dq_attrs = {k: v for k, v in attrs.items() if k != "output_dtype"}
    nodes = [helper.make_node("QuantizeLinear", names, ["q"], name="quant", **attrs),
             helper.make_node("DequantizeLinear", ["q", *names[1:]], ["y"], name="dequant",
                              **dq_attrs)]
    built = models.model(nodes, [("x", F, [1, 4, 3, 3])], [("y", F, [1, 4, 3, 3])], inits,
                         opset=opset)
    return models.save(built, tmp_path, "qdq.onnx")


@pytest.mark.parametrize("scale, zero_point, attrs, fragment", [
    (np.full(2, 0.1), np.zeros(2, np.int8), {},
     "requires one scale per index of axis 1 (4 for input shape (1, 4, 3, 3)), got 2 in 's'"),
    (np.full((2, 2), 0.1), np.zeros((2, 2), np.int8), {},
     "requires a scalar or a 1-D scale, got 's' of shape (2, 2)"),
    (np.full(4, 0.1), np.zeros(4, np.int8), {"axis": 7},
     "requires an axis within its 4-D input (-4 to 3), got axis 7"),
    (np.float32(0.1), np.zeros(3, np.int8), {},
     "requires its zero point 'z' of the scale's shape (), got shape (3,)"),
    (np.float32(0.1), np.int16(0), {},
     "requires a zero point of int8 or uint8, got 'z' of int16"),
])
def test_a_wrong_scale_or_zero_point_is_refused_naming_file_and_node(tmp_path, scale,
                                                                     zero_point, attrs,
                                                                     fragment):
    path = _qdq(tmp_path, scale, zero_point, **attrs)
    with pytest.raises(OnnxImportError) as err:
        import_model(path)
    message = str(err.value)
    assert message.startswith(f"{path}: node 'quant' (QuantizeLinear) "), message
    assert fragment in message, message
    _no_internals(message)


def test_blocked_quantisation_is_refused_naming_the_block_size(tmp_path):
    path = _qdq(tmp_path, np.full((1, 2, 3, 3), 0.1), np.zeros((1, 2, 3, 3), np.int8),
                opset=21, axis=1, block_size=2)
    with pytest.raises(OnnxImportError, match=r"node 'quant' \(QuantizeLinear\) requires "
                       r"per-tensor or per-axis quantisation, got blocked quantisation "
                       r"\(block_size 2\)") as err:
        import_model(path)
    _no_internals(str(err.value))


def _run_exact(path):
    graph = import_model(path)
    rng = np.random.default_rng(0)
    inputs = {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in graph.inputs}
    expected = run_reference(graph, inputs)
    values = dict(inputs)
    for layer in graph.layers:
        values[layer.output] = run_on_host(layer, [values[n] for n in layer.inputs])
        ok, text = compare(values[layer.output], expected[layer.output])
        assert ok and text.startswith(("exact", "max error 0.00e+00")), (layer.name, text)
    return graph


@pytest.mark.parametrize("scale, zero_point, attrs", [
    (np.float32(0.05), np.int8(2), {}),
    (np.full(1, 0.05), np.full(1, -3, np.int8), {}),
    (np.array([0.05, 0.1, 0.02, 0.07]), np.zeros(4, np.int8), {}),
    (np.array([0.05, 0.1, 0.02, 0.07]), np.zeros(4, np.int8), {"axis": -3}),
])
def test_scales_of_the_right_shape_run_exact(tmp_path, scale, zero_point, attrs):
    _run_exact(_qdq(tmp_path, scale, zero_point, **attrs))


def test_quantize_without_zero_point_takes_its_output_dtype(tmp_path):
    path = _qdq(tmp_path, np.float32(0.05), None, opset=21,
                output_dtype=TensorProto.INT8)
    graph = _run_exact(path)
    assert graph.layers[0].output_dtype == "int8"


def test_a_qlinear_conv_weight_scale_of_the_wrong_length_is_refused(tmp_path):
    rng = np.random.default_rng(0)
    c = lambda name, value: numpy_helper.from_array(np.asarray(value), name)  # noqa: E731
    inits = [c("xs", np.float32(0.1)), c("xz", np.int8(0)),
             c("w", rng.integers(-5, 5, (8, 3, 1, 1)).astype(np.int8)),
             c("ws", np.full(3, 0.1, np.float32)), c("wz", np.int8(0)),
             c("ys", np.float32(0.2)), c("yz", np.int8(0))]
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"],
                            ["y"], name="qconv")
    built = models.model([node], [("x", TensorProto.INT8, [1, 3, 4, 4])],
                         [("y", TensorProto.INT8, [1, 8, 4, 4])], inits)
    path = models.save(built, tmp_path, "qconv.onnx")
    with pytest.raises(OnnxImportError) as err:
        import_model(path)
    message = str(err.value)
    assert message.startswith(f"{path}: node 'qconv' (QLinearConv) requires a weight scale "
                              "of one element or one per output channel (8), got 'ws' of "
                              "shape (3,)"), message
    _no_internals(message)
