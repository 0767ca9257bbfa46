"""float16 models: Conv, MatMul and Gemm layers whose kernels sum float16 operands in float32,
then add the bias and round once to float16 on the host, as onnxruntime's CPU provider does
(it has no float16 kernels for them: it casts to float32 and back)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ir.onnx import OnnxImportError, import_model, linear
from tensorize.model.check import compare
from tensorize.model.executors import run_on_host
from tensorize.model.reference import run_reference
from tests.ir.onnx import models

F16 = TensorProto.FLOAT16


@pytest.fixture(scope="module")
def fp16_graph(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fp16")
    return import_model(models.save(models.small_fp16(), folder, "fp16.onnx"))


def test_float16_layers_take_float16_operands_and_sum_in_float32(fp16_graph):
    kernels = [layer for layer in fp16_graph.layers if layer.func is not None]
    assert [layer.op for layer in kernels] == ["Conv", "Conv", "MatMul", "Gemm"]
    for layer in kernels:
        *operands, out = layer.func.params
        assert [p.dtype.name for p in operands] == ["float16", "float16"], layer.name
        assert out.dtype.name == "float32" and layer.output_dtype == "float16"
    epilogues = {layer.name: layer.epilogue for layer in kernels}
    assert epilogues == {"conv1": "host: float32 bias add, then rounding to float16",
                         "conv2": "host: float32 bias add, then rounding to float16",
                         "project": "host: rounding to float16",
                         "fc": "host: float32 bias add, then rounding to float16"}
    assert all(layer.output_dtype == "float16" for layer in fp16_graph.layers)


def test_each_float16_layer_is_within_a_float16_unit_of_numpy(fp16_graph):
    # numpy's float64 sum of the float16 products (exact), rounded to float32, plus the
    # float32 bias, rounded to float16: our float32 sum in another order may round to the
    # neighbouring float16 value, never further.
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float16)
    constants = fp16_graph.constants
    conv1 = fp16_graph.layers[0]
    got = run_on_host(conv1, [x])
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    weights = constants["w1"].astype(np.float64)
    sums = sum(np.einsum("nchw,oc->nohw", padded[:, :, dy:dy + 8, dx:dx + 8],
                         weights[:, :, dy, dx]) for dy in range(3) for dx in range(3))
    want = (sums.astype(np.float32)
            + constants["b1"].astype(np.float32).reshape(1, -1, 1, 1)).astype(np.float16)
    assert got.dtype == np.float16 and got.shape == want.shape
    assert np.all(np.abs(got.astype(np.float64) - want) <= np.spacing(np.abs(want)))

    project = fp16_graph.layers[4]
    a = rng.standard_normal((1, 16, 16)).astype(np.float16)
    got = run_on_host(project, [a])
    want = (a.astype(np.float64) @ constants["wm"].astype(np.float64)).astype(
        np.float32).astype(np.float16)
    assert got.dtype == np.float16
    assert np.all(np.abs(got.astype(np.float64) - want) <= np.spacing(np.abs(want)))


def test_the_network_matches_onnxruntime_layer_by_layer_on_the_host(fp16_graph):
    rng = np.random.default_rng(0)
    inputs = {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float16)}
    expected = run_reference(fp16_graph, inputs)
    values = dict(inputs)
    for layer in fp16_graph.layers:
        values[layer.output] = run_on_host(layer, [values[n] for n in layer.inputs])
        assert values[layer.output].dtype == np.float16, layer.name
        ok, text = compare(values[layer.output], expected[layer.output])
        assert ok and "(tolerance 0.00390625)" in text, f"{layer.name}: {text}"


def test_float16_pools_and_softmax_keep_float16_as_onnxruntime_does(tmp_path):
    # onnxruntime computes these in float32 too, and rounds their output to float16.
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["c"], ["p"], name="pool", kernel_shape=[2, 2],
                              strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["p"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "wf"], ["y"], name="fc", transB=1),
             helper.make_node("Softmax", ["y"], ["s"], name="softmax")]
    inits = [numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float16),
                                     name) for name, shape in (("w", [8, 3, 3, 3]),
                                                               ("wf", [4, 8]))]
    built = models.model(nodes, [("x", F16, [1, 3, 8, 8])], [("s", F16, [1, 4])], inits)
    graph = import_model(models.save(built, tmp_path, "pools.onnx"))
    inputs = {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float16)}
    expected = run_reference(graph, inputs)
    values = dict(inputs)
    for layer in graph.layers:
        assert layer.output_dtype == "float16", layer.name
        values[layer.output] = run_on_host(layer, [values[n] for n in layer.inputs])
        assert values[layer.output].dtype == np.float16, layer.name
        ok, text = compare(values[layer.output], expected[layer.output])
        assert ok, f"{layer.name}: {text}"


def test_the_bias_is_added_before_the_one_rounding_to_float16(tmp_path):
    # The sum 1 + 2**-11 lies half way between two float16 values; with the bias 2**-12
    # added first, 1 + 3 * 2**-12 rounds up to 1 + 2**-10. Rounding the sum first gives 1.0
    # (the tie goes to the even value), and adding 2**-12 to it leaves 1.0.
    node = helper.make_node("Gemm", ["a", "w", "b"], ["y"], name="fc")
    inits = [numpy_helper.from_array(np.ones((2, 1), np.float16), "w"),
             numpy_helper.from_array(np.array([2.0 ** -12], np.float16), "b")]
    built = models.model([node], [("a", F16, [1, 2])], [("y", F16, [1, 1])], inits)
    graph = import_model(models.save(built, tmp_path, "bias.onnx"))
    a = np.array([[1.0, 2.0 ** -11]], np.float16)
    (layer,) = graph.layers
    got = run_on_host(layer, [a])
    assert got.dtype == np.float16 and float(got[0, 0]) == 1.0 + 2.0 ** -10
    assert float(run_reference(graph, {"a": a})["y"][0, 0]) == 1.0 + 2.0 ** -10


def test_a_bfloat16_matmul_is_refused_naming_the_node_and_the_types(tmp_path):
    w = helper.make_tensor("w", TensorProto.BFLOAT16, [4, 4], np.ones(16, np.float32).tolist())
    built = models.model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
                         [("x", TensorProto.BFLOAT16, [2, 4])],
                         [("y", TensorProto.BFLOAT16, [2, 4])], [w])
    path = models.save(built, tmp_path, "bf16.onnx")
    with pytest.raises(OnnxImportError) as err:
        import_model(path)
    message = str(err.value)
    assert message == (f"{path}: node 'mm' (MatMul) requires a float32 or float16 input, got "
                       "'x' of bfloat16")
    assert "Traceback" not in message and "ir/onnx" not in message


def test_onnxruntime_reads_conv1_s_relu_in_float32_where_it_drops_the_casts(fp16_graph):
    # Why a float16 layer is checked within a tolerance (docs/models.md, "Float16 models"):
    # onnxruntime's conv2 is the float32 convolution of conv1's float32 ReLU output, not of
    # the float16 tensor the graph states, which our conv2 reads.
    rng = np.random.default_rng(0)
    inputs = {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float16)}
    theirs = run_reference(fp16_graph, inputs)
    conv2 = fp16_graph.layers[2]
    from_float16 = run_on_host(conv2, [theirs["r1"]])
    assert np.count_nonzero(from_float16 != theirs["c2"]) == 101 and from_float16.size == 256

    constants, pads = fp16_graph.constants, {"pads": [1, 1, 1, 1]}
    conv1_32 = linear.float_conv("c1", "x", (1, 3, 8, 8), constants["w1"], constants["b1"],
                                 pads, "c1", "conv1", "float32")
    conv2_32 = linear.float_conv("c2", "r1", (1, 8, 8, 8), constants["w2"], constants["b2"],
                                 {**pads, "strides": [2, 2]}, "c2", "conv2", "float32")
    relu_32 = np.maximum(run_on_host(conv1_32, [inputs["x"].astype(np.float32)]), 0)
    from_float32 = run_on_host(conv2_32, [relu_32]).astype(np.float16)
    assert np.array_equal(from_float32, theirs["c2"])
