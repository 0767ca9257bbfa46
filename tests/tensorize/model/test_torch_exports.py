"""Networks as PyTorch exports them and onnxruntime quantizes them (examples/models/
export_torchvision.py), reproduced with onnx.helper in a few nodes, so no test needs torch.

What the exports hold that our own builders do not: each ResNet block's residual Add with
the block's last convolution first; a Relu after the first convolution and after the Add,
each of which onnxruntime's quantizer folds into the output scale of the node before it;
the exporters' node names; weights quantized per output channel
(a Gemm's with ``transB = 1`` along axis 0 of its ``N x K`` weights); opset 20. Then the
head each exporter writes: the default (``torch.export``) exporter's ``ReduceMean`` over the
spatial axes (axes an input since opset 18) and ``Reshape`` with ``allowzero = 1``; the
TorchScript exporter's ``GlobalAveragePool`` and ``Flatten``. Every layer is checked exact
against onnxruntime on the NPU.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ir.onnx import import_model
from tensorize.model import run_model
from tests.ir.onnx import models

OPSET = 20
CHANNELS = 16
SIZE = 8
CLASSES = 10


def _torch_resnet_block(head: str, seed: int = 0):
    """conv -> relu -> conv -> Add(conv, input) -> relu -> ``head`` -> Gemm, with the node
    names each exporter gives (torch.export's ``node_Conv_1``, TorchScript's
    ``/layer1/layer1.0/conv1/Conv``)."""
    rng = np.random.default_rng(seed)
    dynamo = head == "reduce_mean"

    def node(op, inputs, output, index, path, **attrs):
        name = f"node_{op}_{index}" if dynamo else path
        return helper.make_node(op, inputs, [output], name=name, **attrs)

    block = "/layer1/layer1.0"
    nodes = [
        node("Conv", ["x", "w1", "b1"], "c1", 1, f"{block}/conv1/Conv", pads=[1, 1, 1, 1]),
        node("Relu", ["c1"], "r1", 2, f"{block}/relu/Relu"),
        node("Conv", ["r1", "w2", "b2"], "c2", 3, f"{block}/conv2/Conv", pads=[1, 1, 1, 1]),
        node("Add", ["c2", "x"], "a", 4, f"{block}/Add"),
        node("Relu", ["a"], "r2", 5, f"{block}/relu_1/Relu"),
    ]
    inits = [models.weights(rng, "w1", [CHANNELS, CHANNELS, 3, 3]),
             models.weights(rng, "b1", [CHANNELS], 0.1),
             models.weights(rng, "w2", [CHANNELS, CHANNELS, 3, 3]),
             models.weights(rng, "b2", [CHANNELS], 0.1),
             models.weights(rng, "wf", [CLASSES, CHANNELS]),
             models.weights(rng, "bf", [CLASSES], 0.1)]
    if dynamo:
        nodes += [node("ReduceMean", ["r2", "axes"], "m", 6, "", keepdims=1),
                  node("Reshape", ["m", "shape"], "f", 7, "", allowzero=1)]
        inits += [numpy_helper.from_array(np.array([-1, -2], np.int64), "axes"),
                  numpy_helper.from_array(np.array([1, CHANNELS], np.int64), "shape")]
    else:
        nodes += [node("GlobalAveragePool", ["r2"], "m", 6, "/avgpool/GlobalAveragePool"),
                  node("Flatten", ["m"], "f", 7, "/Flatten")]
    nodes.append(node("Gemm", ["f", "wf", "bf"], "logits", 8, "/fc/Gemm", transB=1))
    return models.model(nodes, [("x", TensorProto.FLOAT, [1, CHANNELS, SIZE, SIZE])],
                        [("logits", TensorProto.FLOAT, [1, CLASSES])], inits, opset=OPSET)


def _bitwise(record) -> bool:
    """Whether a layer's output equals onnxruntime's bit for bit: integer tensors compare
    exactly, float ones (dequantised, or run by onnxruntime) with an error of 0."""
    return record["check"] == "exact" or record["check"].startswith("max error 0.00e+00 ")


@pytest.fixture(scope="module", params=["reduce_mean", "global_average_pool"])
def exported(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    qdq = models.quantize(_torch_resnet_block(request.param), folder, per_channel=True)
    return request.param, import_model(models.save(qdq, folder, "block_int8.onnx"))


def test_the_quantizer_folds_each_relu_and_quantizes_weights_per_channel(exported):
    _, graph = exported
    ops = [layer.op for layer in graph.layers]
    assert "Relu" not in ops and "QDQ Relu" not in ops
    assert ops.count("QDQ Conv") == 2 and ops.count("QDQ Add") == 1
    assert ops.count("QDQ Gemm") == 1
    scales = {node.input[0]: graph.constants[node.input[1]].shape
              for node in graph.model.graph.node if node.op_type == "DequantizeLinear"
              and node.input[0] in ("w1_quantized", "w2_quantized", "wf_quantized")}
    assert scales == {"w1_quantized": (CHANNELS,), "w2_quantized": (CHANNELS,),
                      "wf_quantized": (CLASSES,)}


def test_every_layer_exact_on_the_npu_the_matrix_layers_tensorized(exported, context):
    head, graph = exported
    run = run_model(graph, context("npu"))
    assert run.ok, [r["check"] for r in run.records]
    by_op = {}
    for record in run.records:
        by_op.setdefault(record["op"], []).append(record)
    joined = by_op["QDQ Conv + QDQ Add"]
    assert len(joined) == 1 and joined[0]["placement"] == "tensorized"
    assert joined[0]["name"] == ("node_Conv_3 + node_Add_4" if head == "reduce_mean" else
                                 "/layer1/layer1.0/conv2/Conv + /layer1/layer1.0/Add")
    for record in (*by_op["QDQ Conv"], *by_op["QDQ Gemm"], *joined):
        assert record["placement"] == "tensorized" and record["intrinsic"].startswith("npu_gemm")
        assert record["check"] == "exact"
    assert all(_bitwise(r) for r in run.records)
    if head == "global_average_pool":
        pool, = by_op["QDQ GlobalAveragePool"]
        assert pool["placement"] == "tensorized"
    else:
        mean, = by_op["ReduceMean"]
        assert mean["placement"] == "host" and "onnxruntime" in mean["why_not"]


def _torch_squeeze_excite(seed: int = 0):
    """MobileNet-v3's block as the export and the quantizer's pre-processing leave it: a
    convolution, hard-swish as ``x * HardSigmoid(x)``, then squeeze and excitation (the
    spatial mean, two 1x1 convolutions, a hard sigmoid scaling the input)."""
    rng = np.random.default_rng(seed)
    squeezed = CHANNELS // 4
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="node_Conv_1"),
        helper.make_node("HardSigmoid", ["c1"], ["g1"], name="HardSigmoid_2", alpha=1 / 6),
        helper.make_node("Mul", ["c1", "g1"], ["h1"], name="Mul_3"),
        helper.make_node("ReduceMean", ["h1", "axes"], ["m"], keepdims=1, name="node_mean"),
        helper.make_node("Conv", ["m", "w2", "b2"], ["c2"], name="node_Conv_4"),
        helper.make_node("Relu", ["c2"], ["r2"], name="node_relu"),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], name="node_Conv_5"),
        helper.make_node("HardSigmoid", ["c3"], ["g3"], name="node_hardsigmoid",
                         alpha=1 / 6),
        helper.make_node("Mul", ["g3", "h1"], ["y"], name="node_mul"),
    ]
    inits = [models.weights(rng, "w1", [CHANNELS, CHANNELS, 1, 1]),
             models.weights(rng, "b1", [CHANNELS], 0.1),
             models.weights(rng, "w2", [squeezed, CHANNELS, 1, 1]),
             models.weights(rng, "b2", [squeezed], 0.1),
             models.weights(rng, "w3", [CHANNELS, squeezed, 1, 1]),
             models.weights(rng, "b3", [CHANNELS], 0.1),
             numpy_helper.from_array(np.array([-1, -2], np.int64), "axes")]
    shape = [1, CHANNELS, SIZE, SIZE]
    return models.model(nodes, [("x", TensorProto.FLOAT, shape)],
                        [("y", TensorProto.FLOAT, shape)], inits, opset=OPSET)


def test_hard_swish_and_squeeze_excite_exact_with_their_float_operators_on_the_host(
        tmp_path, context):
    qdq = models.quantize(_torch_squeeze_excite(), tmp_path, per_channel=True)
    graph = import_model(models.save(qdq, tmp_path, "se_int8.onnx"))
    run = run_model(graph, context("npu"))
    assert run.ok, [r["check"] for r in run.records]
    convs = [r for r in run.records if r["op"] == "QDQ Conv"]
    assert len(convs) == 3 and all(r["placement"] == "tensorized" for r in convs)
    assert all(_bitwise(r) for r in run.records)
    floats = [r for r in run.records if r["op"] in ("HardSigmoid", "Mul", "ReduceMean")]
    assert sorted(r["op"] for r in floats) == ["HardSigmoid", "HardSigmoid", "Mul", "Mul",
                                                "ReduceMean"]
    assert all(r["placement"] == "host" for r in floats)
    # The NPU has no float32 instruction: the host runs each, numpy's HardSigmoid and Mul
    # computing what onnxruntime does, its ReduceMean onnxruntime itself (its sum's order).
    reasons = {r["op"]: r["why_not"] for r in floats}
    assert reasons == {"HardSigmoid": "HardSigmoid is not a GEMM: no compute intrinsic does it",
                       "Mul": "Mul is not a GEMM: no compute intrinsic does it",
                       "ReduceMean": "run by onnxruntime (no importer function for this "
                                     "operator)"}


def _export_script():
    """examples/models/export_torchvision.py as a module (examples is not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "examples" / "models" / "export_torchvision.py"
    spec = importlib.util.spec_from_file_location("export_torchvision", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_example_quantizes_an_export_without_torch(tmp_path):
    script = _export_script()
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["input", "w", "b"], ["c"], strides=[8, 8],
                              name="node_Conv_1"),
             helper.make_node("Relu", ["c"], ["r"], name="node_relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["g"], name="node_pool"),
             helper.make_node("Flatten", ["g"], ["f"], name="node_flatten"),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["logits"], transB=1,
                              name="node_linear")]
    inits = [models.weights(rng, "w", [4, 3, 8, 8]), models.weights(rng, "b", [4]),
             models.weights(rng, "wf", [5, 4]), models.weights(rng, "bf", [5])]
    small = models.model(nodes, [("input", TensorProto.FLOAT, list(script.INPUT_SHAPE))],
                         [("logits", TensorProto.FLOAT, [1, 5])], inits, opset=OPSET)
    with pytest.raises(SystemExit, match="no exported network in"):
        script.main(["quantize", str(tmp_path), "--samples", "2"])
    models.save(small, tmp_path, "resnet18_tv.onnx")
    assert script.main(["quantize", str(tmp_path), "--samples", "2"]) == 0
    graph = import_model(tmp_path / "resnet18_tv_int8.onnx")
    assert [layer.op for layer in graph.layers] == [
        "QuantizeLinear", "QDQ Conv", "QDQ GlobalAveragePool", "QDQ Flatten", "QDQ Gemm",
        "DequantizeLinear"]
