"""The example networks: valid ONNX that onnxruntime runs, the published architectures (by
parameter count), a numpy reference for the BERT layer, and int8 QDQ quantization."""

from __future__ import annotations

import collections
import importlib.util
import logging
import math
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx not installed (pip install tensorize[models])")
ort = pytest.importorskip("onnxruntime",
                          reason="onnxruntime not installed (pip install tensorize[models])")

from onnx import helper, numpy_helper

from ir.errors import TensorizeError
from tensorize.model.networks import (
    NETWORKS,
    SMALL,
    NetworkBuildError,
    bert_layer,
    build,
    mobilenetv2,
    quantize,
    random_inputs,
    resnet50,
)

BUILD_MODELS = Path(__file__).resolve().parents[3] / "examples" / "models" / "build_models.py"


def run_onnxruntime(model, feeds):
    """The model's first output from onnxruntime's CPU provider, one thread."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


@pytest.fixture(scope="module")
def small():
    """Each small network, float and quantized, built once for the module."""
    built = {}
    for name in NETWORKS:
        model = build(name, 0, small=True)
        built[name] = (model, quantize(model, seed=0, samples=4))
    return built


def parameter_count(model) -> int:
    """Elements of the float initializers: the weights and biases."""
    return sum(numpy_helper.to_array(init).size for init in model.graph.initializer
               if init.data_type == onnx.TensorProto.FLOAT and len(init.dims) > 0)


def attribute(node, name):
    """The value of the node's attribute ``name``."""
    return next(helper.get_attribute_value(a) for a in node.attribute if a.name == name)


def conv_output_channels(model) -> int:
    """Output channels summed over every Conv: the channels a batch norm would normalise."""
    inits = {init.name: init for init in model.graph.initializer}
    return sum(inits[node.input[1]].dims[0] for node in model.graph.node if node.op_type == "Conv")


@pytest.mark.parametrize("name", list(NETWORKS))
def test_small_network_is_valid_and_runs(small, name):
    model, _ = small[name]
    onnx.checker.check_model(model, full_check=True)
    feeds = random_inputs(model, seed=1)
    out = run_onnxruntime(model, feeds)
    declared = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
    assert list(out.shape) == declared
    assert np.isfinite(out).all() and out.std() > 0


def test_mobilenetv2_matches_the_published_parameter_count():
    # torchvision's mobilenet_v2 has 3,504,872 parameters: convolutions without bias, each
    # followed by a batch norm (2 per channel). Folding a batch norm leaves one bias per channel.
    model = mobilenetv2(0)
    assert parameter_count(model) + conv_output_channels(model) == 3_504_872
    inits = {init.name: init for init in model.graph.initializer}
    depthwise = [n for n in model.graph.node if n.op_type == "Conv" and attribute(n, "group") > 1]
    assert len(depthwise) == 17  # one per inverted residual block: 1+2+3+4+3+3+1
    for node in depthwise:
        # Depthwise: one group per channel, one input channel per filter.
        assert list(inits[node.input[1]].dims[:2]) == [attribute(node, "group"), 1]


@pytest.mark.slow
def test_resnet50_matches_the_published_parameter_count():
    # torchvision's resnet50 (v1.5, same weights as v1: only a stride moves) has 25,557,032
    # parameters with batch norms; folded, each normalised channel keeps one bias.
    model = resnet50(0)
    assert parameter_count(model) + conv_output_channels(model) == 25_557_032
    assert sum(n.op_type == "Conv" for n in model.graph.node) == 53


def test_resnet50_layout_at_full_depth():
    # The paper's 3-4-6-3 blocks at a small width and resolution: 53 convolutions, and the
    # stride-2 convolutions are each stage's first 1x1 (v1) plus its shortcut.
    model = resnet50(0, width=4, resolution=32, classes=10)
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    assert len(convs) == 1 + 3 * 16 + 4
    strided = sorted(n.name for n in convs if attribute(n, "strides") == [2, 2])
    assert strided == ["conv1"] + [f"layer{s}.0.{c}" for s in (2, 3, 4)
                                   for c in ("conv1", "downsample")]


