"""Tiny ONNX models for the importer's and the runner's tests, built with onnx.helper and,
for the QDQ ones, quantised by onnxruntime's quantize_static on random calibration data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def weights(rng: np.random.Generator, name: str, shape, scale: float = 0.2):
    """A float32 initializer of normal values."""
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32),
                                   name)


def model(nodes, inputs, outputs, initializers=(), opset: int = OPSET) -> onnx.ModelProto:
    """A model of ``nodes``; ``inputs``/``outputs`` are (name, dtype, shape), an output's
    shape None to leave it to shape inference (the checker then cannot check the model)."""
    graph = helper.make_graph(
        nodes, "test",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs], list(initializers))
    built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    built.ir_version = 9
    if all(shape is not None for _, _, shape in outputs):
        onnx.checker.check_model(built)
    return built


def save(built: onnx.ModelProto, folder: Path, name: str) -> Path:
    """Write ``built`` to ``folder/name`` and return the path."""
    path = folder / name
    onnx.save(built, str(path))
    return path


def small_cnn(seed: int = 0, size: int = 12) -> onnx.ModelProto:
    """Conv (stride 2, pad 1) -> Relu -> MaxPool -> Conv 3x3 -> Relu -> Add (residual) ->
    GlobalAveragePool -> Flatten -> Gemm: the layers of a ResNet, tiny."""
    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1],
                         strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Add", ["r2", "p1"], ["a2"], name="add2"),
        helper.make_node("GlobalAveragePool", ["a2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], name="fc", transB=1),
    ]
    inits = [weights(rng, "w1", [16, 3, 3, 3]), weights(rng, "b1", [16]),
             weights(rng, "w2", [16, 16, 3, 3]), weights(rng, "b2", [16]),
             weights(rng, "wf", [10, 16]), weights(rng, "bf", [10])]
    return model(nodes, [("x", TensorProto.FLOAT, [1, 3, size, size])],
                 [("y", TensorProto.FLOAT, [1, 10])], inits)


def quantize(float_model: onnx.ModelProto, folder: Path, seed: int = 0,
             per_channel: bool = False, unsigned: bool = False) -> onnx.ModelProto:
    """``float_model`` as int8 QDQ: activations (QUInt8 with ``unsigned``, else QInt8) and
    weights QInt8, symmetric weights, calibrated on four random inputs."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    rng = np.random.default_rng(seed)
    inputs = [(i.name, [d.dim_value for d in i.type.tensor_type.shape.dim])
              for i in float_model.graph.input]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.samples = iter([{n: rng.standard_normal(s).astype(np.float32)
                                  for n, s in inputs} for _ in range(4)])

        def get_next(self):
            return next(self.samples, None)

    source, target = folder / "float_for_qdq.onnx", folder / "qdq.onnx"
    onnx.save(float_model, str(source))
    quantize_static(str(source), str(target), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8 if unsigned else QuantType.QInt8,
                    weight_type=QuantType.QInt8, per_channel=per_channel)
    return onnx.load(str(target))


def small_attention(seed: int = 0, seq: int = 8, hidden: int = 16) -> onnx.ModelProto:
    """MatMul (constant weights, 3-D input) -> Transpose -> MatMul of two activations ->
    Softmax -> Reshape: the matrix products of an attention head."""
    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"], name="query"),
        helper.make_node("MatMul", ["x", "wk"], ["k"], name="key"),
        helper.make_node("Transpose", ["k"], ["kt"], name="key_t", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"], name="scores"),
        helper.make_node("Softmax", ["s"], ["p"], name="softmax", axis=-1),
        helper.make_node("Reshape", ["p", "shape"], ["y"], name="flatten"),
    ]
    inits = [weights(rng, "wq", [hidden, hidden]), weights(rng, "wk", [hidden, hidden]),
             numpy_helper.from_array(np.array([1, -1], np.int64), "shape")]
    return model(nodes, [("x", TensorProto.FLOAT, [1, seq, hidden])],
                 [("y", TensorProto.FLOAT, [1, seq * seq])], inits)


def small_fp16(seed: int = 0, size: int = 8) -> onnx.ModelProto:
    """A float16 network: Conv (pad 1) -> Relu -> Conv (stride 2) -> Reshape -> MatMul
    (constant weights, 3-D input) -> Flatten -> Gemm, every tensor and weight float16 and
    every Conv and Gemm with a bias."""
    rng = np.random.default_rng(seed)
    half = size // 2
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1],
                         strides=[2, 2]),
        helper.make_node("Reshape", ["c2", "rows"], ["s"], name="rows"),
        helper.make_node("MatMul", ["s", "wm"], ["m"], name="project"),
        helper.make_node("Flatten", ["m"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], name="fc", transB=1),
    ]
    shapes = {"w1": [8, 3, 3, 3], "b1": [8], "w2": [16, 8, 3, 3], "b2": [16],
              "wm": [half * half, 8], "wf": [10, 16 * 8], "bf": [10]}
    inits = [numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float16),
                                     name) for name, shape in shapes.items()]
    inits.append(numpy_helper.from_array(np.array([1, 16, half * half], np.int64), "rows"))
    return model(nodes, [("x", TensorProto.FLOAT16, [1, 3, size, size])],
                 [("y", TensorProto.FLOAT16, [1, 10])], inits)
