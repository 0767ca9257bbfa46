"""The tiny ONNX models the `tensorize model` corpus cases read (tests/corpus/cli/onnx_*.txt),
built here with onnx.helper; the .onnx files in tests/corpus/cli/onnx_models/ are what this
module writes, and a test (test_corpus_models.py) checks they still are.

Regenerate them after changing a builder::

    python -m tests.ir.onnx.corpus_models

Each builder makes one model a user could be handed: three that the importer must refuse
with the file and node named (an operator domain no one defines, an opset newer than onnx
knows, a QDQ scale of the wrong shape), and three valid models exported by other tools that
must run exact against onnxruntime (a Split whose outputs are all used, a QOperator model
with QLinearConcat, node names holding terminal escape sequences).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FOLDER = Path(__file__).resolve().parents[2] / "corpus" / "cli" / "onnx_models"
F, I8, I32 = TensorProto.FLOAT, TensorProto.INT8, TensorProto.INT32


def _model(nodes, inputs, outputs, initializers=(), opsets=(("", 17),)) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "corpus",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs], list(initializers))
    built = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v)
                                                    for d, v in opsets],
                              producer_name="tests.ir.onnx.corpus_models")
    built.ir_version = 9
    return built


def _checked(built: onnx.ModelProto) -> onnx.ModelProto:
    """``built``, which must be a valid model: onnx's full check (strict shape inference
    cross-checks the declared output shapes) passes."""
    onnx.checker.check_model(built, full_check=True)
    return built


def _const(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def _qlinear_conv(rng: np.random.Generator, name: str, x: str, x_q: tuple[str, str],
                  channels: int, out: int, kernel: int, y_scale: float
                  ) -> tuple[onnx.NodeProto, list[onnx.TensorProto]]:
    """A QLinearConv of int8 ``x`` (symmetric int8 weights, an int32 bias), output
    ``name``; its scale and zero point are ``name_scale``/``name_zp``."""
    weights = rng.integers(-127, 128, (out, channels, kernel, kernel)).astype(np.int8)
    inits = [_const(f"{name}_w", weights), _const(f"{name}_w_scale", np.float32(0.02)),
             _const(f"{name}_w_zp", np.int8(0)),
             _const(f"{name}_scale", np.float32(y_scale)), _const(f"{name}_zp", np.int8(3)),
             _const(f"{name}_bias", rng.integers(-500, 500, out).astype(np.int32))]
    node = helper.make_node(
        "QLinearConv", [x, *x_q, f"{name}_w", f"{name}_w_scale", f"{name}_w_zp",
                        f"{name}_scale", f"{name}_zp", f"{name}_bias"], [name], name=name,
        pads=[kernel // 2] * 4)
    return node, inits


def unknown_domain() -> onnx.ModelProto:
    """A Relu, then a node of a custom domain (com.example) that neither onnx nor
    onnxruntime defines."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("FancyGelu", ["r"], ["y"], name="custom_gelu",
                              domain="com.example")]
    return _model(nodes, [("x", F, [2, 3])], [("y", F, [2, 3])],
                  opsets=(("", 17), ("com.example", 1)))


def opset_too_new() -> onnx.ModelProto:
    """A Relu stamped with ai.onnx opset 99."""
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    return _model(nodes, [("x", F, [2, 3])], [("y", F, [2, 3])], opsets=(("", 99),))


def qdq_scale_shape() -> onnx.ModelProto:
    """QuantizeLinear and DequantizeLinear of a 4-channel tensor with two scales along
    axis 1: per-axis needs four."""
    inits = [_const("scale", np.full(2, 0.05, np.float32)), _const("zp", np.zeros(2, np.int8))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zp"], ["q"], name="quant"),
             helper.make_node("DequantizeLinear", ["q", "scale", "zp"], ["y"], name="dequant")]
    return _model(nodes, [("x", F, [1, 4, 3, 3])], [("y", F, [1, 4, 3, 3])], inits)


def split_outputs() -> onnx.ModelProto:
    """int8: QuantizeLinear, a Split into 2 + 3 + 3 channels whose three outputs are all
    used (a QLinearConv on the first, a Concat of all), DequantizeLinear."""
    rng = np.random.default_rng(7)
    conv, conv_inits = _qlinear_conv(rng, "conv0", "part0", ("x_scale", "x_zp"), 2, 2, 3,
                                     0.05)
    inits = [_const("x_scale", np.float32(0.04)), _const("x_zp", np.int8(-2)),
             _const("sizes", np.array([2, 3, 3], np.int64)), *conv_inits,
             _const("y_scale", np.float32(0.05)), _const("y_zp", np.int8(3))]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["xq"], name="quant"),
        helper.make_node("Split", ["xq", "sizes"], ["part0", "part1", "part2"], name="split",
                         axis=1),
        conv,
        helper.make_node("Concat", ["conv0", "part1", "part2"], ["cat"], name="concat",
                         axis=1),
        helper.make_node("DequantizeLinear", ["cat", "y_scale", "y_zp"], ["y"],
                         name="dequant"),
    ]
    return _checked(_model(nodes, [("x", F, [1, 8, 5, 5])], [("y", F, [1, 8, 5, 5])],
                           inits))


