"""Split: every output of the node usable, one host layer per output in use, each exact
against onnxruntime; the sizes of every opset's form (the ``split`` attribute before opset
13, the ``split`` input from 13, ``num_outputs`` from 18, equal parts), and sizes that
contradict the input refused naming the file and the node."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ir.onnx import OnnxImportError, import_model
from tensorize.model import run_model
from tests.ir.onnx import models

F, I8 = TensorProto.FLOAT, TensorProto.INT8


def _split_model(tmp_path, shape, outputs, opset, *, sizes=None, dtype=F, **attrs):
    """x -> Split into ``outputs`` (each a graph output, a Relu reading the last) ."""
    names = [f"s{i}" for i in range(len(outputs))]
    inputs = ["x"]
    inits = []
    if sizes is not None:
        inputs.append("sizes")
        inits.append(numpy_helper.from_array(np.array(sizes, np.int64), "sizes"))
    nodes = [helper.make_node("Split", inputs, names, name="split", **attrs),
             helper.make_node("Relu", [names[-1]], ["r"], name="relu")]
    graph_outputs = [(n, dtype, list(s)) for n, s in zip(names, outputs)]
    graph_outputs.append(("r", dtype, list(outputs[-1])))
    built = models.model(nodes, [("x", dtype, list(shape))], graph_outputs, inits, opset=opset)
    return models.save(built, tmp_path, "split.onnx")


@pytest.mark.parametrize("shape, outputs, opset, sizes, attrs", [
    ((4, 6), [(4, 2), (4, 4)], 11, None, {"axis": 1, "split": [2, 4]}),
    ((4, 6), [(2, 6), (2, 6)], 11, None, {"axis": 0}),
    ((1, 8, 3), [(1, 2, 3), (1, 3, 3), (1, 3, 3)], 13, [2, 3, 3], {"axis": 1}),
    ((2, 7), [(2, 3), (2, 3), (2, 1)], 18, None, {"axis": -1, "num_outputs": 3}),
    ((3, 5), [(3, 5)], 13, None, {"axis": 1}),
])
def test_every_output_is_a_layer_exact_against_onnxruntime(tmp_path, shape, outputs, opset,
                                                           sizes, attrs, context):
    path = _split_model(tmp_path, shape, outputs, opset, sizes=sizes, **attrs)
    graph = import_model(path)
    splits = [layer for layer in graph.layers if layer.op == "Split"]
    assert [layer.output_shape for layer in splits] == [tuple(s) for s in outputs]
    if len(outputs) > 1:
        assert [layer.name for layer in splits] == [f"split:{i}" for i in range(len(outputs))]
    run = run_model(graph, context("host"))
    assert run.ok
    assert all(r["check"].startswith("max error 0.00e+00") for r in run.records), run.records


def test_an_int8_split_is_exact(tmp_path, context):
    path = _split_model(tmp_path, (1, 6, 2, 2), [(1, 2, 2, 2), (1, 4, 2, 2)], 14,
                        sizes=[2, 4], dtype=I8, axis=1)
    run = run_model(import_model(path), context("host"))
    assert run.ok and all(r["check"] == "exact" for r in run.records), run.records


def test_only_outputs_in_use_become_layers(tmp_path, context):
    nodes = [helper.make_node("Split", ["x"], ["a", "b", "c"], name="split", axis=0),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    built = models.model(nodes, [("x", F, [6, 2])], [("y", F, [2, 2])])
    graph = import_model(models.save(built, tmp_path, "split.onnx"))
    assert [(layer.name, layer.output) for layer in graph.layers] == [("split:2", "c"),
                                                                      ("relu", "y")]
    assert run_model(graph, context("host")).ok


@pytest.mark.parametrize("shape, outputs, opset, sizes, attrs, fragment", [
    ((4, 6), [(4, 2), (4, 2)], 13, [2, 2], {"axis": 1},
     "requires 2 positive sizes (one per output) adding up to its axis (6), got [2, 2]"),
    ((4, 7), [(4, 3), (4, 4)], 11, None, {"axis": 1},
     "requires its axis (7) to divide into 2 equal parts, got a remainder of 1"),
    ((4, 6), [(4, 3), (4, 3)], 13, None, {"axis": 2},
     "requires an axis within its 2-D input (-2 to 1), got axis 2"),
])
def test_sizes_that_contradict_the_input_are_refused(tmp_path, shape, outputs, opset, sizes,
                                                     attrs, fragment):
    nodes = [helper.make_node("Split", ["x", "sizes"] if sizes else ["x"], ["a", "b"],
                              name="split", **attrs)]
    inits = [numpy_helper.from_array(np.array(sizes, np.int64), "sizes")] if sizes else []
    built = models.model(nodes, [("x", F, list(shape))],
                         [("a", F, None), ("b", F, None)], inits, opset=opset)
    path = models.save(built, tmp_path, "split.onnx")
    with pytest.raises(OnnxImportError) as err:
        import_model(path)
    message = str(err.value)
    assert message.startswith(f"{path}: node 'split' (Split) {fragment}"), message
    assert "Traceback" not in message and "ir/onnx" not in message
