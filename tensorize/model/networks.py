"""Example networks as ONNX models, built here with random weights: nothing is downloaded.

Three builders return float ``onnx.ModelProto`` graphs made with ``onnx.helper``:

- :func:`resnet50`: ResNet-50 v1 (He et al. 2015; the stride sits on each stage's first 1x1
  convolution, as in the paper and the ONNX model zoo's v1), batch normalisation folded into
  the convolutions' weights and biases, as an exporter does for inference.
- :func:`mobilenetv2`: MobileNet-v2 (Sandler et al. 2018): inverted residual blocks whose
  middle convolution is depthwise (``group`` equal to the channel count), ReLU6 as ``Clip``.
- :func:`bert_layer`: one BERT-base encoder layer (multi-head self-attention, feed-forward,
  two layer norms) on a ``1 x seq_len x hidden`` input.

Each builder has size knobs, so tests build small versions of the very same graphs
(:data:`SMALL` lists the sizes they use). :func:`quantize` turns a float model into the int8
QDQ form onnxruntime's static quantization emits, calibrated on random inputs from
:func:`random_inputs`.

Operators used: Conv, Gemm, MatMul, Add, Relu, Clip, MaxPool, GlobalAveragePool, Flatten,
Reshape, Transpose, Softmax; and two that are not in the importer's list and run on the host:
LayerNormalization and Gelu (one node each rather than a dozen elementwise ones, so the host
runs each as one stage). The attention scale 1/sqrt(head size) is folded into the query
projection's weights and bias, so attention needs no extra Mul. Softmax is a host operator too.
"""

from __future__ import annotations

import logging
import math
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ir.errors import TensorizeError

# Gelu became an ONNX operator in opset 20 and LayerNormalization in 17; onnxruntime runs both.
OPSET = 20
IR_VERSION = 9

