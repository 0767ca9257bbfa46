"""The quantisation arithmetic against onnxruntime's own kernels, on the values where
rounding decides: halves, the saturation edges, per-channel scales."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from ir.onnx.host_ops import qlinear_add
from ir.onnx.quant import QParams, dequantize_linear, quantize_linear, requantize
from tests.ir.onnx import models


def _session(nodes, inputs, outputs, inits):
    built = models.model(nodes, inputs, outputs, inits)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(built.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def test_quantize_and_dequantize_match_onnxruntime_on_ties_and_edges():
    scale, zp = np.float32(0.5), np.int8(3)
    x = np.array([0.25, 0.75, -0.25, -0.75, 1.25, 63.0, 64.0, 70.0, -70.0, -65.75,
                  np.float32(1e9), -np.float32(1e9)], np.float32)
    inits = [numpy_helper.from_array(np.array(scale), "s"),
             numpy_helper.from_array(np.array(zp), "z")]
    session = _session([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
                        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"])],
                       [("x", TensorProto.FLOAT, [x.size])],
                       [("q", TensorProto.INT8, [x.size]), ("d", TensorProto.FLOAT, [x.size])],
                       inits)
    q, d = session.run(None, {"x": x})
    ours = quantize_linear(x, scale, np.array(zp))
    assert ours.dtype == np.int8 and np.array_equal(ours, q)
    assert np.array_equal(dequantize_linear(q, scale, np.array(zp)), d)


@given(st.lists(st.integers(-(1 << 20), 1 << 20), min_size=1, max_size=64),
       st.floats(2.0 ** -13, 2.0, width=32), st.integers(-128, 127))
def test_requantize_is_round_half_even_and_saturates(accs, scale, zp):
    acc = np.array(accs, np.int32)
    got = requantize(acc, np.float32(scale), np.array(zp, np.int8))
    # Python's round() rounds half to even: an independent path to the same integers.
    want = [min(max(round(float(np.float32(a) * np.float32(scale))) + zp, -128), 127)
            for a in accs]
    assert got.tolist() == want


@pytest.mark.parametrize("a, b, y", [
    # ResNet-50's layer2.2.add and BERT's attention.value bias add: parameters under which
    # rounding ties decide elements (a = 12, b = -101 gives 33.49999 before rounding).
    ((0.014800040982663631, 3), (0.014941577799618244, -128), (0.016018599271774292, -128)),
    ((0.03615743666887283, 5), (0.00030800100648775697, -22), (0.03617610037326813, 5)),
    ((0.05, 0), (0.05, 0), (0.05, 0)),
])
def test_qlinear_add_matches_onnxruntime_on_every_int8_pair(a, b, y):
    grid = np.arange(-128, 128, dtype=np.int8)
    xa, xb = (v.reshape(-1) for v in np.meshgrid(grid, grid))
    params = {"sa": a[0], "za": a[1], "sb": b[0], "zb": b[1], "sy": y[0], "zy": y[1]}
    inits = [numpy_helper.from_array(np.array(v, np.float32 if k[0] == "s" else np.int8), k)
             for k, v in params.items()]
    node = helper.make_node("QLinearAdd", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"],
                            ["c"], domain="com.microsoft")
    graph = helper.make_graph([node], "add",
                              [helper.make_tensor_value_info(n, TensorProto.INT8, [xa.size])
                               for n in ("a", "b")],
                              [helper.make_tensor_value_info("c", TensorProto.INT8, [xa.size])],
                              inits)
    built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(built.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    want, = session.run(None, {"a": xa, "b": xb})
    q = [QParams(np.float32(s), np.array(z, np.int8)) for s, z in (a, b, y)]
    assert np.array_equal(qlinear_add(*q)([xa, xb]), want)