def test_bert_base_layer_matches_the_published_parameter_count():
    # One BERT-base encoder layer: 4 x (768^2 + 768) attention, 2 x (2 x 768) layer norms,
    # 768 x 3072 + 3072 + 3072 x 768 + 768 feed-forward = 7,087,872.
    assert parameter_count(bert_layer(0)) == 7_087_872


def numpy_bert(weights, x, heads):
    """An independent numpy BERT encoder layer (scale applied explicitly, exact GELU)."""
    def linear(v, name):
        return v @ weights[f"{name}.weight"] + weights[f"{name}.bias"]

    def norm(v, name):
        mean = v.mean(-1, keepdims=True)
        var = ((v - mean) ** 2).mean(-1, keepdims=True)
        return (v - mean) / np.sqrt(var + 1e-12) * weights[f"{name}.weight"] + weights[f"{name}.bias"]

    _, seq, hidden = x.shape
    head = hidden // heads

    def split(v):
        return v.reshape(seq, heads, head).transpose(1, 0, 2)

    # The stored query weights carry the attention scale 1/sqrt(head) (folded).
    q = split(linear(x[0], "attention.query"))
    k, v = split(linear(x[0], "attention.key")), split(linear(x[0], "attention.value"))
    scores = q @ k.transpose(0, 2, 1)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = (probs @ v).transpose(1, 0, 2).reshape(seq, hidden)
    h = norm(x[0] + linear(context, "attention.output"), "attention.norm")
    f = linear(h, "intermediate")
    erf = np.vectorize(math.erf)
    f = 0.5 * f * (1.0 + erf(f / math.sqrt(2.0)))
    return norm(h + linear(f, "output"), "output.norm")[None]


def test_bert_layer_agrees_with_numpy(small):
    model, _ = small["bert_layer"]
    weights = {i.name: numpy_helper.to_array(i).astype(np.float64)
               for i in model.graph.initializer}
    x = random_inputs(model, seed=3)
    expected = numpy_bert(weights, x["input"].astype(np.float64), SMALL["bert_layer"]["heads"])
    np.testing.assert_allclose(run_onnxruntime(model, x), expected, rtol=1e-4, atol=1e-4)