def qlinear_concat() -> onnx.ModelProto:
    """The QOperator format onnxruntime's quantizer writes: two QLinearConv branches joined
    by QLinearConcat (com.microsoft), a 1x1 QLinearConv, a QLinearAdd with a third branch,
    QLinearGlobalAveragePool, DequantizeLinear and a Sigmoid. onnx's shape inference knows
    no com.microsoft operator, so every shape after the concat is the importer's to find."""
    rng = np.random.default_rng(11)
    xq = ("x_scale", "x_zp")
    a, a_inits = _qlinear_conv(rng, "conv_a", "xq", xq, 3, 4, 3, 0.08)
    b, b_inits = _qlinear_conv(rng, "conv_b", "xq", xq, 3, 5, 3, 0.06)
    c, c_inits = _qlinear_conv(rng, "conv_c", "cat", ("cat_scale", "cat_zp"), 9, 6, 1, 0.1)
    d, d_inits = _qlinear_conv(rng, "conv_d", "xq", xq, 3, 6, 1, 0.07)
    inits = [_const("x_scale", np.float32(0.03)), _const("x_zp", np.int8(0)),
             _const("cat_scale", np.float32(0.09)), _const("cat_zp", np.int8(-1)),
             _const("add_scale", np.float32(0.12)), _const("add_zp", np.int8(2)),
             _const("gap_scale", np.float32(0.05)), _const("gap_zp", np.int8(0)),
             *a_inits, *b_inits, *c_inits, *d_inits]
    ms = "com.microsoft"
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["xq"], name="quant"),
        a, b,
        helper.make_node("QLinearConcat", ["cat_scale", "cat_zp", "conv_a", "conv_a_scale",
                                           "conv_a_zp", "conv_b", "conv_b_scale",
                                           "conv_b_zp"], ["cat"], name="concat", domain=ms,
                         axis=1),
        c, d,
        helper.make_node("QLinearAdd", ["conv_c", "conv_c_scale", "conv_c_zp", "conv_d",
                                        "conv_d_scale", "conv_d_zp", "add_scale", "add_zp"],
                         ["add"], name="add", domain=ms),
        helper.make_node("QLinearGlobalAveragePool", ["add", "add_scale", "add_zp",
                                                      "gap_scale", "gap_zp"], ["gap"],
                         name="pool", domain=ms),
        helper.make_node("DequantizeLinear", ["gap", "gap_scale", "gap_zp"], ["g"],
                         name="dequant"),
        helper.make_node("Sigmoid", ["g"], ["y"], name="sigmoid"),
    ]
    return _checked(_model(nodes, [("x", F, [1, 3, 6, 6])], [("y", F, [1, 6, 1, 1])], inits,
                           opsets=(("", 17), (ms, 1))))


def escaped_names() -> onnx.ModelProto:
    """Node names holding terminal control sequences (ESC [31m, a bell, a carriage
    return): a Split into two and a Relu on each part."""
    nodes = [
        helper.make_node("Split", ["x"], ["a", "b"], name="split\x1b[31m", axis=1),
        helper.make_node("Relu", ["a"], ["ya"], name="relu\x07a"),
        helper.make_node("Relu", ["b"], ["yb"], name="relu\rb"),
    ]
    return _checked(_model(nodes, [("x", F, [2, 6])], [("ya", F, [2, 3]), ("yb", F, [2, 3])]))


# File name (without .onnx) -> builder.
BUILDERS: dict[str, Callable[[], onnx.ModelProto]] = {
    "unknown_domain": unknown_domain,
    "opset_too_new": opset_too_new,
    "qdq_scale_shape": qdq_scale_shape,
    "split_outputs": split_outputs,
    "qlinear_concat": qlinear_concat,
    "escaped_names": escaped_names,
}


def write(folder: Path = FOLDER) -> list[Path]:
    """Write every model into ``folder``; returns the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, build in BUILDERS.items():
        path = folder / f"{name}.onnx"
        path.write_bytes(build().SerializeToString())
        paths.append(path)
    return paths


if __name__ == "__main__":
    for written in write(Path(sys.argv[1]) if len(sys.argv) > 1 else FOLDER):
        print(f"wrote {written} ({written.stat().st_size} bytes)")