# ResNet-50's bottleneck blocks per stage, and MobileNet-v2's inverted residual stages:
# (expansion t, output channels c, repeats n, first stride s), as in the papers' tables.
RESNET50_BLOCKS = (3, 4, 6, 3)
MOBILENETV2_STAGES = (
    (1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
    (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1),
)


class NetworkBuildError(TensorizeError):
    """A network builder or the quantizer was given sizes or a model it cannot use."""


class _Graph:
    """A small exporter: collects nodes and initializers and tracks every tensor's shape.

    Node names are the layer names a report shows (``layer1.0.conv1``); each node's single
    output tensor takes the node's name, so names stay unique and readable.
    """

    def __init__(self, name: str, seed: int) -> None:
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.shapes: dict[str, tuple[int, ...]] = {}

    def constant(self, name: str, array: np.ndarray) -> str:
        """Add an initializer and return its name."""
        self.initializers.append(numpy_helper.from_array(array, name))
        self.shapes[name] = tuple(array.shape)
        return name

    def weight(self, name: str, shape: Sequence[int], std: float) -> str:
        """A float32 initializer drawn from N(0, std^2)."""
        array = self.rng.normal(0.0, std, size=tuple(shape)).astype(np.float32)
        return self.constant(name, array)

    def node(self, op: str, inputs: Sequence[str], name: str, shape: Sequence[int],
             **attrs: object) -> str:
        """Add one node whose output is named ``name`` and has ``shape``."""
        if name in self.shapes:
            raise NetworkBuildError(f"{self.name}: tensor name {name!r} used twice")
        self.nodes.append(helper.make_node(op, list(inputs), [name], name=name, **attrs))
        self.shapes[name] = tuple(int(d) for d in shape)
        return name

    def conv(self, x: str, name: str, out_channels: int, kernel: int, stride: int = 1,
             groups: int = 1, relu_follows: bool = True) -> str:
        """A convolution with bias and "same" padding for odd kernels.

        Weights are He-initialised (std sqrt(2 / fan_in)) when a ReLU follows, and half of
        LeCun's std otherwise, so residual sums stay near unit scale through deep networks.
        """
        n, c, h, w = self.shapes[x]
        if c % groups or out_channels % groups:
            raise NetworkBuildError(
                f"{self.name}: {name} requires channels divisible by groups {groups}, "
                f"got {c} in and {out_channels} out")
        fan_in = c // groups * kernel * kernel
        std = math.sqrt(2.0 / fan_in) if relu_follows else 0.5 * math.sqrt(1.0 / fan_in)
        weight = self.weight(f"{name}.weight", (out_channels, c // groups, kernel, kernel), std)
        bias = self.weight(f"{name}.bias", (out_channels,), 0.01)
        pad = kernel // 2
        out_h = (h + 2 * pad - kernel) // stride + 1
        out_w = (w + 2 * pad - kernel) // stride + 1
        return self.node("Conv", [x, weight, bias], name, (n, out_channels, out_h, out_w),
                         kernel_shape=[kernel, kernel], strides=[stride, stride],
                         pads=[pad, pad, pad, pad], dilations=[1, 1], group=groups)

    def relu(self, x: str, name: str) -> str:
        """Elementwise max(x, 0)."""
        return self.node("Relu", [x], name, self.shapes[x])

    def relu6(self, x: str, name: str) -> str:
        """min(max(x, 0), 6) as Clip with constant bounds."""
        low = self.constant(f"{name}.min", np.array(0.0, np.float32))
        high = self.constant(f"{name}.max", np.array(6.0, np.float32))
        return self.node("Clip", [x, low, high], name, self.shapes[x])

    def add(self, a: str, b: str, name: str) -> str:
        """Elementwise a + b (b may broadcast, as a bias does)."""
        return self.node("Add", [a, b], name, self.shapes[a])

    def classifier(self, x: str, classes: int) -> str:
        """GlobalAveragePool, Flatten and a fully connected Gemm to ``classes`` logits."""
        n, c = self.shapes[x][:2]
        pooled = self.node("GlobalAveragePool", [x], "pool", (n, c, 1, 1))
        flat = self.node("Flatten", [pooled], "flatten", (n, c), axis=1)
        weight = self.weight("fc.weight", (classes, c), math.sqrt(1.0 / c))
        bias = self.weight("fc.bias", (classes,), 0.01)
        return self.node("Gemm", [flat, weight, bias], "fc", (n, classes), transB=1)

    def linear(self, x: str, name: str, out_features: int, scale: float = 1.0) -> str:
        """MatMul by a (in, out) weight then Add of a bias; ``scale`` multiplies both."""
        *lead, in_features = self.shapes[x]
        std = math.sqrt(1.0 / in_features) * scale
        weight = self.weight(f"{name}.weight", (in_features, out_features), std)
        bias = self.weight(f"{name}.bias", (out_features,), 0.01 * scale)
        product = self.node("MatMul", [x, weight], f"{name}.matmul", (*lead, out_features))
        return self.add(product, bias, name)

    def layer_norm(self, x: str, name: str) -> str:
        """LayerNormalization over the last axis, with random gain near 1 and bias near 0."""
        width = self.shapes[x][-1]
        gain = self.constant(f"{name}.weight", (1.0 + self.rng.normal(0.0, 0.05, width))
                             .astype(np.float32))
        bias = self.weight(f"{name}.bias", (width,), 0.01)
        return self.node("LayerNormalization", [x, gain, bias], name, self.shapes[x],
                         axis=-1, epsilon=1e-12)

    def reshape(self, x: str, name: str, shape: Sequence[int]) -> str:
        """Reshape to a fully static ``shape``."""
        target = self.constant(f"{name}.shape", np.array(shape, np.int64))
        return self.node("Reshape", [x, target], name, shape)

    def transpose(self, x: str, name: str, perm: Sequence[int]) -> str:
        """Permute axes."""
        shape = [self.shapes[x][p] for p in perm]
        return self.node("Transpose", [x], name, shape, perm=list(perm))

    def model(self, input_name: str, input_shape: Sequence[int], output: str) -> onnx.ModelProto:
        """The finished, checked model with its intermediate shapes inferred.

        Strict shape inference also cross-checks the output shape tracked here against the
        one ONNX derives, so a wrong shape formula in a builder fails at build time.
        """
        graph = helper.make_graph(
            self.nodes, self.name,
            [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, list(input_shape))],
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, list(self.shapes[output]))],
            initializer=self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="tensorize.model.networks")
        model.ir_version = IR_VERSION
        model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        onnx.checker.check_model(model, full_check=True)
        return model