def test_attention_scale_is_folded_into_the_query():
    # Query and key weights are drawn alike, then the query's scaled by 1/sqrt(head size):
    # their spreads differ by that factor, and no Mul or Div applies the scale at run time.
    model = bert_layer(0, seq_len=4, hidden=64, heads=4)
    weights = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    ratio = weights["attention.key.weight"].std() / weights["attention.query.weight"].std()
    assert ratio == pytest.approx(math.sqrt(64 // 4), rel=0.1)
    ops = collections.Counter(n.op_type for n in model.graph.node)
    assert ops["Mul"] == 0 and ops["Div"] == 0 and ops["Softmax"] == 1


def producers_and_consumers(model):
    """Tensor name -> producing node, and tensor name -> consuming nodes."""
    producer = {out: node for node in model.graph.node for out in node.output}
    consumers = collections.defaultdict(list)
    for node in model.graph.node:
        for name in node.input:
            consumers[name].append(node)
    return producer, consumers


@pytest.mark.parametrize("name", list(NETWORKS))
def test_quantized_network_has_qdq_around_every_conv_and_matmul(small, name):
    _, quantized = small[name]
    onnx.checker.check_model(quantized)
    producer, consumers = producers_and_consumers(quantized)
    inits = {i.name: numpy_helper.to_array(i) for i in quantized.graph.initializer}
    layers = [n for n in quantized.graph.node if n.op_type in ("Conv", "MatMul", "Gemm")]
    assert layers
    for node in layers:
        feeding = [producer[i] for i in node.input]
        assert all(p.op_type == "DequantizeLinear" for p in feeding), node.name
        assert {c.op_type for c in consumers[node.output[0]]} == {"QuantizeLinear"}, node.name
        for dq in feeding[:2]:
            # int8 activations and weights; a weight's zero point is 0 (symmetric).
            source = dq.input[0]
            zero_point = inits[dq.input[2]]
            assert zero_point.dtype == np.int8
            if source in inits:
                assert inits[source].dtype == np.int8 and zero_point == 0
            else:
                assert producer[source].op_type == "QuantizeLinear"


@pytest.mark.parametrize("name", list(NETWORKS))
def test_quantized_output_is_close_to_float(small, name):
    model, quantized = small[name]
    feeds = random_inputs(model, seed=7)
    reference = run_onnxruntime(model, feeds)
    approx = run_onnxruntime(quantized, feeds)
    relative = np.linalg.norm(approx - reference) / np.linalg.norm(reference)
    # int8 keeps 2-4% relative error on these sizes; a wrong scale or layout gives ~100%.
    assert 0.0 < relative < 0.1


def test_quantize_leaves_its_input_and_logging_unchanged(small, caplog):
    model, _ = small["bert_layer"]
    before = model.SerializeToString()
    filters = list(logging.getLogger().filters)
    with caplog.at_level(logging.WARNING):
        quantize(model, seed=0, samples=1)
        assert not [r for r in caplog.records if "pre-processing" in r.getMessage()]
    assert model.SerializeToString() == before
    assert logging.getLogger().filters == filters


def test_builders_are_deterministic_in_the_seed():
    a, b, c = (bert_layer(seed, seq_len=4, hidden=8, heads=2) for seed in (5, 5, 6))
    assert a.SerializeToString() == b.SerializeToString()
    assert a.SerializeToString() != c.SerializeToString()


@pytest.mark.parametrize("call, fragment", [
    (lambda: bert_layer(0, hidden=30, heads=4), "hidden (30) must be a multiple of heads (4)"),
    (lambda: resnet50(0, width=0), "resnet50: width must be positive, got 0"),
    (lambda: resnet50(0, blocks=(1, 0)), "resnet50: blocks must be positive counts"),
    (lambda: mobilenetv2(0, max_repeats=0), "mobilenetv2: max_repeats must be positive"),
    (lambda: quantize(bert_layer(0, seq_len=4, hidden=8, heads=2), samples=0),
     "quantize: samples must be positive, got 0"),
])
def test_bad_sizes_are_refused_by_name(call, fragment):
    with pytest.raises(NetworkBuildError) as info:
        call()
    assert isinstance(info.value, TensorizeError)
    assert fragment in str(info.value)


def test_random_inputs_refuses_a_symbolic_dimension():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", 4])])
    with pytest.raises(NetworkBuildError, match="input 'x' must be float32 with a static shape"):
        random_inputs(helper.make_model(graph), seed=0)


def test_build_models_script_writes_every_network(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("build_models", BUILD_MODELS)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main([str(tmp_path / "out"), "--small", "--samples", "1"]) == 0
    printed = capsys.readouterr().out
    for name in NETWORKS:
        for stem in (name, f"{name}_int8"):
            path = tmp_path / "out" / f"{stem}.onnx"
            assert f"wrote {path}" in printed
            model = onnx.load(path)
            onnx.checker.check_model(model)
            quantized = any(n.op_type == "QuantizeLinear" for n in model.graph.node)
            assert quantized == stem.endswith("_int8")
        float_model = onnx.load(tmp_path / "out" / f"{name}.onnx")
        assert float_model.SerializeToString() == build(name, 0, small=True).SerializeToString()


def test_build_by_name():
    assert build("bert_layer", 3, small=True).SerializeToString() == bert_layer(
        3, **SMALL["bert_layer"]).SerializeToString()
    with pytest.raises(NetworkBuildError, match="unknown network 'vgg'; known: resnet50"):
        build("vgg")