def _check_positive(builder: str, **sizes: float) -> None:
    """Refuse sizes that are not positive, naming the builder and the knob."""
    for knob, value in sizes.items():
        if not value > 0:
            raise NetworkBuildError(f"{builder}: {knob} must be positive, got {value!r}")


def resnet50(seed: int = 0, *, width: int = 64, resolution: int = 224,
             blocks: Sequence[int] = RESNET50_BLOCKS, classes: int = 1000) -> onnx.ModelProto:
    """ResNet-50 v1 for a ``1 x 3 x resolution x resolution`` image, random weights.

    ``width`` is the first stage's bottleneck width (64 in the paper; stage i uses
    width * 2^i, its output four times that), ``blocks`` the bottleneck blocks per stage,
    ``classes`` the logits. The input is named ``input``, the output ``fc``.
    """
    _check_positive("resnet50", width=width, resolution=resolution, classes=classes)
    if not blocks or any(b <= 0 for b in blocks):
        raise NetworkBuildError(f"resnet50: blocks must be positive counts, got {blocks!r}")
    g = _Graph("resnet50", seed)
    g.shapes["input"] = (1, 3, resolution, resolution)
    x = g.relu(g.conv("input", "conv1", width, 7, stride=2), "relu1")
    n, c, h, w = g.shapes[x]
    x = g.node("MaxPool", [x], "maxpool", (n, c, (h - 1) // 2 + 1, (w - 1) // 2 + 1),
               kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    for stage, count in enumerate(blocks):
        mid = width << stage
        for block in range(count):
            stride = 2 if stage > 0 and block == 0 else 1
            x = _bottleneck(g, x, f"layer{stage + 1}.{block}", mid, stride)
    return g.model("input", (1, 3, resolution, resolution), g.classifier(x, classes))


def _bottleneck(g: _Graph, x: str, name: str, mid: int, stride: int) -> str:
    """1x1 (stride) -> 3x3 -> 1x1 to 4*mid channels, plus the (projected) shortcut, ReLU."""
    out = 4 * mid
    y = g.relu(g.conv(x, f"{name}.conv1", mid, 1, stride=stride), f"{name}.relu1")
    y = g.relu(g.conv(y, f"{name}.conv2", mid, 3), f"{name}.relu2")
    y = g.conv(y, f"{name}.conv3", out, 1, relu_follows=False)
    shortcut = x
    if stride != 1 or g.shapes[x][1] != out:
        shortcut = g.conv(x, f"{name}.downsample", out, 1, stride=stride, relu_follows=False)
    return g.relu(g.add(y, shortcut, f"{name}.add"), f"{name}.relu3")


def _make_divisible(value: float, divisor: int = 8) -> int:
    """Round a channel count to a multiple of ``divisor``, never dropping more than 10%
    (the rule of the reference MobileNet-v2 implementation)."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def mobilenetv2(seed: int = 0, *, width: float = 1.0, resolution: int = 224,
                max_repeats: int | None = None, classes: int = 1000) -> onnx.ModelProto:
    """MobileNet-v2 for a ``1 x 3 x resolution x resolution`` image, random weights.

    ``width`` is the paper's width multiplier (channel counts scale by it, rounded to
    multiples of 8), ``max_repeats`` caps each stage's block count (None: the paper's), and
    ``classes`` the logits. The input is named ``input``, the output ``fc``.
    """
    _check_positive("mobilenetv2", width=width, resolution=resolution, classes=classes)
    if max_repeats is not None and max_repeats <= 0:
        raise NetworkBuildError(f"mobilenetv2: max_repeats must be positive, got {max_repeats}")
    g = _Graph("mobilenetv2", seed)
    g.shapes["input"] = (1, 3, resolution, resolution)
    x = g.relu6(g.conv("input", "conv1", _make_divisible(32 * width), 3, stride=2), "relu1")
    for stage, (expand, channels, repeats, first_stride) in enumerate(MOBILENETV2_STAGES):
        count = repeats if max_repeats is None else min(repeats, max_repeats)
        for block in range(count):
            stride = first_stride if block == 0 else 1
            x = _inverted_residual(g, x, f"block{stage + 1}.{block}", expand,
                                   _make_divisible(channels * width), stride)
    last = _make_divisible(1280 * max(1.0, width))
    x = g.relu6(g.conv(x, "conv_last", last, 1), "relu_last")
    return g.model("input", (1, 3, resolution, resolution), g.classifier(x, classes))


def _inverted_residual(g: _Graph, x: str, name: str, expand: int, out: int, stride: int) -> str:
    """1x1 expand (ReLU6) -> 3x3 depthwise (ReLU6) -> 1x1 linear project, plus the identity
    shortcut where the shape is kept."""
    channels = g.shapes[x][1]
    hidden = channels * expand
    y = x
    if expand != 1:
        y = g.relu6(g.conv(y, f"{name}.expand", hidden, 1), f"{name}.relu_expand")
    y = g.relu6(g.conv(y, f"{name}.depthwise", hidden, 3, stride=stride, groups=hidden),
                f"{name}.relu_depthwise")
    y = g.conv(y, f"{name}.project", out, 1, relu_follows=False)
    if stride == 1 and channels == out:
        y = g.add(y, x, f"{name}.add")
    return y


def bert_layer(seed: int = 0, *, seq_len: int = 128, hidden: int = 768, heads: int = 12,
               ffn: int | None = None) -> onnx.ModelProto:
    """One BERT encoder layer on a ``1 x seq_len x hidden`` input, random weights.

    Self-attention with ``heads`` heads (no mask: every position attends to every other),
    output projection, residual and layer norm, then a feed-forward of width ``ffn``
    (default 4 * hidden) with GELU, residual and layer norm. BERT-base: hidden 768, 12 heads.
    The input is named ``input``, the output ``output.norm``.
    """
    ffn = 4 * hidden if ffn is None else ffn
    _check_positive("bert_layer", seq_len=seq_len, hidden=hidden, heads=heads, ffn=ffn)
    if hidden % heads:
        raise NetworkBuildError(
            f"bert_layer: hidden ({hidden}) must be a multiple of heads ({heads})")
    head = hidden // heads
    g = _Graph("bert_layer", seed)
    g.shapes["input"] = (1, seq_len, hidden)
    split = (1, seq_len, heads, head)
    # Folding 1/sqrt(head) into the query projection keeps attention to MatMul -> Softmax.
    query = g.linear("input", "attention.query", hidden, scale=1.0 / math.sqrt(head))
    query = g.transpose(g.reshape(query, "attention.query.split", split),
                        "attention.query.heads", (0, 2, 1, 3))
    key = g.linear("input", "attention.key", hidden)
    key = g.transpose(g.reshape(key, "attention.key.split", split),
                      "attention.key.heads", (0, 2, 3, 1))
    value = g.linear("input", "attention.value", hidden)
    value = g.transpose(g.reshape(value, "attention.value.split", split),
                        "attention.value.heads", (0, 2, 1, 3))
    scores = g.node("MatMul", [query, key], "attention.scores", (1, heads, seq_len, seq_len))
    probs = g.node("Softmax", [scores], "attention.softmax", g.shapes[scores], axis=-1)
    context = g.node("MatMul", [probs, value], "attention.context", (1, heads, seq_len, head))
    context = g.reshape(g.transpose(context, "attention.context.merge", (0, 2, 1, 3)),
                        "attention.context.join", (1, seq_len, hidden))
    attended = g.linear(context, "attention.output", hidden)
    x = g.layer_norm(g.add(attended, "input", "attention.residual"), "attention.norm")
    y = g.linear(x, "intermediate", ffn)
    y = g.node("Gelu", [y], "intermediate.gelu", g.shapes[y])
    y = g.linear(y, "output", hidden)
    out = g.layer_norm(g.add(y, x, "output.residual"), "output.norm")
    return g.model("input", (1, seq_len, hidden), out)


# Builders by the name the example script and tests use, and the small sizes tests build.
NETWORKS: dict[str, Callable[..., onnx.ModelProto]] = {
    "resnet50": resnet50,
    "mobilenetv2": mobilenetv2,
    "bert_layer": bert_layer,
}
SMALL: dict[str, dict[str, object]] = {
    "resnet50": {"width": 4, "resolution": 32, "blocks": (1, 1, 1, 1), "classes": 10},
    "mobilenetv2": {"width": 0.25, "resolution": 32, "max_repeats": 1, "classes": 10},
    "bert_layer": {"seq_len": 16, "hidden": 32, "heads": 2},
}

_NUMPY_TYPES = {TensorProto.FLOAT: np.float32}


def build(name: str, seed: int = 0, *, small: bool = False) -> onnx.ModelProto:
    """The float network ``name`` (a key of :data:`NETWORKS`) at full size, or at the small
    size tests use (:data:`SMALL`)."""
    if name not in NETWORKS:
        raise NetworkBuildError(f"build: unknown network {name!r}; known: {', '.join(NETWORKS)}")
    return NETWORKS[name](seed, **(SMALL[name] if small else {}))


def random_inputs(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    """One standard-normal array per graph input of ``model`` (initializers excluded).

    Every input must be float32 with a fully static shape.
    """
    rng = np.random.default_rng(seed)
    constants = {init.name for init in model.graph.initializer}
    arrays = {}
    for value in model.graph.input:
        if value.name in constants:
            continue
        tensor = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
        if tensor.elem_type not in _NUMPY_TYPES or None in dims:
            raise NetworkBuildError(
                f"random_inputs: input {value.name!r} must be float32 with a static shape, "
                f"got {TensorProto.DataType.Name(tensor.elem_type)} {dims}")
        dtype = _NUMPY_TYPES[tensor.elem_type]
        arrays[value.name] = rng.standard_normal(dims).astype(dtype)
    return arrays


def quantize(model: onnx.ModelProto, seed: int = 0, samples: int = 8) -> onnx.ModelProto:
    """``model`` quantized to int8 QDQ by onnxruntime's static quantization.

    Calibration (min/max) runs ``samples`` inputs from :func:`random_inputs` (seeds
    ``seed``, ``seed + 1``, ...). Activations and weights are both signed int8, weights
    symmetric (zero point 0) and per tensor, because the NPU's GEMM is int8 x int8 -> int32
    and requantises with one scale per layer. The result has QuantizeLinear /
    DequantizeLinear pairs around every Conv, Gemm and MatMul.
    """
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    if samples <= 0:
        raise NetworkBuildError(f"quantize: samples must be positive, got {samples}")
    batches = [random_inputs(model, seed + i) for i in range(samples)]

    class _Reader(CalibrationDataReader):
        """Hands the calibration batches to the quantizer one at a time."""

        def __init__(self, items: list[Mapping[str, np.ndarray]]) -> None:
            self.items = iter(items)

        def get_next(self) -> Mapping[str, np.ndarray] | None:
            return next(self.items, None)

    # The quantizer advises shape-inference pre-processing on every call; that would rewrite
    # the graph (fusing nodes) these builders keep plain on purpose, so the advice is dropped.
    advice = _DropMessages("Please consider")
    logging.getLogger().addFilter(advice)
    try:
        with tempfile.TemporaryDirectory(prefix="tensorize-quantize-") as tmp:
            # quantize_static rewrites a ModelProto it is given (moving weights to external
            # data), so it gets a file: the caller's model stays as it was.
            source = Path(tmp) / "float.onnx"
            onnx.save(model, source)
            output = Path(tmp) / "quantized.onnx"
            quantize_static(source, output, _Reader(batches), quant_format=QuantFormat.QDQ,
                            activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                            per_channel=False, extra_options={"WeightSymmetric": True})
            return onnx.load(output)
    finally:
        logging.getLogger().removeFilter(advice)


class _DropMessages(logging.Filter):
    """Drops log records whose message starts with ``prefix``."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        """Keep every record but those starting with the prefix."""
        return not str(record.msg).startswith(self.prefix)
